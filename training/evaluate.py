"""Held-out evaluation: cross-validation grouped by model shape, leave-one-GPU-count-out for the
multi-node runs, and held-out-shape evaluation of kernels and collectives.

Every figure here comes from predictions on rows the model did not train on.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd

from vtrain.costmodel.collectives import collective_time
from vtrain.costmodel.correction import standalone, trust_weight
from vtrain.costmodel.simulator import kernel_time, simulate
from vtrain.training.data import Dataset
from vtrain.training.fit import FitSettings
from vtrain.training.measurements import take_collectives, take_kernels
from vtrain.training.metrics import error_stats
from vtrain.training.model import to_numpy
from vtrain.training.runs import encode_runs, setting_label, shape_key
from vtrain.training.train import pretrain, train

PUBLISHED_VTRAIN_MAPE = {"single-node": 8.37, "multi-node": 14.73}


def predict_runs(runs: pd.DataFrame, params: dict | None) -> np.ndarray:
    return np.asarray(simulate(encode_runs(runs), params)["iteration_time_s"])


def shape_folds(runs: pd.DataFrame, folds: int | None) -> np.ndarray:
    """Fold index per row: whole model shapes go to one fold (round-robin over sorted shapes);
    folds=None or >= number of shapes means leave-one-shape-out."""
    shapes = shape_key(runs)
    unique = sorted(shapes.unique())
    k = len(unique) if not folds or folds >= len(unique) else folds
    index = {s: i % k for i, s in enumerate(unique)}
    return shapes.map(index).to_numpy()


def _report_fold(on_fold, fold: int, count: int, runs: pd.DataFrame, pred: np.ndarray, t0: float) -> None:
    """Call on_fold(fold, count, held-out runs, held-out MAPE % or None, seconds) if given."""
    if on_fold is None:
        return
    mape = None
    if len(runs):
        mape = float(np.mean(np.abs(pred - runs["iteration_time_s"].to_numpy()) / runs["iteration_time_s"].to_numpy())
                     * 100)
    on_fold(fold, count, len(runs), mape, time.perf_counter() - t0)


def run_folds(runs: pd.DataFrame, split: str = "shape", folds: int | None = None) -> np.ndarray:
    """Fold per row of `runs`: split='shape' groups by model shape (`shape_folds`); split='gpus' is the
    GPU count of each multi-node run, -1 (always trained on) for single-node runs."""
    if split == "shape":
        return shape_folds(runs, folds)
    multi = setting_label(runs) == "multi-node"
    return np.where(multi, runs["num_gpus"].to_numpy(), -1)


def cross_validate_runs(ds: Dataset, settings: FitSettings, folds: int | None = None,
                        init: dict | None = None, split: str = "shape", on_fold=None) -> pd.DataFrame:
    """Held-out predictions for every run: one fit per fold, trained on the other folds' runs and all
    kernels/collectives. split='shape' groups by model shape; split='gpus' holds out each multi-node
    GPU count in turn (single-node runs always train). `on_fold` is called after each fold (see
    `_report_fold`)."""
    runs = ds.runs.reset_index(drop=True)
    fold_of = run_folds(runs, split, folds)
    pred = np.full(len(runs), np.nan)
    weight = np.full(len(runs), np.nan)
    held_folds = sorted(set(fold_of) - {-1})
    for i, fold in enumerate(held_folds):
        t0 = time.perf_counter()
        test = fold_of == fold
        params, _ = train(ds, replace(settings, label=f"fold {fold}"), runs=runs[~test], init=init)
        pred[test] = predict_runs(runs[test], params)
        weight[test] = np.asarray(trust_weight(params, encode_runs(runs[test]), np)) if params is not None else 0.0
        _report_fold(on_fold, i, len(held_folds), runs[test], pred[test], t0)
    out = runs.assign(predicted_s=pred, correction_weight=weight, setting=setting_label(runs), shape=shape_key(runs),
                      fold=fold_of)
    return out[~np.isnan(pred)]


def summarize(predictions: pd.DataFrame) -> pd.DataFrame:
    """Error statistics per setting (single-/multi-node), per shape and overall."""
    rows = []
    for (setting, shape), part in predictions.groupby(["setting", "shape"]):
        rows.append(dict(group=f"{setting} {shape}", **error_stats(part["predicted_s"], part["iteration_time_s"])))
    for setting, part in predictions.groupby("setting"):
        rows.append(dict(group=setting, **error_stats(part["predicted_s"], part["iteration_time_s"]),
                         vtrain_published=PUBLISHED_VTRAIN_MAPE.get(setting)))
    rows.append(dict(group="overall", **error_stats(predictions["predicted_s"], predictions["iteration_time_s"])))
    return pd.DataFrame(rows)


def _kernel_predictions(ks, params) -> pd.DataFrame:
    frames = []
    for cls, v in ks.by_class.items():
        pred = kernel_time(v["op"], v["peak"], v["hbm_bw"], standalone(params), np)
        frames.append(pd.DataFrame(dict(kind="kernel:" + cls, predicted_s=pred, measured_s=v["time"])))
    return pd.concat(frames) if frames else pd.DataFrame()


def _collective_predictions(cs, params) -> pd.DataFrame:
    frames = []
    for op, v in cs.by_op.items():
        net = dict(intra_bw=v["intra_bw"], inter_bw=v["inter_bw"])
        pred = collective_time(op, v["size"], v["group"], v["ranks_per_node"], net, standalone(params), np)
        frames.append(pd.DataFrame(dict(kind="collective:" + op, predicted_s=pred, measured_s=v["time"])))
    return pd.concat(frames) if frames else pd.DataFrame()


def cross_validate(ds: Dataset, settings: FitSettings, folds: int | None = None,
                   on_fold=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Grouped cross-validation of the whole `vtrain fit` recipe, runs and measurements together.

    Fold k holds out at once the runs of the model shapes assigned to k (see `shape_folds`), the
    kernel shape groups (a GEMM weight shape (n, k), or the source table of another op) and the
    collective groups (GPU, network, group size) assigned to k. Each fold pre-trains and trains end
    to end on the rest only, exactly as `vtrain fit` does, and predicts everything it held out.
    Returns (run predictions, kernel/collective predictions); the latter has a `stage` column,
    "final" (the trained model, what a checkpoint ships) or "pre-trained" (after pre-training only).
    `on_fold` is called after each fold (see `_report_fold`).
    """
    runs = ds.runs.reset_index(drop=True)
    run_fold = shape_folds(runs, folds) if len(runs) else np.zeros(0, dtype=int)
    count = int(run_fold.max()) + 1 if len(runs) else (folds or 5)
    rng = np.random.default_rng(settings.seed)
    kernel_fold = {c: _group_folds(v["group"], count, rng) for c, v in ds.kernels.by_class.items()}
    coll_fold = {o: _group_folds(v["group_key"], count, rng) for o, v in ds.collectives.by_op.items()}
    pred = np.full(len(runs), np.nan)
    frames = []
    for fold in range(count):
        t0 = time.perf_counter()
        train_kernels, train_collectives = _measurements_where(ds, kernel_fold, coll_fold, lambda f: f != fold)
        train_part = replace(ds, kernels=train_kernels, collectives=train_collectives)
        fold_settings = replace(settings, label=f"fold {fold}")
        init = pretrain(train_part, fold_settings)
        params, _ = train(train_part, fold_settings, runs=runs[run_fold != fold], init=init)
        test = run_fold == fold
        if test.any():
            pred[test] = predict_runs(runs[test], params)
        _report_fold(on_fold, fold, count, runs[test], pred[test], t0)
        held_kernels, held_collectives = _measurements_where(ds, kernel_fold, coll_fold, lambda f: f == fold)
        for stage, p in (("final", params), ("pre-trained", None if init is None else to_numpy(init))):
            frames += [_kernel_predictions(held_kernels, p).assign(stage=stage),
                       _collective_predictions(held_collectives, p).assign(stage=stage)]
    measured = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not len(runs):
        return runs, measured
    run_predictions = runs.assign(predicted_s=pred, setting=setting_label(runs), shape=shape_key(runs), fold=run_fold)
    return run_predictions[~np.isnan(pred)], measured


