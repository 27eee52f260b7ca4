"""`vtrain forecast` and `vtrain.forecast`: results equal per-row Predictor/build_config references."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import vtrain
from vtrain.cli.app import main
from vtrain.tables import forecast as fc
from vtrain.costmodel.config_files import preset_fields
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import ALL_FIELDS, ConfigError, build_config

PREDICTOR = Predictor.load("none")


def _jobs(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """A mix of preset and explicit jobs, a few invalid ones, some without tokens/price."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        row = dict(job_id=f"j{i}", team=str(rng.choice(["ads", "search"])), model=None, num_layers=None,
                   hidden_size=None, num_attention_heads=None, tp=int(rng.choice([1, 2, 4])),
                   pp=int(rng.choice([1, 2])), dp=int(rng.choice([1, 2, 4])), micro_batch=int(rng.choice([1, 2])),
                   gpu=str(rng.choice(["a100-80gb", "h100", "mi300x"])),
                   recompute=str(rng.choice(["none", "selective", "full"])),
                   tokens=float(rng.choice([1e9, 5e10])) if i % 7 else None,
                   price_per_gpu_hour=float(rng.choice([1.0, 2.5])) if i % 5 else None)
        if i % 3:
            row["model"] = str(rng.choice(["gpt3-1.3b", "llama2-7b"]))
        else:
            row.update(num_layers=int(rng.choice([4, 8])), hidden_size=int(rng.choice([512, 1024])),
                       num_attention_heads=8)
        if i % 11 == 5:
            row["tp"] = 3  # does not divide the heads
        if i % 13 == 6:
            row["gpu"] = "tpu-v9"
        if i == 9:
            row["tokens"] = -5.0
        rows.append(row)
    return pd.DataFrame(rows)


def _reference(row: dict, default_price=None):
    """(Prediction, TrainingCost | None) from build_config + Predictor, or the ConfigError / message."""
    values = {}
    if isinstance(row.get("model"), str):
        values.update(preset_fields(row["model"]))
    values.update({k: v for k, v in row.items() if k in ALL_FIELDS and v is not None and v == v})
    try:
        cfg = build_config(values)
    except ConfigError as err:
        return err, None
    tokens = row.get("tokens")
    if tokens is not None and tokens == tokens and tokens <= 0:
        return "tokens", None
    pred = PREDICTOR.predict(cfg)
    cost = None
    if tokens is not None and tokens == tokens:
        price = row.get("price_per_gpu_hour")
        price = default_price if price is None or price != price else price
        cost = (pred.training_cost(tokens, price if price is not None else 0.0), price)
    return pred, cost


def _check_against_reference(inp: pd.DataFrame, out: pd.DataFrame, default_price=None):
    assert list(out.columns[: len(inp.columns)]) == list(inp.columns)
    assert len(out) == len(inp)
    pd.testing.assert_frame_equal(out[inp.columns].reset_index(drop=True), inp.reset_index(drop=True),
                                  check_dtype=False)
    n_ok = n_bad = 0
    for i, row in enumerate(inp.to_dict("records")):
        got = out.iloc[i]
        pred, cost = _reference(row, default_price)
        if isinstance(pred, (ConfigError, str)):
            n_bad += 1
            field = pred.field if isinstance(pred, ConfigError) else pred
            assert isinstance(got["error"], str) and got["error"].startswith(field + ":"), (got["error"], pred)
            assert pd.isna(got["iteration_time_s"]) and pd.isna(got["mfu"])
            continue
        n_ok += 1
        assert pd.isna(got["error"]), got["error"]
        np.testing.assert_allclose(got["iteration_time_s"], pred.iteration_time_s, rtol=1e-12)
        np.testing.assert_allclose(got["tokens_per_s"], pred.tokens_per_s, rtol=1e-12)
        np.testing.assert_allclose(got["mfu"], pred.mfu, rtol=1e-12)
        np.testing.assert_allclose(got["memory_gib_per_gpu"], pred.memory_gib_per_gpu, rtol=1e-12)
        assert bool(got["fits_memory"]) == pred.fits_memory
        if "tokens" in inp.columns:
            if cost is None:
                assert pd.isna(got["gpu_hours"]) and pd.isna(got["cost"])
            else:
                ref, price = cost
                np.testing.assert_allclose(got["train_days"], ref.train_days, rtol=1e-12)
                np.testing.assert_allclose(got["gpu_hours"], ref.gpu_hours, rtol=1e-12)
                if price is None:
                    assert pd.isna(got["cost"])
                else:
                    np.testing.assert_allclose(got["cost"], ref.cost, rtol=1e-12)
    assert n_ok >= 10 and n_bad >= 3
    return n_ok, n_bad


