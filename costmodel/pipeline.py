"""Pipeline schedules: iteration time from per-stage, per-micro-batch times.

With m micro-batches, p stages of per-micro-batch times t_s (forward + backward) and v virtual
stages per GPU (interleaved 1F1B; v = 1 otherwise), the pipeline finishes after

    T = m * max_s t_s + (sum_s t_s - max_s t_s) / v

The first term is the steady state of the slowest stage; the second is the warm-up/cool-down
bubble. For equal stages the bubble is (p - 1) * t / v, i.e. a fraction (p - 1) / (v * m) of the
ideal time, as in the Megatron-LM papers. 1F1B and GPipe take the same time (they differ in memory).
Pure array code; times in seconds.
"""
from __future__ import annotations

from vtrain.costmodel.rules import Schedule

COMPONENTS = ("compute", "tp_comm", "pp_comm", "ep_comm")


def pipeline_time(first: dict, middle: dict, last: dict, m, pp, vpp, xp) -> dict:
    """Per-stage dicts hold per-micro-batch seconds for COMPONENTS (a missing one counts 0). With pp == 1 `first` must
    already be the whole model (it is the only stage); with pp == 2 `middle` is ignored.

    Returns the pipeline's seconds split into the bottleneck stage's steady-state components
    (m * component) and `bubble`, plus `total`."""
    first, middle, last = ({c: s.get(c, 0.0) for c in COMPONENTS} for s in (first, middle, last))
    t_first = sum(first[c] for c in COMPONENTS)
    t_mid = sum(middle[c] for c in COMPONENTS)
    t_last = sum(last[c] for c in COMPONENTS)
    single = pp <= 1
    has_mid = pp > 2
    t_last = xp.where(single, 0.0, t_last)
    t_mid = xp.where(has_mid, t_mid, 0.0)
    t_max = xp.maximum(t_first, xp.maximum(t_mid, t_last))
    stage_sum = t_first + t_last + xp.maximum(pp - 2.0, 0.0) * t_mid
    bubble = (stage_sum - t_max) / vpp
    # which stage is the bottleneck (first wins ties, then last)
    is_first = t_first >= t_max
    is_last = (~is_first) & (t_last >= t_max)
    out = {}
    for c in COMPONENTS:
        out[c] = m * xp.where(is_first, first[c], xp.where(is_last, last[c], middle[c]))
    out["bubble"] = bubble
    out["total"] = m * t_max + bubble
    return out


def in_flight_micro_batches(m, pp, vpp, schedule, xp):
    """Micro-batches whose activations the first stage holds at its peak.
    1F1B: min(p, m); interleaved: p * (1 + (p - 1) / (p * v)) capped by m * v chunks; GPipe: m."""
    one_f_one_b = xp.minimum(pp, m)
    interleaved = xp.minimum(pp * (1.0 + (pp - 1.0) / (pp * vpp)), m)
    return xp.where(schedule == Schedule.GPIPE, m, xp.where(schedule == Schedule.INTERLEAVED, interleaved, one_f_one_b))
