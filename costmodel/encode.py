"""The simulator's input: `SimInput`, one array per field, one entry per configuration.

It is built in one place, `sim_input(resolved)`, from resolved canonical fields (as `rules.check`
returns them: choices as codes). Every entry point goes through it: `encode(configs)` for
validated TrainConfigs, `tables.columns.encode_table` for a table, `strategy.search.encode_strategies` for a
strategy grid; `with_layout` swaps the parallel degrees (search's relaxed, continuous degrees).

Enums are codes (recompute: rules.Recompute; schedule: rules.Schedule; llama: 1.0 for
Arch.LLAMA, else 0.0; flash: 1.0 for attention=flash, 0.0 for unfused) and the GPU preset (with the config's peak_tflops / hbm_bandwidth_GBps / gpu_memory_GiB
overrides) becomes its figures in FLOP/s, bytes and bytes/s, so the
simulator never looks anything up. SimInput is a NamedTuple, hence a JAX pytree: it passes
through jax.jit, vmap and grad as it is.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from vtrain.costmodel.pipeline import stage_layer_counts
from vtrain.costmodel.rules import ARCHS, ATTENTIONS, GPU_LIST, PRECISIONS, RECOMPUTE_MODES, SCHEDULES, Arch
from vtrain.costmodel.spec import TrainConfig

GRAD_BYTES = {"fp16": 2.0, "bf16": 4.0, "fp8": 4.0}  # Megatron keeps fp32 main grads for bf16


class SimInput(NamedTuple):
    """One configuration per entry (arrays of shape [N], or scalars). Counts, 0/1 flags and codes;
    peak_flops / peak_flops_16 in FLOP/s, hbm_bw / intra_bw / inter_bw in bytes/s (intra per GPU
    per direction, inter per GPU), hbm_bytes and grad_bytes (per parameter) in bytes."""

    layers: Any
    hidden: Any
    heads: Any
    kv_heads: Any
    ffn: Any
    vocab: Any
    seq: Any
    llama: Any
    flash: Any
    tp: Any
    pp: Any
    dp: Any
    num_gpus: Any
    micro_batch: Any
    global_batch: Any
    num_micro_batches: Any
    sp: Any
    recompute: Any
    zero_stage: Any
    schedule: Any
    vpp: Any
    overlap: Any
    peak_flops: Any
    peak_flops_16: Any
    hbm_bw: Any
    hbm_bytes: Any
    intra_bw: Any
    inter_bw: Any
    gpus_per_node: Any
    grad_bytes: Any
    # mixture of experts (0 experts = dense; docs/moe.md)
    experts: Any
    top_k: Any
    moe_ffn: Any
    shared: Any
    dense_layers: Any
    ep: Any
    etp: Any  # expert tensor-parallel degree as configured (0 = tp; moe.expert_tp resolves it)
    moe_freq: Any  # every moe_freq-th layer after the dense ones is MoE
    capacity: Any  # expert capacity factor (0 = dropless)
    imbalance: Any  # routed tokens of the most loaded EP rank / the balanced share (>= 1)
    # layers held by the first, the heaviest middle, the last and the mean middle pipeline GPU
    # (all layers / pp for even stages; pipeline.stage_layer_counts)
    layers_first: Any
    layers_mid: Any
    layers_last: Any
    layers_mid_avg: Any
    # context parallelism: `seq` above is the tokens of a sequence on one cp rank (seq_len / cp)
    cp: Any
    # 1.0 for precision=fp8 (the linears' GEMMs at peak_flops, the FP8 peak; other GEMMs at peak_flops_16)
    fp8: Any
    # 1.0 for async TP (the SP collectives overlapped with the GEMMs; 0.0 without TP)
    async_tp: Any
    # 1.0 for PyTorch eager mode (unfused norms, RoPE and activations; ops.EAGER_PASSES)
    eager: Any
    # fraction of peak_flops_16 the fused FlashAttention kernel reaches (the GPU preset's or the config's)
    attention_eff: Any

    def map(self, fn) -> "SimInput":
        """`fn` applied to every field (e.g. a cast, padding, a device transfer)."""
        return SimInput(*(fn(v) for v in self))

    def take(self, idx) -> "SimInput":
        """The configurations at `idx` (an index array, mask or slice)."""
        return SimInput(*(v[idx] for v in self))

    @property
    def rows(self) -> int:
        return len(self.tp)


def with_layout(d: SimInput, tp, pp, dp, micro_batch, vpp) -> SimInput:
    """`d` with other parallel degrees (any array type, continuous values allowed); num_gpus and
    the micro-batches per pipeline follow from them, and the stages hold layers / pp each (even)."""
    even = d.layers / pp
    return d._replace(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, vpp=vpp, num_gpus=tp * pp * dp * d.cp,
                      num_micro_batches=d.global_batch / (dp * micro_batch), layers_first=even, layers_mid=even,
                      layers_last=even, layers_mid_avg=even)


_GPU = dict(
    peak_flops_16=np.array([s.peak_flops.get("bf16", s.peak_flops["fp16"]) for s in GPU_LIST]),
    hbm_bw=np.array([s.hbm_bw for s in GPU_LIST], dtype=np.float64),
    hbm_bytes=np.array([s.hbm_bytes for s in GPU_LIST], dtype=np.float64),
)
_PEAK = np.array([[s.peak_flops.get(p, 0.0) for p in PRECISIONS] for s in GPU_LIST])  # [gpu, precision]
_GRAD = np.array([GRAD_BYTES[p] for p in PRECISIONS])


def _figure(value, unit: float, preset):
    """An overridable GPU figure in SI units: `value` (in `unit`s) * unit, or exactly the preset's
    SI value where `value` is the preset's (so an unchanged GPU encodes bit-identically)."""
    si = np.asarray(value, dtype=np.float64) * unit
    return np.where(np.isclose(si, preset, rtol=1e-12, atol=0.0), preset, si)


