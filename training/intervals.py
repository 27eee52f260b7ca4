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

from vtrain.costmodel.correction import N_RUN_FEATURES, N_TRUST_FEATURES, run_features, trust_features
from vtrain.costmodel.intervals import (LEVEL, SETTINGS, blended_log_bounds, calibration_ranges, conformal_bounds,
                                        domain_distance, features_distance, widening)

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
    features = encoded_features(runs_d)
    out = np.zeros(len(fold_of))
    for fold in np.unique(fold_of):
        test = fold_of == fold
        if (~test).any():
            seen = _ranges(features, ~test)
            out[test] = features_distance(features[0][test], features[1][test], seen["global"], seen["trust"])
    return out


def encoded_features(d) -> tuple[np.ndarray, np.ndarray]:
    """(run_features, trust_features) of encoded configs `d`."""
    return np.asarray(run_features(d, np)), np.asarray(trust_features(d, np))


def row_features(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """`encoded_features` of every row of a runs table (one encoding)."""
    from vtrain.training.runs import encode_runs

    return encoded_features(encode_runs(table))


def _ranges(features: tuple[np.ndarray, np.ndarray], keep) -> dict:
    """{"global": {"min", "max"}, "trust": {"min", "max"}} of the rows `keep` of `row_features` (the
    layout a checkpoint's feature_range has)."""
    return {name: dict(min=f[keep].min(axis=0).tolist(), max=f[keep].max(axis=0).tolist())
            for name, f in zip(("global", "trust"), features)}


def _distance(calibration: dict, features: tuple[np.ndarray, np.ndarray], rows) -> np.ndarray:
    """Domain distance of the rows `rows` of `row_features` from a calibration's stored range."""
    seen, seen_trust = calibration_ranges(calibration)
    return np.asarray(features_distance(features[0][rows], features[1][rows], seen, seen_trust))


def coverage_by_setting(covered, setting) -> dict[str, float]:
    """{setting: coverage in percent, rounded to 0.1} for the settings with rows (as a calibration
    stores its held-out coverage)."""
    return {row["group"]: round(row["coverage"], 1)
            for row in summarize_coverage(covered, setting).to_dict("records") if row["rows"]}


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
    """log_ratio, setting, distance, group and weight per row of held-out `predictions` (a runs table
    with predicted_s and, where a correction predicted it, its correction_weight (else 1); with a `fold`
    column and no `distance`, distances are taken from each fold's training runs, see
    `fold_distances`)."""
    from vtrain.training.runs import encode_runs, setting_label

    p = predictions.reset_index(drop=True)
    if distance is None:
        distance = fold_distances(encode_runs(p), p["fold"].to_numpy()) if "fold" in p else np.zeros(len(p))
    weight = p["correction_weight"].to_numpy(float) if "correction_weight" in p else np.ones(len(p))
    return pd.DataFrame(dict(log_ratio=np.log(p["iteration_time_s"].to_numpy(float) / p["predicted_s"].to_numpy(float)),
                             setting=np.asarray(setting_label(p)).astype(str), distance=np.asarray(distance, float),
                             group=p[group_column].astype(str).to_numpy(), weight=weight))


def analytical_rows(runs: pd.DataFrame, published: pd.DataFrame | None = None) -> tuple[pd.DataFrame, tuple]:
    """(residual frame, row_features): the analytical predictor (no fitted parameters: every row is
    held out) on dataset runs (grouped by model shape) and public runs (grouped by source,
    'published:<group>'), and the features of those rows, row for row."""
    from vtrain.training.evaluate import predict_runs
    from vtrain.training.runs import shape_key

    tables = []
    if len(runs):
        tables.append(runs.assign(shape=shape_key(runs)))
    if published is not None and len(published):
        tables.append(published.assign(shape="published:" + published["group"].astype(str)))
    if not tables:
        empty = pd.DataFrame(dict(log_ratio=[], setting=[], distance=[], group=[], weight=[]))
        return empty, (np.zeros((0, N_RUN_FEATURES)), np.zeros((0, N_TRUST_FEATURES)))
    rows = pd.concat(tables, ignore_index=True)
    rows = rows.assign(predicted_s=predict_runs(rows, None))
    return residual_frame(rows, distance=np.zeros(len(rows))), row_features(rows)


def analytical_calibration(frame: pd.DataFrame, features: tuple, keep=None, level: float = LEVEL) -> dict:
    """The analytical predictor's calibration from the rows `keep` (default all) of `analytical_rows`:
    conformal bounds per setting, no widening inside, and the feature range of those rows (beyond it
    the far widening applies: costmodel/intervals.widening)."""
    keep = np.ones(len(frame), bool) if keep is None else np.asarray(keep, bool)
    part = frame[keep]
    cal = calibrate(part["log_ratio"], part["setting"], np.zeros(int(keep.sum())), level)
    cal.update(widening=0.0, widening_choice="none: the analytical model has no training range",
               calibrated_distance=0.0, rows_outside=0, feature_range=_ranges(features, keep))
    return cal


def analytical_leave_one_out(frame: pd.DataFrame, features: tuple, level: float = LEVEL):
    """A function group -> the analytical calibration of the rows of `analytical_rows` outside that
    group (model shape, or 'published:<source>'); each computed once."""
    calibrations = {}

    def without(group: str) -> dict:
        if group not in calibrations:
            calibrations[group] = analytical_calibration(frame, features, (frame["group"] != group).to_numpy(), level)
        return calibrations[group]

    return without


def analytical_coverage(frame: pd.DataFrame, features: tuple, without=None,
                        level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(covered, relative width) per row of `analytical_rows`, each group (model shape or public source)
    checked against the analytical calibration of all the other groups (`without`, default
    `analytical_leave_one_out`), widened by its distance from their range."""
    without = without or analytical_leave_one_out(frame, features, level)
    covered, width = np.zeros(len(frame), bool), np.full(len(frame), np.nan)
    groups = frame["group"].to_numpy()
    for g in np.unique(groups):
        test = groups == g
        cal = without(g)
        u = _distance(cal, features, test)
        covered[test] = coverage(frame["log_ratio"][test], frame["setting"][test], u, cal)
        width[test] = interval_width(cal, frame["setting"][test], u)
    return covered, width


def blended_coverage(frame: pd.DataFrame, rows: pd.DataFrame, calibration_for, analytical_for) -> tuple[np.ndarray, np.ndarray]:
    """(covered, relative width) of a checkpoint's blended interval per row of residual `frame` (its
    `rows` table, row for row): for each group, `calibration_for(group)` and `analytical_for(group)`
    give the checkpoint's and the analytical calibration that never saw it."""
    from vtrain.training.runs import encode_runs

    covered, width = np.zeros(len(frame), bool), np.full(len(frame), np.nan)
    groups = frame["group"].to_numpy()
    d = encode_runs(rows.reset_index(drop=True))
    features = encoded_features(d)
    gpus, per_node = np.broadcast_to(d.num_gpus, len(frame)), np.broadcast_to(d.gpus_per_node, len(frame))
    for g in np.unique(groups):
        test = groups == g
        part = frame[test]
        analytical = analytical_for(g)
        lo, hi = blended_log_bounds(calibration_for(g), part["distance"].to_numpy(), analytical,
                                    _distance(analytical, features, test), part["weight"].to_numpy(),
                                    gpus[test], per_node[test])
        r = part["log_ratio"].to_numpy()
        covered[test] = (r >= lo) & (r <= hi)
        width[test] = np.exp(hi) - np.exp(lo)
    return covered, width


def cv_blended_coverage(cv: pd.DataFrame, analytical_for, level: float = LEVEL) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """(residual frame, covered, width) of grouped-CV predictions `cv`: each model shape checked against
    the checkpoint calibration of the other shapes' residuals, blended with `analytical_for(shape)`,
    the analytical calibration of all the other rows (`analytical_leave_one_out`)."""
    f = residual_frame(cv)

    def calibration_for(g):
        keep = (f["group"] != g).to_numpy()
        return calibrate(f["log_ratio"][keep], f["setting"][keep], f["distance"][keep], level)

    covered, width = blended_coverage(f, cv, calibration_for, analytical_for)
    return f, covered, width


def _rows(predictor: str, covered, width, labels: dict[str, np.ndarray]) -> list[dict]:
    out = []
    for name, mask in labels.items():
        mask = np.asarray(mask, bool)
        if mask.any():
            out.append(dict(predictor=predictor, group=name, rows=int(mask.sum()),
                            coverage=float(np.mean(covered[mask]) * 100),
                            median_width=float(np.nanmedian(width[mask]) * 100) if np.isfinite(width[mask]).any()
                            else float("nan")))  # no interval for these rows (a setting without bounds)
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
      shape), each shape checked against a calibration from the other shapes' residuals, blended as
      a prediction blends it with the analytical calibration of every other row (other shapes and
      the public runs);
    - combined predictor, public runs per source: checkpoint `params` with its stored `calibration`
      (fitted on other data; never on these rows), blended with the analytical calibration of the
      dataset runs and the other public sources;
    - analytical, the same groups: every run is held out (no fitted parameters); each model shape or
      public source is checked against a calibration from all the other rows, widened beyond their
      feature range."""
    from vtrain.costmodel.correction import trust_weight
    from vtrain.training.evaluate import predict_runs
    from vtrain.training.runs import encode_runs

    out = []
    fa, features = analytical_rows(runs, published)
    without = analytical_leave_one_out(fa, features, level)  # shared by the three parts below
    if cv is not None and len(cv):
        f, covered, width = cv_blended_coverage(cv, without, level)
        out += _rows("combined (grouped CV)", covered, width, {s: f["setting"].to_numpy() == s for s in SETTINGS})
    if published is not None and len(published) and calibration and params is not None:
        ranges = (params or {}).get("feature_range") or {}
        d = encode_runs(published)
        u = domain_distance(ranges.get("global"), d, np, ranges.get("trust"))
        table = published.assign(predicted_s=predict_runs(published, params),
                                 correction_weight=np.asarray(trust_weight(params, d, np)),
                                 group="published:" + published["group"].astype(str))
        f = residual_frame(table, distance=u, group_column="group")
        covered, width = blended_coverage(f, table, lambda g: calibration, without)
        out += _rows(f"combined ({checkpoint})", covered, width,
                     _public_labels(f["group"].str.removeprefix("published:").to_numpy()))
    if len(fa):
        covered, width = analytical_coverage(fa, features, without, level)
        public = fa["group"].str.startswith("published:").to_numpy()
        labels = {s: (fa["setting"].to_numpy() == s) & ~public for s in SETTINGS}
        labels.update({k: v & public for k, v in
                       _public_labels(np.where(public, fa["group"].str.removeprefix("published:"), "")).items()
                       if k != "public "})
        out += _rows("analytical", covered, width, labels)
    return out
