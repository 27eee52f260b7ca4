"""`vtrain search` / `vtrain plan` command lines and the planning mode."""
import csv
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from vtrain.cli import search_cmd  # noqa: F401  (registers the commands)
from vtrain.cli.app import app
from vtrain.costmodel.errors import UserError
from vtrain.strategy.planning import plan
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.presets import lookup_model
from vtrain.strategy.search import SearchSpace, search
from vtrain.costmodel.spec import build_config

SMALL = ["search", "--model", "gpt3-1.3b", "--gpu", "v100", "--global-batch", "128", "-c", "none"]


def run_main(*args):
    code = "from vtrain.cli.app import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_nothing_fits_is_one_line_and_exit_2():
    proc = run_main("search", "--model", "gpt3-175b", "--gpu", "v100", "--num-gpus", "8", "--global-batch", "8",
                    "-c", "none")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: no strategy fits in 32 GiB per GPU")


def test_bad_requests_are_user_errors():
    runner = CliRunner()
    for args, text in ((SMALL + ["--num-gpus", "29"], "no valid strategy for 29 GPUs"),  # 7 works: pp=7
                       (SMALL, "give --num-gpus N"),
                       (SMALL + ["--num-gpus", "8", "--tp", "3"], "--tp: 3 does not divide num_attention_heads="),
                       (SMALL + ["--num-gpus", "8", "--max-gpus", "16"], "not both"),
                       (SMALL + ["--num-gpus", "8", "--objective", "speed"], "--objective")):
        res = runner.invoke(app, args)
        assert isinstance(res.exception, UserError), args
        assert text in str(res.exception) and "\n" not in str(res.exception)


def test_json_output_parses_and_matches_the_engine(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, SMALL + ["--max-gpus", "32", "--objective", "cost", "--top", "4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["objective"] == "cost" and len(out["top"]) == 4
    assert out["num_fit"] <= out["num_enumerated"]
    assert [r["rank"] for r in out["top"]] == [1, 2, 3, 4]
    assert {s["knob"] for s in out["sensitivity"]} >= {"tp", "pp", "dp", "micro_batch"}
    cfg = build_config(dict(lookup_model("gpt3-1.3b"), gpu="v100", global_batch=128))
    ref = search(cfg, SearchSpace(max_gpus=32), Predictor.load("none"), objective="cost", top=1)
    assert out["top"][0]["config"] == ref.top[0]["config"]

    target = tmp_path / "top.csv"
    plot = tmp_path / "front.png"
    res = runner.invoke(app, SMALL + ["--max-gpus", "32", "--top", "3", "--csv", "-o", str(target),
                                      "--plot", str(plot), "--no-sensitivity"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(target.open()))
    assert len(rows) == 3 and float(rows[0]["iteration_time_s"]) <= float(rows[1]["iteration_time_s"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_table_output_names_the_best_strategy():
    res = CliRunner().invoke(app, SMALL + ["--num-gpus", "16", "--top", "2", "--tp", "2"])
    assert res.exit_code == 0, res.output
    assert "best by time" in res.output and "sensitivity" in res.output
    assert "--tp 2 " in res.output  # the --tp flag restricted the search


def test_plan_recommends_the_largest_model_within_budget():
    pred = Predictor.load("none")
    ladder = (1024, 2048, 4096, 8192)
    res = plan("a100-80gb", 64, 7.0, pred, hidden_sizes=ladder, global_batch=256)
    rec = res.recommended
    assert rec["fits_budget"] and rec["train_days"] <= 7.0 and rec["gpus_used"] <= 64
    assert rec["tokens"] == pytest.approx(20.0 * rec["num_parameters"])
    assert rec["train_days"] == pytest.approx(rec["tokens"] / rec["tokens_per_s"] / 86400.0, rel=1e-9)
    assert all(r["num_parameters"] <= rec["num_parameters"] for r in res.rows if r.get("fits_budget"))
    larger = [r for r in res.rows if r["num_parameters"] > rec["num_parameters"]]
    assert larger and not any(r.get("fits_budget") for r in larger)
    # real throughput is below peak, so the peak-FLOP/s estimate is more optimistic
    assert res.continuous["peak"]["num_parameters"] > res.continuous["predicted"]["num_parameters"]
    # more tokens per parameter -> never a larger model
    res40 = plan("a100-80gb", 64, 7.0, pred, hidden_sizes=ladder, global_batch=256, tokens_per_param=40.0)
    assert res40.recommended["num_parameters"] <= rec["num_parameters"]
    with pytest.raises(UserError, match="even the smallest candidate"):
        plan("a100-80gb", 64, 0.001, pred, hidden_sizes=ladder, global_batch=256)


def test_plan_command_json():
    res = CliRunner().invoke(app, ["plan", "--gpu", "a100-80gb", "--num-gpus", "64", "--days", "7", "-c", "none",
                                   "--global-batch", "256", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["recommended"]["train_days"] <= 7.0
