"""Per-GPU memory in bytes: weights, gradients, optimizer states, activations, logits.

Mixed-precision Adam as in Megatron-LM: 16-bit weights (2 B/param), gradients in 16 bits for
fp16 and fp32 for bf16/fp8 (2 or 4 B/param), fp32 master weights + Adam moments (12 B/param).
ZeRO stage 1 (distributed optimizer) shards optimizer states over DP, stage 2 also gradients,
stage 3 also weights. Activations per layer follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"), generalized to any FFN width and to Llama blocks.
Pure array code.
"""
from __future__ import annotations

from vtrain.costmodel import moe
from vtrain.costmodel.ops import (ACT_BYTES, LAYER_RECOMPUTE_FRACTION, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE,
                                    RECOMPUTE_SELECTIVE_LAYER, RECOMPUTE_SELECTIVE_OP, layer_parameters)
from vtrain.costmodel.units import GiB

FRAMEWORK_BYTES = 1.5 * GiB  # CUDA context, cuBLAS/NCCL workspaces, allocator slack


def activation_bytes_per_layer(d: dict, xp):
    """Bytes of activations one layer stores for one micro-batch on one GPU: (no recompute, the part
    that selective recompute drops (the s^2 tensors of unfused attention), what torchtitan's
    selective-op recompute keeps)."""
    h, a, kv, f, s, b, tp = d.hidden, d.heads, d.kv_heads, d.ffn, d.seq, d.micro_batch, d.tp
    llama, gpt = d.llama, 1.0 - d.llama
    sbh = s * b * h
    sp_div = xp.where(d.sp > 0, tp, 1.0)
    # Replicated across TP ranks unless SP: norm inputs (2 x 2sbh), inputs of the column-parallel
    # GEMMs (2 x 2sbh), dropout masks (2 x sbh, GPT only).
    replicated = 8.0 * sbh + gpt * 2.0 * sbh
    # Split by TP: Q, K, V, attention output and MLP intermediates.
    kv_frac = kv / a
    attn_split = 2.0 * sbh * (1.0 + 2.0 * kv_frac) + 2.0 * sbh  # Q, K, V + context (out-proj input)
    # GeLU: its input and output (2 x 2sbf). SwiGLU (fused, as Megatron's and compiled torchtitan's):
    # the gate+up GEMM output (2 x 2sbf) and the gated product, fc2's input (2sbf).
    mlp_split = gpt * 4.0 * s * b * f + llama * 6.0 * s * b * f
    # unfused attention: softmax out (2), dropout mask (1), dropout out (2) per score; flash: no s^2
    # tensor, only the log-sum-exp statistics in fp32
    scores = (1.0 - d.flash) * 5.0 * a * s * s * b
    flash = d.flash * 4.0 * s * b * a
    split = attn_split + mlp_split + scores + flash
    full = replicated / sp_div + split / tp
    # selective-op keeps: the layer input and the MLP output (2 x 2sbh, SP-split), Q (Llama; GPT: the
    # fused QKV output), V, the attention output + LSE, the MLP gate (GPT: fc1) output.
    kept_split = 2.0 * sbh * (1.0 + kv_frac + gpt * kv_frac) + 2.0 * sbh + flash + 2.0 * s * b * f + scores
    selective_op = 4.0 * sbh / sp_div + kept_split / tp
    return full, scores / tp, mlp_split / tp, selective_op


def _states(params, d, xp, dp=None) -> tuple:
    """(weights, gradients, optimizer) bytes for `params` parameters on one GPU, sharded by ZeRO
    over `dp` ranks (default: the data-parallel group). ZeRO-1/2 shard the fp32 master weights +
    Adam moments (12 B/param) and then the gradients; ZeRO-3 / FSDP keeps only shards: fp32
    parameters (4), gradients (4) and Adam moments (8 B/param)."""
    zero, dp = d.zero_stage, d.dp * d.cp if dp is None else dp  # weights replicated over dp*cp ranks
    fsdp = (zero >= 3) & (dp > 1)  # over one rank ZeRO-3 shards nothing: stage 0's layout (as search treats it)
    weights = xp.where(fsdp, 4.0 * params / dp, ACT_BYTES * params)
    grads = xp.where(fsdp, 4.0 * params / dp, d.grad_bytes * params / xp.where(zero >= 2, dp, 1.0))
    optimizer = xp.where(fsdp, 8.0 * params / dp, 12.0 * params / xp.where(zero >= 1, dp, 1.0))
    return weights, grads, optimizer