def sim_input(r: dict, dtype=np.float64) -> SimInput:
    """SimInput from resolved canonical fields (rules.check's output; every row valid)."""
    f = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    g, prec = np.asarray(r["gpu"]), np.asarray(r["precision"])
    # peak_tflops overrides the 16-bit peak; the other precisions' peaks scale with it
    peak_16 = _figure(r["peak_tflops"], 1e12, _GPU["peak_flops_16"][g])
    d = SimInput(
        layers=f(r["num_layers"]), hidden=f(r["hidden_size"]), heads=f(r["num_attention_heads"]),
        kv_heads=f(r["num_kv_heads"]), ffn=f(r["ffn_hidden_size"]), vocab=f(r["vocab_size"]),
        seq=f(r["seq_len"]) / f(r["cp"]), cp=f(r["cp"]),
        llama=f(np.asarray(r["arch"]) == Arch.LLAMA), flash=f(np.asarray(r["attention"]) == 0),
        tp=None, pp=None, dp=None, num_gpus=None, micro_batch=None, vpp=None, num_micro_batches=None,
        global_batch=f(r["global_batch"]), sp=f(r["sequence_parallel"]), recompute=f(r["recompute"]),
        zero_stage=f(r["zero_stage"]), schedule=f(r["schedule"]), overlap=f(r["overlap_grad_reduce"]),
        peak_flops=_PEAK[g, prec] * (peak_16 / _GPU["peak_flops_16"][g]), peak_flops_16=peak_16,
        hbm_bw=_figure(r["hbm_bandwidth_GBps"], 1e9, _GPU["hbm_bw"][g]),
        hbm_bytes=_figure(r["gpu_memory_GiB"], 1024.0**3, _GPU["hbm_bytes"][g]), intra_bw=f(r["intra_node_bw_GBps"]) * 1e9,
        inter_bw=f(r["inter_node_bw_Gbps"]) * 1e9 / 8.0, gpus_per_node=f(r["gpus_per_node"]),
        grad_bytes=_GRAD[prec], experts=f(r["num_experts"]), top_k=f(r["experts_per_token"]),
        moe_ffn=f(r["moe_ffn_hidden_size"]), shared=f(r["shared_experts"]), dense_layers=f(r["first_dense_layers"]),
        ep=f(r["ep"]), etp=f(r["etp"]), moe_freq=f(r["moe_layer_freq"]), capacity=f(r["capacity_factor"]),
        imbalance=f(r["moe_imbalance"]), fp8=f(prec == PRECISIONS.index("fp8")), async_tp=f(r["async_tp"]),
        eager=f(r["eager"]),
        attention_eff=f(r["attention_efficiency"]),
        layers_first=None, layers_mid=None, layers_last=None, layers_mid_avg=None,
    )
    d = with_layout(d, f(r["tp"]), f(r["pp"]), f(r["dp"]), f(r["micro_batch"]), f(r["vpp"]))
    stages = stage_layer_counts(r["num_layers"], r["pp"], r["vpp"], r["first_stage_layers"], r["last_stage_layers"])
    d = d._replace(layers_first=stages["first"], layers_mid=stages["mid"], layers_last=stages["last"],
                   layers_mid_avg=stages["mid_avg"])
    return d if dtype == np.float64 else d.map(lambda v: v.astype(dtype))


def config_fields(configs: list[TrainConfig]) -> dict[str, np.ndarray]:
    """Resolved canonical fields (choices as codes) of validated configs, one entry per config."""
    flats = [c.flat() for c in configs]
    out = {k: np.array([fl[k] for fl in flats]) for k in flats[0]}
    for name, choices in (("arch", ARCHS), ("attention", ATTENTIONS), ("recompute", RECOMPUTE_MODES), ("schedule", SCHEDULES),
                          ("precision", PRECISIONS)):
        out[name] = np.array([choices.index(v) for v in out[name]], dtype=np.int64)
    names = [s.name for s in GPU_LIST]
    out["gpu"] = np.array([names.index(v) for v in out["gpu"]], dtype=np.int64)
    return out


def encode(configs: list[TrainConfig]) -> SimInput:
    """Stack validated configs into a SimInput of float64 arrays of shape [N]."""
    return sim_input(config_fields(configs))


def config_row(config: TrainConfig) -> SimInput:
    """The simulator's input for one config (arrays of shape [1])."""
    return encode([config])
