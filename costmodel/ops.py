"""The operator graph of one transformer layer (and the first/last-stage extras), per micro-batch.

Every function here is pure array code: arguments are arrays (or scalars) of shape [N] holding
one value per configuration, and `xp` is numpy or jax.numpy. An op is a dict with:
  name, cls  (gemm | attention | softmax | norm | elementwise | embedding),
  flops      (FLOP executed on one GPU),
  bytes      (bytes moved to/from HBM at minimum, one GPU),
  m, n, k, batch (GEMM shape, out[batch,m,n] = a[batch,m,k] @ b[batch,k,n]; 1 for non-GEMMs),
  kernels    (kernel launches),
  base_eff   (optional: the op's analytical efficiency where it is not its class's BASE_EFFICIENCY).
Shapes are per GPU: tensor-parallel sharding is already applied.
"""
from __future__ import annotations

from vtrain.costmodel.hardware import DEFAULT_ATTENTION_EFFICIENCY
from vtrain.costmodel.rules import Recompute

# The op classes (the one list: the correction has one network per class, the dataset's kernel
# rows name one) and the fraction of the roofline each reaches analytically (the learned
# correction replaces it with shape- and hardware-dependent values).
BASE_EFFICIENCY = {
    "gemm": 0.70,
    "attention": DEFAULT_ATTENTION_EFFICIENCY,  # the fused FlashAttention op takes its GPU's (d.attention_eff)
    "softmax": 0.60,
    "norm": 0.60,
    "elementwise": 0.70,
    "embedding": 0.50,
}
OP_CLASSES = tuple(BASE_EFFICIENCY)

ACT_BYTES = 2.0  # activations in fp16/bf16 (fp8 runs keep bf16 activations)
# FLOP per output element of the bandwidth-bound ops. The importers count measured kernels the same
# way (dataset/rows.py), so an op's arithmetic intensity tells the efficiency network which op it is
# (a residual add and a SwiGLU move the same bytes per element but reach different bandwidths).
FLOPS_PER_ELEMENT = {"norm": 5.0, "softmax": 5.0, "rope": 3.0, "activation": 8.0, "add": 1.0, "cast": 2.0}
# PyTorch eager mode (d.eager): the extra passes over HBM (in 2-byte element units; an fp32
# intermediate counts 2) and extra kernels of the composite ATen ops, over the fused kernel the
# default assumes (Megatron's fused kernels, or torch.compile). Counted from the reference code:
# - rmsnorm: Llama's `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight` is
#   cast, pow, mean, mul, cast, mul: 18 passes in 8 kernels (with the per-token add and rsqrt)
#   against 2 in 1 (GPT's LayerNorm is one native kernel in eager mode too: nothing added);
# - rope: the complex rotation `view_as_real(view_as_complex(x.float()) * freqs).type_as(x)` is
#   cast, complex mul, cast: 14 passes in 3 kernels against 2 in 1;
# - activation: SwiGLU's silu(gate) * up is 2 kernels (5 passes against 3); GPT's bias add + GeLU is
#   2 kernels (4 against 2);
# - bias_dropout_add: GPT's bias add, dropout and residual add are 3 kernels (7.5 passes against 4.5);
#   Llama's residual add is one kernel either way.
EAGER_EXTRA = {"rmsnorm": (16.0, 7.0), "rope": (12.0, 2.0), "activation": (2.0, 1.0), "bias_dropout_add": (3.0, 1.0)}


def gemm(name, m, n, k, batch=1.0, elt_bytes=ACT_BYTES, cls="gemm", fp8=0.0):
    """A (batched) GEMM out[batch,m,n] = a[batch,m,k] @ b[batch,k,n]. `fp8` (0/1 per config): an FP8
    linear (torchao Float8Linear / Transformer Engine): 1-byte inputs, 16-bit output, the FP8 peak."""
    flops = 2.0 * batch * m * n * k
    bytes_ = elt_bytes * batch * (m * k + k * n + m * n) - fp8 * (elt_bytes - 1.0) * batch * (m * k + k * n)
    return dict(name=name, cls=cls, flops=flops, bytes=bytes_, m=m, n=n, k=k, batch=batch, kernels=1.0, fp8=fp8)


