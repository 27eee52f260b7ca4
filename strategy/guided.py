"""Gradient guidance (`guided_search`, `sensitivity`): derivatives of the combined predictor with
respect to relaxed, continuous log2-degrees (tp, pp, dp, micro_batch, vpp); for MoE models the
sensitivity of ep from an exact step (ep is discrete).
"""
from __future__ import annotations

import math
import time

import numpy as np

from vtrain.costmodel.encode import SimInput, with_layout
from vtrain.costmodel.rules import RECOMPUTE_MODES, SCHEDULES
from vtrain.costmodel.spec import ConfigError, TrainConfig, build_config
from vtrain.strategy.evaluation import _GRADIENT_COMPILER_OPTIONS, _compiled, _pad_array, evaluate, has_moe
from vtrain.strategy.grid import (STRATEGY_FIELDS, SearchSpace, candidates, check_run_parameters, encode_strategies,
                                  strategy_values)
from vtrain.strategy.ranking import SearchResult, _finish, _rank, objective_key, ranking_times

KNOBS = ("tp", "pp", "dp", "micro_batch", "vpp")
GRAD_CHUNK = 512  # padded batch size of the jitted gradient (one compile)
PENALTY = 20.0  # weight of the memory overflow penalty (per unit of ln(memory / capacity))


def _relaxed_builder(table, moe_layers: bool = True):
    """loss(corr, x, base, w): x [n, 5] log2 degrees (tp, pp, dp, micro_batch, vpp); base the encoded
    constants; w [n, 4] (fixed_gpus_log2 or -1, cost weight, memory penalty, unused). Per-row loss =
    ln(time) + w1 * ln(num_gpus) + w2 * relu(ln(memory / capacity)); returns (loss sum, (ln time, ln mem))."""
    import jax
    import jax.numpy as jnp

    from vtrain.costmodel.simulator import simulate

    def relaxed(corr, x, base, w):
        tp, pp = 2.0 ** x[:, 0], 2.0 ** x[:, 1]
        dp = jnp.where(w[:, 0] >= 0, 2.0 ** (w[:, 0] - x[:, 0] - x[:, 1]) / base.cp, 2.0 ** x[:, 2])
        mb, vpp = 2.0 ** x[:, 3], 2.0 ** x[:, 4]
        d = with_layout(base, tp, pp, dp, mb, vpp)
        out = simulate(d, corr, xp=jnp, allreduce_table=table, moe_layers=moe_layers)
        ln_t = jnp.log(out["iteration_time_s"])
        ln_mem = jnp.log(out["memory"]["total"] / d.hbm_bytes)
        loss = ln_t + w[:, 1] * jnp.log(d.num_gpus) + w[:, 2] * jax.nn.relu(ln_mem)
        return jnp.sum(loss), (ln_t, ln_mem)

    def run(corr, x, base, w):
        (_, aux), g = jax.value_and_grad(relaxed, argnums=1, has_aux=True)(corr, x, base, w)
        return g, aux[0], aux[1]
    return run


def relaxed_gradient(predictor, x: np.ndarray, base: SimInput, w: np.ndarray):
    """(d loss / d x [n, 5], ln time [n], ln(memory/capacity) [n]) at relaxed points (jax.grad)."""
    import jax.numpy as jnp

    n = len(x)
    moe_layers = has_moe(base)
    gs, ts, ms = [], [], []
    for start in range(0, n, GRAD_CHUNK):
        xc, wc = x[start:start + GRAD_CHUNK], w[start:start + GRAD_CHUNK]
        bc = base.take(slice(start, start + GRAD_CHUNK))
        m = len(xc)
        xs = jnp.asarray(_pad_array(xc, GRAD_CHUNK), dtype=jnp.float32)
        ws = jnp.asarray(_pad_array(wc, GRAD_CHUNK), dtype=jnp.float32)
        bs = bc.map(lambda v: jnp.asarray(_pad_array(v, GRAD_CHUNK), dtype=jnp.float32))
        fn = _compiled("relaxed-moe" if moe_layers else "relaxed-dense", GRAD_CHUNK, predictor,
                       lambda table: _relaxed_builder(table, moe_layers), (xs, bs, ws), _GRADIENT_COMPILER_OPTIONS)
        g, ln_t, ln_mem = fn(predictor.correction, xs, bs, ws)
        gs.append(np.asarray(g)[:m].astype(np.float64))
        ts.append(np.asarray(ln_t)[:m])
        ms.append(np.asarray(ln_mem)[:m])
    return np.concatenate(gs), np.concatenate(ts), np.concatenate(ms)


