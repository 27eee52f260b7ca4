"""Ranking evaluated strategies: objectives (time, p90 time, cost, tokens per dollar), the exact
float64 re-evaluation of the leaders (so reported figures equal `vtrain predict`'s), the Pareto
front and the SearchResult.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtrain.costmodel.cost import training_cost
from vtrain.costmodel.encode import SimInput
from vtrain.costmodel.errors import ParameterError
from vtrain.costmodel.simulator import BREAKDOWN_KEYS
from vtrain.costmodel.spec import TrainConfig
from vtrain.costmodel.units import GiB
from vtrain.strategy.grid import OBJECTIVES, _describe, encode_strategies, strategy_values

# what limits a strategy: breakdown key -> label in the tables
LIMIT_LABELS = {"compute": "compute", "tp_comm": "TP comm", "pp_comm": "PP comm", "ep_comm": "EP comm",
                "cp_comm": "CP ring", "fsdp_comm": "FSDP comm", "dp_comm": "DP comm",
                "bubble": "bubble", "optimizer": "optimizer", "overhead": "overhead"}

@dataclass
class SearchResult:
    """Ranked feasible strategies. `top` rows are plain dicts (exact float64 figures)."""

    config: TrainConfig
    objective: str
    price_per_gpu_hour: float
    tokens: float | None
    top: list[dict]
    num_enumerated: int
    num_fit: int
    num_evaluated: int
    feasible: dict = field(default_factory=dict)  # strategy columns + time/cost of every fitting strategy
    pareto: list[dict] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    checkpoint: str = "none"
    method: str = "enumeration"

    @property
    def cost_basis(self) -> str:
        return f"for {self.tokens:.3g} tokens" if self.tokens else "per 1B tokens"


def interval_bounds(predictor, d: SimInput, time_s) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) seconds of the predictor's prediction interval around `time_s` for strategies `d`
    (NaN without a calibration; costmodel/intervals.py)."""
    if getattr(predictor, "interval", None) is None:
        nan = np.full(np.shape(time_s), np.nan)
        return nan, nan
    with np.errstate(all="ignore"):
        band = predictor.interval(d, np.asarray(time_s, dtype=np.float64))
    return np.asarray(band["low"], dtype=np.float64), np.asarray(band["high"], dtype=np.float64)


def ranking_times(predictor, objective: str, d: SimInput, time_s) -> np.ndarray:
    """The times an objective ranks by: the interval's upper bound for time-p90, else `time_s`."""
    if objective != "time-p90":
        return np.asarray(time_s, dtype=np.float64)
    high = interval_bounds(predictor, d, time_s)[1]
    if np.isnan(high).any():
        raise ParameterError("objective", f"time-p90 needs prediction intervals, and checkpoint "
                             f"'{getattr(predictor, 'name', '?')}' has no calibration for these strategies; add one "
                             "with `vtrain calibrate DATASET_DIR -c CHECKPOINT` or rank by 'time'")
    return high


def objective_key(objective: str, time_s, num_gpus, tokens_per_iteration):
    """Smaller is better. time: iteration time (time-p90: pass the interval's upper bound as
    `time_s`); cost / tokens-per-dollar: GPU-seconds per token."""
    if objective in ("time", "time-p90"):
        return np.asarray(time_s, dtype=np.float64)
    if objective in ("cost", "tokens-per-dollar"):
        return np.asarray(time_s, dtype=np.float64) * num_gpus / tokens_per_iteration
    raise ParameterError("objective", f"'{objective}' is unknown; use one of {', '.join(OBJECTIVES)}")


