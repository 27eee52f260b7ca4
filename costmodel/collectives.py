"""Collective communication times with an alpha-beta model on a two-tier network.

Tier 1: NVLink inside a node (bandwidth per GPU per direction, bytes/s).
Tier 2: InfiniBand/Ethernet across nodes (NIC bandwidth per GPU, bytes/s). A group that spans
nodes with r of its ranks in each node drives r NICs per node (NCCL runs one ring channel per
NIC; concurrent groups use disjoint NICs), so its bandwidth is min(NVLink, r * NIC).
Sizes follow the nccl-tests convention: all-gather = output bytes, reduce-scatter = input bytes.
All functions are pure array code (`xp` = numpy or jax.numpy); times in seconds.
"""
from __future__ import annotations

from vtrain.costmodel.correction import collective_adjustment

BASE_BW_EFFICIENCY = 0.75  # achieved bus bandwidth / link bandwidth (nccl-tests on DGX A100: ~0.7-0.8)
CALL_LATENCY = 30e-6  # s per collective call (kernel launch, setup and synchronisation)
ALPHA_INTRA = 4e-6  # s per ring step inside a node
ALPHA_INTER = 10e-6  # s per ring step across nodes
# (nccl-tests all-reduce on DGX A100, in-place: 1 MiB takes 45 us on 2 GPUs and 92 us on 8.)


def link(group, ranks_per_node, net: dict, xp):
    """(bandwidth in bytes/s, per-step latency in s, crosses_node 0/1) for a group of `group` ranks
    of which `ranks_per_node` share a node."""
    crosses = xp.where(group > ranks_per_node, 1.0, 0.0)
    bw = xp.where(crosses > 0, xp.minimum(net["intra_bw"], ranks_per_node * net["inter_bw"]), net["intra_bw"])
    alpha = xp.where(crosses > 0, ALPHA_INTER, ALPHA_INTRA)
    return bw, alpha, crosses


def collective_time(op_name: str, size_bytes, group, ranks_per_node, net: dict, correction, xp):
    """Time of one collective of `size_bytes` over `group` ranks (0 when group == 1)."""
    group = group * 1.0
    bw, alpha, crosses = link(group, ranks_per_node, net, xp)
    # The learned efficiency sees a group across nodes by its ranks per node (the NICs it drives), not by
    # its node count: how the time grows with more nodes is the alpha-beta model's, so more data
    # parallelism never looks faster, however far beyond the measured group sizes.
    seen_group = xp.where(crosses > 0, xp.minimum(ranks_per_node * 1.0, group), group)
    bw_eff, latency_mult = collective_adjustment(correction, op_name, size_bytes, seen_group, crosses, bw,
                                                 BASE_BW_EFFICIENCY, xp)
    eff_bw = bw * bw_eff
    alpha = alpha * latency_mult
    steps = group - 1.0
    frac = steps / xp.maximum(group, 1.0)
    call = CALL_LATENCY * latency_mult
    if op_name == "all_reduce":
        ring = 2.0 * frac * size_bytes / eff_bw + 2.0 * steps * alpha
        # NCCL switches to a tree across nodes at small sizes: log-depth latency, 2x the traffic
        tree = 2.0 * size_bytes / eff_bw + 2.0 * xp.log2(xp.maximum(group, 1.0)) * alpha
        t = call + xp.where(crosses > 0, xp.minimum(ring, tree), ring)
    elif op_name in ("all_gather", "reduce_scatter", "all_to_all"):
        t = call + frac * size_bytes / eff_bw + steps * alpha
    elif op_name == "send_recv":
        t = call + size_bytes / eff_bw + alpha
        return t  # point-to-point between two ranks: no group-size factor
    else:
        raise ValueError(f"unknown collective {op_name}")
    return xp.where(group > 1.0, t, 0.0)


def all_to_all_time(size_bytes, group, ranks_per_node, net: dict, correction, xp):
    """One all-to-all in which each of `group` ranks sends `size_bytes` (split evenly over the
    ranks). Inside a node: the ring-style alpha-beta model of `collective_time`. Across nodes each
    GPU sends the (group - r) / group of its buffer bound for other nodes through its own NIC while
    the (r - 1) / group for its node peers goes over NVLink at the same time (r = ranks_per_node):
    time = max(NVLink part, NIC part) + latency, with the analytical efficiencies (no measured
    cross-node all-to-all to learn from). 0 when group == 1."""
    group = group * 1.0
    in_node = collective_time("all_to_all", size_bytes, group, ranks_per_node, net, correction, xp)
    # The measured all-to-alls (XLA tables) are all inside one node: across nodes the learned
    # correction would extrapolate, so the analytical efficiency and latency apply there.
    bw_eff, latency_mult = BASE_BW_EFFICIENCY, 1.0
    g = xp.maximum(group, 1.0)
    nvlink = (ranks_per_node - 1.0) / g * size_bytes / (net["intra_bw"] * bw_eff)
    nic = (group - ranks_per_node) / g * size_bytes / (net["inter_bw"] * bw_eff)
    across = CALL_LATENCY * latency_mult + xp.maximum(nvlink, nic) + (group - 1.0) * ALPHA_INTER * latency_mult
    return xp.where(group > ranks_per_node, across, in_node)


def lut_allreduce_time(size_bytes, group, table: dict, xp):
    """All-reduce time from a measured table: table["sizes"] [S] bytes (ascending),
    table["times"] [G, S] seconds for group sizes table["groups"] [G]. Linear interpolation in
    size; below/above the measured range, scaled by the nearest point's time per byte plus its latency."""
    sizes, times, groups = table["sizes"], table["times"], table["groups"]
    per_group = xp.stack([xp.interp(size_bytes, sizes, times[i]) for i in range(len(groups))], axis=0)
    beyond = size_bytes > sizes[-1]
    per_group = xp.where(beyond, per_group * (size_bytes / sizes[-1]), per_group)
    pick = xp.stack([xp.where(group == g, 1.0, 0.0) for g in groups], axis=0)
    return xp.sum(per_group * pick, axis=0)
