"""End-to-end throughput and peak memory of `vtrain forecast` (parquet in, parquet out).

    python bench/bench_forecast.py [--rows 1000000] [--devices numpy|all] [--chunk-rows 65536]

Writes a table of random, mostly valid jobs to a temporary folder, runs `vtrain forecast` on it
as a subprocess (so the figure includes start-up, reading, validation, simulation and writing),
and prints rows per minute and that process's peak RSS (ru_maxrss from os.wait4). The jobs are
generated in a separate process, so the (large) generator never inflates the measured figure.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_jobs(rows: int, seed: int = 0) -> pa.Table:
    """Random jobs: presets and explicit shapes, many strategies; ~5% invalid on purpose."""
    rng = np.random.default_rng(seed)
    presets = np.array(["gpt3-1.3b", "gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b"])
    tp = rng.choice([1, 2, 4, 8], rows)
    pp = rng.choice([1, 2, 4, 8], rows)
    dp = rng.choice([1, 2, 4, 8, 16, 32, 64], rows)
    micro = rng.choice([1, 2, 4], rows)
    model = rng.choice(presets, rows).astype(object)
    explicit = rng.random(rows) < 0.3  # the rest use presets
    model[explicit] = None
    layers = np.where(explicit, rng.choice([24, 32, 40, 48], rows), 0)
    hidden = np.where(explicit, rng.choice([2048, 4096, 5120, 8192], rows), 0)
    heads = np.where(explicit, rng.choice([16, 32, 64], rows), 0)
    bad = rng.random(rows) < 0.05
    tp = np.where(bad, 3, tp)  # 3 divides no head count here: an error row
    return pa.table({
        "job_id": pa.array(np.char.add("job-", np.arange(rows).astype(str))),
        "team": pa.array(rng.choice(["search", "ads", "research", "infra"], rows)),
        "model": pa.array(model, type=pa.string()),
        "num_layers": pa.array(layers, mask=~explicit),
        "hidden_size": pa.array(hidden, mask=~explicit),
        "num_attention_heads": pa.array(heads, mask=~explicit),
        "arch": pa.array(np.where(explicit, rng.choice(["gpt", "llama"], rows), None), type=pa.string()),
        "tp": tp, "pp": pp, "dp": dp, "micro_batch": micro,
        "global_batch": dp * micro * rng.choice([8, 16, 32], rows),
        "recompute": rng.choice(["none", "selective", "full"], rows),
        "zero_stage": rng.choice([0, 1], rows),
        "gpu": rng.choice(["a100-80gb", "h100-sxm", "h200", "b200", "mi300x"], rows),
        "tokens": rng.choice([1e11, 3e11, 1e12, 2e12], rows),
        "price_per_gpu_hour": rng.choice([1.5, 2.0, 2.5, 4.0], rows),
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--devices", default="numpy")
    ap.add_argument("--chunk-rows", type=int, default=65536)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--checkpoint", default="default", help="correction checkpoint (default: shipped; none = analytical)")
    ap.add_argument("--generate-only", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate_only:
        pq.write_table(make_jobs(args.rows), args.generate_only)
        return
    tmp = Path(tempfile.mkdtemp(prefix="vtrain-bench-"))
    try:
        jobs, out = tmp / "jobs.parquet", tmp / "out.parquet"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--generate-only", str(jobs)], check=True)
        print(f"generated {args.rows:,} jobs in {time.perf_counter() - t0:.1f} s ({jobs.stat().st_size / 1e6:.0f} MB)", flush=True)
        vtrain = shutil.which("vtrain") or str(Path(sys.executable).with_name("vtrain"))
        cmd = [vtrain, "forecast", str(jobs), "-o", str(out), "--checkpoint", args.checkpoint, "--no-progress",
               "--devices", args.devices, "--chunk-rows", str(args.chunk_rows)]
        t0 = time.perf_counter()
        sys.stdout.flush()
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"vtrain forecast failed with exit code {proc.returncode}")
        peak_mib = usage.ru_maxrss / 1024  # Linux: KiB
        meta = pq.ParquetFile(out).metadata
        assert meta.num_rows == args.rows, (meta.num_rows, args.rows)
        print(f"rows: {args.rows:,}  wall: {wall:.1f} s  throughput: {args.rows / wall * 60:,.0f} rows/min  "
              f"peak RSS: {peak_mib:,.0f} MiB  (devices={args.devices}, chunk_rows={args.chunk_rows}, "
              f"cores={os.cpu_count()})")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