def fp8_casts(name, elements, grad_elements, tensors, grad_tensors, fp8):
    """FP8 scaling of the inputs of a group of linears (zero elements unless `fp8`): per tensor an amax
    pass (read 16-bit) and a cast pass (read 16-bit, write the FP8 copy and its transpose for the other
    GEMM), 6 bytes per element in 2 kernels; forward: activations and weights (`elements`, `tensors`);
    backward (its `bwd`): the incoming gradients."""
    op = memory_op(name, "elementwise", fp8 * elements, reads=2.0, writes=1.0, flops_per_elt=FLOPS_PER_ELEMENT["cast"],
                   kernels=2.0 * tensors)
    op["bwd"] = memory_op(name + ".bwd", "elementwise", fp8 * grad_elements, reads=2.0, writes=1.0,
                          flops_per_elt=FLOPS_PER_ELEMENT["cast"], kernels=2.0 * grad_tensors)
    return op


def memory_op(name, cls, elements, reads=1.0, writes=1.0, flops_per_elt=1.0, kernels=1.0, elt_bytes=ACT_BYTES):
    """A bandwidth-bound op touching `elements` values (reads+writes passes over them)."""
    one = elements * 0.0 + 1.0
    return dict(name=name, cls=cls, flops=flops_per_elt * elements, bytes=elt_bytes * elements * (reads + writes),
                m=elements, n=one, k=one, batch=one, kernels=kernels * one)


