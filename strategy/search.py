"""Strategy search: enumerate every valid parallelization strategy as arrays, drop those that do
not fit in memory, evaluate the rest in one batched, jitted call of the combined predictor, and rank.

    space = SearchSpace(num_gpus=3360)                       # or max_gpus=..., max_tp=16, ...
    result = search(base_config, space, predictor, objective="cost", top=10)
    result.top[0]["tp"], result.top[0]["iteration_time_s"]

The strategy grid is built with numpy from the same validity rules as `spec.build_config`
(tp divides heads and meets the kv-head rule, pp*vpp divides layers, dp*micro_batch divides the
global batch, tp*pp*dp == num_gpus, interleaved needs pp > 1 and vpp > 1, ZeRO-3 only with pp == 1,
sequence parallelism only with tp > 1 and tp dividing seq_len; for mixture-of-experts models ep
divides num_experts and dp, tp > 1 needs SP). Memory is checked in float64 numpy
first (cheap); times come from `simulate` under `jax.jit` in float32, padded to a few fixed batch
sizes so one search compiles once; the best candidates are then re-evaluated exactly in float64
numpy, so reported figures equal `vtrain predict`'s.

Gradient guidance (`guided_search`, `sensitivity`) uses derivatives of the same predictor with
respect to relaxed, continuous log2-degrees (tp, pp, dp, micro_batch, vpp).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from vtrain.costmodel import ops as opgraph
from vtrain.costmodel import rules
from vtrain.costmodel.cost import default_price, training_cost
from vtrain.costmodel.encode import SimInput, config_fields, sim_input, with_layout
from vtrain.costmodel.errors import ParameterError, UserError
from vtrain.costmodel.memory import memory_per_gpu
from vtrain.costmodel.pipeline import in_flight_micro_batches
from vtrain.costmodel.simulator import BREAKDOWN_KEYS
from vtrain.costmodel.rules import RECOMPUTE_MODES, SCHEDULES, divisors, fmt_choices
from vtrain.costmodel.spec import ConfigError, TrainConfig, build_config
from vtrain.costmodel.units import GiB

OBJECTIVES = ("time", "time-p90", "cost", "tokens-per-dollar")  # time-p90: the interval's upper bound

# Strategy fields (canonical names) held by a strategy table; enums as codes.
STRATEGY_FIELDS = ("tp", "pp", "dp", "num_gpus", "micro_batch", "num_micro_batches", "vpp", "schedule",
                   "recompute", "sequence_parallel", "zero_stage", "ep", "cp")
LIMIT_LABELS = {"compute": "compute", "tp_comm": "TP comm", "pp_comm": "PP comm", "ep_comm": "EP comm",
                "cp_comm": "CP ring", "dp_comm": "DP comm",
                "bubble": "bubble", "optimizer": "optimizer", "overhead": "overhead"}
BUCKETS = (32768,)  # padded batch size of the jitted evaluation (larger batches are chunked): one compile


@dataclass(frozen=True)
class SearchSpace:
    """Which strategies to consider. Exactly one of num_gpus / max_gpus. Lists restrict a knob
    (None = every valid value); max_* cap a degree."""

    num_gpus: int | None = None
    max_gpus: int | None = None
    min_gpus: int = 1
    max_tp: int | None = None
    max_pp: int | None = None
    max_dp: int | None = None
    max_micro_batch: int = 32
    max_vpp: int | None = None
    max_ep: int | None = None
    max_cp: int | None = None
    cp: tuple | None = None
    tp: tuple | None = None
    pp: tuple | None = None
    dp: tuple | None = None
    micro_batch: tuple | None = None
    vpp: tuple | None = None
    ep: tuple | None = None  # expert-parallel degrees (MoE models; dense models always ep=1)
    recompute: tuple = RECOMPUTE_MODES
    zero_stages: tuple = (0, 1, 2, 3)
    schedules: tuple = ("1f1b", "interleaved")
    sequence_parallel: tuple = (False, True)

    def __post_init__(self):
        """Refuse values that are not what each knob takes (ParameterError naming it); whole numbers
        given as floats (8.0) become ints."""
        for name in ("num_gpus", "max_gpus", "min_gpus", "max_tp", "max_pp", "max_dp", "max_micro_batch", "max_vpp"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _whole(name, value))
        for name in ("tp", "pp", "dp", "micro_batch", "vpp"):
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, tuple(_whole(name, v) for v in _as_tuple(name, values)))
        for name, choices in (("recompute", RECOMPUTE_MODES), ("zero_stages", rules.ZERO_STAGES),
                              ("schedules", SCHEDULES), ("sequence_parallel", (False, True))):
            values = _as_tuple(name, getattr(self, name))
            for v in values:
                if isinstance(v, (list, dict, set)) or v not in choices or (name == "zero_stages" and
                                                                            isinstance(v, (bool, np.bool_))):
                    raise ParameterError(name, f"{v!r} is not one of {', '.join(map(str, choices))}")
            object.__setattr__(self, name, values)


def _whole(name: str, value) -> int:
    """`value` as a positive int below 2**40, else a ParameterError naming `name`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(name, f"{value!r} is not an integer; give a positive whole number")
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ParameterError(name, f"{value} must be a positive integer")
    if value >= 2 ** 40:
        raise ParameterError(name, f"{value} is too large; give a whole number below 2**40 (1.1e12)")
    return int(value)


