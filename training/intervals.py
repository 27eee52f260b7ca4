"""Calibrating prediction intervals (costmodel/intervals.py) from held-out residuals, and measuring
their coverage on rows the calibration never saw.

Residuals are r = log(measured / predicted) of predictions made by a model that did not train on
the row's model shape (grouped cross-validation), each with its setting (single-/multi-node) and its
domain distance u from the training runs of the model that predicted it. The calibration picks the
widening g from a small grid, the smallest one under which the rows outside their training range
(u > 0) are covered at the target level, then takes the conformal bounds of r / (1 + g u) per
setting.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from vtrain.costmodel.correction import run_features, trust_features
from vtrain.costmodel.intervals import LEVEL, SETTINGS, conformal_bounds, domain_distance, widening

WIDENINGS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)  # candidate g, in ascending order
DEFAULT_WIDENING = 1.0  # when too few held-out rows lie outside their training range to choose g
FAR_WIDENING = 1.0  # prior beyond the largest held-out distance (costmodel/intervals.widening)
MIN_OUTSIDE_ROWS = 10


def _bounds_per_setting(r, setting, u, g, level):
    return {name: conformal_bounds(r[setting == name] / (1.0 + g * u[setting == name]), level) for name in SETTINGS}


def _covered(r, setting, u, g, table):
    lo = np.array([table[s][0] for s in setting])
    hi = np.array([table[s][1] for s in setting])
    w = 1.0 + g * u
    return (r >= lo * w) & (r <= hi * w)


def calibrate(log_ratio, setting, distance, level: float = LEVEL) -> dict:
    """A calibration dict (the layout costmodel/intervals.py reads) from held-out log ratios
    measured / predicted, their settings ('single-node' / 'multi-node') and domain distances.
    A setting with too few rows for the level gets null bounds (no interval)."""
    r = np.asarray(log_ratio, dtype=float)
    setting = np.asarray(setting).astype(str)
    u = np.asarray(distance, dtype=float)
    outside = u > 0
    chosen, how = DEFAULT_WIDENING, f"default: only {int(outside.sum())} held-out rows outside their training range"
    if outside.sum() >= MIN_OUTSIDE_ROWS:
        chosen, how = WIDENINGS[-1], "largest candidate (none reached the level)"
        for g in WIDENINGS:
            table = _bounds_per_setting(r, setting, u, g, level)
            if np.mean(_covered(r[outside], setting[outside], u[outside], g, table)) >= level:
                chosen, how = g, f"smallest of {list(WIDENINGS)} covering {level:.0%} of the rows outside"
                break
    table = _bounds_per_setting(r, setting, u, chosen, level)
    return dict(level=level, widening=chosen, widening_choice=how, far_widening=FAR_WIDENING,
                calibrated_distance=float(u.max()) if len(u) else 0.0,
                log_ratio={name: (list(b) if np.all(np.isfinite(b)) else None) for name, b in table.items()},
                rows={name: int((setting == name).sum()) for name in SETTINGS},
                rows_outside=int(outside.sum()))


def coverage(log_ratio, setting, distance, calibration: dict) -> np.ndarray:
    """Whether each row's log ratio lies inside `calibration`'s interval (False where it has none)."""
    r = np.asarray(log_ratio, dtype=float)
    setting = np.asarray(setting).astype(str)
    u = np.asarray(distance, dtype=float)
    table = {name: (pair if pair is not None else [np.nan, np.nan]) for name, pair in calibration["log_ratio"].items()}
    table = {name: table.get(name, [np.nan, np.nan]) for name in SETTINGS}
    lo = np.array([table[s][0] for s in setting])
    hi = np.array([table[s][1] for s in setting])
    w = widening(calibration, u)
    return (r >= lo * w) & (r <= hi * w)


def grouped_coverage(log_ratio, setting, distance, groups, level: float = LEVEL) -> np.ndarray:
    """Held-out coverage: each group's rows are checked against a calibration built from the other
    groups' rows only (leave one group out; groups = model shapes, or public-run sources)."""
    r, setting, u = np.asarray(log_ratio, float), np.asarray(setting).astype(str), np.asarray(distance, float)
    groups = np.asarray(groups).astype(str)
    covered = np.zeros(len(r), bool)
    for g in np.unique(groups):
        test = groups == g
        cal = calibrate(r[~test], setting[~test], u[~test], level)
        covered[test] = coverage(r[test], setting[test], u[test], cal)
    return covered