def layer_forward_ops(d: dict, xp) -> list[dict]:
    """Forward ops of one transformer layer for one micro-batch on one GPU.

    `d` holds arrays: hidden, heads, kv_heads, ffn, seq, micro_batch, tp, sp (0/1), llama (0/1),
    flash (0/1), eager (0/1: PyTorch eager mode's unfused norms, RoPE and activations, EAGER_EXTRA). GPT: LayerNorm, GeLU MLP, bias-dropout-add. Llama: RMSNorm, RoPE, SwiGLU MLP,
    residual adds. Attention, independent of the architecture: flash = one fused causal
    FlashAttention kernel (no s^2 tensor); unfused = Megatron's layout copies, QK^T,
    scale-mask-softmax, dropout and PV over b*a/tp*s^2 scores.
    """
    h, a, kv, f, s, b, tp = d.hidden, d.heads, d.kv_heads, d.ffn, d.seq, d.micro_batch, d.tp
    llama, gpt = d.llama, 1.0 - d.llama
    flash, unfused = d.flash, 1.0 - d.flash
    # context parallelism: s is this rank's share of the sequence; its queries attend to the whole
    # sequence's keys (ring attention: cp steps over K/V chunks; the load-balanced causal split gives
    # every rank 1/cp of the causal FLOPs)
    s_kv = s * d.cp
    head_dim = h / a
    tokens = b * s
    # Regions outside the TP-split GEMMs (norms, dropouts, residuals) are split by TP only with SP.
    sp_tokens = tokens / xp.where(d.sp > 0, tp, 1.0)
    heads_tp = a / tp
    kv_tp = xp.maximum(kv / tp, 1.0)
    qkv_n = (heads_tp + 2.0 * kv_tp) * head_dim
    mlp_n = ffn_tp = f / tp
    up_n = mlp_n * (1.0 + llama)  # SwiGLU computes gate and up projections together

    # precision=fp8: the four linears run as FP8 GEMMs with their inputs scaled and cast
    fp8 = d.fp8
    qkv_in, out_in, up_in, down_in = tokens * h, tokens * h / tp, tokens * h, tokens * ffn_tp
    casts_attn = fp8_casts("fp8_cast_attn", qkv_in + out_in + h * qkv_n + (h / tp) * h, tokens * (qkv_n + h),
                           4.0, 2.0, fp8)
    casts_mlp = fp8_casts("fp8_cast_mlp", up_in + down_in + h * up_n + ffn_tp * h, tokens * (up_n + h), 4.0, 2.0, fp8)
    # PyTorch eager mode: the unfused composite kernels' extra passes and launches (EAGER_EXTRA)
    eager = d.eager
    norm_passes, norm_kernels = eager * llama * EAGER_EXTRA["rmsnorm"][0], 1.0 + eager * llama * EAGER_EXTRA["rmsnorm"][1]
    rope_passes, rope_kernels = eager * EAGER_EXTRA["rope"][0], 1.0 + eager * EAGER_EXTRA["rope"][1]
    act_passes, act_kernels = eager * EAGER_EXTRA["activation"][0], 1.0 + eager * EAGER_EXTRA["activation"][1]
    bda_passes, bda_kernels = eager * gpt * EAGER_EXTRA["bias_dropout_add"][0], eager * gpt * EAGER_EXTRA["bias_dropout_add"][1]
    ops = [
        memory_op("input_norm", "norm", sp_tokens * h, reads=1.0, writes=1.0 + norm_passes,
                  flops_per_elt=FLOPS_PER_ELEMENT["norm"], kernels=norm_kernels),
        casts_attn,
        gemm("qkv_proj", tokens, qkv_n, h, fp8=fp8),
        # RoPE on Q and K (Llama only: zero elements for GPT)
        memory_op("rope", "elementwise", llama * tokens * (heads_tp + kv_tp) * head_dim, writes=1.0 + rope_passes,
                  flops_per_elt=FLOPS_PER_ELEMENT["rope"], kernels=rope_kernels),
        # unfused: Q/K/V and context reshaped between [s, b, heads, d] and [b*heads, s, d] (copies)
        memory_op("attn_layout", "elementwise", unfused * tokens * (qkv_n + h / tp), kernels=4.0, flops_per_elt=0.0),
        # unfused: explicit score and context batched GEMMs over (batch*heads)
        gemm("attn_scores", s * unfused + flash, s * unfused + flash, head_dim, batch=b * heads_tp * unfused + flash * 0.0,
             cls="attention"),
        memory_op("attn_softmax", "softmax", unfused * b * heads_tp * s * s, flops_per_elt=FLOPS_PER_ELEMENT["softmax"]),
        memory_op("attn_dropout", "elementwise", unfused * b * heads_tp * s * s, reads=1.0, writes=1.5),
        gemm("attn_context", s * unfused + flash, head_dim, s * unfused + flash, batch=b * heads_tp * unfused + flash * 0.0,
             cls="attention"),
        # flash: fused causal FlashAttention (half the s^2 work is masked out and skipped)
        dict(name="flash_attention", cls="attention", flops=flash * 2.0 * b * heads_tp * s * s_kv * head_dim,
             bytes=flash * ACT_BYTES * tokens * (2.0 * heads_tp + 2.0 * kv_tp) * head_dim * d.cp,
             m=s, n=s, k=head_dim, batch=flash * b * heads_tp + unfused, kernels=flash * d.cp,
             base_eff=d.attention_eff),
        gemm("attn_out_proj", tokens, h, h / tp, fp8=fp8),
        memory_op("attn_residual", "elementwise", sp_tokens * h, reads=2.0 + gpt, writes=1.0 + 0.5 * gpt + bda_passes,
                  kernels=1.0 + gpt + bda_kernels),
        memory_op("post_attn_norm", "norm", sp_tokens * h, writes=1.0 + norm_passes, flops_per_elt=FLOPS_PER_ELEMENT["norm"],
                  kernels=norm_kernels),
        casts_mlp,
        gemm("mlp_up_proj", tokens, up_n, h, fp8=fp8),
        memory_op("mlp_act", "elementwise", tokens * ffn_tp, reads=1.0 + llama, writes=1.0 + act_passes,
                  flops_per_elt=FLOPS_PER_ELEMENT["activation"], kernels=act_kernels),
        gemm("mlp_down_proj", tokens, h, ffn_tp, fp8=fp8),
        memory_op("mlp_residual", "elementwise", sp_tokens * h, reads=2.0 + gpt, writes=1.0 + 0.5 * gpt + bda_passes,
                  kernels=1.0 + gpt + bda_kernels),
    ]
    return ops


