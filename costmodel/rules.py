"""The one set of configuration validity rules, vectorised over 1-D numpy arrays.

`check(f, text)` takes canonical fields as arrays of one value per configuration (integers,
floats, bools; choice fields as codes, see below) and returns the resolved fields (defaults
filled in: kv heads, FFN width, dp / num_gpus / global batch, GPU link figures, precision) and
the first broken rule of each configuration. All three entry points call it:
`spec.build_config` (one row), `tables.columns.encode_table` (a table) and
`strategy.search.enumerate_strategies` (a strategy grid, `messages=False`: masks only).

Choice fields are codes: `arch` an `Arch`, `schedule` a `Schedule`, `recompute` a `Recompute`,
`precision` an index into PRECISIONS (UNSET = not given: the GPU's default), `gpu` an index into
GPU_LIST; UNKNOWN (-1) for a value that is none of them (`text[name]` then holds the value, for the
message). A value of 0 in num_kv_heads, ffn_hidden_size, dp, num_gpus, global_batch,
gpus_per_node, the bandwidths and the GPU figures (peak_tflops, hbm_bandwidth_GBps, gpu_memory_GiB)
means "derive it" (from the other fields or the GPU preset).

Adding a field: its default in spec, its rule here, its encoding in encode.sim_input.
"""
from __future__ import annotations

import math
from enum import IntEnum

import numpy as np

from vtrain.costmodel.errors import one_line
from vtrain.costmodel.hardware import GPUS, gpu_names

ARCHS = ("gpt", "llama")
ATTENTIONS = ("flash", "unfused")  # fused FlashAttention kernel | Megatron's unfused QK^T-softmax-PV
# selective: Korthikanti et al. / Megatron (attention core recomputed); full: whole layers;
# selective-op: torchtitan's op-level selective AC (every second matmul output and the attention
# output kept, the rest recomputed); selective-layer: torchtitan's per-layer selective AC (every
# second layer fully recomputed, the others keep everything: selective_ac_option = "2").
RECOMPUTE_MODES = ("none", "selective", "full", "selective-op", "selective-layer")
SCHEDULES = ("1f1b", "interleaved", "gpipe")
PRECISIONS = ("fp16", "bf16", "fp8")
ZERO_STAGES = (0, 1, 2, 3)
GPU_LIST = list(GPUS.values())
UNKNOWN = -1  # a choice value that is not one of the choices
UNSET = -2  # precision not given: the GPU's default


class Arch(IntEnum):
    """Transformer block family (index into ARCHS)."""
    GPT = 0
    LLAMA = 1


class Recompute(IntEnum):
    """Activation recomputation (index into RECOMPUTE_MODES)."""
    NONE = 0
    SELECTIVE = 1
    FULL = 2
    SELECTIVE_OP = 3
    SELECTIVE_LAYER = 4


class Schedule(IntEnum):
    """Pipeline schedule (index into SCHEDULES)."""
    ONE_F_ONE_B = 0
    INTERLEAVED = 1
    GPIPE = 2


assert tuple(a.name.lower() for a in Arch) == ARCHS and len(Recompute) == len(RECOMPUTE_MODES)
assert len(Schedule) == len(SCHEDULES)


def preset_figures(spec) -> dict:
    """A GPU preset's values of the overridable GPU figures: peak_tflops (dense 16-bit, bf16 where it
    has it, TFLOP/s), hbm_bandwidth_GBps (GB/s), gpu_memory_GiB (GiB) and attention_efficiency (the
    fraction of that peak the fused attention kernel reaches)."""
    return dict(peak_tflops=spec.peak_flops.get("bf16", spec.peak_flops["fp16"]) / 1e12,
                hbm_bandwidth_GBps=spec.hbm_bw / 1e9, gpu_memory_GiB=spec.hbm_bytes / 1024**3,
                attention_efficiency=spec.attention_efficiency)