def memory_per_gpu(d: dict, in_flight, layer_params, embedding_params, xp, in_flight_mid=None) -> dict:
    """Peak bytes per GPU on the most loaded pipeline stage: the first (embedding, most in-flight
    micro-batches), the heaviest middle one (uneven stages: more layers, `in_flight_mid` micro-batches
    in flight, the second stage's) or the last (output layer, fp32 logits of one micro-batch)."""
    tp, pp = d.tp, d.pp
    single = pp <= 1
    # Output layer: tied to the input embedding for GPT (a copy lives on the last stage when
    # pp > 1), a separate matrix for Llama; plus the final norm.
    head_params = xp.where(single, d.llama, 1.0) * embedding_params + 2.0 * d.hidden
    n_moe = moe.stage_moe_layers(d, xp)
    moe_dense = moe.moe_layer_dense_parameters(d, layer_parameters)

    def layers_params(count, n):  # a stage's layer parameters outside the routed experts, n of them MoE
        return (count - n) * layer_params + n * moe_dense

    params_first = (layers_params(d.layers_first, n_moe["first"]) + embedding_params
                    + xp.where(single, head_params, 0.0)) / tp
    params_mid = layers_params(d.layers_mid, n_moe["middle"]) / tp
    params_last = (layers_params(d.layers_last, n_moe["last"]) + head_params) / tp

    per_layer, attention_scores, mlp_part, selective_op = activation_bytes_per_layer(d, xp)
    per_moe_layer = moe.activation_bytes(d, xp, per_layer, mlp_part)
    sbh = d.seq * d.micro_batch * d.hidden
    sp_div = xp.where(d.sp > 0, tp, 1.0)
    stored_full_recompute = ACT_BYTES * sbh / sp_div  # only each layer's input is kept
    rec = d.recompute
    full, by_op, by_layer = rec == RECOMPUTE_FULL, rec == RECOMPUTE_SELECTIVE_OP, rec == RECOMPUTE_SELECTIVE_LAYER
    # selective-layer: the average layer, half of them storing only their input, half everything
    q = LAYER_RECOMPUTE_FRACTION
    stored = xp.where(full, stored_full_recompute,
                      xp.where(by_op, selective_op,
                               xp.where(rec == RECOMPUTE_SELECTIVE, per_layer - attention_scores,
                                        xp.where(by_layer, q * stored_full_recompute + (1.0 - q) * per_layer,
                                                 per_layer))))
    # (selective-op on an MoE layer: its dense part as for a dense layer, the routed part stored)
    stored_moe = xp.where(full, stored_full_recompute,
                          xp.where(by_op, selective_op + per_moe_layer - per_layer,
                                   xp.where(rec == RECOMPUTE_SELECTIVE, per_moe_layer - attention_scores,
                                            xp.where(by_layer, q * stored_full_recompute + (1.0 - q) * per_moe_layer,
                                                     per_moe_layer))))
    # The backward pass re-materializes what was dropped, for one layer and one micro-batch at a
    # time: full recompute the layer's activations beyond its stored input, selective-op the layer's
    # activations beyond the outputs it keeps, selective the attention scores. (Counting the whole
    # layer on top of its stored input made full exceed selective when few micro-batches are in
    # flight.) So none >= selective >= full always. The largest re-materialization among the kinds of
    # layer the stage holds counts (a dense layer's, larger than a small-expert MoE layer's, made full
    # exceed none on an all-MoE model).
    def rematerialized(per):  # (selective-layer: a fully recomputed layer's, as for full)
        return xp.where(full | by_layer, per - stored_full_recompute,
                        xp.where(by_op, per_layer - selective_op,
                                 xp.where(rec == RECOMPUTE_SELECTIVE, attention_scores, 0.0)))

    working_dense, working_moe = rematerialized(per_layer), rematerialized(per_moe_layer)
    permutation = moe.permutation_buffer_bytes(d, xp)  # MoE: one all-to-all's send + receive buffers
    # context parallelism: the K/V chunk in flight around the ring (send and receive, K and V)
    ring_buffers = xp.where(d.cp > 1, 2.0 * 2.0 * ACT_BYTES * d.seq * d.micro_batch
                            * xp.maximum(d.kv_heads / tp, 1.0) * (d.hidden / d.heads), 0.0)
    # ZeRO-3 / FSDP: the layer being computed and the prefetched next one hold unsharded 16-bit
    # weights, and one layer's unsharded fp32 gradients exist before their reduce-scatter.
    fsdp = (d.zero_stage >= 3) & (d.dp * d.cp > 1)  # one data-parallel rank: nothing to gather
    unsharded = xp.maximum(layer_params, embedding_params) / tp
    fsdp_weights = xp.where(fsdp, 2.0 * ACT_BYTES * unsharded, 0.0)
    fsdp_grads = xp.where(fsdp, 4.0 * unsharded, 0.0)
    # fp32 logits and their gradient for one micro-batch
    logits = 2.0 * 4.0 * d.seq * d.micro_batch * d.vocab / tp

    def stage(params, count, n, micro_batches, logits_bytes):
        weights, grads, optimizer = _states(params, d, xp)
        weights, grads = weights + fsdp_weights, grads + fsdp_grads
        # routed experts: experts / ep per GPU, ZeRO-sharded over the expert-data-parallel group
        e_weights, e_grads, e_optimizer = _states(moe.expert_parameters_per_gpu(d, n, xp), d, xp, moe.expert_dp(d, xp))
        weights, grads, optimizer = weights + e_weights, grads + e_grads, optimizer + e_optimizer
        has_dense, has_moe = (count - n) > 0, n > 0
        working = xp.maximum(xp.where(has_dense, working_dense, 0.0), xp.where(has_moe, working_moe, 0.0)) + \
            xp.where(has_moe, permutation, 0.0) + ring_buffers
        activations = ((count - n) * stored + n * stored_moe) * micro_batches + working
        total = weights + grads + optimizer + activations + logits_bytes + FRAMEWORK_BYTES
        return dict(weights=weights, gradients=grads, optimizer=optimizer, activations=activations,
                    logits=logits_bytes + 0.0 * total, framework=FRAMEWORK_BYTES + 0.0 * total, total=total)

    first = stage(params_first, d.layers_first, n_moe["first"], in_flight, xp.where(single, logits, 0.0))
    mid = stage(params_mid, d.layers_mid, n_moe["middle"], in_flight if in_flight_mid is None else in_flight_mid,
                0.0)
    last = stage(params_last, d.layers_last, n_moe["last"], 1.0, logits)
    use_mid = (pp > 2) & (mid["total"] > first["total"])
    peak = {key: xp.where(use_mid, mid[key], first[key]) for key in first}
    use_last = (~single) & (last["total"] > peak["total"])
    return {key: xp.where(use_last, last[key], peak[key]) for key in first}