SENSITIVITY_STEP = 1e-4  # finite-difference step of `relaxed_time_gradient`, in log2 units (0.007 %)


def relaxed_time_gradient(predictor, x: np.ndarray, base: SimInput, step: float = SENSITIVITY_STEP) -> np.ndarray:
    """d ln(time) / d x [n, 5] at relaxed log2 degrees `x` (tp, pp, dp, micro_batch, vpp; dp free),
    by finite differences of the predictor in numpy float64 (one simulate call on 11 points per row;
    nothing to compile). Central differences where the model is smooth; at a step of the model (tp
    reaching the GPUs per node, a pipeline stage boundary) the two one-sided differences disagree,
    and the smaller one is taken: the local slope on one side, not the jump. (The same relaxed model
    as `relaxed_gradient`'s jax.grad, which guided_search uses over many points; for one strategy this
    is cheaper than compiling the derivative graph, ~10 s on 2 cores.)"""
    from vtrain.costmodel.simulator import simulate

    x = np.asarray(x, dtype=np.float64)
    n, k = x.shape
    offsets = np.concatenate([np.zeros((1, k)), step * np.eye(k), -step * np.eye(k)])  # [1 + 2k, k]
    points = (x[:, None, :] + offsets[None, :, :]).reshape(-1, k)
    rows = base.take(np.repeat(np.arange(n), len(offsets)))
    d = with_layout(rows, *(2.0 ** points[:, i] for i in range(k)))
    out = simulate(d, predictor.correction, allreduce_table=predictor.allreduce_table)
    ln_t = np.log(np.asarray(out["iteration_time_s"], dtype=np.float64)).reshape(n, len(offsets))
    forward = (ln_t[:, 1:k + 1] - ln_t[:, :1]) / step
    backward = (ln_t[:, :1] - ln_t[:, k + 1:]) / step
    central = (forward + backward) / 2.0
    step_of_model = np.abs(forward - backward) > 0.05 * (1.0 + np.abs(central))
    one_sided = np.where(np.abs(forward) < np.abs(backward), forward, backward)
    return np.where(step_of_model, one_sided, central)


