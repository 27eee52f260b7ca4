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

import numpy as np

from vtrain.costmodel.rules import Schedule

COMPONENTS = ("compute", "tp_comm", "pp_comm", "ep_comm", "cp_comm", "fsdp_comm")


def chunk_layers(layers: int, pp: int, vpp: int = 1, first: int = 0, last: int = 0) -> list[int]:
    """Layers of each of the pp*vpp model chunks, in model order (chunk c runs on GPU c % pp).

    `first` / `last` (0 = not given) fix the first / last chunk (Megatron's
    --decoder-first/last-pipeline-num-layers); the other layers are spread evenly over the other
    chunks, the remainder one each to the first of them. With neither given the remainder goes to
    the middle chunks first (the first chunk carries the embedding, the last the logits), then the
    first chunk, then the last: BLOOM's 70 layers on pp=12 are 5 + 10 x 6 + 5 (Megatron-DeepSpeed's
    'type:transformer|embedding' partition). The caller has checked that every chunk gets >= 1."""
    n = pp * vpp
    chunks = [0] * n
    fixed = {}
    if first:
        fixed[0] = first
    if last:
        fixed[n - 1] = last
    free = [c for c in range(n) if c not in fixed]
    if not fixed and n > 2:
        order = list(range(1, n - 1)) + [0, n - 1]
    else:
        order = free
    rest = layers - sum(fixed.values())
    base, extra = divmod(rest, len(free)) if free else (0, 0)
    for c, v in fixed.items():
        chunks[c] = v
    for c in free:
        chunks[c] = base
    for c in order[:extra]:
        chunks[c] += 1
    return chunks


def gpu_stage_layers(layers: int, pp: int, vpp: int = 1, first: int = 0, last: int = 0) -> list[int]:
    """Layers each of the pp pipeline GPUs holds (the sum of its vpp chunks)."""
    chunks = chunk_layers(layers, pp, vpp, first, last)
    return [sum(chunks[g::pp]) for g in range(pp)]


def stage_layer_counts(layers, pp, vpp, first, last) -> dict:
    """Per-config layer counts (float arrays) of the first GPU, the heaviest middle GPU, the last GPU
    and the mean middle GPU (middle ones only where pp > 2; else equal to layers / pp)."""
    keys = np.stack([np.asarray(x, dtype=np.int64) for x in (layers, pp, vpp, first, last)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    table = np.empty((len(uniq), 4))
    for i, (n, p, v, f, la) in enumerate(uniq):
        even = n / p
        if f == 0 and la == 0 and n % (p * v) == 0:
            table[i] = (even, even, even, even)
            continue
        g = gpu_stage_layers(int(n), int(p), int(v), int(f), int(la))
        mid = g[1:-1]
        table[i] = (g[0], max(mid) if mid else even, g[-1], sum(mid) / len(mid) if mid else even)
    out = table[np.asarray(inverse).reshape(-1)]
    return dict(first=out[:, 0], mid=out[:, 1], last=out[:, 2], mid_avg=out[:, 3])


def pipeline_time(first: dict, middle: dict, last: dict, m, pp, vpp, xp, middle_avg: dict | None = None) -> dict:
    """Per-stage dicts hold per-micro-batch seconds for COMPONENTS (a missing one counts 0). With pp == 1 `first` must
    already be the whole model (it is the only stage); with pp == 2 `middle` is ignored. `middle` is the
    heaviest middle stage, `middle_avg` (default `middle`) the mean one: the bubble sums all stages.

    Returns the pipeline's seconds split into the bottleneck stage's steady-state components
    (m * component) and `bubble`, plus `total`."""
    middle_avg = middle if middle_avg is None else middle_avg
    first, middle, last, middle_avg = ({c: s.get(c, 0.0) for c in COMPONENTS} for s in (first, middle, last, middle_avg))
    t_first = sum(first[c] for c in COMPONENTS)
    t_mid = sum(middle[c] for c in COMPONENTS)
    t_avg = sum(middle_avg[c] for c in COMPONENTS)
    t_last = sum(last[c] for c in COMPONENTS)
    single = pp <= 1
    has_mid = pp > 2
    t_last = xp.where(single, 0.0, t_last)
    t_mid = xp.where(has_mid, t_mid, 0.0)
    t_avg = xp.where(has_mid, t_avg, 0.0)
    t_max = xp.maximum(t_first, xp.maximum(t_mid, t_last))
    stage_sum = t_first + t_last + xp.maximum(pp - 2.0, 0.0) * t_avg
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


def in_flight_micro_batches(m, pp, vpp, schedule, xp, stage=0):
    """Micro-batches whose activations pipeline stage `stage` (0 = first) holds at its peak.
    1F1B: min(p - i, m); interleaved (Megatron's warm-up of (p - i - 1) * 2 + (v - 1) * p chunks, plus
    the one in flight, each 1/v of the stage): p + (p - 1 - 2i) / v, capped by m; GPipe: m.
    For the first stage: min(p, m) and p * (1 + (p - 1) / (p * v))."""
    if isinstance(stage, int) and stage == 0:
        one_f_one_b = xp.minimum(pp, m)
        interleaved = xp.minimum(pp * (1.0 + (pp - 1.0) / (pp * vpp)), m)
    else:
        one_f_one_b = xp.minimum(pp - stage, m)
        interleaved = xp.minimum(pp + (pp - 1.0 - 2.0 * stage) / vpp, m)
    return xp.where(schedule == Schedule.GPIPE, m, xp.where(schedule == Schedule.INTERLEAVED, interleaved, one_f_one_b))
