"""Coverage of the 90 % prediction interval on held-out runs: single-node and multi-node (grouped CV
by model shape, each shape checked against a calibration from the other shapes), the public runs by
source (the checkpoint's stored calibration, which never saw them), and the analytical predictor.

Run: python bench/bench_intervals.py out/shared-dataset [--folds 5] [--checkpoint default]
     [--predictions cv.parquet]   # reuse held-out predictions (a runs table with predicted_s, fold and
                                  # correction_weight; bench_trust_scale.py --save's pred_1 / trust are read as those)
The cross-validation is the runs-only split of `vtrain validate --no-kernels` (~5-30 min on 2 cores);
`vtrain validate` prints the same table.
"""
import argparse

import pandas as pd

from vtrain.costmodel.predictor import Predictor
from vtrain.training import evaluate as ev
from vtrain.training.data import load_dataset
from vtrain.training.fit import FitSettings
from vtrain.training.intervals import coverage_report
from vtrain.training.published import default_path, load_published


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="dataset directory (vtrain dataset import ...)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default="default", help="checkpoint for the public runs")
    parser.add_argument("--published", default=None, help="published runs.csv (default: the shared data's)")
    parser.add_argument("--predictions", default=None, help="parquet of held-out predictions to reuse")
    args = parser.parse_args()
    ds = load_dataset(args.dataset, seed=args.seed)
    if args.predictions:
        cv = pd.read_parquet(args.predictions)
        if "predicted_s" not in cv and "pred_1" in cv:  # bench_trust_scale.py --save at scale 1
            cv = cv.rename(columns={"pred_1": "predicted_s", "trust": "correction_weight"})
    else:
        settings = FitSettings(seed=args.seed, progress=False)
        cv = ev.cross_validate_runs(ds, settings, args.folds, init=ev.pretrain(ds, settings))
    path = args.published or default_path()
    pub = load_published(path)[0] if path else None
    predictor = Predictor.load(args.checkpoint)
    rows = coverage_report(cv, ds.runs, pub, predictor.correction, predictor.calibration,
                           checkpoint=f"checkpoint {predictor.name}")
    print(f"{'predictor':28s} {'group':34s} {'rows':>5s} {'coverage %':>11s} {'median width %':>15s}")
    for r in rows:
        print(f"{r['predictor']:28s} {r['group']:34s} {r['rows']:5d} {r['coverage']:11.1f} {r['median_width']:15.1f}")


if __name__ == "__main__":
    main()