# field -> (preset value per GPU_LIST entry, plausible upper bound, unit hint for the message)
GPU_FIGURES = {
    name: (np.array([preset_figures(s)[name] for s in GPU_LIST]), limit, example)
    for name, limit, example in (("peak_tflops", 1e5, "TFLOP/s (dense bf16/fp16), e.g. 989 for an H100 SXM"),
                                 ("hbm_bandwidth_GBps", 1e6, "GB/s, e.g. 3350 for an H100 SXM"),
                                 ("gpu_memory_GiB", 1e5, "GiB, e.g. 80"),
                                 ("attention_efficiency", 1.0, "a fraction of the 16-bit peak in (0, 1], e.g. 0.6 for "
                                  "FlashAttention-3 on an H100"))
}


def tp_heads_message(tp, heads: int) -> str:
    """Why a tp cannot split the attention heads, and the tp values that can (`tp`: a degree, or the
    text of several)."""
    return f"{tp} does not divide num_attention_heads={heads}; use tp in {fmt_choices(divisors(heads))}"


def divisors(n: int) -> list[int]:
    """Every positive divisor of n, ascending (O(sqrt n), so huge values stay fast)."""
    n = int(n)
    if n <= 0:
        return []
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def fmt_choices(values) -> str:
    """'{1, 2, 4, ...}' (at most 12 values) for an error message."""
    values = list(values)
    return "{" + ", ".join(str(v) for v in values[:12]) + (", ..." if len(values) > 12 else "") + "}"


def gpu_default_precision(g: np.ndarray) -> np.ndarray:
    """Precision code each GPU (index into GPU_LIST) trains in by default: bf16 where it has it."""
    table = np.array([PRECISIONS.index("bf16" if "bf16" in s.peak_flops else "fp16") for s in GPU_LIST])
    return table[g]


class Errors:
    """The first broken rule per row, in check()'s order: `ok` mask, and (unless messages=False)
    `field` and `msg` (the message after 'field: ') per row."""

    def __init__(self, n: int, messages: bool = True):
        self.ok = np.ones(n, dtype=bool)
        self.messages = messages
        self.field = np.full(n, None, dtype=object)
        self.msg = np.full(n, None, dtype=object)

    def fail(self, mask, field: str, make):
        rows = np.flatnonzero(mask & self.ok)
        if self.messages:
            for i in rows:
                self.field[i] = field
                self.msg[i] = make(i)
        self.ok[rows] = False

    def fail_msg(self, errors):
        """Errors found before check() (coercion): full 'field: message' strings or None."""
        rows = np.flatnonzero((errors != None) & self.ok)  # noqa: E711 (elementwise)
        for i in rows:
            self.field[i], self.msg[i] = str(errors[i]).split(": ", 1)
        self.ok[rows] = False

    def lines(self) -> np.ndarray:
        """'field: message' per row (None where the row is valid), each one line."""
        out = np.full(len(self.ok), None, dtype=object)
        for i in np.flatnonzero(~self.ok):
            out[i] = one_line(f"{self.field[i]}: {self.msg[i]}")
        return out


def _safe(x, ok):
    """Denominator that is never zero (rows already failing use 1)."""
    return np.where(ok & (x != 0), x, 1)


def _text(text, name, i, code):
    return text[name][i] if text and name in text else code


