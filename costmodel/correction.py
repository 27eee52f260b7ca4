"""The learned correction's forward pass, in plain array code (numpy or jax.numpy).

The correction never predicts raw times. It outputs bounded adjustments to the analytical
model's own parameters:
- per op class, an efficiency in (0, 1] relative to the roofline time,
  eff = sigmoid(logit(base_eff) + mlp(features));
- per collective, a bandwidth efficiency in (0, 1] and a latency multiplier exp(mlp) in [1/8, 8];
- a global time factor in [0.8, 1.65] for what op sums miss (overlap slowdown, framework overhead),
  and a per-micro-batch framework overhead in seconds.
(A learned multiplier of the host's dispatch time was tried and dropped: it fitted the training
shapes better and held-out shapes worse.)
Every MLP's last layer is initialised to zero, so an untrained correction equals the analytical
model.

Two levels. The op and collective networks ("ops", "collectives") describe kernels and collectives
as micro-benchmarks measure them and learn from those measurements only. An optional "in_situ"
group ({"ops": {op_class: mlp}, "collectives": mlp}) adds to their raw outputs what changes inside
a training iteration (contention, fused or differently configured kernels); it learns from
iteration times, kept near the micro-benchmarks by a penalty (training/fit.py). `simulate` uses
both; a kernel or collective on its own is predicted with `standalone(correction)`.

Outside the training runs the correction fades to the analytical model: `with_trust` attaches a
per-config weight in [0, 1] (from the stored feature range of the runs) that scales every network's
raw output, so a config far from the data gets the simulator's answer, and scale enters through the
modelled collectives and pipeline only.

Parameters are nested dicts of arrays in flax's layout ({"Dense_0": {"kernel", "bias"}, ...}),
so the same weights run here without importing JAX.
"""
from __future__ import annotations

import numpy as np

from vtrain.costmodel.ops import OP_CLASSES  # noqa: F401 (re-exported: one network per op class)
from vtrain.costmodel.rules import Recompute, Schedule

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def mlp_apply(params: dict, x, xp):
    """Dense layers with tanh between them; `x` is [..., features] -> [..., outputs]."""
    names = sorted(params, key=lambda name: int(name.split("_")[-1]))
    layers = [(params[name]["kernel"], params[name]["bias"]) for name in names]
    if xp is np and np.size(x) >= NUMPY_FEATURE_MAJOR_MIN * np.shape(x)[-1]:
        return _mlp_feature_major(layers, np.asarray(x))
    for i, (kernel, bias) in enumerate(layers):
        x = _dense(x, kernel, bias, xp)
        if i < len(layers) - 1:
            x = xp.tanh(x)
    return x


def _dense(x, kernel, bias, xp):
    """x @ kernel + bias. In numpy, as a fixed sequence of elementwise multiply-adds over the (few)
    inputs: a row's result is then bit-identical whatever the other rows of the batch (a BLAS matmul
    picks its kernel and summation order by the batch shape, so a job's prediction moved by an ulp
    with the table around it)."""
    if xp is not np:
        return x @ kernel + bias
    kernel = np.asarray(kernel)
    acc = x[..., 0:1] * kernel[0]
    for j in range(1, kernel.shape[0]):
        acc = acc + x[..., j:j + 1] * kernel[j]
    return acc + np.asarray(bias)


# numpy batches of at least this many rows run feature-major (below it, the per-call overhead of
# one pass per unit outweighs the cache misses of the row-major passes)
NUMPY_FEATURE_MAJOR_MIN = 512
NUMPY_BLOCK_ROWS = 16384  # rows per feature-major block: one unit's values of a block (128 KiB) stay in cache


def _mlp_feature_major(layers: list, x: np.ndarray) -> np.ndarray:
    """mlp_apply in numpy for large batches, with the same elementwise operations as `_dense` in the
    same order (so bit-identical to it), but feature-major and in blocks of rows: each multiply-add
    runs over one unit's contiguous values of a block, which stay in cache (the row-major passes
    over [rows, 16] arrays are memory-bound: ~2.5x slower)."""
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1])
    kernels = [(np.asarray(kernel), np.asarray(bias)) for kernel, bias in layers]
    out = np.empty((rows.shape[0], kernels[-1][0].shape[1]), dtype=np.result_type(rows, *kernels[-1]))
    for start in range(0, rows.shape[0], NUMPY_BLOCK_ROWS):
        units = list(np.ascontiguousarray(rows[start:start + NUMPY_BLOCK_ROWS].T))
        for i, (kernel, bias) in enumerate(kernels):
            outputs = []
            for o in range(kernel.shape[1]):
                acc = units[0] * kernel[0, o:o + 1]
                tmp = np.empty_like(acc)
                for j in range(1, kernel.shape[0]):
                    np.multiply(units[j], kernel[j, o:o + 1], out=tmp)
                    np.add(acc, tmp, out=acc)
                acc = acc + bias[o:o + 1]
                if i < len(kernels) - 1:
                    np.tanh(acc, out=acc)
                outputs.append(acc)
            units = outputs
        out[start:start + NUMPY_BLOCK_ROWS] = np.stack(units, axis=-1)
    return out.reshape(lead + (out.shape[-1],))


