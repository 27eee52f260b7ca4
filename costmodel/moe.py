"""Mixture-of-Experts layers with expert parallelism (Megatron-Core style), as pure array code.

An MoE layer is a transformer layer whose MLP is replaced by a router, `experts` routed experts
(each an MLP of width `moe_ffn`) of which every token uses `top_k`, and optionally `shared`
shared experts (a dense MLP of width shared * moe_ffn that every token uses). The first
`dense_layers` layers stay dense (DeepSeek-V3's first_k_dense_replace); after them every
`moe_freq`-th layer is MoE (layers f + k - 1, f + 2k - 1, ...; Qwen's decoder_sparse_step; 1 = all).

Routing load: the most loaded expert-parallel rank receives `imbalance` times the balanced share of
routed tokens (capped by what one rank can receive and, with a capacity factor, by the capacity);
it sets the pace of the grouped expert GEMMs, the all-to-alls and the expert activations
(`routing_load`). Model FLOP (MFU) count balanced routing.

Parallelism (Megatron-Core; expert tensor parallel etp = tp by default): experts are sharded over
`ep` ranks, each expert's FFN over etp ranks. With etp = tp the EP ranks come from the data-parallel
group, tp apart in the rank order; with etp < tp (Megatron-Core's parallel folding: expert ranks
ordered etp, ep, expert-dp over the tp*dp GPUs of a stage) they are etp apart and may include tp
ranks, each GPU then processes etp/tp of the routed copies its tp group would at width moe_ffn/etp.
With tp > 1 sequence parallelism is required (as Megatron-Core does), so each GPU routes b*s/tp
tokens. Per MoE layer and micro-batch, forward: router GEMM, softmax + top-k, load-balancing loss,
permutation, all-to-all dispatch over ep, all-gather of the routed tokens over etp, grouped expert
GEMMs on b*s*top_k*etp/tp tokens (balanced routing), reduce-scatter over etp, all-to-all combine,
unpermutation. Backward repeats both all-to-alls. Expert gradients reduce over the
expert-data-parallel group (dp * tp / etp / ep ranks), the rest over dp.

Units: FLOP, bytes, seconds. `d` keys used: experts, top_k, moe_ffn, shared, dense_layers, ep,
moe_freq, capacity, imbalance (0 experts = a dense model: every count below is then 0), etp (0 = tp).
"""
from __future__ import annotations

from vtrain.costmodel.ops import ACT_BYTES, FLOPS_PER_ELEMENT, gemm, memory_op

SHARED_MLP_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj", "fp8_cast_mlp")


def is_moe(d: dict, xp):
    """1.0 for MoE configs, 0.0 for dense ones."""
    return xp.where(d.experts > 0, 1.0, 0.0)


def stage_moe_layers(d: dict, xp) -> dict:
    """MoE layers on the first, the most loaded middle (its layers placed last among the middle
    ones, where the MoE layers are) and the last pipeline stage (dense layers come first), the mean
    middle stage, and in the whole model. Stage layer counts: d.layers_first / _mid / _last; each
    stage's layers are taken as contiguous (as they are with vpp = 1).

    With moe_freq k > 1 a window of n layers past the dense ones holds floor(n/k) or ceil(n/k)
    MoE layers depending on where it starts; the heaviest middle stage is taken to hold
    ceil(n/k) (at most the middle stages' total), an upper bound that is exact when k divides n."""
    moe = is_moe(d, xp)
    f = d.dense_layers
    k = xp.maximum(d.moe_freq, 1.0)
    every = k <= 1.0
    lf, lm, ll = d.layers_first, d.layers_mid, d.layers_last

    def before(x):  # MoE layers among layers [0, x) for k > 1 (layers f + jk - 1, j >= 1)
        return xp.floor(xp.maximum(x - f, 0.0) / k + 1e-6)

    def count(lo, hi):  # MoE layers among layers [lo, hi) (k = 1: today's clip, bit for bit)
        return moe * xp.where(every, xp.clip(hi - xp.maximum(lo, f), 0.0, hi - lo), before(hi) - before(lo))

    middle_all = count(lf, d.layers - ll)
    window = count(d.layers - ll - lm, d.layers - ll)
    bound = xp.minimum(moe * xp.ceil(lm / k - 1e-6), middle_all)
    return dict(first=count(0.0, lf), middle=xp.where(every, window, xp.maximum(window, bound)),
                last=count(d.layers - ll, d.layers), middle_avg=middle_all / xp.maximum(d.pp - 2.0, 1.0),
                total=moe * xp.where(every, xp.maximum(d.layers - f, 0.0), before(d.layers)))