def sensitivity(predictor, cfg: TrainConfig, row: dict) -> list[dict]:
    """Which knob matters most at a strategy: elasticities d ln(time) / d ln(knob) of the predictor
    with the degrees relaxed to continuous values (`relaxed_time_gradient`; global batch fixed;
    num_gpus = tp*pp*dp, so cost per token has elasticity time's + 1 for tp, pp, dp). Also the
    trades that keep the GPU count fixed (raise one degree, lower another by the same factor)."""
    strategies = {k: np.array([row[k] if k not in ("schedule", "recompute", "sequence_parallel")
                               else (SCHEDULES.index(row[k]) if k == "schedule" else
                                     RECOMPUTE_MODES.index(row[k]) if k == "recompute" else int(row[k]))])
                  for k in STRATEGY_FIELDS}
    base = encode_strategies(cfg, strategies)
    x = np.log2(np.array([[row["tp"], row["pp"], row["dp"], row["micro_batch"], row["vpp"]]], dtype=np.float64))
    g = relaxed_time_gradient(predictor, x, base)
    e = g[0] / math.log(2.0)  # d ln T / d log2 k -> d ln T / d ln k
    out = []
    for i, knob in enumerate(KNOBS):
        if knob == "vpp" and row["schedule"] != "interleaved":
            continue
        cost_e = e[i] + (1.0 if knob in ("tp", "pp", "dp") else 0.0)
        out.append(dict(knob=knob, value=row[knob], time_elasticity=float(e[i]), cost_elasticity=float(cost_e),
                        time_change_if_doubled_pct=100.0 * (2.0 ** e[i] - 1.0)))
    ep_e = _ep_elasticity(predictor, cfg, strategies) if cfg.model.num_experts else None
    if ep_e is not None:  # (ep does not change the GPU count: cost follows time)
        out.append(dict(knob="ep", value=row["ep"], time_elasticity=ep_e, cost_elasticity=ep_e,
                        time_change_if_doubled_pct=100.0 * (2.0 ** ep_e - 1.0)))
    for a, b in (("tp", "dp"), ("pp", "dp"), ("tp", "pp")):
        ia, ib = KNOBS.index(a), KNOBS.index(b)
        el = e[ia] - e[ib]
        out.append(dict(knob=f"{a} up, {b} down (same GPUs)", value=f"{row[a]}/{row[b]}", time_elasticity=float(el),
                        cost_elasticity=float(el), time_change_if_doubled_pct=100.0 * (2.0 ** el - 1.0)))
    out.sort(key=lambda r: -abs(r["time_elasticity"]))
    return out