def _log2(x, xp):
    return xp.log2(xp.maximum(x, 1.0))


def op_features(op: dict, hw: dict, xp):
    """Features of an op for the efficiency network: log2 shape, work and hardware descriptors."""
    intensity = op["flops"] / xp.maximum(op["bytes"], 1.0)
    cols = [
        _log2(op["m"], xp), _log2(op["n"], xp), _log2(op["k"], xp), _log2(op["batch"], xp),
        _log2(op["flops"], xp) - 30.0, _log2(op["bytes"], xp) - 20.0, xp.log2(xp.maximum(intensity, 1e-3)),
        xp.log2(hw["peak_flops"]) - 40.0, xp.log2(hw["hbm_bw"]) - 40.0,
    ]
    return xp.stack([c * xp.ones_like(op["flops"]) for c in cols], axis=-1) / 8.0


N_OP_FEATURES = 9


def collective_features(op_index: int, size_bytes, group, crosses_node, link_bw, xp):
    """Features of a collective: log2 size and group, tier, link bandwidth, op one-hot. (For a group
    across nodes `group` is its ranks per node: see collectives.collective_time.)"""
    one = xp.ones_like(size_bytes * 1.0)
    cols = [(_log2(size_bytes, xp) - 20.0) / 8.0, _log2(group, xp) / 4.0, crosses_node * one,
            (xp.log2(link_bw) - 35.0) / 4.0]
    cols += [one * (1.0 if i == op_index else 0.0) for i in range(len(COLLECTIVE_OPS))]
    return xp.stack([c * one for c in cols], axis=-1)


N_COLLECTIVE_FEATURES = 4 + len(COLLECTIVE_OPS)


def _logit(p, xp):
    return xp.log(p) - xp.log1p(-p)


def _sigmoid(x, xp):
    return 1.0 / (1.0 + xp.exp(-x))


def standalone(correction: dict | None) -> dict | None:
    """The correction as it applies to a kernel or collective measured on its own (the in-situ
    part, learned from iteration times, left out)."""
    if correction is None:
        return None
    return {k: v for k, v in correction.items() if k != "in_situ"}


def _raw_outputs(correction: dict, path: tuple, features, xp):
    """Sum of the raw outputs of the network at `path` (e.g. ("ops", "gemm")) and of its in-situ
    counterpart, where each exists, times the config's trust weight (see `with_trust`); None when
    neither network exists."""
    total = None
    for root in (correction, correction.get("in_situ", {})):
        node = root
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            raw = mlp_apply(node, features, xp)
            total = raw if total is None else total + raw
    if total is not None and TRUST_KEY in correction:
        total = total * correction[TRUST_KEY][..., None]
    return total


def op_efficiency(correction: dict | None, op: dict, base_eff: float, hw: dict, xp):
    """Efficiency in (0, 1] of `op` relative to its roofline time."""
    raw = None if correction is None else _raw_outputs(correction, ("ops", op["cls"]), op_features(op, hw, xp), xp)
    if raw is None:
        return base_eff
    return _sigmoid(_logit(base_eff, xp) + raw[..., 0], xp)


def op_efficiencies(correction: dict | None, op_list: list[dict], base_effs: list, hws: list[dict], xp) -> list:
    """op_efficiency of each op of `op_list` (ops of one class; `base_effs[i]`, `hws[i]`: op i's
    analytical efficiency and hardware), with the class's network run once over the ops' features
    stacked on a new leading axis (one evaluation instead of one per op: a smaller graph under
    jax.jit, fewer passes in numpy)."""
    if correction is None or not op_list:
        return list(base_effs)
    features = [op_features(op, hw, xp) for op, hw in zip(op_list, hws)]
    shape = np.broadcast_shapes(*(np.shape(f) for f in features))
    stacked = xp.stack([xp.broadcast_to(f, shape) for f in features], axis=0)
    raw = _raw_outputs(correction, ("ops", op_list[0]["cls"]), stacked, xp)
    if raw is None:
        return list(base_effs)
    if all(isinstance(b, float) and b == base_effs[0] for b in base_effs):
        base = base_effs[0]  # one class prior for every op (the usual case): no stacking
    else:
        base = xp.stack([xp.broadcast_to(xp.asarray(b, dtype=raw.dtype), raw.shape[1:-1]) for b in base_effs], axis=0)
    eff = _sigmoid(_logit(base, xp) + raw[..., 0], xp)
    return [eff[i] for i in range(len(op_list))]


