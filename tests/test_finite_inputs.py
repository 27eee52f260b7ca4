"""NaN, inf and non-positive numbers are refused where they make no sense, with the value in the
message: predict/search/plan flags, forecast's tokens and price_per_gpu_hour cells, and --summary
shows 'n/a' (not 0) for jobs with no price."""
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vtrain.cli.app import main
from vtrain.tables import forecast as fc

PREDICT = ["predict", "--model", "gpt3-1.3b", "--num-gpus", "8", "--global-batch", "64", "-c", "none"]


def _run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


@pytest.mark.parametrize("flag,value,words", [
    ("--tokens", "nan", "nan is not a finite number"),
    ("--tokens", "inf", "inf is not a finite number"),
    ("--tokens", "-inf", "-inf is not a finite number"),
    ("--tokens", "0", "0 must be positive"),
    ("--tokens", "-1e9", "-1e+09 must be positive"),
    ("--price-per-gpu-hour", "nan", "nan is not a finite number"),
    ("--price-per-gpu-hour", "inf", "inf is not a finite number"),
    ("--price-per-gpu-hour", "-2", "-2 must be >= 0"),
])
def test_predict_refuses_non_finite_or_non_positive(flag, value, words, capsys):
    args = PREDICT + (["--tokens", "1e9"] if flag != "--tokens" else []) + [flag, value]
    code, out, err = _run(args, capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert f"{flag}: {words}" in err


@pytest.mark.parametrize("args,words", [
    (["search", "--model", "gpt3-1.3b", "--num-gpus", "8", "--global-batch", "64", "--tokens", "nan"],
     "--tokens: nan is not a finite number"),
    (["search", "--model", "gpt3-1.3b", "--num-gpus", "8", "--global-batch", "64", "--price-per-gpu-hour", "inf"],
     "--price-per-gpu-hour: inf is not a finite number"),
    (["plan", "--num-gpus", "8", "--days", "nan"], "--days: nan is not a finite number"),
    (["plan", "--num-gpus", "8", "--days", "30", "--tokens-per-param", "inf"], "--tokens-per-param: inf is not"),
])
def test_search_and_plan_refuse_non_finite(args, words, capsys):
    code, _, err = _run(args + ["-c", "none"], capsys)
    assert code == 2 and words in err, err


def _jobs(tokens, price):
    n = len(tokens)
    return pa.table(dict(job_id=[f"j{i}" for i in range(n)], model=["gpt3-1.3b"] * n, num_gpus=[8] * n,
                         global_batch=[64] * n, tokens=pa.array(tokens, type=pa.float64(), from_pandas=False),
                         price_per_gpu_hour=pa.array(price, type=pa.float64(), from_pandas=False)))


def test_forecast_rows_with_non_finite_tokens_or_price_get_their_own_error(tmp_path):
    tokens = [1e9, math.nan, math.inf, -math.inf, 0.0, -5.0, None, 1e9, 1e9, 1e9, 1e9]
    price = [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, math.nan, math.inf, 1e308, None]
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.parquet"
    pq.write_table(_jobs(tokens, price), src)
    report = fc.forecast_file(src, dst, checkpoint="none")
    out = pq.read_table(dst).to_pydict()
    err = out["error"]
    assert err[0] is None and out["cost"][0] > 0
    assert err[1].startswith("tokens: nan is not a finite number")
    assert err[2].startswith("tokens: inf is not a finite number")
    assert err[3].startswith("tokens: -inf is not a finite number")
    assert err[4].startswith("tokens: 0 must be positive") and err[5].startswith("tokens: -5 must be positive")
    assert err[6] is None and out["gpu_hours"][6] is None and out["cost"][6] is None  # no tokens: no cost
    assert err[7].startswith("price_per_gpu_hour: nan is not a finite number")
    assert err[8].startswith("price_per_gpu_hour: inf is not a finite number")
    assert err[9].startswith("price_per_gpu_hour: 1e+308 gives a non-finite cost")
    assert err[10] is None and out["gpu_hours"][10] > 0 and out["cost"][10] is None  # no price: no cost
    for name in ("train_days", "gpu_hours", "cost"):
        assert all(v is None or math.isfinite(v) for v in out[name]), name
    totals = np.array([acc[2:5] for acc in report.groups.values()])
    assert np.all(np.isfinite(totals))


def test_forecast_csv_text_cells(tmp_path):
    src, dst = tmp_path / "jobs.csv", tmp_path / "out.csv"
    src.write_text("model,num_gpus,global_batch,tokens,price_per_gpu_hour\n"
                   "gpt3-1.3b,8,64,1e9,2\ngpt3-1.3b,8,64,inf,2\ngpt3-1.3b,8,64,lots,2\ngpt3-1.3b,8,64,,2\n"
                   "gpt3-1.3b,8,64,1e9,-inf\n")
    fc.forecast_file(src, dst, checkpoint="none")
    import pandas as pd

    err = pd.read_csv(dst)["error"].tolist()
    assert pd.isna(err[0]) and pd.isna(err[3])
    assert err[1].startswith("tokens: inf is not a finite number")
    assert err[2].startswith("tokens: 'lots' is not a number")
    assert err[4].startswith("price_per_gpu_hour: -inf is not a finite number")


def test_summary_shows_na_for_jobs_without_price(tmp_path, capsys):
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.parquet"
    table = _jobs([1e9, 1e9], [None, None]).append_column("team", pa.array(["a", "b"]))
    table = table.set_column(table.schema.names.index("price_per_gpu_hour"), "price_per_gpu_hour",
                             pa.array([None, 3.0], type=pa.float64()))
    pq.write_table(table, src)
    code, out, err = _run(["forecast", str(src), "-o", str(dst), "-c", "none", "--summary"], capsys)
    assert code == 0, err
    header = next([c.strip() for c in line.split("┃")[1:-1]] for line in out.splitlines() if "┃ gpu" in line)
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == len(header):
            rows[cells[1] or cells[0]] = cells
    cost = header.index("cost")
    assert rows["a"][cost] == "n/a"  # no price: not 0
    assert rows["b"][cost] not in ("n/a", "0") and float(rows["b"][cost].replace(",", "")) > 0
    assert rows["total"][cost].endswith("(+1 n/a)")  # the total says one job had no price
    assert "n/a: jobs without tokens" in out
