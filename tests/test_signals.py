"""SIGTERM during `vtrain forecast` cleans up like Ctrl-C: no hidden temporary file, no output."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

ROWS = 400_000


def _jobs_csv(path):
    line = "gpt3-13b,a100-80gb,64,2,4,2,512,300e9\n"
    path.write_text("model,gpu,num_gpus,tp,pp,micro_batch,global_batch,tokens\n" + line * ROWS)


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_forecast_removes_temporary_files(tmp_path, sig, code):
    src, out_dir = tmp_path / "jobs.csv", tmp_path / "out"
    out_dir.mkdir()
    _jobs_csv(src)
    proc = subprocess.Popen([sys.executable, "-m", "vtrain.cli", "forecast", str(src), "-o", str(out_dir / "f.csv"),
                             "-c", "none", "--chunk-rows", "2000", "--no-progress"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.endswith(".tmp") for p in out_dir.iterdir()):  # the first chunk is being written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.02)
        time.sleep(0.3)
        assert proc.poll() is None, "forecast finished before the signal; make the table larger"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert list(out_dir.iterdir()) == [], "a temporary or partial output was left behind"
    assert "Traceback" not in err
