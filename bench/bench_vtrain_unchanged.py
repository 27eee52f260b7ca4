"""Predicts every vTrain ground-truth run (../shared/data/vtrain, imported into a temporary
dataset) with the shipped checkpoint and with the analytical model, and writes the times to a
CSV; with --compare OLD.csv it prints the largest relative change against an earlier run.
Used to check that a change to the simulator leaves vTrain's runs (attention=unfused, GPT,
even stages, cp=1) predicted exactly as before, so the shipped checkpoint stays valid.

Run: python bench/bench_vtrain_unchanged.py -o now.csv [--compare before.csv]
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--compare", default=None)
    args = parser.parse_args()
    from vtrain.costmodel.predictor import Predictor
    from vtrain.dataset import store
    from vtrain.dataset.paths import data_root
    from vtrain.training.runs import encode_runs

    root = Path(data_root())
    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds"
        subprocess.run([sys.executable, "-m", "vtrain.cli", "dataset", "import", str(root / "vtrain"), "-o", str(ds)],
                       check=True, capture_output=True)
        runs = store.load(ds, "runs")
    d = encode_runs(runs)
    out = pd.DataFrame({"source": runs["source"], "measured_s": runs["iteration_time_s"]})
    for name in ("default", "none"):
        sim = Predictor.load(name).simulate(d)
        out[f"{name}_s"] = sim["iteration_time_s"]
        out[f"{name}_mem"] = sim["memory"]["total"]
    out.to_csv(args.output, index=False)
    print(f"{len(out)} vTrain runs predicted -> {args.output}")
    if args.compare:
        old = pd.read_csv(args.compare)
        for col in ("default_s", "none_s"):
            rel = np.abs(out[col].to_numpy() / old[col].to_numpy() - 1.0)
            print(f"{col}: max relative change {rel.max():.2e} over {len(rel)} runs")


if __name__ == "__main__":
    main()
