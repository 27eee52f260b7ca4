"""`vtrain dataset import/info` and `vtrain profile` through the CLI."""
import subprocess
import sys

from typer.testing import CliRunner

from vtrain.cli.app import _register_commands, app
from vtrain.dataset import store

GT = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
      "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
      "8,32,4,1024,16,24,1024,2,2,2,219.5\n8,32,4,1024,16,24,1024,4,1,1,100.0\n2,16,8,1024,16,24,1024,1,1,2,-3\n")
LUT = "size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n1048576,262144,float,92790,19.78,92150,19.91\n"

_register_commands()
runner = CliRunner()


def _sources(tmp_path):
    src = tmp_path / "src"
    (src / "a100").mkdir(parents=True)
    (src / "ground_truth_single.csv").write_bytes(b"\xef\xbb\xbf" + GT.replace("\n", "\r\n").encode())
    (src / "a100" / "AR_GPU8_1M_1024M_LUT").write_text(LUT)
    (src / "SOURCE.md").write_text("# notes")
    return src


def test_import_reports_and_appends_without_duplicates(tmp_path):
    src, out = _sources(tmp_path), tmp_path / "ds"
    result = runner.invoke(app, ["dataset", "import", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "vtrain_ground_truth" in result.output and "vtrain_lut" in result.output
    assert "non-positive time (1)" in result.output and "impossible config: num_gpus" in result.output
    assert "SOURCE.md" not in result.output
    assert len(store.load(out, "runs")) == 1 and len(store.load(out, "collectives")) == 1
    again = runner.invoke(app, ["dataset", "import", str(src), "-o", str(out)])
    assert again.exit_code == 0 and "nothing new" in again.output
    assert len(store.load(out, "runs")) == 1 and len(store.part_files(out, "runs")) == 1

    info = runner.invoke(app, ["dataset", "info", str(out)])
    assert info.exit_code == 0, info.output
    assert "runs: 1 rows" in info.output and "collectives: 1 rows" in info.output and "a100-80gb" in info.output


def test_user_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "ground_truth_single.csv"
    bad.write_text(GT.replace("micro batch,", ""))
    proc = subprocess.run([sys.executable, "-c", "from vtrain.cli.app import main; main()", "dataset", "import",
                           str(bad), "-o", str(tmp_path / "ds")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "missing column 'micro batch'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ds").exists()


def test_profile_cli_tiny_cpu(tmp_path):
    out = tmp_path / "ds"
    result = runner.invoke(app, ["profile", "--device", "cpu", "-o", str(out), "--shapes", "tiny", "--tokens", "32",
                                 "--repeats", "2"])
    assert result.exit_code == 0, result.output
    kernels = store.load(out, "kernels")
    assert len(kernels) == 16 and set(kernels["gpu"]) == {"cpu"} and (kernels["time_s"] > 0).all()
    bad = runner.invoke(app, ["profile", "--device", "tpu", "-o", str(out)])
    assert bad.exit_code != 0 and "use cpu or gpu" in str(bad.exception)


def test_import_into_an_unwritable_table_folder_names_the_output_flag(tmp_path):
    """The store names its parameter (dataset_dir); the command names its flag (--output)."""
    src, out = _sources(tmp_path), tmp_path / "ds"
    out.mkdir()
    (out / "runs").write_text("not a folder")
    proc = subprocess.run([sys.executable, "-c", "from vtrain.cli.app import main; main()", "dataset", "import",
                           str(src), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: --output: cannot write"), \
        proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "runs").read_text() == "not a folder"