def _ep_elasticity(predictor, cfg: TrainConfig, strategies: dict) -> float | None:
    """ln time change per ln ep from an exact step of the expert-parallel degree (ep is discrete and
    outside the relaxed model): to 2 ep, or from ep / 2 where 2 ep breaks a rule; None when neither
    is a valid strategy."""
    ep = int(strategies["ep"][0])

    def time_at(value):
        try:
            config = build_config(strategy_values(cfg, dict(strategies, ep=np.array([value])), 0))
        except ConfigError:
            return None
        return predictor.predict(config).iteration_time_s

    here = time_at(ep)
    doubled = time_at(2 * ep)
    if here and doubled:
        return math.log2(doubled / here)
    halved = time_at(ep // 2) if ep % 2 == 0 else None
    return math.log2(here / halved) if here and halved else None


def guided_search(cfg: TrainConfig, space: SearchSpace, predictor, objective: str = "time", top: int = 10,
                  price_per_gpu_hour: float | None = None, tokens: float | None = None, steps: int = 40,
                  radius: float = 1.0) -> SearchResult:
    """Gradient-guided search: for each categorical combination (schedule, recompute, SP, ZeRO, ep), run
    projected sign-gradient descent on the relaxed log2 degrees (jax.grad of log time [+ log GPUs for
    cost] + a memory-overflow penalty) from a 3x3 grid of starts, then evaluate exactly only the valid,
    fitting strategies within `radius` (in log2 units) of where the descents ended."""
    top, price, tokens = check_run_parameters(cfg, objective, top, price_per_gpu_hour, tokens)
    t0 = time.perf_counter()
    strategies, d, mem, fits = candidates(cfg, space)
    logs = np.log2(np.stack([strategies[k] for k in KNOBS], axis=1).astype(np.float64))
    cat = np.stack([strategies["schedule"], strategies["recompute"], strategies["sequence_parallel"],
                    strategies["zero_stage"], strategies["ep"], strategies["cp"]], axis=1)
    feasible = np.flatnonzero(fits)
    combos, inverse = np.unique(cat[feasible], axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    fixed = math.log2(space.num_gpus) if space.num_gpus is not None else -1.0
    cost_w = 0.0 if objective in ("time", "time-p90") else 1.0
    xs, lo, hi, owners, rows_base = [], [], [], [], []
    for c in range(len(combos)):
        members = feasible[inverse == c]
        lo_c, hi_c = logs[members].min(axis=0), logs[members].max(axis=0)
        mid = (lo_c + hi_c) / 2.0
        for a in (lo_c[0], mid[0], hi_c[0]):
            for b in (lo_c[1], mid[1], hi_c[1]):
                start = mid.copy()
                start[0], start[1] = a, b
                xs.append(start)
                lo.append(lo_c)
                hi.append(hi_c)
                owners.append(c)
                rows_base.append(members[0])
    x, lo, hi = np.array(xs), np.array(lo), np.array(hi)
    base = d.take(np.array(rows_base))
    w = np.tile(np.array([[fixed, cost_w, PENALTY, 0.0]]), (len(x), 1))
    for step in range(steps):
        g, _, _ = relaxed_gradient(predictor, x, base, w)
        lr = 0.5 * (0.05 / 0.5) ** (step / max(steps - 1, 1))
        x = np.clip(x - lr * np.sign(g), lo, hi)
        if fixed >= 0:  # keep dp = N / (tp * pp * cp) inside its range
            fc = fixed - np.log2(np.asarray(base.cp, dtype=np.float64))
            x[:, 1] = np.clip(x[:, 1], fc - x[:, 0] - hi[:, 2], fc - x[:, 0] - lo[:, 2])
            x[:, 2] = fc - x[:, 0] - x[:, 1]
        elif space.max_gpus is not None:  # project onto tp*pp*dp <= max_gpus
            for _ in range(3):
                excess = np.maximum(x[:, 0] + x[:, 1] + x[:, 2] - math.log2(space.max_gpus), 0.0)
                x[:, :3] = np.clip(x[:, :3] - excess[:, None] / 3.0, lo[:, :3], hi[:, :3])
    t1 = time.perf_counter()
    # Exact evaluation of the neighbourhoods of the end points.
    chosen = np.zeros(len(strategies["tp"]), dtype=bool)
    dims = [0, 1, 2, 3]
    for c in range(len(combos)):
        members = feasible[inverse == c]
        ends = x[np.array(owners) == c][:, dims]
        dist = np.abs(logs[members][:, None, dims] - ends[None, :, :]).max(axis=2)  # [members, ends]
        chosen[members[dist.min(axis=1) <= radius + 1e-9]] = True
        chosen[members[np.argmin(dist, axis=0)]] = True  # at least the nearest strategy to each end point
    # Local refinement: evaluate every fitting strategy (any schedule, recompute, SP, ZeRO) within
    # `radius` of the current leaders, until the leaders stop changing.
    tokens_per_iter = cfg.parallel.global_batch * cfg.model.seq_len
    times = np.full(len(strategies["tp"]), np.nan)
    leaders_before = None
    for _ in range(4):
        todo = np.flatnonzero(chosen & np.isnan(times))
        if len(todo):
            times[todo] = evaluate(predictor, d.take(todo))["iteration_time_s"]
        idx = np.flatnonzero(~np.isnan(times))
        key = objective_key(objective, ranking_times(predictor, objective, d.take(idx), times[idx]),
                            strategies["num_gpus"][idx], tokens_per_iter)
        leaders = idx[_rank(key, mem[idx], idx)[:max(top, 8)]]
        if leaders_before is not None and set(leaders) == set(leaders_before):
            break
        leaders_before = leaders
        near = np.abs(logs[feasible][:, None, dims] - logs[leaders][None, :, dims]).max(axis=2).min(axis=1)
        chosen[feasible[near <= radius + 1e-9]] = True
    idx = np.flatnonzero(~np.isnan(times))
    t2 = time.perf_counter()
    result = _finish(predictor, cfg, space, strategies, d, mem, fits, idx, times[idx], objective, top,
                     price, tokens, "guided", {})
    result.timings = dict(guide_s=t1 - t0, evaluate_s=t2 - t1, rank_s=time.perf_counter() - t2,
                          descent_points=len(x), steps=steps)
    return result
