"""The analytical simulator: one training iteration's time, breakdown and memory per GPU.

`simulate(d, correction=None, xp=numpy)` takes `d`, a SimInput of arrays with one entry per
configuration (see `encode.py`), and returns a dict of arrays in seconds / bytes. It is pure
array code, so the same function runs on numpy (fast single predictions, no JAX import) and
under `jax.jit`, `jax.vmap` and `jax.grad` with `xp=jax.numpy`.

Kernel time = roofline time / efficiency, where the roofline time is max(FLOP / peak FLOP/s,
bytes / HBM bytes/s) and the efficiency comes from BASE_EFFICIENCY or, when a learned `correction`
is given, from its per-op-class network. Kernels are launched asynchronously by the host, so a
sequence of ops takes max(sum of kernel times, kernels launched x dispatch cost): small models
are dispatch-bound, large ones kernel-bound.
"""
from __future__ import annotations

import numpy as np

from vtrain.costmodel import moe
from vtrain.costmodel import ops as opgraph
from vtrain.costmodel.ops import BASE_EFFICIENCY  # noqa: F401 (re-exported)
from vtrain.costmodel.collectives import all_to_all_time, collective_time, lut_allreduce_time
from vtrain.costmodel.correction import global_adjustment, op_efficiencies, op_efficiency, with_trust
from vtrain.costmodel.encode import SimInput
from vtrain.costmodel.memory import memory_per_gpu
from vtrain.costmodel.pipeline import in_flight_micro_batches, pipeline_time

DISPATCH_S = 20e-6  # host time to issue one kernel from an eager framework (Python, autograd, launch), s
ADAM_BYTES_PER_PARAM = 36.0  # read grad, fp32 master, m, v; write master, m, v, 16-bit weight; norm pass
ADAM_KERNELS = 8.0
BREAKDOWN_KEYS = ("compute", "tp_comm", "pp_comm", "ep_comm", "cp_comm", "fsdp_comm", "dp_comm", "bubble",
                  "optimizer", "overhead")


def roofline_time(op: dict, peak_flops, hbm_bw, xp):
    """Seconds of the op at the roofline: max(FLOP / peak FLOP/s, bytes / HBM bytes/s)."""
    return xp.maximum(op["flops"] / peak_flops, op["bytes"] / hbm_bw)


def kernel_time(op: dict, peak_flops, hbm_bw, correction, xp):
    """Seconds the op's kernels occupy the GPU: roofline time / efficiency."""
    roofline = roofline_time(op, peak_flops, hbm_bw, xp)
    hw = dict(peak_flops=peak_flops, hbm_bw=hbm_bw)
    return roofline / op_efficiency(correction, op, base_efficiency(op), hw, xp)


def base_efficiency(op: dict):
    """The op's analytical efficiency: its own `base_eff` (the fused attention's GPU prior) or its
    class's BASE_EFFICIENCY."""
    return op.get("base_eff", BASE_EFFICIENCY[op["cls"]])


def op_peak(op: dict, hw: dict, xp):
    """FLOP/s peak an op runs at: an FP8 linear at the FP8 peak, other GEMMs at the run's precision's
    peak (16-bit in an FP8 run: the logits and the router stay bf16), everything else at the 16-bit peak."""
    if op["cls"] != "gemm":
        return hw["peak_flops_16"]
    return xp.where(op.get("fp8", 0.0) > 0, hw["peak_flops"], hw["peak_flops_gemm16"])


def op_times(op_list: list[dict], hw: dict, correction, xp) -> list:
    """Seconds each op's kernels occupy the GPU (at op_peak): kernel_time of each op."""
    return op_times_many([op_list], hw, correction, xp)[0]


