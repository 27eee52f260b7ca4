"""Kernel and collective measurements as arrays the correction is trained on.

Rows on hardware without a preset (e.g. A40, MI210, GB200) or on topologies the two-tier model
does not describe (PCIe boards with NVLink pairs) are skipped and counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from vtrain.costmodel.correction import COLLECTIVE_OPS, OP_CLASSES
from vtrain.costmodel.hardware import lookup_gpu

UNMODELLED_NETWORKS = ("pairwise-nvlink",)
UNMODELLED_GPUS = ("v100", "cpu")  # DGX-1 hybrid cube-mesh NVLink: not the NVSwitch fabric the model assumes
# Networks whose inter-node link the source does not state: Vidur's two-node DGX runs reach ~6 GB/s
# per GPU across nodes, far below a DGX cluster's 8 x 200 Gb/s, so their cross-node rows would
# teach the model the wrong network. Their intra-node rows are kept.
UNSTATED_INTER_NODE_NETWORKS = ("dgx-a100", "dgx-h100")


@dataclass
class KernelSet:
    """Per op class: op dicts of arrays, peak FLOP/s, HBM bytes/s, measured seconds, group labels."""

    by_class: dict  # cls -> dict(op=dict, peak=array, hbm_bw=array, time=array, group=array)
    skipped: int

    @property
    def rows(self) -> int:
        return int(sum(len(v["time"]) for v in self.by_class.values()))


def kernel_shape_group(df: pd.DataFrame) -> pd.Series:
    """Grouping for held-out-shape evaluation: a GEMM's weight shape (n, k) or the source model
    of non-GEMM ops, so every size of one shape is held out together."""
    gemm_key = df["op_class"] + ":" + df["n"].astype(str) + "x" + df["k"].astype(str)
    other_key = df["op_class"] + ":" + df["source"].astype(str) + ":" + df["n"].astype(str)
    return pd.Series(np.where(df["op_class"] == "gemm", gemm_key, other_key), index=df.index)


def kernel_set(kernels: pd.DataFrame) -> KernelSet:
    """Arrays for every usable kernel row (known GPU and dtype, positive time and work)."""
    peaks, bws, attention_effs, keep = [], [], [], []
    for gpu, dtype in zip(kernels["gpu"], kernels["dtype"]):
        spec = lookup_gpu(gpu)
        ok = spec is not None and dtype in spec.peak_flops
        keep.append(ok)
        peaks.append(spec.peak_flops[dtype] if ok else np.nan)
        bws.append(spec.hbm_bw if ok else np.nan)
        attention_effs.append(spec.attention_efficiency if ok else np.nan)
    df = kernels.assign(peak=peaks, hbm_bw=bws, attention_eff=attention_effs)[np.array(keep, dtype=bool)]
    df = df[(df["time_s"] > 0) & (df["flops"] + df["bytes_moved"] > 0) & df["op_class"].isin(OP_CLASSES)]
    groups = kernel_shape_group(df)
    by_class = {}
    for cls, part in df.groupby("op_class"):
        f = lambda col: part[col].to_numpy(dtype=np.float64)
        if cls == "gemm" or cls == "attention":
            m, n, k, b = f("m"), f("n"), f("k"), np.maximum(f("batch"), 1.0)
            if cls == "attention":
                m, n, k = f("seq"), f("seq"), np.where(f("k") > 0, f("k"), 128.0)
                b = np.maximum(f("batch"), 1.0) * np.maximum(f("heads"), 1.0)
        else:
            m, n, k, b = np.maximum(f("num_elements"), 1.0), np.ones(len(part)), np.ones(len(part)), np.ones(len(part))
        op = dict(cls=cls, flops=f("flops"), bytes=f("bytes_moved"), m=m, n=n, k=k, batch=b, kernels=np.ones(len(part)))
        if cls == "attention":  # a measured attention kernel starts from its GPU's prior, as the simulator's fused op
            op["base_eff"] = f("attention_eff")
        by_class[cls] = dict(op=op, peak=f("peak"), hbm_bw=f("hbm_bw"), time=f("time_s"),
                             group=groups.loc[part.index].to_numpy())
    return KernelSet(by_class, skipped=int(len(kernels) - len(df)))


@dataclass
class CollectiveSet:
    """Per collective op: bytes, group, ranks per node, link bandwidths (bytes/s), measured seconds."""

    by_op: dict
    skipped: int

    @property
    def rows(self) -> int:
        return int(sum(len(v["time"]) for v in self.by_op.values()))


def collective_set(collectives: pd.DataFrame) -> CollectiveSet:
    intra, inter, keep = [], [], []
    for gpu, network in zip(collectives["gpu"], collectives["network"]):
        spec = lookup_gpu(gpu)
        ok = spec is not None and spec.name not in UNMODELLED_GPUS and network not in UNMODELLED_NETWORKS
        keep.append(ok)
        intra.append(spec.nvlink_GBps * 1e9 if ok else np.nan)
        inter.append(spec.nic_Gbps * 1e9 / 8.0 if ok else np.nan)
    df = collectives.assign(intra_bw=intra, inter_bw=inter)[np.array(keep, dtype=bool)]
    df = df[~(df["network"].isin(UNSTATED_INTER_NODE_NETWORKS) & (df["ranks_per_node"] < df["group_size"]))]
    df = df[(df["time_s"] > 0) & (df["bytes"] > 0) & (df["group_size"] > 1) & df["op"].isin(COLLECTIVE_OPS)]
    by_op = {}
    for op, part in df.groupby("op"):
        f = lambda col: part[col].to_numpy(dtype=np.float64)
        by_op[op] = dict(size=f("bytes"), group=f("group_size"), ranks_per_node=f("ranks_per_node"),
                         intra_bw=f("intra_bw"), inter_bw=f("inter_bw"), time=f("time_s"),
                         group_key=(part["gpu"] + ":" + part["network"] + ":" + part["group_size"].astype(str)).to_numpy())
    return CollectiveSet(by_op, skipped=int(len(collectives) - len(df)))


def _take(groups: dict, masks: dict) -> dict:
    """The rows selected by a boolean mask per group; groups left empty are dropped. Arrays nested one
    level deep (a kernel's op dict) are sliced too; other values (the op class name) are kept."""
    def cut(value, mask):
        if isinstance(value, dict):
            return {k: cut(v, mask) for k, v in value.items()}
        return value[mask] if isinstance(value, np.ndarray) else value

    return {name: cut(arrays, masks[name]) for name, arrays in groups.items() if masks[name].any()}


def take_kernels(ks: KernelSet, mask_by_class: dict) -> KernelSet:
    """Subset of a KernelSet (boolean mask per class)."""
    return KernelSet(_take(ks.by_class, mask_by_class), ks.skipped)


def take_collectives(cs: CollectiveSet, mask_by_op: dict) -> CollectiveSet:
    """Subset of a CollectiveSet (boolean mask per op)."""
    return CollectiveSet(_take(cs.by_op, mask_by_op), cs.skipped)


def _sample_masks(groups: dict, total: int, max_rows: int, seed: int) -> dict:
    """Per group, a uniform sample of about max_rows/total of its rows (deterministic for a seed);
    groups under 200 rows are kept whole so that no class or op disappears."""
    rng = np.random.default_rng(seed)
    fraction = max_rows / total
    return {name: (rng.random(len(v["time"])) < fraction) | (len(v["time"]) < 200) for name, v in groups.items()}


def subsample_kernels(ks: KernelSet, max_rows: int, seed: int) -> KernelSet:
    """At most about `max_rows` rows, sampled uniformly, keeping every class."""
    if ks.rows <= max_rows:
        return ks
    return take_kernels(ks, _sample_masks(ks.by_class, ks.rows, max_rows, seed))


def subsample_collectives(cs: CollectiveSet, max_rows: int, seed: int) -> CollectiveSet:
    """At most about `max_rows` rows, sampled uniformly, keeping every op."""
    if cs.rows <= max_rows:
        return cs
    return take_collectives(cs, _sample_masks(cs.by_op, cs.rows, max_rows, seed))