def _as_tuple(name: str, values) -> tuple:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ParameterError(name, f"{values!r} must be a list of values")
    return tuple(values)


def _parameter_number(name: str, value, positive: bool) -> float:
    """A finite float (> 0 with positive=True, else >= 0), else a ParameterError naming `name`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(name, f"{value!r} is not a number")
    value = float(value)
    if positive and not value > 0:
        raise ParameterError(name, f"{value:g} must be positive, e.g. 300e9")
    if not value >= 0:
        raise ParameterError(name, f"{value} must be >= 0")
    if not math.isfinite(value):
        raise ParameterError(name, f"{value} is not a finite number")
    return value


def check_run_parameters(cfg: TrainConfig, objective: str, top: int, price_per_gpu_hour, tokens):
    """(top, price, tokens) checked; ParameterError naming the first bad one."""
    if objective not in OBJECTIVES:
        raise ParameterError("objective", f"'{objective}' is unknown; use one of {', '.join(OBJECTIVES)}")
    if isinstance(top, (bool, np.bool_)) or not isinstance(top, (int, np.integer)) or top <= 0:
        raise ParameterError("top", f"{top!r} must be a positive integer")
    price = default_price(cfg.cluster.gpu) if price_per_gpu_hour is None else \
        _parameter_number("price_per_gpu_hour", price_per_gpu_hour, positive=False)
    tokens = None if tokens is None else _parameter_number("tokens", tokens, positive=True)
    return int(top), price, tokens


def _allowed(values, explicit, cap):
    out = [v for v in values if (cap is None or v <= cap)]
    if explicit is not None:
        out = [v for v in out if v in set(explicit)]
    return out


def _tp_values(cfg: TrainConfig, space: SearchSpace) -> list[int]:
    heads, kv = cfg.model.num_attention_heads, cfg.model.num_kv_heads
    ok = [t for t in divisors(heads) if kv % t == 0 or t % kv == 0]
    return _allowed(ok, space.tp, space.max_tp)


CP_MIN_TOKENS = 4096  # context parallelism is enumerated while each rank keeps >= this many tokens


def _cp_values(cfg: TrainConfig, space: SearchSpace) -> list[int]:
    """Context-parallel degrees to try: 1, and for long sequences (flash attention, dense models) the
    powers of two that keep >= CP_MIN_TOKENS tokens per rank and split the sequence into 2*cp chunks."""
    m = cfg.model
    out = [1]
    if m.attention == "flash" and not m.num_experts:
        c = 2
        while m.seq_len // c >= CP_MIN_TOKENS and m.seq_len % (2 * c) == 0:
            out.append(c)
            c *= 2
    return _allowed(out, space.cp, space.max_cp)


def _ep_values(cfg: TrainConfig, space: SearchSpace) -> list[int]:
    """Expert-parallel degrees to consider: divisors of num_experts (dense models: only 1)."""
    experts = cfg.model.num_experts
    if not experts:
        if space.ep is not None and 1 not in set(space.ep):
            raise ParameterError("ep", f"{space.ep[0]} needs a mixture-of-experts model; set num_experts or ep=1")
        return [1]
    eps = _allowed(divisors(experts), space.ep, space.max_ep)
    if not eps:
        raise ParameterError("ep", f"{', '.join(str(e) for e in (space.ep or (space.max_ep,)))} leaves no expert-"
                                   f"parallel degree dividing num_experts={experts}; use ep in "
                                   f"{fmt_choices(divisors(experts))}")
    return eps


def _layouts(cfg: TrainConfig, space: SearchSpace) -> np.ndarray:
    """[L, 4] valid (tp, pp, dp, cp) rows (before micro-batch choices)."""
    layers, batch = cfg.model.num_layers, cfg.parallel.global_batch
    tps = _tp_values(cfg, space)
    # pipeline degrees: with a fixed GPU count every degree dividing it (uneven stages allowed, at
    # least one layer each); otherwise the divisors of num_layers and the powers of two
    if space.num_gpus is not None:
        pp_cand = [p for p in divisors(space.num_gpus) if p <= layers]
    else:
        pp_cand = sorted(set(divisors(layers)) | {2 ** k for k in range(layers.bit_length()) if 2 ** k <= layers})
    pps = _allowed(pp_cand, space.pp, space.max_pp)
    dps = _allowed(divisors(batch), space.dp, space.max_dp)
    rows = []
    for c in _cp_values(cfg, space):
        for t in tps:
            for p in pps:
                if space.num_gpus is not None:
                    if space.num_gpus % (t * p * c):
                        continue
                    cand = [space.num_gpus // (t * p * c)]
                else:
                    cand = [d for d in dps if space.min_gpus <= t * p * c * d <= space.max_gpus]
                rows += [(t, p, d, c) for d in cand if d in dps]
    lay = np.array(rows, dtype=np.int64).reshape(-1, 4)
    if cfg.model.num_experts:  # some allowed ep must divide dp (rules.check)
        eps = np.array(_ep_values(cfg, space), dtype=np.int64)
        lay = lay[((lay[:, 2:3] % eps[None, :]) == 0).any(axis=1)]
    return lay


def _cross(a: dict, b: dict) -> dict:
    """Cartesian product of two column tables."""
    na, nb = len(next(iter(a.values()))), len(next(iter(b.values())))
    out = {k: np.repeat(v, nb) for k, v in a.items()}
    out.update({k: np.tile(v, na) for k, v in b.items()})
    return out


def _mask(t: dict, keep) -> dict:
    return {k: v[keep] for k, v in t.items()}


def enumerate_strategies(cfg: TrainConfig, space: SearchSpace) -> dict[str, np.ndarray]:
    """Every valid strategy for `cfg`'s model, cluster and global batch, as int64 column arrays
    (STRATEGY_FIELDS; schedule/recompute as rules.Schedule/Recompute codes). The grid is the
    product of each knob's candidate values; validity is rules.check's, as for build_config."""
    layers, batch = cfg.model.num_layers, cfg.parallel.global_batch
    lay = _layouts(cfg, space)
    t = dict(tp=lay[:, 0], pp=lay[:, 1], dp=lay[:, 2], cp=lay[:, 3])
    mbs = np.array(_allowed(divisors(batch), space.micro_batch, space.max_micro_batch), dtype=np.int64)
    t = _cross(t, dict(micro_batch=mbs))
    t = _mask(t, (batch % (t["dp"] * t["micro_batch"])) == 0)  # (rules.check's, early: keeps the grid small)
    # pipeline schedule and virtual stages
    sched_rows = []
    for name in space.schedules:
        code = SCHEDULES.index(name)
        if name == "interleaved":
            vpps = [v for v in _allowed(divisors(layers), space.vpp, space.max_vpp) if v > 1]
            sched_rows += [(code, v) for v in vpps]
        else:
            sched_rows.append((code, 1))
    sched = np.array(sched_rows, dtype=np.int64).reshape(-1, 2)
    t = _cross(t, dict(schedule=sched[:, 0], vpp=sched[:, 1]))
    if cfg.model.num_experts == 0:
        # Prune the layout x schedule grid before crossing it with the choices below. With no
        # recomputation, SP or ZeRO a dense model's row can only break layout rules, which no
        # recompute / SP / ZeRO choice repairs (ZeRO-3 and SP only add rules; MoE's SP rule is why
        # MoE models skip this).
        none = np.zeros_like(t["tp"])
        t = _mask(t, _valid(cfg, _with_counts(cfg, dict(t, recompute=none, sequence_parallel=none, zero_stage=none))))
    # recompute x sequence parallel x ZeRO
    cats = [(RECOMPUTE_MODES.index(r), int(s), z) for r in space.recompute for s in space.sequence_parallel
            for z in space.zero_stages]
    cat = np.array(cats, dtype=np.int64).reshape(-1, 3)
    t = _cross(t, dict(recompute=cat[:, 0], sequence_parallel=cat[:, 1], zero_stage=cat[:, 2]))
    # expert parallelism: ep divides num_experts (and dp: rules.check); dense models only ep=1
    eps = _ep_values(cfg, space)
    t = _cross(t, dict(ep=np.array(eps, dtype=np.int64).reshape(-1)))
    t = _mask(t, (t["dp"] % t["ep"]) == 0)  # (rules.check's, early)
    # Search's own pruning: SP without TP is the same strategy as without SP; a ZeRO stage > 0
    # with dp == 1 shards nothing (kept once, as the space's first stage).
    sp = t["sequence_parallel"] > 0
    keep = ~(sp & (t["tp"] == 1))
    keep &= ~((t["zero_stage"] > 0) & (t["dp"] == 1) & (t["zero_stage"] != space.zero_stages[0]))
    t = _mask(t, keep)
    t = _with_counts(cfg, t)
    ok = _valid(cfg, t)
    return {k: t[k][ok].astype(np.int64) for k in STRATEGY_FIELDS}


def _with_counts(cfg: TrainConfig, t: dict) -> dict:
    """Grid rows `t` plus their num_gpus and num_micro_batches columns."""
    return dict(t, num_gpus=t["tp"] * t["pp"] * t["cp"] * t["dp"],
                num_micro_batches=cfg.parallel.global_batch // (t["dp"] * t["micro_batch"]))


def _valid(cfg: TrainConfig, t: dict) -> np.ndarray:
    """rules.check's mask over grid rows `t` (with counts) on top of cfg's model and cluster."""
    if len(t["tp"]) == 0:  # nothing to check (rules.check would broadcast the constants to one row)
        return np.zeros(0, dtype=bool)
    _, errors = rules.check(_grid_fields(cfg, t, broadcast=False), messages=False)
    return errors.ok


def _grid_fields(cfg: TrainConfig, strategies: dict, broadcast: bool = True) -> dict[str, np.ndarray]:
    """Canonical fields (rules.check's input) of every strategy: cfg's model, cluster and global
    batch (repeated, or of length 1 with broadcast=False) with the strategy's layout."""
    n = len(strategies["tp"])
    f = {k: (np.repeat(v, n) if broadcast or n == 0 else v) for k, v in config_fields([cfg]).items()}
    for key in STRATEGY_FIELDS:
        if key != "num_micro_batches" and key in strategies:  # (no ep column yet: cfg's ep, 1 for dense)
            f[key] = strategies[key]
    f["sequence_parallel"] = strategies["sequence_parallel"] > 0
    f["overlap_grad_reduce"] = f["overlap_grad_reduce"].astype(bool)
    # search picks the layout: its stages take the default split of pipeline.chunk_layers
    f["first_stage_layers"] = np.zeros_like(f["first_stage_layers"])
    f["last_stage_layers"] = np.zeros_like(f["last_stage_layers"])
    return f


def strategy_values(cfg: TrainConfig, strategies: dict, i: int) -> dict:
    """Canonical flat fields of strategy `i` on top of `cfg` (feed to spec.build_config)."""
    flat = cfg.flat()
    flat.update(tp=int(strategies["tp"][i]), pp=int(strategies["pp"][i]), dp=int(strategies["dp"][i]),
                num_gpus=int(strategies["num_gpus"][i]), micro_batch=int(strategies["micro_batch"][i]),
                vpp=int(strategies["vpp"][i]), schedule=SCHEDULES[int(strategies["schedule"][i])],
                recompute=RECOMPUTE_MODES[int(strategies["recompute"][i])],
                sequence_parallel=bool(strategies["sequence_parallel"][i]),
                zero_stage=int(strategies["zero_stage"][i]), ep=int(strategies["ep"][i]), first_stage_layers=0,
                last_stage_layers=0, cp=int(strategies["cp"][i]))
    return flat


def encode_strategies(cfg: TrainConfig, strategies: dict, dtype=np.float64) -> SimInput:
    """The simulator's input for every strategy: cfg's model and cluster, the strategy's layout."""
    return sim_input(_grid_fields(cfg, strategies), dtype)


def memory_bytes(d: SimInput) -> np.ndarray:
    """Peak bytes per GPU (numpy, float64): the same composition as simulator.simulate's memory."""
    in_flight = in_flight_micro_batches(d.num_micro_batches, d.pp, d.vpp, d.schedule, np)
    in_flight_mid = in_flight_micro_batches(d.num_micro_batches, d.pp, d.vpp, d.schedule, np, stage=1.0)
    mem = memory_per_gpu(d, in_flight, opgraph.layer_parameters(d), opgraph.embedding_parameters(d), np,
                         in_flight_mid)
    return np.asarray(mem["total"], dtype=np.float64)


# ----------------------------------------------------------------------------- batched JAX evaluation

_COMPILED: dict = {}
# XLA:CPU's fusion emitters make compiling these large elementwise graphs slow (forward ~5 s, derivative
# ~10-20 s on 2 cores); the classic emitters compile them in ~2-3 s and run them as fast.
_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# The derivative graph is evaluated on few rows, so its run time hardly matters while its compile
# time dominates a first `vtrain search`: compile it without backend optimisation (26 s -> 10 s).
_GRADIENT_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}