def interval_width(calibration: dict, setting, distance) -> np.ndarray:
    """Relative width (high - low) / predicted of each row's interval (NaN where there is none)."""
    w = widening(calibration, np.asarray(distance, float))
    out = []
    for s, f in zip(np.asarray(setting).astype(str), w):
        pair = calibration["log_ratio"].get(s)
        out.append(np.nan if pair is None else np.exp(pair[1] * f) - np.exp(pair[0] * f))
    return np.array(out)


def fold_distances(runs_d, fold_of: np.ndarray) -> np.ndarray:
    """Each row's domain distance from the training runs of its fold's model (all rows not in the
    fold): the global term's and the trust weight's feature ranges of those runs, as `fit` stores
    them and as a prediction measures it (so other hardware or an execution flag the fold's runs
    never had widens the held-out score as it widens a prediction)."""
    features = np.asarray(run_features(runs_d, np))
    trusted = np.asarray(trust_features(runs_d, np))
    out = np.zeros(len(fold_of))
    for fold in np.unique(fold_of):
        test = fold_of == fold
        if (~test).any():
            seen = dict(min=features[~test].min(axis=0), max=features[~test].max(axis=0))
            seen_trust = dict(min=trusted[~test].min(axis=0), max=trusted[~test].max(axis=0))
            out[test] = domain_distance(seen, runs_d.take(test), np, seen_trust)
    return out


