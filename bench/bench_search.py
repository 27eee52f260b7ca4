"""Strategy-search speed: batched evaluations per second for a 96-layer model (gpt3-175b) on CPU,
and the wall time of a full `vtrain search` for MT-NLG 530B as a subprocess (including JAX start).

    /work/venv/bin/python bench/bench_search.py            # figures go to docs/search.md by hand
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MTNLG = ["search", "--model", "mt-nlg-530b", "--gpu", "a100-80gb", "--global-batch", "1920", "--max-tp", "16",
         "--max-dp", "32"]


def evals_per_second(checkpoint: str, repeats: int = 5) -> None:
    t0 = time.perf_counter()
    from vtrain.strategy import search as S
    from vtrain.costmodel.predictor import Predictor
    from vtrain.costmodel.presets import lookup_model
    from vtrain.costmodel.spec import build_config

    cfg = build_config(dict(lookup_model("gpt3-175b"), gpu="a100-80gb", global_batch=1536))
    strategies = S.enumerate_strategies(cfg, S.SearchSpace(max_gpus=4096, max_micro_batch=64))
    d = S.encode_strategies(cfg, strategies)
    n = d.rows
    predictor = Predictor.load(checkpoint)
    from vtrain.strategy.evaluation import NUMPY_MAX_ROWS, evaluate_numpy

    t1 = time.perf_counter()
    S.evaluate(predictor, d.take(slice(0, NUMPY_MAX_ROWS + 1)))  # above the numpy limit: jitted, compiles
    t2 = time.perf_counter()
    runs = []
    for _ in range(repeats):
        s = time.perf_counter()
        S.evaluate(predictor, d)
        runs.append(time.perf_counter() - s)
    best = min(runs)
    print(f"[checkpoint {checkpoint}] gpt3-175b: {n:,} strategies (<= 4096 GPUs, all knobs), enumerate+encode {t1 - t0:.2f} s "
          f"(incl. imports), compile {t2 - t1:.2f} s")
    print(f"  after compile: {n / best:,.0f} evaluations/s (best of {repeats}; median {n / np.median(runs):,.0f})")
    print(f"  including compile: {n / (best + t2 - t1):,.0f} evaluations/s")
    small = d.take(slice(0, 20_000))
    numpy_s = _timed(lambda: evaluate_numpy(predictor, small))
    print(f"  numpy float64 (what batches <= {NUMPY_MAX_ROWS:,} use, nothing to compile): "
          f"{small.rows / numpy_s:,.0f} evaluations/s")
    mem = S.memory_bytes(d)
    print(f"  memory pre-filter (numpy float64): {n / _timed(lambda: S.memory_bytes(d)):,.0f} strategies/s; "
          f"{int((mem <= d.hbm_bytes).sum()):,} fit")


def _timed(fn) -> float:
    s = time.perf_counter()
    fn()
    return time.perf_counter() - s


def cli_wall(args, cache_dir, label) -> None:
    env = dict(os.environ, VTRAIN_JAX_CACHE=cache_dir)
    s = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from vtrain.cli.app import main; main()", *args],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - s
    status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
    print(f"  {label}: {wall:.2f} s ({status})")


def main() -> None:
    print(f"cpus: {os.cpu_count()}, python {sys.version.split()[0]}")
    for checkpoint in ("none", "default"):
        evals_per_second(checkpoint)
    for checkpoint in ("none", "default"):
        with tempfile.TemporaryDirectory() as cache:
            for space, extra in (("3,360 GPUs", ["--num-gpus", "3360"]), ("<= 53,760 GPUs", ["--max-gpus", "53760"])):
                print(f"vtrain search MT-NLG 530B, {space}, checkpoint {checkpoint} (subprocess, JAX start included):")
                extra = extra + ["--checkpoint", checkpoint]
                cli_wall(MTNLG + extra + ["--no-sensitivity"], "0", "no compilation cache, --no-sensitivity")
                cli_wall(MTNLG + extra, "0", "no compilation cache, with the sensitivity table")
                cli_wall(MTNLG + extra, cache, "persistent cache, first run")
                cli_wall(MTNLG + extra, cache, "persistent cache, warm")


if __name__ == "__main__":
    main()