def _safe(x, xp):
    return xp.maximum(x, 1.0)


def expert_tp(d: dict, xp):
    """Ranks each expert's FFN is split over: the config's etp, or tp where it is 0."""
    return xp.where(d.etp > 0, d.etp, d.tp)


def routing_load(d: dict, xp):
    """Routed tokens of the most loaded expert-parallel rank / the balanced share (>= 1): the
    config's imbalance, capped by what one rank can receive (each token sends at most
    min(top_k, local experts) copies to it: ep * min(top_k, experts/ep) / top_k; 1 with ep = 1)
    and, with a capacity factor, by the capacity (tokens beyond it are dropped, not sent)."""
    top_k, ep = _safe(d.top_k, xp), _safe(d.ep, xp)
    most = ep * xp.minimum(top_k, _safe(d.experts, xp) / ep) / top_k
    load = xp.minimum(d.imbalance, most)
    return xp.where(d.capacity > 0, xp.minimum(load, d.capacity), load)


def routed_tokens(d: dict, xp):
    """Tokens one GPU routes per micro-batch (its sequence-parallel share) and the routed-token
    copies its local experts process (experts TP-split; times the routing load, 1 if balanced)."""
    tokens = d.micro_batch * d.seq
    t_route = tokens / d.tp
    # (etp < tp: the experts' etp group gathers etp of the tp ranks' token shares, not all tp)
    t_expert = tokens * d.top_k * routing_load(d, xp) * (expert_tp(d, xp) / d.tp)
    return t_route, t_expert


def shared_ffn(d: dict):
    return d.shared * d.moe_ffn


def moe_layer_forward_ops(d: dict, xp, layer_ops) -> list[dict]:
    """Forward ops of one MoE layer on one GPU: `layer_ops(d)` (the dense layer's op builder) with
    the shared experts as its MLP (masked out without shared experts), plus the routed part."""
    h, llama = d.hidden, d.llama
    experts = _safe(d.experts, xp)
    local_experts = experts / _safe(d.ep, xp)
    t_route, t_expert = routed_tokens(d, xp)
    per_expert = t_expert / local_experts
    ffn_tp = d.moe_ffn / expert_tp(d, xp)
    base = layer_ops(d._replace(ffn=shared_ffn(d)))
    routed = [
        gemm("router", t_route, experts, h),
        memory_op("router_softmax_topk", "softmax", t_route * experts, flops_per_elt=FLOPS_PER_ELEMENT["softmax"],
                  kernels=2.0),
        memory_op("moe_aux_loss", "elementwise", t_route * experts, reads=1.0, writes=0.1, kernels=3.0),
        memory_op("moe_permute", "elementwise", t_route * d.top_k * h, flops_per_elt=0.0, kernels=2.0),
        gemm("expert_up_proj", per_expert, ffn_tp * (1.0 + llama), h, batch=local_experts, fp8=d.fp8),
        memory_op("expert_act", "elementwise", t_expert * ffn_tp, reads=1.0 + llama, writes=1.0,
                  flops_per_elt=FLOPS_PER_ELEMENT["activation"]),
        gemm("expert_down_proj", per_expert, h, ffn_tp, batch=local_experts, fp8=d.fp8),
        memory_op("moe_unpermute", "elementwise", t_route * d.top_k * h, reads=1.0, writes=1.0 / _safe(d.top_k, xp),
                  flops_per_elt=2.0, kernels=2.0),
    ]
    return mask_shared(base, d, xp) + routed


