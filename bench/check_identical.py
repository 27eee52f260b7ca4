"""Predictions of two versions of the code side by side: dump with each version, then compare.

    OLD/.venv/bin/python bench/check_identical.py dump /tmp/old.npz
    NEW/.venv/bin/python bench/check_identical.py dump /tmp/new.npz
    python bench/check_identical.py compare /tmp/old.npz /tmp/new.npz

Inputs (fixed seeds): 20,000 jobs of the forecast bench generator (its valid rows) and random samples
of searched strategies (every knob: ZeRO 0-3, recompute modes, cp, vpp, ep) for a dense model in
bf16 and fp8 and two MoE models. Outputs: iteration time (s), its breakdown (s), memory (bytes) and
MFU, from numpy (float64) and from the jitted float32 search evaluation, for checkpoints "default"
and "none". `compare` prints max |new/old - 1| per group (numpy must be 0; float32 below 1e-6).
"""
from __future__ import annotations

import os
import sys

import numpy as np

SAMPLES = 2000  # strategies drawn per searched model


def inputs() -> dict:
    """name -> SimInput (float64)."""
    from vtrain.costmodel.presets import lookup_model
    from vtrain.costmodel.spec import build_config
    from vtrain.strategy import search as S
    from vtrain.tables.columns import encode_table

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_forecast import make_jobs

    table = make_jobs(20000)
    d, errors = encode_table({name: table.column(name) for name in table.schema.names}, table.num_rows)
    out = {"forecast": d.take(np.flatnonzero(np.array([e is None for e in errors])))}
    searched = (("gpt3-175b", dict(global_batch=1536), dict(max_gpus=4096, max_cp=4)),
                ("gpt3-175b-fp8", dict(global_batch=1536, gpu="h100-sxm", precision="fp8"), dict(max_gpus=2048)),
                ("mixtral-8x7b", dict(global_batch=512, gpu="h100-sxm"), dict(max_gpus=512, max_cp=2)),
                ("deepseek-v3", dict(global_batch=4096, gpu="h100-sxm"), dict(max_gpus=2048)))
    rng = np.random.default_rng(0)
    for name, fields, space in searched:
        model = lookup_model(name.removesuffix("-fp8"))
        cfg = build_config(dict(model, **dict(dict(gpu="a100-80gb"), **fields)))
        strategies = S.enumerate_strategies(cfg, S.SearchSpace(max_micro_batch=8, **space))
        d = S.encode_strategies(cfg, strategies)
        pick = np.sort(rng.choice(d.rows, min(SAMPLES, d.rows), replace=False))
        out[name] = d.take(pick)
    return out


def outputs(out: dict) -> dict:
    """The compared arrays of one simulate output."""
    from vtrain.costmodel.simulator import BREAKDOWN_KEYS

    shape = np.shape(out["iteration_time_s"])
    arrays = dict(iteration_time_s=out["iteration_time_s"], mfu=out["mfu"], memory=out["memory"]["total"])
    arrays.update({f"bd_{k}": out["breakdown"][k] for k in BREAKDOWN_KEYS})
    return {k: np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for k, v in arrays.items()}


def dump(path: str) -> None:
    from vtrain.costmodel.predictor import Predictor
    from vtrain.strategy.evaluation import evaluate

    saved = {}
    for name, d in inputs().items():
        for checkpoint in ("default", "none"):
            predictor = Predictor.load(checkpoint)
            with np.errstate(all="ignore"):
                for key, v in outputs(predictor.simulate(d)).items():
                    saved[f"numpy/{checkpoint}/{name}/{key}"] = v
            jitted = evaluate(predictor, d)
            saved[f"jax32/{checkpoint}/{name}/iteration_time_s"] = jitted["iteration_time_s"]
            saved[f"jax32/{checkpoint}/{name}/memory"] = jitted["memory"]
        print(f"{name}: {d.rows} rows", flush=True)
    np.savez(path, **saved)


def compare(old_path: str, new_path: str) -> int:
    old, new = np.load(old_path), np.load(new_path)
    assert sorted(old.files) == sorted(new.files), "different keys"
    worst: dict[str, float] = {}
    rows: dict[str, int] = {}
    for key in old.files:
        a, b = old[key], new[key]
        same_nan = np.array_equal(np.isnan(a), np.isnan(b))
        ok = np.isfinite(a) & (a != 0)
        rel = float(np.max(np.abs(b[ok] / a[ok] - 1.0))) if ok.any() else 0.0
        exact_rest = np.array_equal(a[~ok & ~np.isnan(a)], b[~ok & ~np.isnan(a)])
        group = "/".join(key.split("/")[:2])
        worst[group] = max(worst.get(group, 0.0), rel if (same_nan and exact_rest) else float("inf"))
        if key.endswith("iteration_time_s"):
            rows[group] = rows.get(group, 0) + len(a)
    bad = 0
    for group, rel in sorted(worst.items()):
        limit = 0.0 if group.startswith("numpy") else 1e-6
        status = "ok" if rel <= limit else "DIFFERENT"
        bad += status != "ok"
        print(f"{group:16s} {rows[group]:6d} rows  max |new/old - 1| = {rel:.3g}  ({status}, limit {limit:g})")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