def _run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def test_parquet_roundtrip_matches_predictor(tmp_path, capsys):
    jobs = _jobs()
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.parquet"
    jobs.to_parquet(src, index=False)
    code, out, err = _run(["forecast", str(src), "-o", str(dst), "--checkpoint", "none", "--chunk-rows", "7"], capsys)
    assert code == 0, err
    result = pq.read_table(dst).to_pandas()
    for name in fc.RESULT_COLUMNS + fc.COST_COLUMNS + (fc.ERROR_COLUMN,):
        assert name in result.columns
    _check_against_reference(jobs, result)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_csv_roundtrip_with_default_price_and_late_bad_cell(tmp_path, capsys, monkeypatch):
    jobs = _jobs(60, seed=1)
    jobs["num_layers"] = jobs["num_layers"].astype(object)
    jobs.loc[55, "num_layers"] = "lots"  # far past the first CSV block: the column becomes text
    src, dst = tmp_path / "jobs.csv", tmp_path / "out.csv"
    jobs.to_csv(src, index=False)
    monkeypatch.setattr(fc, "CSV_BLOCK_BYTES", 1024)  # many blocks
    report = fc.forecast_file(src, dst, checkpoint="none", default_price=3.0)
    result = pd.read_csv(dst)
    assert report.rows == 60 and report.valid == result["error"].isna().sum()
    assert result.loc[55, "error"].startswith("num_layers: 'lots' is not an integer")
    expected = pd.read_csv(src)  # what the CSV holds (numbers as text where a column has text)
    _check_against_reference(_numeric(expected.drop(index=55)), _numeric(result.drop(index=55)), default_price=3.0)


def _numeric(df):
    out = df.copy()
    for c in ("num_layers", "hidden_size", "num_attention_heads"):
        out[c] = pd.to_numeric(out[c], errors="coerce")
    return out


def test_parquet_to_csv_and_no_tokens_means_no_cost_columns(tmp_path):
    jobs = _jobs(20).drop(columns=["tokens", "price_per_gpu_hour"])
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.csv"
    jobs.to_parquet(src, index=False)
    fc.forecast_file(src, dst, checkpoint="none", chunk_rows=6)
    result = pd.read_csv(dst)
    assert not set(fc.COST_COLUMNS) & set(result.columns)
    _check_against_reference(jobs, result)


def test_python_api_keeps_index_and_matches(tmp_path):
    jobs = _jobs(30, seed=2)
    jobs.index = np.arange(100, 130)
    out = vtrain.forecast(jobs, checkpoint="none")
    assert list(out.index) == list(jobs.index)
    assert "forecast" in vtrain.__all__
    _check_against_reference(jobs, out)


def test_reforecasting_an_output_replaces_results(tmp_path):
    jobs = _jobs(15)
    once = vtrain.forecast(jobs, checkpoint="none")
    twice = vtrain.forecast(once, checkpoint="none")
    assert list(twice.columns) == list(once.columns)
    pd.testing.assert_frame_equal(twice, once)


def test_missing_column_fails_without_touching_existing_output(tmp_path, capsys):
    jobs = _jobs(10).drop(columns=["model", "hidden_size"])
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.parquet"
    jobs.to_parquet(src, index=False)
    dst.write_bytes(b"previous results")
    code, out, err = _run(["forecast", str(src), "-o", str(dst), "-c", "none"], capsys)
    assert code == 2
    assert err.strip().startswith("error: column 'hidden_size': missing") and len(err.strip().splitlines()) == 1
    assert dst.read_bytes() == b"previous results"
    jobs.rename(columns={"num_layers": "num_layer"}).to_parquet(src, index=False)
    code, out, err = _run(["forecast", str(src), "-o", str(tmp_path / "new.csv"), "-c", "none"], capsys)
    assert code == 2 and "did you mean 'num_layers'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.parquet", "out.parquet"]