def enable_compilation_cache() -> None:
    """Persist XLA executables across processes (VTRAIN_JAX_CACHE=dir, or '0' to disable)."""
    import jax

    path = os.environ.get("VTRAIN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "vtrain", "jax"))
    if path in ("", "0", "off"):
        return
    try:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except Exception:  # an older/newer jax without these options: just no persistent cache
        pass


def _table_key(table: dict | None):
    """A content key for an all-reduce table (it is baked into the compiled function as constants):
    equal tables share a compiled function; an id() could be reused by a new table after a free."""
    if table is None:
        return None
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(table):
        value = np.ascontiguousarray(np.asarray(table[name], dtype=np.float64))
        digest.update(name.encode() + str(value.shape).encode() + value.tobytes())
    return digest.hexdigest()


def _compiled(kind: str, n: int, predictor, build, example_args, options=None):
    import jax

    corr = predictor.correction
    key = (kind, n, jax.tree_util.tree_structure(corr), _table_key(predictor.allreduce_table))
    fn = _COMPILED.get(key)
    if fn is None:
        lowered = jax.jit(build(predictor.allreduce_table)).lower(corr, *example_args)
        try:
            fn = lowered.compile(compiler_options=options) if options else lowered.compile()
        except Exception:  # an XLA without this option: default options
            fn = lowered.compile()
        _COMPILED[key] = fn
    return fn


def _forward_builder(table):
    import jax.numpy as jnp

    from vtrain.costmodel.simulator import simulate

    def run(corr, d):
        out = simulate(d, corr, xp=jnp, allreduce_table=table)
        one = jnp.ones_like(d.tp)
        return dict(iteration_time_s=out["iteration_time_s"] * one, mfu=out["mfu"] * one,
                    memory=out["memory"]["total"] * one,
                    **{f"bd_{k}": out["breakdown"][k] * one for k in BREAKDOWN_KEYS})
    return run


def _pad_array(v: np.ndarray, n: int) -> np.ndarray:
    """`v` padded to `n` rows by repeating its first row."""
    return v if len(v) == n else np.concatenate([v, np.repeat(v[:1], n - len(v), axis=0)])


def _bucket(n: int) -> int:
    for b in BUCKETS:
        if n <= b:
            return b
    return BUCKETS[-1]


def evaluate(predictor, d: SimInput) -> dict[str, np.ndarray]:
    """Batched, jitted `simulate` (float32) on an encoded dict; returns numpy arrays (iteration_time_s,
    mfu, memory, bd_<component>). Batches are padded to BUCKETS sizes and chunked, so compiling
    happens at most once per bucket size per process."""
    import jax.numpy as jnp

    n = d.rows
    chunk = _bucket(n)
    parts = []
    for start in range(0, n, chunk):
        piece = d.take(slice(start, start + chunk))
        m = piece.rows
        padded = piece.map(lambda v: jnp.asarray(_pad_array(v, chunk), dtype=jnp.float32))
        fn = _compiled("forward", chunk, predictor, _forward_builder, (padded,), _COMPILER_OPTIONS)
        out = fn(predictor.correction, padded)
        parts.append({k: np.asarray(v)[:m].astype(np.float64) for k, v in out.items()})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


# ----------------------------------------------------------------------------- ranking

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


def _describe(cfg: TrainConfig, s: dict, i: int) -> str:
    sched = SCHEDULES[int(s["schedule"][i])]
    return (f"tp={s['tp'][i]} pp={s['pp'][i]} dp={s['dp'][i]} micro_batch={s['micro_batch'][i]}"
            + (f" vpp={s['vpp'][i]}" if s["vpp"][i] > 1 else "") + (f" {sched}" if sched != "1f1b" else "")
            + f" recompute={RECOMPUTE_MODES[int(s['recompute'][i])]} zero={s['zero_stage'][i]}"
            + (" sp" if s["sequence_parallel"][i] else "") + (f" ep={s['ep'][i]}" if s["ep"][i] > 1 else "")
            + (f" cp={s['cp'][i]}" if s["cp"][i] > 1 else ""))


def explain_no_strategy(cfg: TrainConfig, space: SearchSpace) -> str:
    """One line on why no strategy is valid, with nearby GPU counts that work."""
    m, batch = cfg.model, cfg.parallel.global_batch
    gpus = f"{space.num_gpus} GPUs" if space.num_gpus is not None else f"{space.min_gpus}..{space.max_gpus} GPUs"
    rule = (f"tp*pp*cp*dp must equal the GPU count with tp dividing heads={m.num_attention_heads}"
            f"{' (tp<=' + str(space.max_tp) + ')' if space.max_tp else ''}, pp <= layers={m.num_layers}"
            f"{' (pp<=' + str(space.max_pp) + ')' if space.max_pp else ''} and dp dividing global_batch={batch}"
            f"{' (dp<=' + str(space.max_dp) + ')' if space.max_dp else ''}"
            + (f", and ep in {fmt_choices(_ep_values(cfg, space))} dividing dp" if m.num_experts else ""))
    hint = ""
    if space.num_gpus is not None:
        # GPU counts with a valid layout are tp*pp*cp*dp products: the nearest ones (ties both kept), found
        # without walking the counts one by one (a huge num_gpus would take forever).
        want = space.num_gpus
        wide = SearchSpace(**{**space.__dict__, "num_gpus": None, "min_gpus": 1,
                                 "max_gpus": min(2 * max(want, 8), 2 ** 40 - 1)})
        counts = {t * p * d * c for t, p, d, c in _layouts(cfg, wide)}
        near = []
        for n in sorted(counts - {want}, key=lambda n: (abs(n - want), n)):
            if abs(n - want) >= max(want, 8) or (len(near) >= 2 and abs(n - want) > abs(near[-1] - want)):
                break
            near.append(int(n))
        if near:
            hint = f"; try num_gpus {' or '.join(str(n) for n in sorted(near))}"
    return f"no valid strategy for {gpus}: {rule}{hint}"


def candidates(cfg: TrainConfig, space: SearchSpace):
    """(strategies, encoded float64 dict, memory bytes, fits mask) for every valid strategy.
    Raises UserError with a one-line reason when none is valid or none fits."""
    if space.num_gpus is not None and space.num_gpus <= 0:
        raise ParameterError("num_gpus", f"{space.num_gpus} must be a positive integer")
    if space.max_gpus is not None and space.max_gpus <= 0:
        raise ParameterError("max_gpus", f"{space.max_gpus} must be a positive integer")
    if (space.num_gpus is None) == (space.max_gpus is None):
        raise UserError("search: give exactly one of num_gpus or max_gpus")
    strategies = enumerate_strategies(cfg, space)
    n = len(strategies["tp"])
    if n == 0:
        raise UserError(explain_no_strategy(cfg, space))
    d = encode_strategies(cfg, strategies)
    mem = memory_bytes(d)
    fits = mem <= d.hbm_bytes
    if not fits.any():
        i = int(np.argmin(mem))
        cap = d.hbm_bytes[0] / GiB
        raise UserError(
            f"no strategy fits in {cap:.0f} GiB per GPU: the smallest needs {mem[i] / GiB:.1f} GiB "
            f"({_describe(cfg, strategies, i)}, {strategies['num_gpus'][i]} GPUs); allow more GPUs, a larger "
            f"max_tp/max_pp, a smaller global_batch or seq_len, or a GPU with more memory")
    return strategies, d, mem, fits


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


def search(cfg: TrainConfig, space: SearchSpace, predictor, objective: str = "time", top: int = 10,
           price_per_gpu_hour: float | None = None, tokens: float | None = None) -> SearchResult:
    """Full enumeration: every valid strategy that fits, evaluated in one batched jitted call."""
    top, price, tokens = check_run_parameters(cfg, objective, top, price_per_gpu_hour, tokens)
    t0 = time.perf_counter()
    strategies, d, mem, fits = candidates(cfg, space)
    t1 = time.perf_counter()
    idx = np.flatnonzero(fits)
    out = evaluate(predictor, d.take(idx))
    t2 = time.perf_counter()
    result = _finish(predictor, cfg, space, strategies, d, mem, fits, idx, out["iteration_time_s"], objective, top,
                     price, tokens, "enumeration", {})
    result.timings = dict(enumerate_s=t1 - t0, evaluate_s=t2 - t1, rank_s=time.perf_counter() - t2)
    return result


# ----------------------------------------------------------------------------- gradient guidance

KNOBS = ("tp", "pp", "dp", "micro_batch", "vpp")
GRAD_CHUNK = 512  # padded batch size of the jitted gradient (one compile)
PENALTY = 20.0  # weight of the memory overflow penalty (per unit of ln(memory / capacity))


def _relaxed_builder(table):
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
        out = simulate(d, corr, xp=jnp, allreduce_table=table)
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
    gs, ts, ms = [], [], []
    for start in range(0, n, GRAD_CHUNK):
        xc, wc = x[start:start + GRAD_CHUNK], w[start:start + GRAD_CHUNK]
        bc = base.take(slice(start, start + GRAD_CHUNK))
        m = len(xc)
        xs = jnp.asarray(_pad_array(xc, GRAD_CHUNK), dtype=jnp.float32)
        ws = jnp.asarray(_pad_array(wc, GRAD_CHUNK), dtype=jnp.float32)
        bs = bc.map(lambda v: jnp.asarray(_pad_array(v, GRAD_CHUNK), dtype=jnp.float32))
        fn = _compiled("relaxed", GRAD_CHUNK, predictor, _relaxed_builder, (xs, bs, ws), _GRADIENT_COMPILER_OPTIONS)
        g, ln_t, ln_mem = fn(predictor.correction, xs, bs, ws)
        gs.append(np.asarray(g)[:m].astype(np.float64))
        ts.append(np.asarray(ln_t)[:m])
        ms.append(np.asarray(ln_mem)[:m])
    return np.concatenate(gs), np.concatenate(ts), np.concatenate(ms)


def sensitivity(predictor, cfg: TrainConfig, row: dict) -> list[dict]:
    """Which knob matters most at a strategy: elasticities d ln(time) / d ln(knob) from jax.grad of
    the predictor with the degrees relaxed to continuous values (global batch fixed; num_gpus =
    tp*pp*dp, so cost per token has elasticity time's + 1 for tp, pp, dp). Also the trades that
    keep the GPU count fixed (raise one degree, lower another by the same factor)."""
    strategies = {k: np.array([row[k] if k not in ("schedule", "recompute", "sequence_parallel")
                               else (SCHEDULES.index(row[k]) if k == "schedule" else
                                     RECOMPUTE_MODES.index(row[k]) if k == "recompute" else int(row[k]))])
                  for k in STRATEGY_FIELDS}
    base = encode_strategies(cfg, strategies)
    x = np.log2(np.array([[row["tp"], row["pp"], row["dp"], row["micro_batch"], row["vpp"]]], dtype=np.float64))
    w = np.array([[-1.0, 0.0, 0.0, 0.0]])
    g, _, _ = relaxed_gradient(predictor, x, base, w)
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
