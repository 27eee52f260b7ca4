"""Prediction intervals for the iteration time: split-conformal bounds on the log ratio
measured / predicted, widened outside the training data.

A calibration (stored in a checkpoint's .json under "intervals", or for the analytical predictor in
checkpoints/analytical.intervals.json; built by training/intervals.py from held-out residuals) is

    {"level": 0.9, "widening": g, "far_widening": f, "calibrated_distance": u_max,
     "log_ratio": {"single-node": [lo, hi], "multi-node": [lo, hi]}, ...}

and a prediction t of a config at domain distance u (see `domain_distance`) gets the interval

    [t * exp(lo * w), t * exp(hi * w)]   (seconds),  w = 1 + g * u + f * max(u - u_max, 0)

where [lo, hi] = [m - q, m + q]: m the median of the held-out scores log(measured / predicted) /
(1 + g * u) of the config's setting (single-node: all GPUs in one node; multi-node otherwise) and
q the conformal quantile of their distance from m (`conformal_bounds`; checkpoints calibrated before
it store equal-tailed bounds, used as stored).

The combined predictor applies its learned correction at a weight c in [0, 1] (correction.trust_weight;
1 inside the training runs, towards 0 outside, where its answer becomes the analytical one), so its
log bounds blend the same way: c * (the checkpoint's bounds) + (1 - c) * (the analytical predictor's
bounds), each widened by its own distance (the analytical calibration stores the feature range of the
runs it was calibrated on: vTrain's and the public ones). A config far outside the training runs thus
gets the analytical model's interval, widened beyond the runs that interval was measured on. Pure
array code (numpy or jax.numpy), no state.
"""
from __future__ import annotations

import math

import numpy as np

from vtrain.costmodel.correction import N_GLOBAL_INPUTS, N_TRUST_FEATURES, run_features, trust_features

LEVEL = 0.9
SETTINGS = ("single-node", "multi-node")


def conformal_bounds(scores, level: float = LEVEL) -> tuple[float, float]:
    """Split-conformal bounds (m - q, m + q) of calibration `scores`, symmetric about their median m:
    q is the ceil((n + 1) * level)-th smallest |score - m|, so a new score from the same distribution
    lies in the bounds with probability >= `level`; (-inf, inf) when there are too few scores for that
    rank (fewer than level / (1 - level), i.e. 9 at 90 %).

    Symmetric about the median rather than equal-tailed: held out by model shape, a shape's bias can
    have either sign, and with few shapes (vTrain's multi-node runs have three) the tails' asymmetry
    learned from the others does not carry over to it; a bias shared by all the scores still moves
    the centre (docs/accuracy.md, "symmetric bounds")."""
    s = np.asarray(scores, dtype=float)
    n = len(s)
    k = math.ceil((n + 1) * level - 1e-9)  # (n + 1) * 0.9 can land a hair above an integer in floating point
    if not 1 <= k <= n:
        return -math.inf, math.inf
    centre = float(np.median(s))
    q = float(np.sort(np.abs(s - centre))[k - 1])
    return centre - q, centre + q


def domain_distance(feature_range: dict | None, d, xp=np, trust_range: dict | None = None):
    """Per config: how far the global term's inputs (run_features) lie outside `feature_range`
    ({"min", "max"} of the training runs' features), as the Euclidean norm of the per-input excess in
    doublings (log2 units; a 0/1 flag never seen in training counts 1). With `trust_range` (the trust
    weight's range, correction.trust_features) the excess of the GPU and network figures and of the
    execution flags beyond it counts too, so other hardware or another recipe widens the interval as
    it fades the correction. 0 inside the range, or when there is no range (the analytical model)."""
    trusted = trust_features(d, xp) if trust_range is not None else None
    return features_distance(run_features(d, xp), trusted, feature_range, trust_range, xp)