def mask_shared(op_list: list[dict], d: dict, xp) -> list[dict]:
    """Zero the shared-expert MLP ops (and their backward) where a config has no shared experts."""
    keep = xp.where(d.shared > 0, 1.0, 0.0)
    out = []
    for op in op_list:
        if op["name"].split(".")[0] in SHARED_MLP_OPS:
            op = {**op, "flops": op["flops"] * keep, "bytes": op["bytes"] * keep, "kernels": op["kernels"] * keep}
        out.append(op)
    return out


def expert_parameters(d: dict):
    """Parameters of one routed expert (all TP ranks): gated (Llama) or GeLU (GPT, with biases)."""
    h, f, llama = d.hidden, d.moe_ffn, d.llama
    return (2.0 + llama) * h * f + (1.0 - llama) * (f + h)


def moe_layer_dense_parameters(d: dict, layer_parameters):
    """Parameters of one MoE layer outside its routed experts: attention, norms, router, shared experts."""
    no_mlp = layer_parameters(d._replace(ffn=d.ffn * 0.0)) - (1.0 - d.llama) * d.hidden
    return no_mlp + d.hidden * d.experts + d.shared * expert_parameters(d)


def expert_parameters_per_gpu(d: dict, moe_layers, xp):
    """Routed-expert parameters one GPU holds for `moe_layers` MoE layers (experts / ep, FFN / etp)."""
    return moe_layers * (d.experts / d.ep) * expert_parameters(d) / expert_tp(d, xp)


def expert_dp(d: dict, xp):
    """Ranks of the expert-data-parallel group (they hold the same experts): dp * (tp / etp) / ep."""
    return d.dp * (d.tp / expert_tp(d, xp)) / d.ep


def _a2a_balanced(d: dict, xp):
    t_route, _ = routed_tokens(d, xp)
    return ACT_BYTES * t_route * d.top_k * d.hidden


def a2a_bytes(d: dict, xp):
    """Bytes the most loaded GPU moves in one all-to-all (dispatch or combine) of one MoE layer and
    micro-batch: it sends its own tokens' routed copies and receives the routing load times as many
    (the all-to-all ends when it is done)."""
    return _a2a_balanced(d, xp) * routing_load(d, xp)


def activation_bytes(d: dict, xp, dense_full, dense_mlp):
    """Bytes one MoE layer stores per micro-batch on one GPU (no recompute): the dense layer's
    `dense_full` without its MLP part `dense_mlp`, plus the shared experts, the router's fp32
    logits and probabilities and the routing map, the permuted expert inputs, the expert
    intermediates and the expert outputs waiting for the combine."""
    h, s, b, tp, llama = d.hidden, d.seq, d.micro_batch, d.tp, d.llama
    t_route, t_expert = routed_tokens(d, xp)
    coeff = (1.0 - llama) * 4.0 + llama * 8.0  # bytes per token per FFN unit, as the dense MLP
    shared = coeff * s * b * shared_ffn(d) / tp
    router = t_route * d.experts * (2.0 * 4.0 + 1.0)
    expert_in = ACT_BYTES * t_expert * h
    expert_mid = coeff * t_expert * d.moe_ffn / expert_tp(d, xp)
    combine_in = ACT_BYTES * t_route * d.top_k * h  # on the tokens' own GPU: not scaled by the load
    return dense_full - dense_mlp + shared + router + expert_in + expert_mid + combine_in


def permutation_buffer_bytes(d: dict, xp):
    """Transient send and receive buffers of one all-to-all (held once, not per micro-batch); the
    receive buffer holds the routing load times the balanced share."""
    return (1.0 + routing_load(d, xp)) * _a2a_balanced(d, xp)