def backward_ops(fwd_ops: list[dict], xp) -> list[dict]:
    """Backward ops: each GEMM becomes a data-gradient and a weight-gradient GEMM of the same size;
    attention costs 2x (5/2x for FlashAttention, which recomputes scores); bandwidth-bound ops
    read the saved input and incoming gradient and write the outgoing gradient (about 1.5x); an op
    with its own backward (`bwd`: the FP8 casts of the incoming gradients) becomes that."""
    out = []
    for op in fwd_ops:
        if op["cls"] == "gemm":
            m, n, k, b, fp8 = op["m"], op["n"], op["k"], op["batch"], op.get("fp8", 0.0)
            out.append(gemm(op["name"] + ".dgrad", m, k, n, batch=b, fp8=fp8))
            out.append(gemm(op["name"] + ".wgrad", k, n, m, batch=b, fp8=fp8))
        elif "bwd" in op:
            out.append(op["bwd"])
        elif op["cls"] == "attention":
            scale = 2.5 if op["name"] == "flash_attention" else 2.0
            out.append({**op, "name": op["name"] + ".bwd", "flops": scale * op["flops"], "bytes": 2.0 * op["bytes"],
                        "kernels": 2.0 * op["kernels"]})
        else:
            out.append({**op, "name": op["name"] + ".bwd", "flops": 1.5 * op["flops"], "bytes": 1.5 * op["bytes"]})
    return out


SELECTIVE_RECOMPUTE_OPS = ("attn_scores", "attn_softmax", "attn_dropout", "attn_context", "flash_attention")
RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, RECOMPUTE_SELECTIVE_OP = Recompute.FULL, Recompute.SELECTIVE, Recompute.SELECTIVE_OP
RECOMPUTE_SELECTIVE_LAYER = Recompute.SELECTIVE_LAYER
LAYER_RECOMPUTE_FRACTION = 0.5  # selective-layer: every second layer fully recomputed (torchtitan's option "2")


def full_recompute_fraction(recompute, xp):
    """Fraction of the layers whose whole forward re-runs in the backward pass: 1 for full, 1/2 for
    selective-layer, else 0."""
    return xp.where(recompute == RECOMPUTE_FULL, 1.0,
                    xp.where(recompute == RECOMPUTE_SELECTIVE_LAYER, LAYER_RECOMPUTE_FRACTION, 0.0))


def selective_op_fraction(op: dict, d: dict):
    """Fraction of a forward op that torchtitan's op-level selective AC re-runs in the backward pass.
    It keeps the outputs of every second matmul of a layer (counted per layer: Llama's wq, wv, w1,
    w2; GPT's fused QKV and fc1) and of the attention kernel, and recomputes everything else: norms,
    RoPE, activations, residuals and the other matmuls (Llama: wk, wo, w3; GPT: out-proj, fc2)."""
    llama, name = d.llama, op["name"]
    if name == "qkv_proj":
        return llama * d.kv_heads / (d.heads + 2.0 * d.kv_heads)  # wk's share of the fused QKV GEMM
    if name == "attn_out_proj":
        return 1.0
    if name == "mlp_up_proj":
        return llama * 0.5  # w3 (gate w1 kept)
    if name == "mlp_down_proj":
        return 1.0 - llama
    if op["cls"] == "attention":
        return 0.0
    return 1.0


def recompute_ops(fwd_ops: list[dict], recompute, xp, d: dict | None = None) -> list[dict]:
    """Ops re-run in the backward pass: all of them for full recompute, the attention core for
    selective recompute, torchtitan's op-level choice for selective-op (needs `d`), all of them on
    half the layers for selective-layer (an average layer: every op at 1/2, its kernels launched on
    half the layers), none for none. Costs are masked, not dropped, so the list has a fixed length
    (needed under jax.jit)."""
    full = full_recompute_fraction(recompute, xp)
    selective = xp.where((recompute == RECOMPUTE_SELECTIVE) | (recompute == RECOMPUTE_FULL), 1.0, 0.0) + \
        xp.where(recompute == RECOMPUTE_SELECTIVE_LAYER, LAYER_RECOMPUTE_FRACTION, 0.0)
    by_op = xp.where(recompute == RECOMPUTE_SELECTIVE_OP, 1.0, 0.0)
    by_layer = xp.where(recompute == RECOMPUTE_SELECTIVE_LAYER, 1.0, 0.0)
    out = []
    for op in fwd_ops:
        mask = selective if op["name"] in SELECTIVE_RECOMPUTE_OPS else full
        if d is not None:
            mask = mask + by_op * selective_op_fraction(op, d)
        out.append({**op, "name": op["name"] + ".recompute", "flops": op["flops"] * mask,
                    "bytes": op["bytes"] * mask,
                    "kernels": op["kernels"] * xp.where(by_layer > 0, mask, xp.minimum(mask * 1e9, 1.0)),
                    "mask": mask})
    return out


