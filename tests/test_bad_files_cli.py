"""Every command against garbage files: exit 2, one line on stderr, no traceback, nothing written.

Unwritable outputs: the tests run as root, where a chmod'ed read-only folder is still writable, so
an unwritable place is made by putting the output under a regular file (`blocker/out.csv`)."""
import csv
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _one_line_error(result):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def garbage(tmp_path):
    (tmp_path / "bin.toml").write_bytes(bytes(range(256)))
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage\x80\x81")
    (tmp_path / "empty.toml").write_bytes(b"")
    (tmp_path / "dup.csv").write_text("model,num_gpus,num_gpus,tp\ngpt3-1.3b,8,8,2\n")
    (tmp_path / "bin.csv").write_bytes(b"\x00\xff\x80" * 50)
    (tmp_path / "trunc.parquet").write_bytes(b"PAR1\x00\x01\x02")
    (tmp_path / "lut").mkdir()
    (tmp_path / "lut" / "AR_GPU2_1M_1024M_LUT").write_bytes(b"\xff\xfe\x80\x81\x00")
    json.dump({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
               "max_position_embeddings": "long"}, open(tmp_path / "hf.json", "w"))
    (tmp_path / "blocker").write_text("a regular file, so nothing can be created under it")
    shipped = REPO / "checkpoints" / "default.npz"
    (tmp_path / "broken.npz").write_bytes(shipped.read_bytes()[: shipped.stat().st_size // 3])  # cut short
    (tmp_path / "empty.csv").write_bytes(b"")
    with open(tmp_path / "jobs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "num_gpus", "tp", "global_batch"])
        w.writerow(["gpt3-1.3b", 8, 2, 64])
    return tmp_path


@pytest.mark.parametrize("args, names", [
    (("predict", "--model", "gpt3-1.3b", "--num-gpus", "8", "-c", "{d}/broken.npz"), "broken.npz"),
    (("forecast", "{d}/jobs.csv", "-o", "{d}/out.csv", "-c", "{d}/broken.npz"), "broken.npz"),
    (("search", "--model", "gpt3-1.3b", "--max-gpus", "8", "--global-batch", "64", "-c", "{d}/broken.npz",
      "--no-sensitivity"), "broken.npz"),
    (("forecast", "{d}/empty.csv", "-o", "{d}/out.csv", "-c", "none"), "empty.csv"),
    (("forecast", "{d}/jobs.csv", "-o", "{d}/missing/out.csv", "-c", "none"), "cannot write"),
    (("predict", "{d}/bin.toml", "-c", "none"), "bin.toml"),
    (("predict", "{d}/bin.json", "-c", "none"), "bin.json"),
    (("predict", "{d}/empty.toml", "-c", "none"), "num_layers"),
    (("predict", "{d}/hf.json", "--num-gpus", "8", "-c", "none"), "max_position_embeddings"),
    (("predict", "--model", "gpt3-1.3b", "--num-gpus", "8", "-c", "none", "--allreduce-table", "{d}/lut"),
     "AR_GPU2"),
    (("forecast", "{d}/dup.csv", "-o", "{d}/out.csv", "-c", "none"), "num_gpus"),
    (("forecast", "{d}/bin.csv", "-o", "{d}/out.csv", "-c", "none"), "bin.csv"),
    (("forecast", "{d}/trunc.parquet", "-o", "{d}/out.csv", "-c", "none"), "trunc.parquet"),
    (("forecast", "{d}/jobs.csv", "-o", "{d}/blocker/out.csv", "-c", "none"), "blocker"),
    (("predict", "-c", "{d}/trunc.parquet", "--model", "gpt3-1.3b", "--num-gpus", "8"), "trunc.parquet"),
    (("search", "--model", "gpt3-1.3b", "--max-gpus", "8", "--global-batch", "64", "-c", "none", "--csv",
      "--no-sensitivity", "-o", "{d}/blocker/s.csv"), "s.csv"),
    (("dataset", "import", "{d}/jobs.csv", "-o", "{d}/blocker/ds"), "blocker"),
    (("profile", "-o", "{d}/blocker/ds"), "blocker"),
    (("fit", "{d}", "-o", "{d}/blocker/x.npz"), "blocker"),
    (("validate", "{d}", "--plot", "{d}/blocker/p.png"), "blocker"),
])
def test_garbage_gets_one_line(cli, garbage, args, names):
    before = sorted(p.name for p in garbage.rglob("*"))
    line = _one_line_error(cli(*[a.format(d=garbage) for a in args]))
    assert names in line
    assert sorted(p.name for p in garbage.rglob("*")) == before  # nothing written, no temp file left


def test_huge_value_is_that_rows_error_and_others_are_predicted(tmp_path):
    """1e30 layers in one row of 18 (mixed with text so the column is not numeric): that row's error,
    every other good row predicted exactly as alone, and no numpy RuntimeWarning."""
    import warnings

    import pandas as pd

    from vtrain.tables.forecast import forecast_frame

    rows = [dict(model="gpt3-1.3b", num_layers=24, num_gpus=8, tp=2, global_batch=64) for _ in range(18)]
    rows[3]["num_layers"] = 1e30
    rows[7]["num_layers"] = "twelve"
    rows[9]["num_layers"] = -5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = forecast_frame(pd.DataFrame(rows), checkpoint="none")
        numeric = forecast_frame(pd.DataFrame([rows[0], rows[3]]), checkpoint="none")
        alone = forecast_frame(pd.DataFrame(rows[:1]), checkpoint="none")
    assert "1e+30" in out.loc[3, "error"] and "too large" in out.loc[3, "error"]
    assert "too large" in numeric.loc[1, "error"]
    assert out.loc[7, "error"].startswith("num_layers") and out.loc[9, "error"].startswith("num_layers")
    good = [i for i in range(18) if i not in (3, 7, 9)]
    assert out.loc[good, "error"].isna().all()
    assert (out.loc[good, "iteration_time_s"] == alone.loc[0, "iteration_time_s"]).all()


def _damaged_parquet(path, rows=40, group=10, damaged_group=2):
    """A parquet file whose footer is intact but whose row group `damaged_group` has a garbled page
    header: it opens, and reading fails part-way through."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"model": ["gpt3-1.3b"] * rows, "num_gpus": [8] * rows, "tp": [2] * rows,
                      "global_batch": [64] * rows})
    pq.write_table(table, path, row_group_size=group, compression="none")
    column = pq.ParquetFile(path).metadata.row_group(damaged_group).column(1)
    offset = column.dictionary_page_offset if column.dictionary_page_offset is not None else column.data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))


def test_error_part_way_through_a_table_is_one_line_in_the_library(tmp_path):
    """A read error after some batches (here a damaged page in the third row group) is a UserError of
    one line naming the file and the rows read, from the library itself; no output is left."""
    from vtrain import UserError
    from vtrain.tables.forecast import forecast_file, iter_input

    src = tmp_path / "jobs.parquet"
    _damaged_parquet(src)
    total, _, batches = iter_input(src, 10)
    assert total == 40
    with pytest.raises(UserError) as err:
        for _ in batches:
            pass
    assert batches.rows == 20
    message = str(err.value)
    assert "\n" not in message and "jobs.parquet" in message and "past row 20" in message, message
    with pytest.raises(UserError, match="past row 20"):
        forecast_file(src, tmp_path / "out.csv", checkpoint="none", chunk_rows=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.parquet"]


def test_error_part_way_through_a_table_cli(cli, tmp_path):
    src = tmp_path / "jobs.parquet"
    _damaged_parquet(src)
    line = _one_line_error(cli("forecast", src, "-o", tmp_path / "out.csv", "-c", "none", "--chunk-rows", "10"))
    assert "past row 20" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.parquet"]


@pytest.mark.parametrize("args, names", [
    (("predict", "--model", "gpt3-1.3b", "--tp", "abc"), "'--tp'"),
    (("predict", "--bogus", "1"), "--bogus"),
    (("frobnicate",), "frobnicate"),
    (("fit",), "dataset_dir"),
    (("predict", "--model", "gpt3-1.3b", "--tp"), "'--tp'"),
])
def test_usage_errors_get_one_line_naming_the_flag_and_the_help(cli, args, names):
    """click's own usage errors (unknown flag or command, wrong type, missing argument or value) are one
    line too, naming the flag and the command's --help, instead of click's usage block."""
    line = _one_line_error(cli(*args))
    assert names in line and "--help'" in line, line


def test_help_and_a_bare_group_still_print_the_help(cli):
    ok = cli("predict", "--help")
    assert ok.returncode == 0 and "--num-gpus" in ok.stdout
    bare = cli("dataset")
    assert bare.returncode == 2 and "import" in bare.stdout + bare.stderr