def _measurements_where(ds: Dataset, kernel_fold: dict, coll_fold: dict, select) -> tuple:
    """(kernels, collectives) of `ds` whose fold index array passes `select` (fold array -> bool mask)."""
    return (take_kernels(ds.kernels, {c: select(f) for c, f in kernel_fold.items()}),
            take_collectives(ds.collectives, {o: select(f) for o, f in coll_fold.items()}))


def _group_folds(groups: np.ndarray, folds: int, rng) -> np.ndarray:
    unique = np.unique(groups)
    assignment = dict(zip(unique, rng.permutation(len(unique)) % folds))
    return np.array([assignment[g] for g in groups])


def summarize_measurements(predictions: pd.DataFrame) -> pd.DataFrame:
    rows = [dict(group=kind, **error_stats(p["predicted_s"], p["measured_s"]))
            for kind, p in predictions.groupby("kind")]
    for family in ("kernel", "collective"):
        part = predictions[predictions["kind"].str.startswith(family)]
        if len(part):
            rows.append(dict(group=f"all {family}s", **error_stats(part["predicted_s"], part["measured_s"])))
    return pd.DataFrame(rows)


def plot_predictions(predictions: pd.DataFrame, path) -> None:
    """Predicted-vs-measured scatter (log-log), one colour per setting, saved as PNG atomically."""
    import matplotlib

    from vtrain.costmodel.atomic import atomic_write

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for setting, part in predictions.groupby("setting"):
        ax.scatter(part["iteration_time_s"], part["predicted_s"], s=8, alpha=0.6, label=setting)
    lo = min(predictions["iteration_time_s"].min(), predictions["predicted_s"].min()) * 0.8
    hi = max(predictions["iteration_time_s"].max(), predictions["predicted_s"].max()) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="exact")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured iteration time (s)",
           ylabel="predicted iteration time (s)", title="vtrain held-out predictions")
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)


__all__ = ["cross_validate", "cross_validate_runs", "summarize", "summarize_measurements",
           "plot_predictions", "predict_runs", "error_stats", "pretrain"]