def embedding_ops(d: dict, xp) -> list[dict]:
    """First stage: token (+ learned position for GPT) embedding lookup, forward."""
    tokens = d.micro_batch * d.seq
    return [memory_op("embedding", "embedding", tokens * d.hidden, reads=1.0 + (1.0 - d.llama), writes=1.0)]


def head_ops(d: dict, xp) -> list[dict]:
    """Last stage: final norm, vocabulary-parallel logits GEMM and the softmax cross-entropy, forward."""
    tokens = d.micro_batch * d.seq
    sp_tokens = tokens / xp.where(d.sp > 0, d.tp, 1.0)
    vocab_tp = d.vocab / d.tp
    return [
        memory_op("final_norm", "norm", sp_tokens * d.hidden, flops_per_elt=FLOPS_PER_ELEMENT["norm"]),
        gemm("logits", tokens, vocab_tp, d.hidden),
        # cross-entropy in fp32 over the logits shard: max, exp-sum, log, gradient
        memory_op("cross_entropy", "softmax", tokens * vocab_tp, reads=2.0, writes=1.0, flops_per_elt=6.0,
                  kernels=4.0, elt_bytes=4.0),
    ]


def layer_parameters(d: dict) -> object:
    """Parameters of one transformer layer (all TP ranks together)."""
    h, a, kv, f, llama = d.hidden, d.heads, d.kv_heads, d.ffn, d.llama
    head_dim = h / a
    attn = 2.0 * h * h + 2.0 * h * kv * head_dim
    mlp = (2.0 + llama) * h * f
    # GPT: two LayerNorms (4h), QKV/out-proj biases (4h), fc1/fc2 biases (f + h); Llama: two RMSNorms
    norms_biases = (1.0 - llama) * (9.0 * h + f) + llama * 2.0 * h
    return attn + mlp + norms_biases


def embedding_parameters(d: dict) -> object:
    """Input embedding (+ learned positions for GPT, one per position of the whole sequence)."""
    return d.vocab * d.hidden + (1.0 - d.llama) * (d.seq * d.cp) * d.hidden


def model_flops_per_micro_batch(d: dict, xp) -> object:
    """Useful model FLOP (forward + backward, no recompute) of one micro-batch across all GPUs
    of one pipeline (all TP ranks, all stages): the MFU numerator. MoE layers count the FLOP of
    the parameters a token activates (balanced routing)."""
    from vtrain.costmodel import moe

    one = d._replace(tp=d.tp * 0.0 + 1.0, sp=d.sp * 0.0, ep=d.ep * 0.0 + 1.0, imbalance=d.ep * 0.0 + 1.0,
                     etp=d.ep * 0.0)
    fwd = sum(op["flops"] for op in layer_forward_ops(one, xp) if op["cls"] in ("gemm", "attention"))
    # MoE layers count their active parameters: router, top-k routed experts, shared experts
    moe_ops = moe.mask_shared(moe.moe_layer_forward_ops(one, xp, lambda dd: layer_forward_ops(dd, xp)), one, xp)
    moe_fwd = sum(op["flops"] for op in moe_ops if op["cls"] in ("gemm", "attention"))
    n_moe = moe.stage_moe_layers(one, xp)["total"]
    head = 2.0 * d.micro_batch * d.seq * d.vocab * d.hidden
    # (with context parallelism the above is one cp rank's share of the micro-batch: times cp)
    return 3.0 * ((d.layers - n_moe) * fwd + n_moe * moe_fwd + head) * d.cp
