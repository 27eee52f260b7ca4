"""`vtrain validate` says how far it is: a line per fold on stderr, each table as soon as it is ready
(the grouped-CV table comes before the GPU-count folds run); --quiet drops the lines, --json keeps
stdout pure JSON. Training is replaced by a stub returning the analytical model (a real fit per fold
takes minutes here; tests/test_fit_validate.py covers it): what is tested is the reporting."""
import io
import json
import sys

import numpy as np
import pandas as pd
import pytest

from vtrain.cli.app import main
from vtrain.training import evaluate
from vtrain.costmodel.encode import encode
from vtrain.costmodel.simulator import simulate
from vtrain.costmodel.spec import build_config
from vtrain.dataset import store


def _runs() -> pd.DataFrame:
    """Runs of 3 shapes on 8 (single node), 16 and 32 GPUs (multi-node), 'measured' = analytical x 1.3."""
    rows = []
    for layers, hidden in [(12, 1024), (16, 1024), (12, 2048)]:
        for gpus, tp, pp in [(8, 2, 2), (8, 1, 4), (16, 2, 2), (16, 4, 1), (32, 2, 2), (32, 8, 1)]:
            rows.append(build_config(dict(num_layers=layers, hidden_size=hidden, num_attention_heads=16, seq_len=1024,
                                          num_gpus=gpus, tp=tp, pp=pp, micro_batch=1, global_batch=64,
                                          recompute="full", precision="fp16")).flat())
    frame = pd.DataFrame(rows)
    frame["iteration_time_s"] = np.asarray(simulate(encode([build_config(r) for r in rows]))["iteration_time_s"]) * 1.3
    frame["interconnect"] = "nvlink"
    frame["source"] = "test:synthetic"
    return frame


def _validate(monkeypatch, path, *flags) -> tuple[int, str, str]:
    """Run `vtrain validate` in-process with a stub trainer: (exit code, stdout+stderr in order, stdout)."""
    monkeypatch.setattr(evaluate, "train", lambda ds, settings, runs=None, init=None: (None, {}))
    monkeypatch.setattr(evaluate, "pretrain", lambda ds, settings: None)
    merged, out = io.StringIO(), io.StringIO()

    class Tee(io.StringIO):
        def write(self, text):
            out.write(text)
            return merged.write(text)

    monkeypatch.setattr(sys, "stdout", Tee())
    monkeypatch.setattr(sys, "stderr", merged)
    monkeypatch.setenv("COLUMNS", "150")
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(path), "--folds", "2", "--no-kernels", *flags])
    return exc.value.code, merged.getvalue(), out.getvalue()


def test_validate_prints_fold_progress_and_each_table_when_ready(tmp_path, monkeypatch):
    store.append(tmp_path, "runs", _runs())
    code, text, _ = _validate(monkeypatch, tmp_path)
    assert code == 0, text
    lines = text.splitlines()

    def first(words):
        return next(i for i, line in enumerate(lines) if words in line)

    assert first("grouped CV: fold 1/2 done") < first("grouped CV: fold 2/2 done") < first("Grouped CV by model shape")
    assert "held-out MAPE 23.08 %" in lines[first("grouped CV: fold 1/2 done")]  # analytical = measured / 1.3
    # the grouped-CV table is out before the GPU-count split trains (16 and 32 GPUs: 2 folds)
    assert first("Grouped CV by model shape") < first("leave-one-GPU-count-out: fold 1/2 done") \
        < first("Leave-one-GPU-count-out (multi-node runs)")


def test_validate_quiet_json_prints_only_the_json(tmp_path, monkeypatch):
    store.append(tmp_path, "runs", _runs())
    code, text, out = _validate(monkeypatch, tmp_path, "--quiet", "--json")
    assert code == 0, text
    assert set(json.loads(out)) >= {"grouped_cv", "leave_one_gpu_count_out"}
    assert text == out  # nothing on stderr


def test_validate_json_keeps_progress_off_stdout(tmp_path, monkeypatch):
    store.append(tmp_path, "runs", _runs())
    code, text, out = _validate(monkeypatch, tmp_path, "--json")
    assert code == 0, text
    json.loads(out)
    assert "fold 1/2 done" in text and "fold" not in out