def collective_adjustment(correction: dict | None, op_name: str, size_bytes, group, crosses_node, link_bw,
                          base_bw_eff: float, xp):
    """(bandwidth efficiency in (0, 1], latency multiplier in [1/8, 8]) for one collective."""
    if correction is None:
        return base_bw_eff, 1.0
    feats = collective_features(COLLECTIVE_OPS.index(op_name), size_bytes, group, crosses_node, link_bw, xp)
    raw = _raw_outputs(correction, ("collectives",), feats, xp)
    if raw is None:
        return base_bw_eff, 1.0
    bw_eff = _sigmoid(_logit(base_bw_eff, xp) + raw[..., 0], xp)
    latency_mult = xp.exp(2.0794 * xp.tanh(raw[..., 1]))  # 2.0794 = ln 8
    return bw_eff, latency_mult


def _recompute_level(code, xp):
    """The recompute feature: none 0, selective 1, full 2; torchtitan's selective-op (code 3) and
    selective-layer (code 4, half the layers fully recomputed) are presented as selective, their nearest
    trained setting (the feature's meaning is unchanged)."""
    selective_like = (code == Recompute.SELECTIVE_OP) | (code == Recompute.SELECTIVE_LAYER)
    return xp.where(selective_like, 1.0, code * 1.0)


def run_features(d: dict, xp):
    """Features of a whole configuration for the global term. (Network tiers are left to the
    collective model: a run-level flag such as 'TP crosses nodes' is seen in too few runs to
    generalise.)"""
    cols = [_log2(d.tp, xp), _log2(d.pp, xp), _log2(d.dp, xp), _log2(d.micro_batch, xp),
            _log2(d.num_micro_batches, xp), _log2(d.hidden, xp) - 12.0, _log2(d.seq, xp) - 11.0,
            _log2(d.layers / d.pp, xp), _recompute_level(d.recompute, xp) / 2.0, d.sp * 1.0]
    one = xp.ones_like(d.tp * 1.0)
    return xp.stack([c * one for c in cols], axis=-1) / 4.0


N_RUN_FEATURES = 10
# run_features column -> (name, value from a feature: 2**(4f + offset) for log2 columns, else f * scale)
RUN_FEATURE_UNITS = (("tp", "log2", 0), ("pp", "log2", 0), ("dp", "log2", 0), ("micro_batch", "log2", 0),
                     ("micro-batches", "log2", 0), ("hidden", "log2", 12), ("seq", "log2", 11),
                     ("layers/stage", "log2", 0), ("recompute", "linear", 8), ("sequence_parallel", "linear", 4))
# The global term reads every run feature but dp: data parallelism changes an iteration only through
# its gradient collectives, which the collective model carries. (A global factor that read dp inflated
# GPT-3 175B on 3,072-12,288 A100s by 23-40 %, at dp 48-192, beyond the runs' dp <= 64.)
GLOBAL_INPUTS = tuple(i for i, (name, _, _) in enumerate(RUN_FEATURE_UNITS) if name != "dp")
N_GLOBAL_INPUTS = len(GLOBAL_INPUTS)
OVERHEAD_INIT_BIAS = -8.0


def global_adjustment(correction: dict | None, d: dict, xp):
    """(multiplicative time factor, framework overhead per micro-batch in seconds); both fade to
    (1, 0) with the config's trust weight (see `with_trust`)."""
    if correction is None or "global" not in correction:
        return 1.0, 0.0
    features = run_features(d, xp)
    seen = correction.get("feature_range", {}).get("global")
    if seen is not None:
        # Clamp to the range the network was trained on: no extrapolation beyond the training runs.
        features = xp.clip(features, seen["min"], seen["max"])
    raw = mlp_apply(correction["global"], features[..., list(GLOBAL_INPUTS)], xp)
    trust = correction.get(TRUST_KEY, 1.0)
    # Within [0.8, 1.65]: mostly slowdowns; large speed-ups must come from op efficiencies, which
    # the roofline bounds. (A factor down to 0.61 traded a global speed-up for a large per-micro-batch
    # overhead, which fits small models and extrapolates badly to large ones.)
    t = xp.tanh(raw[..., 0])
    factor = xp.exp(trust * xp.where(t > 0, 0.5 * t, 0.2231 * t))
    # The output bias starts at OVERHEAD_INIT_BIAS, i.e. ~0.3 microseconds: effectively zero.
    overhead = trust * 1e-3 * xp.exp(xp.clip(raw[..., 1], -20.0, 5.0))
    return factor, overhead


