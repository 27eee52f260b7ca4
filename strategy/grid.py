"""The strategy grid: which strategies a search considers (SearchSpace and its parameter checks)
and every valid one as numpy arrays, built from the same validity rules as `spec.build_config`
(tp divides heads and meets the kv-head rule, pp <= layers with >= 1 layer per chunk, dp*micro_batch
divides the global batch, tp*pp*cp*dp == num_gpus, interleaved needs pp > 1 and vpp > 1, sequence
parallelism only with tp > 1; for mixture-of-experts models ep divides num_experts and dp), their
encoded simulator inputs and their memory (float64 numpy).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vtrain.costmodel import ops as opgraph
from vtrain.costmodel import rules
from vtrain.costmodel.cost import default_price
from vtrain.costmodel.encode import SimInput, config_fields, sim_input
from vtrain.costmodel.errors import ParameterError, UserError
from vtrain.costmodel.memory import memory_per_gpu
from vtrain.costmodel.pipeline import in_flight_micro_batches
from vtrain.costmodel.rules import RECOMPUTE_MODES, SCHEDULES, divisors, fmt_choices
from vtrain.costmodel.spec import TrainConfig
from vtrain.costmodel.units import GiB

OBJECTIVES = ("time", "time-p90", "cost", "tokens-per-dollar")  # time-p90: the interval's upper bound

# Strategy fields (canonical names) held by a strategy table; enums as codes.
STRATEGY_FIELDS = ("tp", "pp", "dp", "num_gpus", "micro_batch", "num_micro_batches", "vpp", "schedule",
                   "recompute", "sequence_parallel", "zero_stage", "ep", "cp")


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
    # the config's async TP applies to the layouts that can run it (tp > 1 with SP)
    f["async_tp"] = f["async_tp"].astype(bool) & (strategies["tp"] > 1) & (strategies["sequence_parallel"] > 0)
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
                last_stage_layers=0, cp=int(strategies["cp"][i]),
                async_tp=bool(flat["async_tp"] and strategies["tp"][i] > 1 and strategies["sequence_parallel"][i]))
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
    if space.tp is not None and not any(m.num_attention_heads % t == 0 for t in space.tp):
        # every tp asked for is impossible whatever the GPU count: name the option, not the count
        return "--tp: " + rules.tp_heads_message(", ".join(str(t) for t in space.tp), m.num_attention_heads)
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