def op_times_many(op_lists: list[list[dict]], hw: dict, correction, xp) -> list[list]:
    """op_times of several op lists at once (the same values): each op class's efficiency network runs
    once over that class's ops from all the lists (correction.op_efficiencies), not once per op."""
    flat = [op for op_list in op_lists for op in op_list]
    peaks = [op_peak(op, hw, xp) for op in flat]
    effs = [None] * len(flat)
    for cls in dict.fromkeys(op["cls"] for op in flat):
        idx = [i for i, op in enumerate(flat) if op["cls"] == cls]
        hws = [dict(peak_flops=peaks[i], hbm_bw=hw["hbm_bw"]) for i in idx]
        ops_of_class = [flat[i] for i in idx]
        bases = [base_efficiency(op) for op in ops_of_class]
        for i, eff in zip(idx, op_efficiencies(correction, ops_of_class, bases, hws, xp)):
            effs[i] = eff
    times = [roofline_time(op, peak, hw["hbm_bw"], xp) / eff for op, peak, eff in zip(flat, peaks, effs)]
    out, start = [], 0
    for op_list in op_lists:
        out.append(times[start:start + len(op_list)])
        start += len(op_list)
    return out


def sequence_time(op_list: list[dict], times: list, xp):
    """Seconds for a sequence of ops whose kernel times are `times`: the GPU's kernel time or the
    host's dispatch time, whichever is longer (launches are asynchronous)."""
    gpu = 0.0
    launches = 0.0
    for op, t in zip(op_list, times):
        gpu = gpu + t
        launches = launches + op["kernels"] * xp.where(op["bytes"] > 0, 1.0, 0.0)
    return xp.maximum(gpu, launches * DISPATCH_S)


def _tp_comm_per_layer(d, net, correction, xp):
    """TP collectives of one layer, one micro-batch, one direction (forward or backward):
    2 all-reduces of the layer output, or with SP 2 all-gathers + 2 reduce-scatters. Returns
    (seconds, one SP all-gather's seconds, one SP reduce-scatter's seconds)."""
    size = opgraph.ACT_BYTES * d.micro_batch * d.seq * d.hidden
    tp_per_node = xp.minimum(d.tp, d.gpus_per_node)
    ar = _allreduce(size, d.tp, tp_per_node, net, correction, xp)
    ag = collective_time("all_gather", size, d.tp, tp_per_node, net, correction, xp)
    rs = collective_time("reduce_scatter", size, d.tp, tp_per_node, net, correction, xp)
    return xp.where(d.sp > 0, 2.0 * (ag + rs), 2.0 * ar), ag, rs


def _tp_async_per_layer(d, ag, rs, gemm_time: dict, xp):
    """Exposed seconds of one layer's SP collectives in one direction under async TP (`ag`, `rs`: one
    all-gather's / reduce-scatter's seconds): per (collective, GEMM) pair, the first of tp chunks plus
    the excess of the other chunks over the GEMM's."""
    rest = (d.tp - 1.0) / d.tp

    def pair(comm, gemm):
        return comm / d.tp + xp.maximum(comm - gemm, 0.0) * rest

    return (pair(ag, gemm_time["qkv_proj"]) + pair(rs, gemm_time["attn_out_proj"]) + pair(ag, gemm_time["mlp_up_proj"])
            + pair(rs, gemm_time["mlp_down_proj"]))


def fsdp_unit_ops(params, d, dpc, tp) -> list[dict]:
    """The ops of one FSDP unit of `params` parameters (all TP ranks) sharded over `dpc` ranks: on the
    comm stream the fp32 shard's cast to 16 bits before a gather and the 16-bit gradients' copy (cast
    to the reduce dtype) into the reduce-scatter buffer; on the compute stream the gathered buffer's
    copy-out into the layer's parameters."""
    unsharded = params / tp
    return [opgraph.memory_op("fsdp_shard_cast", "elementwise", unsharded / dpc, reads=2.0, writes=1.0,
                              flops_per_elt=0.0),
            opgraph.memory_op("fsdp_grad_copy_in", "elementwise", unsharded, reads=1.0,
                              writes=d.grad_bytes / opgraph.ACT_BYTES, flops_per_elt=0.0),
            opgraph.memory_op("fsdp_copy_out", "elementwise", unsharded, flops_per_elt=0.0)]