# --- Trust: how much of the learned correction applies to a config. Inside the range of the training
# runs all of it; outside, every learned term (op and collective efficiencies, in-situ terms, the
# global factor and overhead) fades towards the analytical model together, since they were fitted
# and validated together. The weight is exp(-(u / TRUST_SCALE)**2), u the Euclidean excess of
# `trust_features` beyond the training runs' range, in doublings. ---
TRUST_KEY = "trust_weight"  # where `with_trust` puts the per-config weight in a correction (not a parameter)
TRUST_SCALE = 1.0  # doublings outside the training runs at which the correction keeps exp(-1) = 37 %
HARDWARE_FEATURE_NAMES = ("peak FLOP/s", "HBM bytes/s", "intra-node bytes/s", "inter-node bytes/s", "GPUs per node")
# How a run is executed beyond its shape, layout and hardware: what another framework or recipe
# changes. Each is a 0/1 flag (one unit of excess when the training runs never had it) but the
# context-parallel degree (as log2 cp, in doublings). (The architecture - Llama's gated MLP, GQA,
# fused attention - is not among them: it changes which ops run, which the op graph spells out and the
# op networks see op by op; these flags change how the runs execute, which no learned term sees.)
CONFIG_FEATURE_NAMES = ("ZeRO stage >= 1", "ZeRO-3 / FSDP", "a schedule other than 1F1B", "overlapped gradient reduction",
                        "FP8 linears", "async TP", "context-parallel degree", "mixture of experts",
                        "selective-op/-layer recompute", "PyTorch eager kernels")
TRUST_FEATURE_NAMES = (tuple(name for name, _, _ in RUN_FEATURE_UNITS if name != "dp") + HARDWARE_FEATURE_NAMES
                       + CONFIG_FEATURE_NAMES)
N_TRUST_FEATURES = len(TRUST_FEATURE_NAMES)


def trust_features(d, xp):
    """Per config, in doublings (log2 units; the recompute level counts 0 / 0.5 / 1, SP 0 / 1): the run
    features but dp (more data parallelism at the same per-GPU work is modelled by the collectives,
    and fading with dp would let more GPUs look faster), the GPU's and network's speeds and the GPUs
    per node, and the execution flags of CONFIG_FEATURE_NAMES (a framework or recipe the training
    runs never used is outside them too)."""
    run = run_features(d, xp) * 4.0
    one = xp.ones_like(d.tp * 1.0)

    def flag(condition):
        return xp.where(condition, 1.0, 0.0) * one

    hardware = [xp.log2(d.peak_flops * one), xp.log2(d.hbm_bw * one), xp.log2(d.intra_bw * one),
                xp.log2(xp.maximum(d.inter_bw * one, 1.0)), xp.log2(d.gpus_per_node * one)]
    config = [flag(d.zero_stage >= 1), flag(d.zero_stage >= 3), flag(d.schedule != Schedule.ONE_F_ONE_B), flag(d.overlap > 0),
              flag(d.fp8 > 0), flag(d.async_tp > 0), _log2(d.cp * one, xp), flag(d.experts > 0),
              flag((d.recompute == Recompute.SELECTIVE_OP) | (d.recompute == Recompute.SELECTIVE_LAYER)),
              flag(d.eager > 0)]
    assert len(hardware) == len(HARDWARE_FEATURE_NAMES) and len(config) == len(CONFIG_FEATURE_NAMES)
    return xp.concatenate([run[..., list(GLOBAL_INPUTS)], xp.stack(hardware + config, axis=-1)], axis=-1)


def trust_weight(correction: dict | None, d, xp):
    """Per config, the weight in [0, 1] of the learned correction (1 inside the training runs' range,
    or when the correction stores no range)."""
    seen = (correction or {}).get("feature_range", {}).get("trust")
    if seen is None:
        return xp.ones_like(d.tp * 1.0)
    f = trust_features(d, xp)
    excess = xp.maximum(xp.asarray(seen["min"]) - f, 0.0) + xp.maximum(f - xp.asarray(seen["max"]), 0.0)
    return xp.exp(-xp.sum(excess * excess, axis=-1) / TRUST_SCALE ** 2)