def check(f: dict, text: dict | None = None, errors: Errors | None = None, messages: bool = True):
    """Resolve and validate canonical fields (see the module docstring). Returns (resolved, errors):
    resolved holds every canonical field as an array (codes for choices), errors an Errors.
    Arrays of length 1 broadcast against the others (a grid's constant fields)."""
    n = max(len(v) for v in f.values())
    E = errors if errors is not None else Errors(n, messages)
    i64 = np.int64

    # --- model ---
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size"):
        x = f[name]
        E.fail(x <= 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    for name in ("num_kv_heads", "ffn_hidden_size"):
        x = f[name]
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    arch = f["arch"]
    E.fail(arch < 0, "arch", lambda i: f"'{_text(text, 'arch', i, arch[i])}' is unknown; use one of {', '.join(ARCHS)}")
    llama = arch == Arch.LLAMA
    attention = f["attention"]
    E.fail(attention < 0, "attention",
           lambda i: f"'{_text(text, 'attention', i, attention[i])}' is unknown; use one of {', '.join(ATTENTIONS)}")
    layers, hidden, heads = f["num_layers"], f["hidden_size"], f["num_attention_heads"]
    seq = f["seq_len"]
    kv = np.where(f["num_kv_heads"] == 0, heads, f["num_kv_heads"])
    ffn_llama = -(-(8 * hidden // 3) // 256) * 256
    ffn = np.where(f["ffn_hidden_size"] == 0, np.where(llama, ffn_llama, 4 * hidden), f["ffn_hidden_size"])
    E.fail(hidden % _safe(heads, E.ok) != 0, "num_attention_heads",
           lambda i: f"hidden_size={hidden[i]} is not divisible by num_attention_heads={heads[i]}; use heads in "
                     f"{fmt_choices(divisors(hidden[i]))}")
    E.fail(heads % _safe(kv, E.ok) != 0, "num_kv_heads",
           lambda i: f"{kv[i]} does not divide num_attention_heads={heads[i]}; use one of "
                     f"{fmt_choices(divisors(heads[i]))}")

    # --- mixture of experts ---
    experts, top_k, moe_ffn_given = f["num_experts"], f["experts_per_token"], f["moe_ffn_hidden_size"]
    shared, first_dense = f["shared_experts"], f["first_dense_layers"]
    moe_fields = dict(num_experts=experts, experts_per_token=top_k, moe_ffn_hidden_size=moe_ffn_given,
                      shared_experts=shared, first_dense_layers=first_dense)
    for name, x in moe_fields.items():
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be >= 0")
    dense = experts == 0
    for name, x in list(moe_fields.items())[1:]:
        E.fail(dense & (x != 0), name, lambda i, x=x, name=name: f"{x[i]} needs a mixture-of-experts model; set "
                                                                 f"num_experts (> 0) or drop {name}")
    E.fail(~dense & (top_k == 0), "experts_per_token",
           lambda i: "missing; give the number of routed experts per token (top-k) for num_experts > 0")
    E.fail(top_k > experts, "experts_per_token",
           lambda i: f"{top_k[i]} exceeds num_experts={experts[i]}; use 1..{experts[i]}")
    E.fail(~dense & (first_dense >= layers), "first_dense_layers",
           lambda i: f"{first_dense[i]} leaves no MoE layer of num_layers={layers[i]}; use 0..{layers[i] - 1}")
    moe_ffn = np.where(~dense & (moe_ffn_given == 0), ffn, moe_ffn_given)
    # MoE layer placement, token dropping and routing imbalance (defaults: every layer, dropless, balanced)
    freq = f["moe_layer_freq"]
    capacity = np.asarray(f["capacity_factor"], dtype=np.float64)
    imbalance = np.asarray(f["moe_imbalance"], dtype=np.float64)
    E.fail(freq < 1, "moe_layer_freq", lambda i: f"{freq[i]} must be >= 1 (1 = every layer after first_dense_layers "
                                                 "is MoE)")
    E.fail(dense & (freq != 1), "moe_layer_freq",
           lambda i: f"{freq[i]} needs a mixture-of-experts model; set num_experts (> 0) or drop moe_layer_freq")
    E.fail(~dense & (first_dense + freq - 1 >= layers), "moe_layer_freq",
           lambda i: f"{freq[i]} with first_dense_layers={first_dense[i]} leaves no MoE layer of "
                     f"num_layers={layers[i]}; use moe_layer_freq <= {max(int(layers[i] - first_dense[i]), 1)}")
    E.fail(capacity < 0, "capacity_factor", lambda i: f"{capacity[i]:g} must be >= 1 (or 0: dropless, the default)")
    E.fail((capacity > 0) & (capacity < 1), "capacity_factor",
           lambda i: f"{capacity[i]:g} drops tokens even under balanced routing, which is not modelled; use "
                     "capacity_factor >= 1 or 0 (dropless)")
    E.fail(dense & (capacity != 0), "capacity_factor",
           lambda i: f"{capacity[i]:g} needs a mixture-of-experts model; set num_experts (> 0) or drop capacity_factor")
    E.fail(imbalance < 1, "moe_imbalance",
           lambda i: f"{imbalance[i]:g} must be >= 1 (the most loaded expert-parallel rank's routed tokens / the "
                     "balanced share; 1 = balanced)")
    E.fail(imbalance > 1e3, "moe_imbalance", lambda i: f"{imbalance[i]:g} is implausibly large; use 1 .. 1000")
    E.fail(dense & (imbalance != 1), "moe_imbalance",
           lambda i: f"{imbalance[i]:g} needs a mixture-of-experts model; set num_experts (> 0) or drop moe_imbalance")

    # --- cluster ---
    gidx = f["gpu"]
    E.fail(gidx < 0, "gpu", lambda i: f"'{_text(text, 'gpu', i, gidx[i])}' is not a known GPU; use one of "
                                      f"{', '.join(gpu_names())} (or set intra_node_bw_GBps etc. on a known preset)")
    g = np.where(gidx < 0, list(GPUS).index("a100-80gb"), gidx)
    prec = np.where(f["precision"] == UNSET, gpu_default_precision(g), f["precision"])
    E.fail(prec < 0, "precision",
           lambda i: f"'{_text(text, 'precision', i, prec[i])}' is unknown; use one of {', '.join(PRECISIONS)}")
    supported = np.zeros(len(prec), dtype=bool)
    for code, p in enumerate(PRECISIONS):
        supported |= (prec == code) & np.array([p in s.peak_flops for s in GPU_LIST])[g]
    E.fail(~supported, "precision",
           lambda i: f"{GPU_LIST[g[i]].name} has no {PRECISIONS[prec[i]]} tensor cores; use one "
                     f"of {', '.join(p for p in GPU_LIST[g[i]].peak_flops if p in PRECISIONS)}")
    gpn, intra, inter = f["gpus_per_node"], f["intra_node_bw_GBps"], f["inter_node_bw_Gbps"]
    gpus_per_node = np.where(gpn != 0, gpn, np.array([s.gpus_per_node for s in GPU_LIST])[g])
    intra = np.where(intra != 0, intra, np.array([float(s.nvlink_GBps) for s in GPU_LIST])[g])
    inter = np.where(inter != 0, inter, np.array([float(s.nic_Gbps) for s in GPU_LIST])[g])
    for name, val in (("gpus_per_node", gpus_per_node), ("intra_node_bw_GBps", intra), ("inter_node_bw_Gbps", inter)):
        E.fail(val <= 0, name, lambda i, val=val: f"{val[i]} must be positive")
    # GPU figure overrides (0 = the preset's): a variant of a preset, e.g. a power-capped part
    figures = {}
    for name, (per_gpu, limit, example) in GPU_FIGURES.items():
        given = np.asarray(f[name], dtype=np.float64)
        E.fail(given < 0, name, lambda i, given=given, name=name: f"{given[i]:g} must be positive (leave {name} out "
                                                                   "for the GPU preset's value)")
        E.fail(given > limit, name, lambda i, given=given, example=example: f"{given[i]:g} is implausibly large; "
                                                                             f"give it in {example}")
        figures[name] = np.where(given > 0, given, per_gpu[g])

    # --- parallel ---
    for name in ("tp", "pp", "micro_batch", "vpp", "cp"):
        x = f[name]
        E.fail(x <= 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    for name in ("dp", "num_gpus", "global_batch"):
        x = f[name]
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    tp, pp, mb, vpp, cp = f["tp"], f["pp"], f["micro_batch"], f["vpp"], f["cp"]
    dp, num_gpus = f["dp"], f["num_gpus"]
    # the model-parallel product: tp*pp, times cp with context parallelism (dp = num_gpus / (tp*pp*cp))
    tpp = _safe(tp * pp * cp, E.ok)

    def _mp(i):  # 'tp*pp' or 'tp*pp*cp' (with its value) for messages
        return ("tp*pp", tp[i] * pp[i]) if cp[i] == 1 else ("tp*pp*cp", tp[i] * pp[i] * cp[i])

    # tp must split the heads: checked before the GPU count, so a tp that cannot work is named as such
    # (not as a GPU count that tp*pp does not divide)
    E.fail(heads % _safe(tp, E.ok) != 0, "tp", lambda i: tp_heads_message(tp[i], heads[i]))
    ok = E.ok
    E.fail((kv % _safe(tp, ok) != 0) & (tp % _safe(kv, ok) != 0), "tp",
           lambda i: f"{tp[i]} neither divides nor is a multiple of num_kv_heads={kv[i]}")
    dp = np.where((dp == 0) & (num_gpus == 0), 1, dp)
    derive = dp == 0
    E.fail(derive & (num_gpus % tpp != 0), "num_gpus",
           lambda i: f"{num_gpus[i]} is not divisible by {_mp(i)[0]}={_mp(i)[1]}; use a multiple of "
                     f"{_mp(i)[1]} or change {_mp(i)[0].replace('*', '/')}")
    dp = np.where(derive, num_gpus // tpp, dp)
    num_gpus = np.where(num_gpus == 0, tp * pp * cp * dp, num_gpus)

    def _ng_msg(i):
        t, q, c_, d_, ng = int(tp[i]), int(pp[i]), int(cp[i]), int(dp[i]), int(num_gpus[i])
        hint = ng // (t * q * c_) if ng % (t * q * c_) == 0 else "?"
        if c_ == 1:
            return f"{ng} != tp*pp*dp = {t}*{q}*{d_} = {t * q * d_}; set num_gpus={t * q * d_} or dp={hint}"
        return (f"{ng} != tp*pp*cp*dp = {t}*{q}*{c_}*{d_} = {t * q * c_ * d_}; set num_gpus={t * q * c_ * d_} "
                f"or dp={hint}")

    E.fail(tp * pp * cp * dp != num_gpus, "num_gpus", _ng_msg)
    # context parallelism: the sequence in 2*cp chunks (load-balanced causal split), ring attention
    # over FlashAttention
    ctx = cp > 1
    E.fail(ctx & (seq % _safe(2 * cp, E.ok) != 0), "cp",
           lambda i: f"{cp[i]} needs seq_len={seq[i]} divisible by 2*cp={2 * cp[i]} (the load-balanced causal "
                     f"split); use cp in {fmt_choices([c for c in divisors(seq[i] // 2) if c > 1])} or cp=1")
    E.fail(ctx & (attention != 0), "cp",
           lambda i: f"{cp[i]} needs attention=flash (ring attention runs FlashAttention on K/V chunks); set "
                     "attention=flash or cp=1")
    schedule = f["schedule"]
    E.fail(schedule < 0, "schedule",
           lambda i: f"'{_text(text, 'schedule', i, schedule[i])}' is unknown; use one of {', '.join(SCHEDULES)}")
    interleaved = schedule == Schedule.INTERLEAVED
    E.fail(~interleaved & (vpp != 1), "vpp",
           lambda i: f"{vpp[i]} needs schedule='interleaved'; set schedule=interleaved or vpp=1")
    E.fail(interleaved & (pp == 1), "schedule", lambda i: "interleaved needs pp > 1; use schedule=1f1b or raise pp")

    # Pipeline stages: any split where every one of the pp*vpp model chunks gets >= 1 layer
    # (pipeline.chunk_layers); first/last_stage_layers fix the first/last chunk.
    first_l, last_l = f["first_stage_layers"], f["last_stage_layers"]
    chunks = pp * vpp
    for name, x in (("first_stage_layers", first_l), ("last_stage_layers", last_l)):
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be >= 1 (or 0 / absent: spread the layers evenly)")
        E.fail((x > 0) & (pp == 1), name, lambda i, x=x, name=name: f"{x[i]} needs pp > 1; drop {name} or raise pp")
    E.fail(chunks > layers, "pp",
           lambda i: f"pp*vpp={pp[i]}*{vpp[i]}={chunks[i]} exceeds num_layers={layers[i]}: every pipeline stage "
                     f"needs at least one layer; use pp*vpp <= {layers[i]}")
    fixed = (first_l > 0).astype(np.int64) + (last_l > 0)
    rest = layers - first_l - last_l
    free = chunks - fixed
    E.fail((free > 0) & (rest < free), "first_stage_layers",
           lambda i: f"first_stage_layers={first_l[i]} + last_stage_layers={last_l[i]} leave {rest[i]} of "
                     f"num_layers={layers[i]} for the other {free[i]} stages (pp*vpp={chunks[i]}); each needs at "
                     "least one layer")
    E.fail((free == 0) & (rest != 0), "first_stage_layers",
           lambda i: f"first_stage_layers={first_l[i]} + last_stage_layers={last_l[i]} must equal "
                     f"num_layers={layers[i]} with pp*vpp=2")
    dpmb = dp * mb
    global_batch = np.where(f["global_batch"] != 0, f["global_batch"], dpmb)
    E.fail(global_batch % _safe(dpmb, E.ok) != 0, "global_batch",
           lambda i: f"{global_batch[i]} is not divisible by dp*micro_batch={dp[i]}*{mb[i]}={dpmb[i]}; "
                     f"use a multiple of {dpmb[i]}")
    ok = E.ok
    micro_batches = global_batch // _safe(dpmb, ok)
    E.fail(interleaved & (micro_batches % _safe(pp, ok) != 0), "global_batch",
           lambda i: f"the interleaved schedule needs the micro-batches per pipeline ({micro_batches[i]}) to be a "
                     f"multiple of pp={pp[i]}; use a global_batch multiple of {dpmb[i] * pp[i]} or schedule=1f1b")
    recompute = f["recompute"]
    E.fail(recompute < 0, "recompute",
           lambda i: f"'{_text(text, 'recompute', i, recompute[i])}' is unknown; use one of "
                     f"{', '.join(RECOMPUTE_MODES)}")
    zero = f["zero_stage"]
    E.fail(~np.isin(zero, ZERO_STAGES), "zero_stage", lambda i: f"{zero[i]} is not a ZeRO stage; use 0, 1, 2 or 3")
    E.fail((zero == 3) & (pp > 1), "zero_stage",
           lambda i: "ZeRO-3 cannot be combined with pp > 1; use zero_stage <= 2 or pp=1")
    sp = f["sequence_parallel"].astype(bool) & (tp != 1)  # a no-op without tensor parallelism
    # async TP (torchtitan / Megatron-Core TP comm overlap): a no-op without TP, needs SP
    async_tp = f["async_tp"].astype(bool) & (tp != 1)
    E.fail(async_tp & ~sp, "async_tp",
           lambda i: "needs sequence_parallel=true (async TP overlaps the sequence-parallel all-gathers and "
                     "reduce-scatters with the GEMMs); set sequence_parallel=true or async_tp=false")
    local_seq = seq // _safe(cp, E.ok)  # tokens of a sequence on one context-parallel rank
    E.fail(sp & (local_seq % _safe(tp, E.ok) != 0), "sequence_parallel",
           lambda i: (f"seq_len={seq[i]} is not divisible by tp={tp[i]}; turn sequence_parallel off or pick tp "
                      "dividing seq_len") if cp[i] == 1 else
           (f"seq_len/cp={local_seq[i]} is not divisible by tp={tp[i]}; turn sequence_parallel off or pick tp "
            "dividing seq_len/cp"))

    ep, etp = f["ep"], f["etp"]
    E.fail(ep <= 0, "ep", lambda i: f"{ep[i]} must be a positive integer")
    E.fail(etp < 0, "etp", lambda i: f"{etp[i]} must be a positive integer (or 0 / absent: etp = tp)")
    E.fail(dense & (etp != 0), "etp", lambda i: f"{etp[i]} needs a mixture-of-experts model; set num_experts or drop etp")
    E.fail(tp % _safe(etp, E.ok) != 0, "etp",
           lambda i: f"{etp[i]} does not divide tp={tp[i]} (experts split over a part of the tensor-parallel group); "
                     f"use etp in {fmt_choices(divisors(tp[i]))}")
    etp_eff = np.where(etp == 0, tp, etp)
    folded = tp // _safe(etp_eff, E.ok)  # tp ranks the expert-parallel group takes besides dp (1 when etp = tp)
    E.fail(~dense & (cp > 1), "cp",
           lambda i: f"{cp[i]}: context parallelism with mixture-of-experts is not modelled; use cp=1")
    E.fail(dense & (ep != 1), "ep", lambda i: f"{ep[i]} needs a mixture-of-experts model; set num_experts or ep=1")
    E.fail(experts % _safe(ep, E.ok) != 0, "ep",
           lambda i: f"{ep[i]} does not divide num_experts={experts[i]}; use ep in {fmt_choices(divisors(experts[i]))}")
    E.fail((folded == 1) & (dp % _safe(ep, E.ok) != 0), "ep",
           lambda i: f"{ep[i]} does not divide the data-parallel size dp={dp[i]} (experts are sharded inside the dp "
                     f"group); use ep in {fmt_choices([e for e in divisors(dp[i]) if experts[i] % e == 0])}")
    E.fail((folded > 1) & ((dp * folded) % _safe(ep, E.ok) != 0), "ep",
           lambda i: f"{ep[i]} does not divide dp*tp/etp={dp[i]}*{tp[i]}/{etp_eff[i]}={dp[i] * folded[i]} (the "
                     f"expert-parallel group); use ep in "
                     f"{fmt_choices([e for e in divisors(dp[i] * folded[i]) if experts[i] % e == 0])}")
    E.fail(~dense & (tp > 1) & ~sp, "sequence_parallel",
           lambda i: "mixture-of-experts with tp > 1 needs sequence_parallel=true (as Megatron-Core)")

    resolved = dict(
        num_experts=experts, experts_per_token=top_k, moe_ffn_hidden_size=moe_ffn, shared_experts=shared,
        first_dense_layers=first_dense, ep=ep, etp=etp, moe_layer_freq=freq, capacity_factor=capacity,
        moe_imbalance=imbalance,
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, seq_len=seq, num_kv_heads=kv,
        ffn_hidden_size=ffn, vocab_size=f["vocab_size"], arch=arch, attention=attention,
        tp=tp, pp=pp, dp=dp, num_gpus=num_gpus, micro_batch=mb, global_batch=global_batch,
        sequence_parallel=sp, recompute=recompute, zero_stage=zero, schedule=schedule, vpp=vpp,
        first_stage_layers=first_l, last_stage_layers=last_l, cp=cp,
        overlap_grad_reduce=f["overlap_grad_reduce"].astype(bool), async_tp=async_tp,
        eager=f["eager"].astype(bool),
        gpu=g, gpus_per_node=gpus_per_node, intra_node_bw_GBps=intra.astype(np.float64),
        inter_node_bw_Gbps=inter.astype(np.float64), precision=prec, **figures,
    )
    resolved = {k: (v.astype(i64, copy=False) if v.dtype.kind in "iu" else v) for k, v in resolved.items()}
    return resolved, E


__all__ = ["check", "Errors", "divisors", "fmt_choices", "Arch", "Recompute", "Schedule", "ARCHS", "ATTENTIONS",
           "RECOMPUTE_MODES", "SCHEDULES", "PRECISIONS", "GPU_LIST", "UNKNOWN", "UNSET"]