def pareto_front(time_s: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the (time, cost) Pareto front (both minimised), ordered by time."""
    order = np.lexsort((cost, time_s))
    best = np.inf
    keep = []
    for i in order:
        if cost[i] < best:
            keep.append(i)
            best = cost[i]
    return np.array(keep, dtype=np.int64)


def exact_rows(predictor, cfg: TrainConfig, strategies: dict, index, price: float, tokens: float | None) -> list[dict]:
    """Float64 numpy re-evaluation of some strategies, with cost and limits, as dicts."""
    sub = {k: v[index] for k, v in strategies.items()}
    d = encode_strategies(cfg, sub)
    out = predictor.simulate(d)
    n = len(sub["tp"])
    low, high = interval_bounds(predictor, d, out["iteration_time_s"])
    weight = predictor.correction_weight(d)
    tokens_per_iter = cfg.parallel.global_batch * cfg.model.seq_len
    rows = []
    for j in range(n):
        t = float(out["iteration_time_s"][j])
        ngpu = int(sub["num_gpus"][j])
        bd = {k: float(np.broadcast_to(out["breakdown"][k], (n,))[j]) for k in BREAKDOWN_KEYS}
        non_compute = {k: v for k, v in bd.items() if k != "compute"}
        lim = max(non_compute, key=non_compute.get)
        mem = float(out["memory"]["total"][j])
        cap = float(d.hbm_bytes[j])
        c = training_cost(t, ngpu, tokens_per_iter, tokens if tokens else 1e9, price)
        values = strategy_values(cfg, sub, j)
        rows.append(dict(
            tp=int(sub["tp"][j]), pp=int(sub["pp"][j]), dp=int(sub["dp"][j]), cp=int(sub["cp"][j]), num_gpus=ngpu,
            micro_batch=int(sub["micro_batch"][j]), num_micro_batches=int(sub["num_micro_batches"][j]),
            vpp=int(sub["vpp"][j]), schedule=values["schedule"], recompute=values["recompute"],
            sequence_parallel=values["sequence_parallel"], zero_stage=int(sub["zero_stage"][j]),
            ep=int(sub["ep"][j]),
            iteration_time_s=t, iteration_time_s_low=_number(low[j]), iteration_time_s_high=_number(high[j]),
            correction_weight=None if weight is None else float(weight[j]),
            tokens_per_s=tokens_per_iter / t, mfu=float(out["mfu"][j]),
            memory_gib=mem / GiB, gpu_memory_gib=cap / GiB, memory_headroom_pct=100.0 * (1.0 - mem / cap),
            fits_memory=bool(out["fits_memory"][j]), gpu_hours=c.gpu_hours, cost=c.cost, train_days=c.train_days,
            tokens_per_dollar=(c.tokens / c.cost) if c.cost > 0 else float("inf"),
            limiter=LIMIT_LABELS[lim], limiter_share_pct=100.0 * bd[lim] / t, breakdown=bd,
            config=values,
        ))
    return rows


def _number(value) -> float | None:
    """A float, or None (JSON null) for NaN."""
    value = float(value)
    return None if value != value else value


def _rank(key: np.ndarray, mem: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Order (smaller key first; ties: less memory, then enumeration order)."""
    return np.lexsort((index, mem, key))


def _finish(predictor, cfg, space, strategies, d, mem, fits, evaluated_idx, times, objective, top, price, tokens,
            method, timings) -> SearchResult:
    tokens_per_iter = cfg.parallel.global_batch * cfg.model.seq_len
    rank_times = ranking_times(predictor, objective, d.take(evaluated_idx), times)
    key = objective_key(objective, rank_times, strategies["num_gpus"][evaluated_idx], tokens_per_iter)
    order = evaluated_idx[_rank(key, mem[evaluated_idx], evaluated_idx)]
    # Exact (float64) re-evaluation of the leaders; float32 ranks are within ~1e-6 of these.
    shortlist = order[: max(4 * top, 64)]
    rows = exact_rows(predictor, cfg, strategies, shortlist, price, tokens)
    time_column = "iteration_time_s_high" if objective == "time-p90" else "iteration_time_s"
    ekey = objective_key(objective, np.array([r[time_column] for r in rows]),
                         np.array([r["num_gpus"] for r in rows]), tokens_per_iter)
    emem = np.array([r["memory_gib"] for r in rows])
    rows = [rows[i] for i in _rank(ekey, emem, shortlist) if rows[i]["fits_memory"]]
    # Hide exact ties that differ only in a dominated knob (same time and cost, more memory).
    seen, shown = set(), []
    for r in rows:
        sig = (round(r["iteration_time_s"], 12), r["tp"], r["pp"], r["dp"], r["micro_batch"], r["vpp"],
               r["recompute"], r["sequence_parallel"], r["ep"])
        if sig in seen:
            continue
        seen.add(sig)
        shown.append(r)
    for rank, r in enumerate(shown, 1):
        r["rank"] = rank
    ngpu = strategies["num_gpus"][evaluated_idx].astype(np.float64)
    c = training_cost(times, ngpu, tokens_per_iter, tokens if tokens else 1e9, price)
    cost, gpu_hours = c.cost, c.gpu_hours
    front = pareto_front(times, gpu_hours)
    pareto = [dict(iteration_time_s=float(times[i]), cost=float(cost[i]), gpu_hours=float(gpu_hours[i]),
                   num_gpus=int(ngpu[i]), strategy=_describe(cfg, strategies, int(evaluated_idx[i]))) for i in front]
    feasible = {k: v[evaluated_idx] for k, v in strategies.items()}
    feasible.update(iteration_time_s=times, cost=cost, gpu_hours=gpu_hours)
    if objective == "time-p90":
        feasible["iteration_time_s_high"] = rank_times
    return SearchResult(config=cfg, objective=objective, price_per_gpu_hour=price, tokens=tokens, top=shown[:top],
                        num_enumerated=len(strategies["tp"]), num_fit=int(fits.sum()),
                        num_evaluated=len(evaluated_idx), feasible=feasible, pareto=pareto, timings=timings,
                        checkpoint=getattr(predictor, "name", "none"), method=method)