def with_trust(correction: dict | None, d, xp) -> dict | None:
    """`correction` with the per-config trust weight of configs `d` attached (see `trust_weight`; a new
    dict, None stays None)."""
    if correction is None or "trust" not in correction.get("feature_range", {}):
        return correction
    return {**correction, TRUST_KEY: trust_weight(correction, d, xp)}


# --- The parameter layout: the one definition init (training/model.py) and checkpoint checks
# (costmodel/checkpoint.py) both follow. ---
HIDDEN = 16  # hidden units of every correction MLP


def network_shapes() -> dict[str, tuple[int, int]]:
    """Every network of a correction: '/'-joined path -> (inputs, outputs), in initialisation order."""
    nets: dict[str, tuple[int, int]] = {}
    for prefix in ("", "in_situ/"):
        nets.update({f"{prefix}ops/{cls}": (N_OP_FEATURES, 1) for cls in OP_CLASSES})
        nets[f"{prefix}collectives"] = (N_COLLECTIVE_FEATURES, 2)
    nets["global"] = (N_GLOBAL_INPUTS, 2)
    return nets


def parameter_shapes() -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(required, optional) flattened array name -> shape of a correction's parameters. Optional:
    the training runs' feature ranges of the global term and of the trust weight (present once the
    fit has seen runs)."""
    required = {}
    for net, (inputs, outputs) in network_shapes().items():
        required.update({f"{net}/Dense_0/kernel": (inputs, HIDDEN), f"{net}/Dense_0/bias": (HIDDEN,),
                         f"{net}/Dense_1/kernel": (HIDDEN, outputs), f"{net}/Dense_1/bias": (outputs,)})
    optional = {f"feature_range/global/{bound}": (N_RUN_FEATURES,) for bound in ("min", "max")}
    optional.update({f"feature_range/trust/{bound}": (N_TRUST_FEATURES,) for bound in ("min", "max")})
    return required, optional


def trainable_count(flat: dict) -> int:
    """Trainable parameters among flattened arrays (the stored feature range is not counted)."""
    return int(sum(a.size for name, a in flat.items() if not name.startswith("feature_range/")))


def out_of_domain(correction: dict | None, d: dict, xp) -> list[list[tuple]]:
    """Per config in `d`: (input name, value, lowest seen, highest seen) for each input of the global
    term outside the range of the training runs (where it is clamped to that range), then each GPU or
    network figure (FLOP/s, bytes/s, GPUs per node) and each execution flag (0/1; log2 cp as the cp
    degree) outside it (these only lower the trust weight); [] when the correction stores no range
    (or there is none)."""
    ranges = (correction or {}).get("feature_range", {})
    seen = ranges.get("global")
    if seen is None:
        return []
    feats = xp.asarray(run_features(d, xp)).reshape(-1, N_RUN_FEATURES)
    trust_seen = ranges.get("trust")
    n_extra = N_TRUST_FEATURES - N_GLOBAL_INPUTS
    extra = (xp.asarray(trust_features(d, xp)).reshape(-1, N_TRUST_FEATURES)[:, -n_extra:]
             if trust_seen is not None else None)
    extra_names = TRUST_FEATURE_NAMES[-n_extra:]

    def value(f, unit, k):
        return float(2.0 ** (4.0 * f + k)) if unit == "log2" else float(f * k)

    def extra_value(name, f):  # a hardware figure or cp: from its log2; a flag as it is
        return float(2.0 ** f) if name in HARDWARE_FEATURE_NAMES or name == "context-parallel degree" else float(f)

    out = []
    for r, row in enumerate(feats):
        items = []
        for i, (name, unit, k) in enumerate(RUN_FEATURE_UNITS):
            if row[i] > seen["max"][i] + 1e-9 or row[i] < seen["min"][i] - 1e-9:
                items.append((name, value(row[i], unit, k), value(seen["min"][i], unit, k),
                              value(seen["max"][i], unit, k)))
        if extra is not None:
            lo, hi = trust_seen["min"][-n_extra:], trust_seen["max"][-n_extra:]
            for j, name in enumerate(extra_names):
                if extra[r, j] > hi[j] + 1e-9 or extra[r, j] < lo[j] - 1e-9:
                    items.append((name, extra_value(name, extra[r, j]), extra_value(name, lo[j]),
                                  extra_value(name, hi[j])))
        out.append(items)
    return out