def summarize_coverage(covered, setting, groups: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Coverage in percent per setting (and per extra named row mask in `groups`) with row counts."""
    covered, setting = np.asarray(covered, bool), np.asarray(setting).astype(str)
    rows = [dict(group=name, rows=int((setting == name).sum()),
                 coverage=float(covered[setting == name].mean() * 100) if (setting == name).any() else np.nan)
            for name in SETTINGS]
    for name, mask in (groups or {}).items():
        mask = np.asarray(mask, bool)
        rows.append(dict(group=name, rows=int(mask.sum()),
                         coverage=float(covered[mask].mean() * 100) if mask.any() else np.nan))
    return pd.DataFrame(rows)


def residual_frame(predictions: pd.DataFrame, distance=None, group_column: str = "shape") -> pd.DataFrame:
    """log_ratio, setting, distance and group per row of held-out `predictions` (a runs table with
    predicted_s; with a `fold` column and no `distance`, distances are taken from each fold's
    training runs, see `fold_distances`)."""
    from vtrain.training.runs import encode_runs, setting_label

    p = predictions.reset_index(drop=True)
    if distance is None:
        distance = fold_distances(encode_runs(p), p["fold"].to_numpy()) if "fold" in p else np.zeros(len(p))
    return pd.DataFrame(dict(log_ratio=np.log(p["iteration_time_s"].to_numpy(float) / p["predicted_s"].to_numpy(float)),
                             setting=np.asarray(setting_label(p)).astype(str), distance=np.asarray(distance, float),
                             group=p[group_column].astype(str).to_numpy()))


def calibrate_frame(frame: pd.DataFrame, level: float = LEVEL) -> dict:
    """`calibrate` on a residual frame, with its held-out (leave one group out) coverage per setting."""
    cal = calibrate(frame["log_ratio"], frame["setting"], frame["distance"], level)
    covered = grouped_coverage(frame["log_ratio"], frame["setting"], frame["distance"], frame["group"], level)
    cal["coverage_leave_one_group_out"] = {
        row["group"]: round(row["coverage"], 1) for row in summarize_coverage(covered, frame["setting"]).to_dict("records")
        if row["rows"]}
    return cal


def analytical_frame(runs: pd.DataFrame, published: pd.DataFrame | None = None) -> pd.DataFrame:
    """Residual frame of the analytical predictor (no fitted parameters: every row is held out) on
    dataset runs (grouped by model shape) and public runs (grouped by source, 'published:<group>')."""
    from vtrain.training.evaluate import predict_runs
    from vtrain.training.runs import shape_key

    frames = []
    if len(runs):
        frames.append(residual_frame(runs.assign(predicted_s=predict_runs(runs, None), shape=shape_key(runs)),
                                     distance=np.zeros(len(runs))))
    if published is not None and len(published):
        frames.append(residual_frame(published.assign(predicted_s=predict_runs(published, None),
                                                      shape="published:" + published["group"].astype(str)),
                                     distance=np.zeros(len(published))))
    if not frames:
        return pd.DataFrame(dict(log_ratio=[], setting=[], distance=[], group=[]))
    return pd.concat(frames, ignore_index=True)


def _rows(predictor: str, covered, width, labels: dict[str, np.ndarray]) -> list[dict]:
    out = []
    for name, mask in labels.items():
        mask = np.asarray(mask, bool)
        if mask.any():
            out.append(dict(predictor=predictor, group=name, rows=int(mask.sum()),
                            coverage=float(np.mean(covered[mask]) * 100),
                            median_width=float(np.nanmedian(width[mask]) * 100)))
    return out


def _public_labels(groups: np.ndarray) -> dict[str, np.ndarray]:
    labels = {f"public {g}": groups == g for g in sorted(set(groups))}
    labels["public, all"] = np.ones(len(groups), bool)
    return labels


def coverage_report(cv: pd.DataFrame | None, runs: pd.DataFrame, published: pd.DataFrame | None,
                    params: dict | None, calibration: dict | None, level: float = LEVEL,
                    checkpoint: str = "checkpoint") -> list[dict]:
    """Held-out coverage of the `level` interval, in percent, with the median relative width:
    - combined predictor, single-/multi-node: the grouped-CV residuals `cv` (held out by model
      shape), each shape checked against a calibration from the other shapes' residuals;
    - combined predictor, public runs per source: checkpoint `params` with its stored `calibration`
      (fitted on other data; never on these rows);
    - analytical, the same groups: every run is held out (no fitted parameters); each model shape or
      public source is checked against a calibration from all the other rows."""
    from vtrain.training.evaluate import predict_runs
    from vtrain.training.runs import encode_runs

    out = []
    if cv is not None and len(cv):
        f = residual_frame(cv)
        covered = grouped_coverage(f["log_ratio"], f["setting"], f["distance"], f["group"], level)
        cal = calibrate(f["log_ratio"], f["setting"], f["distance"], level)
        out += _rows("combined (grouped CV)", covered, interval_width(cal, f["setting"], f["distance"]),
                     {s: f["setting"].to_numpy() == s for s in SETTINGS})
    if published is not None and len(published) and calibration and params is not None:
        ranges = (params or {}).get("feature_range") or {}
        u = domain_distance(ranges.get("global"), encode_runs(published), np, ranges.get("trust"))
        f = residual_frame(published.assign(predicted_s=predict_runs(published, params)), distance=u,
                           group_column="group")
        covered = coverage(f["log_ratio"], f["setting"], f["distance"], calibration)
        out += _rows(f"combined ({checkpoint})", covered, interval_width(calibration, f["setting"], f["distance"]),
                     _public_labels(f["group"].to_numpy()))
    f = analytical_frame(runs, published)
    if len(f):
        covered = grouped_coverage(f["log_ratio"], f["setting"], f["distance"], f["group"], level)
        cal = calibrate(f["log_ratio"], f["setting"], f["distance"], level)
        public = f["group"].str.startswith("published:").to_numpy()
        labels = {s: (f["setting"].to_numpy() == s) & ~public for s in SETTINGS}
        labels.update({k: v & public for k, v in
                       _public_labels(np.where(public, f["group"].str.removeprefix("published:"), "")).items()
                       if k != "public "})
        out += _rows("analytical", covered, interval_width(cal, f["setting"], f["distance"]), labels)
    return out
