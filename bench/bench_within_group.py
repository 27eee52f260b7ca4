"""How well a run's own group predicts it: a reference point for the iteration-time figures.

For each group of vTrain's measured runs that share the model shape, GPU count, global batch and
TP / PP / DP sizes (so only the micro-batch size varies), every row is predicted from the other
rows of its group by the 1F1B pipeline law

    T = (m + p - 1) * (a * micro_batch + c),   m = global_batch / (dp * micro_batch),

with a (seconds per sample and stage) and c (seconds per micro-batch and stage) fitted by least
squares on the rest of the group. Such a fit knows far more about the row than the grouped
cross-validation of `vtrain validate`, which never sees the row's model shape. Where it still
misses by several percent, the row varies in ways its configuration does not explain (run-to-run
variation, effects the law leaves out), and no shape-held-out model can be expected to do better.

Run: python bench/bench_within_group.py   (reads ../shared/data/vtrain or $VTRAIN_DATA/vtrain)
"""
import numpy as np
import pandas as pd

from vtrain.training.metrics import error_stats
from vtrain.training.runs import SHAPE_COLUMNS

GROUP = [*SHAPE_COLUMNS, "num_gpus", "global_batch", "tp", "pp", "dp"]  # runs that differ in micro-batch only


def leave_one_out(group: pd.DataFrame) -> pd.DataFrame:
    """Each row's time (s) predicted from the other rows of its group, next to the measured time."""
    m = group["global_batch"] / (group["dp"] * group["micro_batch"])
    steps = (m + group["pp"] - 1).to_numpy()
    mb = group["micro_batch"].to_numpy(float)
    t = group["iteration_time_s"].to_numpy()
    features = np.stack([steps * mb, steps], axis=1)
    rows = []
    for i in range(len(group)):
        rest = np.arange(len(group)) != i
        coef, *_ = np.linalg.lstsq(features[rest], t[rest], rcond=None)
        interior = mb[rest].min() < mb[i] < mb[rest].max()
        rows.append(dict(predicted=features[i] @ coef, measured=t[i], interior=interior))
    return pd.DataFrame(rows)


def main():
    from vtrain.dataset.import_vtrain import import_ground_truth
    from vtrain.dataset.paths import data_root

    root = data_root()
    if root is None or not (root / "vtrain").is_dir():
        raise SystemExit("no shared data: set VTRAIN_DATA to the folder holding vtrain/")
    files = {label: root / "vtrain" / name for name, label in
             (("ground_truth_single.csv", "single-node"), ("ground_truth_multi.csv", "multi-node"))}
    for path in files.values():
        if not path.is_file():
            raise SystemExit(f"{path}: not found; get it from github.com/VIA-Research/vTrain (data/) "
                             "or set VTRAIN_DATA")
    runs_by_setting = {label: import_ground_truth(path).tables["runs"] for label, path in files.items()}
    print("setting      rows in groups of 3+   LOO MAPE   median   interior rows   interior MAPE")
    for label, runs in runs_by_setting.items():
        loo = pd.concat([leave_one_out(g) for _, g in runs.groupby(GROUP) if len(g) >= 3], ignore_index=True)
        every = error_stats(loo["predicted"], loo["measured"])
        inner = error_stats(loo["predicted"][loo["interior"]], loo["measured"][loo["interior"]])
        print(f"{label:12s} {every['rows']:>21d} {every['mape']:>9.2f}% {every['median']:>7.2f}% "
              f"{inner['rows']:>15d} {inner['mape']:>14.2f}%")


if __name__ == "__main__":
    from vtrain.costmodel.errors import UserError

    try:
        main()
    except UserError as err:  # a malformed input file: one line, as the CLI prints it
        raise SystemExit(str(err))
