"""Accuracy on the shared measurements: imports ../shared/data (or $VTRAIN_DATA) into a temporary
dataset, then runs `vtrain validate` (grouped cross-validation, held-out model shapes) and prints
its tables, including the uncalibrated analytical simulator's error per group.

Run: python bench/bench_accuracy.py [--folds K] [--steps N] [--no-kernels] [--plot FILE]
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=6000)  # the `vtrain fit` recipe
    parser.add_argument("--no-kernels", action="store_true")
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    from vtrain.dataset.paths import data_root

    root = Path(data_root())
    sources = [root / name for name in ("vtrain", "vidur", "xla", "llmcompass") if (root / name).exists()]
    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds"
        vtrain = [sys.executable, "-m", "vtrain.cli"]
        subprocess.run(vtrain + ["dataset", "import", *map(str, sources), "-o", str(ds)], check=True,
                       capture_output=True)
        cmd = vtrain + ["validate", str(ds), "--steps", str(args.steps), "--quiet"]
        if args.folds:
            cmd += ["--folds", str(args.folds)]
        if args.no_kernels:
            cmd.append("--no-kernels")
        if args.plot:
            cmd += ["--plot", args.plot]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