def test_an_output_folder_that_does_not_exist_is_named_not_created(tmp_path, capsys):
    # a long forecast into a mistyped folder fails at once, saying so (search's -o creates folders;
    # forecast does not, so a typo does not scatter results)
    src = tmp_path / "jobs.parquet"
    _jobs(5).to_parquet(src, index=False)
    code, out, err = _run(["forecast", str(src), "-o", str(tmp_path / "typo" / "out.csv"), "-c", "none"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "does not exist; create it first" in lines[0] and "typo" in lines[0]
    assert not (tmp_path / "typo").exists()


def test_a_malformed_csv_line_is_named_by_its_number(tmp_path, capsys):
    src, dst = tmp_path / "jobs.csv", tmp_path / "out.csv"
    good = "gpt3-1.3b,8,1,1,64\n"
    src.write_text("model,num_gpus,tp,pp,global_batch\n" + good * 3 + "gpt3-1.3b,8,1,1,64,7\n" + good)
    dst.write_bytes(b"previous results")
    code, out, err = _run(["forecast", str(src), "-o", str(dst), "-c", "none"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "at line 5" in lines[0] and "Expected 5 columns, got 6" in lines[0]
    assert dst.read_bytes() == b"previous results"


def test_failure_mid_stream_leaves_existing_output(tmp_path, monkeypatch):
    jobs = _jobs(30)
    src, dst = tmp_path / "jobs.parquet", tmp_path / "out.parquet"
    jobs.to_parquet(src, index=False)
    dst.write_bytes(b"previous results")
    calls = []

    def failing(batch, evaluator, default_price=None, _real=fc.forecast_chunk):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk on fire")
        return _real(batch, evaluator, default_price)

    monkeypatch.setattr(fc, "forecast_chunk", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        fc.forecast_file(src, dst, checkpoint="none", chunk_rows=5)
    assert dst.read_bytes() == b"previous results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.parquet", "out.parquet"]


def test_summary_and_plot(tmp_path, capsys):
    jobs = _jobs(40, seed=3)
    src, dst, png = tmp_path / "jobs.csv", tmp_path / "out.parquet", tmp_path / "cost.png"
    jobs.to_csv(src, index=False)
    code, out, err = _run(["forecast", str(src), "-o", str(dst), "-c", "none", "--summary", "--plot", str(png)],
                          capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = pq.read_table(dst).to_pandas()
    result["gpu_name"] = result["gpu"].map(lambda g: {"h100": "h100-sxm"}.get(g, g))
    for (gpu, team), group in result.groupby(["gpu_name", "team"]):
        line = next(ln for ln in out.splitlines() if gpu in ln and team in ln)
        cells = [c.strip() for c in line.split("│") if c.strip()]
        assert cells[2] == f"{len(group):,}" and cells[3] == f"{group['error'].isna().sum():,}", line
        no_price = int((group["gpu_hours"].notna() & group["cost"].isna()).sum())
        expected = f"{group['cost'].sum():,.0f}" if group["cost"].notna().any() else "n/a"
        assert cells[5] == expected + (f" (+{no_price:,} n/a)" if no_price and expected != "n/a" else ""), line
    total = next(ln for ln in out.splitlines() if ln.strip("│ ").startswith("total"))
    assert f"{len(result):,}" in total and f"{result['gpu_hours'].sum():,.0f}" in total
    # the report's most expensive jobs are the output's
    report = fc.forecast_file(src, tmp_path / "again.parquet", checkpoint="none", top_n=5)
    top = result.sort_values("cost", ascending=False).head(5)
    assert list(report.top_label) == list(top["job_id"])
    np.testing.assert_allclose(report.top_value, top["cost"])


def test_plot_without_tokens_is_a_user_error(tmp_path, capsys):
    src = tmp_path / "jobs.parquet"
    _jobs(5).drop(columns=["tokens"]).to_parquet(src, index=False)
    code, out, err = _run(["forecast", str(src), "-o", str(tmp_path / "o.parquet"), "-c", "none", "--plot",
                           str(tmp_path / "p.png")], capsys)
    assert code == 2 and "needs a 'tokens' column" in err
    assert not (tmp_path / "o.parquet").exists()


def test_header_only_csv(tmp_path):
    src, dst = tmp_path / "jobs.csv", tmp_path / "out.csv"
    src.write_text("num_layers,hidden_size,num_attention_heads,tokens\n")
    report = fc.forecast_file(src, dst, checkpoint="none")
    assert report.rows == 0
    header = dst.read_text().splitlines()[0].replace('"', "").split(",")
    assert header[:4] == ["num_layers", "hidden_size", "num_attention_heads", "tokens"] and "cost" in header


SHARDED_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, pandas as pd
    import jax
    from vtrain.tables import forecast as fc
    from vtrain.costmodel.predictor import Predictor
    jobs = pd.read_parquet(sys.argv[1])
    p = Predictor.load("none")
    sharded = fc.ShardedEvaluator(p, "all")
    single = fc.ShardedEvaluator(p, 1)
    a = fc.forecast_frame(jobs, predictor=p, devices=None, chunk_rows=50)
    fc.make_evaluator = lambda pred, devices, _e={"all": sharded, 1: single}: _e[devices]
    b = fc.forecast_frame(jobs, predictor=p, devices="all", chunk_rows=50)
    c = fc.forecast_frame(jobs, predictor=p, devices=1, chunk_rows=50)
    cols = list(fc.RESULT_COLUMNS) + list(fc.COST_COLUMNS)
    print(json.dumps(dict(
        n_devices=len(jax.devices()), used=sharded.last_device_count, used_single=single.last_device_count,
        sharded_equals_single=bool(b[cols].equals(c[cols])),
        errors_equal=bool(b["error"].equals(a["error"])),
        max_rel_vs_numpy=float(np.nanmax(np.abs(b[cols[:4]].to_numpy(float) - a[cols[:4]].to_numpy(float))
                                         / np.abs(a[cols[:4]].to_numpy(float)))),
        valid=int(a["error"].isna().sum()))))
""")


def test_sharded_path_on_four_cpu_devices_equals_single_device(tmp_path):
    src = tmp_path / "jobs.parquet"
    _jobs(150, seed=4).to_parquet(src, index=False)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT, str(src)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["n_devices"] == 4 and res["used"] == 4 and res["used_single"] == 1
    assert res["sharded_equals_single"] and res["errors_equal"]
    assert res["max_rel_vs_numpy"] < 1e-12 and res["valid"] > 50


@pytest.mark.parametrize("call, parameter, flag", [
    (lambda src, tmp: dict(input_path=tmp / "missing.csv"), "input_path", "JOBS"),
    (lambda src, tmp: dict(output_path=tmp / "out.txt"), "output_path", "--output"),
    (lambda src, tmp: dict(output_path=tmp / "no-such-folder" / "out.csv"), "output_path", "--output"),
    (lambda src, tmp: dict(chunk_rows=0), "chunk_rows", "--chunk-rows"),
    (lambda src, tmp: dict(devices="many"), "devices", "--devices"),
    (lambda src, tmp: dict(require_tokens=True), "require_tokens", "--plot"),
])
def test_library_errors_name_parameters_and_the_cli_its_flags(tmp_path, capsys, call, parameter, flag):
    """forecast_file names its own parameters (a library user never sees a flag); `vtrain forecast`
    says the same with its argument/flag names. Nothing is written either way."""
    src = tmp_path / "jobs.csv"
    pd.DataFrame([dict(model="gpt3-1.3b", tp=1, pp=1, dp=1)]).to_csv(src, index=False)
    kwargs = dict(input_path=src, output_path=tmp_path / "out.csv", checkpoint="none")
    kwargs.update(call(src, tmp_path))
    with pytest.raises(vtrain.UserError) as err:
        fc.forecast_file(**kwargs)
    message = str(err.value)
    assert message.startswith(f"{parameter}: ") and "--" not in message.split(":")[0], message
    args = ["forecast", str(kwargs["input_path"]), "-o", str(kwargs["output_path"]), "-c", "none"]
    args += {"chunk_rows": ["--chunk-rows", "0"], "devices": ["--devices", "many"],
             "require_tokens": ["--plot", str(tmp_path / "cost.png")]}.get(parameter, [])
    code, _, cli_err = _run(args, capsys)
    assert code == 2 and cli_err.strip().splitlines()[-1].startswith(f"error: {flag}: "), cli_err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv"]