def features_distance(run_feature_values, trust_feature_values, feature_range: dict | None,
                      trust_range: dict | None = None, xp=np):
    """`domain_distance` from configs' run_features and trust_features already computed (the trust
    ones may be None when `trust_range` is None)."""
    features = xp.asarray(run_feature_values) * 4.0  # run_features divides log2 values by 4
    if feature_range is None:
        return xp.zeros(features.shape[:-1])
    lo = xp.asarray(feature_range["min"]) * 4.0
    hi = xp.asarray(feature_range["max"]) * 4.0
    excess = xp.maximum(lo - features, 0.0) + xp.maximum(features - hi, 0.0)
    squared = xp.sum(excess * excess, axis=-1)
    if trust_range is not None:
        n = N_TRUST_FEATURES - N_GLOBAL_INPUTS  # the trust features that are not run features
        extra = xp.asarray(trust_feature_values)[..., -n:]
        lo, hi = xp.asarray(trust_range["min"])[-n:], xp.asarray(trust_range["max"])[-n:]
        beyond = xp.maximum(lo - extra, 0.0) + xp.maximum(extra - hi, 0.0)
        squared = squared + xp.sum(beyond * beyond, axis=-1)
    return xp.sqrt(squared)


def setting_of(num_gpus, gpus_per_node, xp=np):
    """1 where a config spans nodes (multi-node), else 0."""
    return (xp.asarray(num_gpus) > xp.asarray(gpus_per_node)) * 1


def widening(calibration: dict, distance, xp=np):
    """The factor applied to the log bounds: 1 + g * u, plus f * (u - u_max) beyond the largest
    distance u_max the calibration's held-out rows had (`calibrated_distance`), where nothing measured
    says how fast the error grows; f (`far_widening`, 1 in the shipped calibrations) is a stated
    prior, not a fit: one doubling beyond u_max doubles the interval's log width."""
    g = float(calibration.get("widening", 0.0))
    f = float(calibration.get("far_widening", 0.0))
    u_max = float(calibration.get("calibrated_distance", 0.0))
    return 1.0 + g * distance + f * xp.maximum(distance - u_max, 0.0)


def log_bounds(calibration: dict | None, num_gpus, gpus_per_node, distance, xp=np):
    """(low, high) log ratios measured / predicted of the interval at domain distance `distance`
    (widened; see `widening`); NaN where the calibration has no bounds for the config's setting, or
    when there is no calibration."""
    multi = setting_of(num_gpus, gpus_per_node, xp)
    distance = xp.asarray(distance, dtype=float)
    if not calibration:
        nan = xp.full(xp.broadcast_shapes(xp.shape(multi), distance.shape), xp.nan)
        return nan, nan
    table = calibration["log_ratio"]

    def bound(name, i):
        value = (table.get(name) or [None, None])[i]
        return xp.nan if value is None else float(value)

    lo = xp.where(multi == 1, bound("multi-node", 0), bound("single-node", 0))
    hi = xp.where(multi == 1, bound("multi-node", 1), bound("single-node", 1))
    w = widening(calibration, distance, xp)
    return lo * w, hi * w


def bounds(calibration: dict | None, time_s, num_gpus, gpus_per_node, distance, xp=np):
    """(low, high) in seconds around predicted `time_s` (arrays); NaN where the calibration has no
    bounds for the config's setting, or when there is no calibration."""
    time_s = xp.asarray(time_s, dtype=float)
    lo, hi = log_bounds(calibration, num_gpus, gpus_per_node, distance, xp)
    return time_s * xp.exp(lo), time_s * xp.exp(hi)


def blended_log_bounds(calibration: dict | None, distance, analytical: dict | None, analytical_distance,
                       weight, num_gpus, gpus_per_node, xp=np):
    """(low, high) log bounds of a prediction whose learned correction applies at `weight` (0-1): the
    weighted mean of `calibration`'s bounds at `distance` and the `analytical` calibration's at
    `analytical_distance` (see the module docstring). Without an analytical calibration, or with
    weight None, `calibration`'s bounds alone."""
    lo, hi = log_bounds(calibration, num_gpus, gpus_per_node, distance, xp)
    if analytical is None or weight is None:
        return lo, hi
    a_lo, a_hi = log_bounds(analytical, num_gpus, gpus_per_node, analytical_distance, xp)
    c = xp.asarray(weight, dtype=float)
    return c * lo + (1.0 - c) * a_lo, c * hi + (1.0 - c) * a_hi