def _allreduce(size, group, ranks_per_node, net, correction, xp):
    modelled = collective_time("all_reduce", size, group, ranks_per_node, net, correction, xp)
    table = net.get("allreduce_table")
    if table is None:
        return modelled
    measured = sum(xp.where(group == g, 1.0, 0.0) for g in table["groups"]) > 0  # only measured group sizes
    in_node = (group <= ranks_per_node) & measured
    return xp.where(in_node, lut_allreduce_time(size, group, table, xp), modelled)


def simulate(d: SimInput, correction: dict | None = None, xp=np, allreduce_table: dict | None = None,
             moe_layers: bool | None = None) -> dict:
    """Iteration time (s), its breakdown (s), model FLOP and memory per GPU (bytes) per config.

    `moe_layers`: whether any config of `d` may have MoE layers; False skips the MoE layers' ops and
    collectives (the same results for dense configs: each of those terms is multiplied by their zero
    MoE layer count or MoE mask). None: decided from `d` in numpy, True under jax (traced values)."""
    if moe_layers is None:
        moe_layers = xp is not np or bool(np.any(d.experts > 0))
    hw = dict(peak_flops=d.peak_flops, peak_flops_16=d.peak_flops_16, hbm_bw=d.hbm_bw,
              peak_flops_gemm16=xp.where(d.fp8 > 0, d.peak_flops_16, d.peak_flops))
    net = dict(intra_bw=d.intra_bw, inter_bw=d.inter_bw, allreduce_table=allreduce_table)
    tp, pp, dp, vpp = d.tp, d.pp, d.dp, d.vpp
    m = d.num_micro_batches

    correction = with_trust(correction, d, xp)  # fades the learned terms outside the training runs
    factor, overhead_per_mb = global_adjustment(correction, d, xp)

    # --- compute per layer and micro-batch ---
    fwd = opgraph.layer_forward_ops(d, xp)
    bwd = opgraph.backward_ops(fwd, xp)
    rec = opgraph.recompute_ops(fwd, d.recompute, xp, d)
    emb = opgraph.embedding_ops(d, xp)
    emb = emb + opgraph.backward_ops(emb, xp)
    head = opgraph.head_ops(d, xp)
    head = head + opgraph.backward_ops(head, xp)
    # MoE layers (zero of them for dense models; skipped without moe_layers): the same attention,
    # shared experts as the MLP, and the routed experts (costmodel/moe.py)
    n_moe = moe.stage_moe_layers(d, xp)
    moe_fwd = moe.moe_layer_forward_ops(d, xp, lambda dd: opgraph.layer_forward_ops(dd, xp)) if moe_layers else []
    moe_bwd = moe.mask_shared(opgraph.backward_ops(moe_fwd, xp), d, xp)
    moe_rec = opgraph.recompute_ops(moe_fwd, d.recompute, xp, d)
    # ZeRO-3 / FSDP units (see below): a dense layer, an MoE layer's non-expert part, the root units
    layer_params = opgraph.layer_parameters(d)
    embedding_params = opgraph.embedding_parameters(d)
    moe_dense_params = moe.moe_layer_dense_parameters(d, opgraph.layer_parameters)
    single = pp <= 1
    dpc = dp * d.cp  # weights are replicated over the cp ranks too: ZeRO shards over dp*cp ranks, tp apart
    # the root unit (embedding on the first stage; output layer on the last; both with pp = 1)
    head_params = xp.where(single, d.llama, 1.0) * embedding_params
    fsdp_params = dict(dense=layer_params, first=embedding_params + xp.where(single, head_params, 0.0),
                       last=head_params, **(dict(moe=moe_dense_params) if moe_layers else {}))
    fsdp_ops = {k: fsdp_unit_ops(v, d, dpc, tp) for k, v in fsdp_params.items()}

    # every op's kernel time in one evaluation per op class of the correction
    fwd_times, bwd_times, emb_times, head_times, moe_fwd_times, moe_bwd_times, *fsdp_times = op_times_many(
        [fwd, bwd, emb, head, moe_fwd, moe_bwd, *fsdp_ops.values()], hw, correction, xp)
    fsdp_times = dict(zip(fsdp_ops, fsdp_times))
    t_fwd = sequence_time(fwd, fwd_times, xp)
    # A recomputed op is its forward op again, or nothing (masked): reuse the forward kernel times
    # instead of evaluating the correction networks a third time per op.
    # (A partly recomputed op, e.g. one of the fused QKV projections under selective-op, takes its share.)
    rec_times = [t * r["mask"] for t, r in zip(fwd_times, rec)]
    t_bwd = sequence_time(bwd, bwd_times, xp) + sequence_time(rec, rec_times, xp)
    t_emb = sequence_time(emb, emb_times, xp)
    t_head = sequence_time(head, head_times, xp)
    moe_rec_times = [t * r["mask"] for t, r in zip(moe_fwd_times, moe_rec)]
    t_moe_fwd = sequence_time(moe_fwd, moe_fwd_times, xp)
    t_moe_bwd = sequence_time(moe_bwd, moe_bwd_times, xp) + sequence_time(moe_rec, moe_rec_times, xp)
    t_moe = t_moe_fwd + t_moe_bwd

    # --- tensor-parallel communication ---
    tp_layer, sp_gather, sp_scatter = _tp_comm_per_layer(d, net, correction, xp)
    full_recompute = opgraph.full_recompute_fraction(d.recompute, xp)
    # async TP: each SP all-gather / reduce-scatter runs in tp chunks under the GEMM it feeds / follows
    # (QKV, out-proj, MLP up, MLP down; the backward's data-gradient GEMMs likewise): the first chunk
    # and whatever outlasts the GEMM stay exposed
    gemm_time = {op["name"]: t for op, t in zip(fwd, fwd_times)}
    tp_async = _tp_async_per_layer(d, sp_gather, sp_scatter, gemm_time, xp)
    tp_layer = xp.where(d.async_tp > 0, tp_async, tp_layer)
    tp_per_layer = tp_layer * (2.0 + full_recompute)  # forward, backward, (forward again)
    tp_per_node = xp.minimum(tp, d.gpus_per_node)
    # vocabulary-parallel embedding all-reduce (fwd) and cross-entropy statistics (3 fp32 per token)
    emb_size = opgraph.ACT_BYTES * d.micro_batch * d.seq * d.hidden
    tp_emb = _allreduce(emb_size, tp, tp_per_node, net, correction, xp)
    tp_head = 3.0 * _allreduce(4.0 * d.micro_batch * d.seq, tp, tp_per_node, net, correction, xp)

    # --- context-parallel ring attention: cp - 1 point-to-point steps per layer pass, each step's
    # K/V chunk transfer (forward; K, V, dK, dV backward) overlapped with that step's attention
    # compute (1/cp of the rank's attention): only the excess is exposed. The forward ring runs again
    # wherever the attention is recomputed. cp ranks are tp apart (rank order tp, cp, dp, pp).
    flash_i = [op["name"] for op in fwd].index("flash_attention")
    t_attn = fwd_times[flash_i]
    kv_chunk = 2.0 * opgraph.ACT_BYTES * d.micro_batch * d.seq * xp.maximum(d.kv_heads / tp, 1.0) * \
        (d.hidden / d.heads)
    cp_per_node = xp.clip(d.gpus_per_node / tp, 1.0, d.cp)
    ring_ranks_per_node = xp.where(d.cp > cp_per_node, 1.0, 2.0)
    ring_fwd = collective_time("send_recv", kv_chunk, 2.0, ring_ranks_per_node, net, correction, xp)
    ring_bwd = collective_time("send_recv", 2.0 * kv_chunk, 2.0, ring_ranks_per_node, net, correction, xp)
    steps = d.cp - 1.0
    exposed_fwd = steps * xp.maximum(ring_fwd - t_attn / d.cp, 0.0)
    exposed_bwd = steps * xp.maximum(ring_bwd - 2.5 * t_attn / d.cp, 0.0)
    cp_per_layer = xp.where(d.cp > 1, exposed_fwd * (1.0 + rec[flash_i]["mask"]) + exposed_bwd, 0.0)

    # --- pipeline point-to-point (activations forward, gradients backward) ---
    # Ranks are ordered tp, cp, dp, pp: neighbouring stages are tp*cp*dp ranks apart.
    p2p_size = opgraph.ACT_BYTES * d.micro_batch * d.seq * d.hidden / tp
    stage_stride = tp * d.cp * dp
    p2p_ranks_per_node = xp.where(stage_stride >= d.gpus_per_node, 1.0, 2.0)
    p2p = collective_time("send_recv", p2p_size, 2.0, p2p_ranks_per_node, net, correction, xp)
    pp_per_mb = xp.where(pp > 1, 2.0 * p2p * vpp, 0.0)

    # --- expert-parallel all-to-all (dispatch + combine, forward and backward, again with full
    # recompute) and the all-gather / reduce-scatter of the routed tokens over the tp ranks ---
    moe_mask = moe.is_moe(d, xp)
    etp = moe.expert_tp(d, xp)  # (= tp unless the config sets etp)
    ep_per_node = xp.clip(d.gpus_per_node / etp, 1.0, d.ep)  # EP ranks are etp apart
    a2a = all_to_all_time(moe.a2a_bytes(d, xp), d.ep, ep_per_node, net, correction, xp) if moe_layers else 0.0
    ep_per_layer = moe_mask * 2.0 * a2a * (2.0 + full_recompute)
    # (on the experts' side: the routing load times the balanced routed tokens, gathered over the etp
    # ranks that split each expert)
    routed_size = opgraph.ACT_BYTES * d.micro_batch * d.seq * d.top_k * d.hidden * moe.routing_load(d, xp) * \
        (etp / tp)
    etp_per_node = xp.minimum(etp, d.gpus_per_node)
    moe_tp = collective_time("all_gather", routed_size, etp, etp_per_node, net, correction, xp) + \
        collective_time("reduce_scatter", routed_size, etp, etp_per_node, net, correction, xp) if moe_layers else 0.0
    # the shared experts keep the layer's own TP communication
    tp_moe_layer = tp_per_layer + moe_mask * moe_tp * (2.0 + full_recompute)

    # --- ZeRO-3 / FSDP (PyTorch FSDP2 as torchtitan runs it, DeepSpeed ZeRO-3 alike): every layer's
    # 16-bit weights are all-gathered over the dp*cp ranks before its forward and again before its
    # backward, its gradients reduce-scattered after the backward, per micro-batch. Each gather is
    # prefetched during the previous layer's compute, so a layer's comm is exposed only beyond its
    # own compute; the first gather and the last reduce-scatter of a micro-batch hide behind nothing.
    # On the comm stream: the fp32 shard's cast to 16 bits before a gather and the 16-bit gradients'
    # copy (cast to the fp32 reduce dtype) into the reduce-scatter buffer; on the compute stream the
    # gathered buffer's copy-out into the layer's parameters (FSDP2's all-gather copy-out), each pass.
    # (the units' ops and parameters: above, with the other kernel times)
    dp_per_node = xp.clip(d.gpus_per_node / tp, 1.0, dpc)
    fsdp = xp.where((d.zero_stage >= 3) & (dpc > 1), 1.0, 0.0)

    def fsdp_unit(unit):
        """(gather, reduce-scatter, copy-out) seconds of FSDP unit `unit` (a key of fsdp_params): the
        comm-stream chains and the compute-stream copy of one pass."""
        unsharded = fsdp_params[unit] / tp
        (cast, grad_copy, copy_out), (t_cast, t_grad_copy, t_copy_out) = fsdp_ops[unit], fsdp_times[unit]
        gather = sequence_time([cast], [t_cast], xp) + collective_time(
            "all_gather", opgraph.ACT_BYTES * unsharded, dpc, dp_per_node, net, correction, xp)
        scatter = sequence_time([grad_copy], [t_grad_copy], xp) + collective_time(
            "reduce_scatter", d.grad_bytes * unsharded, dpc, dp_per_node, net, correction, xp)
        return gather, scatter, sequence_time([copy_out], [t_copy_out], xp)

    def fsdp_exposed(unit, t_f, t_b):
        """Exposed FSDP seconds of one layer and micro-batch with forward / backward compute t_f, t_b."""
        gather, scatter, copy_out = unit
        return fsdp * (xp.maximum(gather - t_f, 0.0) + xp.maximum(gather + scatter - t_b, 0.0) + 2.0 * copy_out)

    dense_unit = fsdp_unit("dense")
    fsdp_dense = fsdp_exposed(dense_unit, t_fwd, t_bwd)
    fsdp_moe = fsdp_exposed(fsdp_unit("moe"), t_moe_fwd, t_moe_bwd) if moe_layers else 0.0
    fsdp_edges = fsdp * (dense_unit[0] + dense_unit[1])
    # the root units (embedding on the first stage; output layer on the last; both with pp = 1):
    # gathered once at the start of the micro-batch's forward, reduce-scattered at the end of its backward

    def fsdp_root(unit):
        gather, scatter, copy_out = fsdp_unit(unit)
        return fsdp * (gather + scatter + copy_out)

    fsdp_first = fsdp_root("first")
    fsdp_last = fsdp_root("last")

    def stage_layers(count, n):
        """Compute, TP, EP, CP and FSDP seconds of a stage's `count` layers (n MoE layers, the rest dense)."""
        dense = count - n
        return (dense * (t_fwd + t_bwd) + n * t_moe, dense * tp_per_layer + n * tp_moe_layer, n * ep_per_layer,
                count * cp_per_layer, dense * fsdp_dense + n * fsdp_moe + fsdp_edges)

    # uneven stages: the first, the heaviest middle and the last GPU's own layer counts
    c_first, tp_first, ep_first, cp_first, fs_first = stage_layers(d.layers_first, n_moe["first"])
    c_mid, tp_mid, ep_mid, cp_mid, fs_mid = stage_layers(d.layers_mid, n_moe["middle"])
    c_last, tp_last, ep_last, cp_last, fs_last = stage_layers(d.layers_last, n_moe["last"])
    c_avg, tp_avg, ep_avg, cp_avg, fs_avg = stage_layers(d.layers_mid_avg, n_moe["middle_avg"])
    first = dict(compute=c_first + t_emb + xp.where(single, t_head, 0.0),
                 tp_comm=tp_first + tp_emb + xp.where(single, tp_head, 0.0), pp_comm=pp_per_mb, ep_comm=ep_first,
                 cp_comm=cp_first, fsdp_comm=fs_first + fsdp_first)
    middle = dict(compute=c_mid, tp_comm=tp_mid, pp_comm=pp_per_mb, ep_comm=ep_mid, cp_comm=cp_mid, fsdp_comm=fs_mid)
    last = dict(compute=c_last + t_head, tp_comm=tp_last + tp_head, pp_comm=pp_per_mb, ep_comm=ep_last,
                cp_comm=cp_last, fsdp_comm=fs_last + fsdp_last)
    middle_avg = dict(compute=c_avg, tp_comm=tp_avg, pp_comm=pp_per_mb, ep_comm=ep_avg, cp_comm=cp_avg,
                      fsdp_comm=fs_avg)
    pipe = pipeline_time(first, middle, last, m, pp, vpp, xp, middle_avg)

    # --- data-parallel gradient reduction and optimizer ---
    # largest stage (the first with the embedding, or a middle one with more layers); MoE layers count
    # their non-expert parameters here
    stage_params = ((d.layers_first - n_moe["first"]) * layer_params + n_moe["first"] * moe_dense_params
                    + embedding_params) / tp
    mid_params = xp.where(pp > 2, ((d.layers_mid - n_moe["middle"]) * layer_params
                                   + n_moe["middle"] * moe_dense_params) / tp, 0.0)
    stage_params = xp.maximum(stage_params, mid_params)
    grad_size = d.grad_bytes * stage_params
    # gradients reduce (and ZeRO shards) over dp*cp ranks, tp apart
    allreduce = _allreduce(grad_size, dpc, dp_per_node, net, correction, xp)
    sharded = collective_time("reduce_scatter", grad_size, dpc, dp_per_node, net, correction, xp) + \
        collective_time("all_gather", opgraph.ACT_BYTES * stage_params, dpc, dp_per_node, net, correction, xp)
    # (ZeRO-3 / FSDP gathers and reduce-scatters layer by layer instead: fsdp_comm above)
    t_dp = xp.where(fsdp > 0, 0.0, xp.where(d.zero_stage >= 1, sharded, allreduce))
    # Expert gradients (of the stage holding the most MoE layers) reduce over the expert-data-
    # parallel group: dp / ep ranks, ep * tp apart in the rank order.
    moe_most = xp.maximum(n_moe["first"], xp.maximum(xp.where(pp > 2, n_moe["middle"], 0.0), n_moe["last"]))
    expert_params = moe.expert_parameters_per_gpu(d, moe_most, xp)
    edp = moe.expert_dp(d, xp)
    edp_per_node = xp.clip(d.gpus_per_node / (etp * d.ep), 1.0, edp)
    expert_grad = d.grad_bytes * expert_params
    if moe_layers:
        expert_allreduce = _allreduce(expert_grad, edp, edp_per_node, net, correction, xp)
        expert_sharded = collective_time("reduce_scatter", expert_grad, edp, edp_per_node, net, correction, xp) + \
            collective_time("all_gather", opgraph.ACT_BYTES * expert_params, edp, edp_per_node, net, correction, xp)
    else:
        expert_allreduce = expert_sharded = 0.0
    t_dp = t_dp + moe_mask * xp.where(d.zero_stage >= 1, expert_sharded, expert_allreduce)
    # With overlap, gradient reduction hides behind the last micro-batch's backward pass.
    overlap_window = xp.where(d.overlap > 0, d.layers_first * t_bwd, 0.0)
    dp_comm = xp.maximum(t_dp - overlap_window, 0.05 * t_dp * d.overlap)

    optimizer_params = stage_params / xp.where(d.zero_stage >= 1, dpc, 1.0) + \
        expert_params / xp.where(d.zero_stage >= 1, edp, 1.0)
    optimizer = ADAM_BYTES_PER_PARAM * optimizer_params / (BASE_EFFICIENCY["elementwise"] * d.hbm_bw) + \
        ADAM_KERNELS * DISPATCH_S

    breakdown = dict(compute=pipe["compute"], tp_comm=pipe["tp_comm"], pp_comm=pipe["pp_comm"],
                     ep_comm=pipe["ep_comm"], cp_comm=pipe["cp_comm"], fsdp_comm=pipe["fsdp_comm"], dp_comm=dp_comm,
                     bubble=pipe["bubble"], optimizer=optimizer, overhead=m * overhead_per_mb)
    breakdown = {k: v * factor for k, v in breakdown.items()}
    iteration = sum(breakdown[k] for k in BREAKDOWN_KEYS)

    in_flight = in_flight_micro_batches(m, pp, vpp, d.schedule, xp)
    in_flight_mid = in_flight_micro_batches(m, pp, vpp, d.schedule, xp, stage=1.0)
    memory = memory_per_gpu(d, in_flight, layer_params, embedding_params, xp, in_flight_mid)
    model_flops = m * dp * opgraph.model_flops_per_micro_batch(d, xp)
    mfu = model_flops / (iteration * d.num_gpus * d.peak_flops)
    tokens = d.global_batch * (d.seq * d.cp)  # d.seq: one cp rank's share of a sequence
    return dict(iteration_time_s=iteration, breakdown=breakdown, memory=memory, model_flops=model_flops,
                mfu=mfu, tokens_per_s=tokens / iteration, fits_memory=memory["total"] <= d.hbm_bytes)