def calibration_ranges(calibration: dict | None) -> tuple[dict | None, dict | None]:
    """(global, trust) feature ranges stored with a calibration (the analytical one keeps the range of
    the runs it was calibrated on); (None, None) when it stores none."""
    ranges = (calibration or {}).get("feature_range") or {}
    return ranges.get("global"), ranges.get("trust")


def interval_arrays(calibration: dict | None, feature_range: dict | None, d, time_s, xp=np,
                    trust_range: dict | None = None, analytical: dict | None = None, weight=None) -> dict:
    """{"low", "high", "distance", "widening"} arrays for configs `d` (a SimInput) predicted at
    `time_s` seconds (`feature_range`, `trust_range`: see `domain_distance`; `analytical`, `weight`:
    the analytical calibration and the correction's weight per config, see `blended_log_bounds`).
    "widening" is the interval's log width over its width at distance 0 (1 inside the data)."""
    run_values = run_features(d, xp)  # both distances read the same features: computed once
    trust_values = trust_features(d, xp) if trust_range is not None or analytical is not None else None
    distance = features_distance(run_values, trust_values, feature_range, trust_range, xp)
    a_global, a_trust = calibration_ranges(analytical)
    a_distance = features_distance(run_values, trust_values, a_global, a_trust, xp)
    args = (d.num_gpus, d.gpus_per_node, xp)
    lo, hi = blended_log_bounds(calibration, distance, analytical, a_distance, weight, *args)
    lo0, hi0 = blended_log_bounds(calibration, 0.0 * distance, analytical, 0.0 * a_distance, weight, *args)
    time_s = xp.asarray(time_s, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = xp.where(hi0 - lo0 > 0, (hi - lo) / xp.where(hi0 - lo0 > 0, hi0 - lo0, 1.0), 1.0)
    factor = xp.where(xp.isfinite(factor), factor, 1.0)
    return dict(low=time_s * xp.exp(lo), high=time_s * xp.exp(hi), distance=distance, widening=factor)


def check_calibration(calibration, where: str) -> dict | None:
    """`calibration` if it has the stored layout, else None (with no interval shown); `where` names
    the file for errors. Raises ValueError naming the problem when the layout is broken."""
    if calibration is None:
        return None
    if not isinstance(calibration, dict) or not isinstance(calibration.get("log_ratio"), dict):
        raise ValueError(f"{where}: 'intervals' has no 'log_ratio' table")
    for name, pair in calibration["log_ratio"].items():
        if pair is not None and (not isinstance(pair, list) or len(pair) != 2
                                 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in pair)):
            raise ValueError(f"{where}: intervals.log_ratio.{name} must be [low, high] finite numbers, got {pair!r}")
    ranges = calibration.get("feature_range", {})
    if not isinstance(ranges, dict):
        raise ValueError(f"{where}: intervals.feature_range must be a table of {{\"min\", \"max\"}} ranges")
    for name, seen in ranges.items():
        if not (isinstance(seen, dict) and isinstance(seen.get("min"), list) and isinstance(seen.get("max"), list)
                and len(seen["min"]) == len(seen["max"])):
            raise ValueError(f"{where}: intervals.feature_range.{name} must be {{\"min\": [...], \"max\": [...]}} "
                             "of equal lengths")
    for key in ("widening", "far_widening", "calibrated_distance"):
        g = calibration.get(key, 0.0)
        if not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
            raise ValueError(f"{where}: intervals.{key} must be a finite number >= 0, got {g!r}")
    return calibration
