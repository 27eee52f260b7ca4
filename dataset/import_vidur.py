"""Vidur (microsoft/vidur) profiling tables: per-op `mlp.csv`, legacy `attention.csv`, network CSVs.

All times are `time_stats.<op>.median` / `.std` in ms -> s; fp16; forward only.
mlp.csv (one row per (num_tokens, tp)), with h = n_embd, d = h / n_head, f = n_expanded_embd:
  attn_pre_proj  gemm m=tokens k=h n=(n_head + 2*n_kv_head)*d/tp
  attn_post_proj gemm m=tokens k=h/tp n=h
  mlp_up_proj    gemm m=tokens k=h n=(2 if gated else 1)*f/tp
  mlp_down_proj  gemm m=tokens k=f/tp n=h
  *layernorm     norm num_elements=tokens*h
  mlp_act        elementwise tokens*f/tp (io 3 when gated: gate, up -> out)
  add            elementwise tokens*h (io 3)
  attn_rope      elementwise tokens*(n_head + n_kv_head)*d/tp
  emb            embedding tokens*h
Non-GEMM ops also record m = tokens, n = row width (e.g. h), so num_elements = m*n.
GPU from the folder: a100 -> a100-80gb, h100 -> h100-sxm, a40 -> a40.
"""
from __future__ import annotations

import math
from pathlib import Path

from vtrain.costmodel.errors import UserError
from vtrain.dataset.readers import read_csv
from vtrain.dataset.rows import ImportResult, canonical_gpu, collective_row, kernel_row, to_frame

MLP_REQUIRED = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
                "num_tensor_parallel_workers"]
ATTN_REQUIRED = ["time_stats.attn_prefill.median", "n_embd", "n_q_head", "num_tensor_parallel_workers",
                 "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill"]
NET_REQUIRED = ["num_workers", "size", "collective", "devices_per_node"]
# network folder -> (gpu, network)
NETWORKS = {"a100_dgx": ("a100-80gb", "dgx-a100"), "h100_dgx": ("h100-sxm", "dgx-h100")}
MS = 1e-3


def is_mlp(head: str) -> bool:
    return "time_stats." in head and "n_expanded_embd" in head


def is_attention(head: str) -> bool:
    return "time_stats.attn_prefill" in head


def is_network(head: str) -> bool:
    first = head.splitlines()[0] if head else ""
    return "time_stats." in first and "num_workers" in first and "collective" in first


def _gpu_folder(path: Path, anchor: str) -> str:
    """The folder after `anchor` ('compute' / 'profiling') in the path, else the 4th-from-last part."""
    parts = path.parts
    if anchor in parts[:-1]:
        return parts[parts.index(anchor) + 1]
    return parts[-4] if len(parts) >= 4 else ""


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


def _mlp_shapes(r: dict) -> dict:
    """op -> (op_class, shape kwargs, io_tensors) for one mlp.csv row."""
    tokens, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
    h, f = int(r["n_embd"]), int(r["n_expanded_embd"])
    heads, kv = int(r["n_head"]), int(r["n_kv_head"])
    d = h // heads
    gated = _truthy(r["use_gated_mlp"])
    gemm = "gemm"
    return {
        "attn_pre_proj": (gemm, dict(m=tokens, k=h, n=(heads + 2 * kv) * d // tp, batch=1), None),
        "attn_post_proj": (gemm, dict(m=tokens, k=h // tp, n=h, batch=1), None),
        "mlp_up_proj": (gemm, dict(m=tokens, k=h, n=(2 if gated else 1) * f // tp, batch=1), None),
        "mlp_down_proj": (gemm, dict(m=tokens, k=f // tp, n=h, batch=1), None),
        "input_layernorm": ("norm", dict(m=tokens, n=h, num_elements=tokens * h), None),
        "post_attention_layernorm": ("norm", dict(m=tokens, n=h, num_elements=tokens * h), None),
        "mlp_act": ("elementwise", dict(m=tokens, n=f // tp, num_elements=tokens * f // tp), 3 if gated else 2),
        "add": ("elementwise", dict(m=tokens, n=h, num_elements=tokens * h), 3),
        "attn_rope": ("elementwise", dict(m=tokens, n=(heads + kv) * d // tp, num_elements=tokens * (heads + kv) * d // tp),
                      None),
        "emb": ("embedding", dict(m=tokens, n=h, num_elements=tokens * h), None),
    }


def import_mlp(path: Path) -> ImportResult:
    """`kernels` rows (one per op per row) from a Vidur mlp.csv."""
    fmt = "vidur_mlp"
    df = read_csv(path, MLP_REQUIRED, fmt)
    folder = _gpu_folder(path, "compute")
    gpu = canonical_gpu(folder) if folder else ""
    ops = [c.split(".")[1] for c in df.columns if c.startswith("time_stats.") and c.endswith(".median")]
    source = f"vidur:{'/'.join(path.parts[-4:])}"
    rows, rejected = [], []
    for r in df.to_dict("records"):
        if any(_nan(r[c]) for c in MLP_REQUIRED):
            rejected.extend(["missing model dimension"] * len(ops))
            continue
        shapes = _mlp_shapes(r)
        for op in ops:
            if op not in shapes:
                rejected.append(f"unknown Vidur op '{op}'")
                continue
            op_class, shape, io = shapes[op]
            std = r.get(f"time_stats.{op}.std", math.nan)
            rows.append(kernel_row(source, gpu, "fp16", op_class, op, "fwd", _num(r[f"time_stats.{op}.median"]) * MS,
                                   _num(std) * MS, io_tensors=io, **shape))
    return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")}, rejected)


def import_attention(path: Path) -> ImportResult:
    """`kernels` attention rows from Vidur's legacy attention.csv: prefill rows without KV cache."""
    fmt = "vidur_attention"
    df = read_csv(path, ATTN_REQUIRED, fmt)
    gpu = canonical_gpu(_gpu_folder(path, "profiling") or path.parent.name)
    source = f"vidur:{'/'.join(path.parts[-3:])}"
    rows, rejected = [], []
    for r in df.to_dict("records"):
        if not _truthy(r["is_prefill"]) or _num(r["kv_cache_size"]) != 0:
            rejected.append("not training-like attention (decode or KV cache)")
            continue
        tp, h, q_heads = int(r["num_tensor_parallel_workers"]), int(r["n_embd"]), int(r["n_q_head"])
        std = r.get("time_stats.attn_prefill.std", math.nan)
        rows.append(kernel_row(source, gpu, "fp16", "attention", "attn_prefill", "fwd",
                               _num(r["time_stats.attn_prefill.median"]) * MS, _num(std) * MS,
                               k=h // q_heads, batch=int(r["batch_size"]), heads=q_heads // tp,
                               seq=int(r["prefill_chunk_size"])))
    return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")}, rejected)


def import_network(path: Path) -> ImportResult:
    """`collectives` rows from a Vidur network all_reduce.csv / send_recv.csv."""
    fmt = "vidur_network"
    df = read_csv(path, NET_REQUIRED, fmt)
    folder = path.parent.name
    if folder in NETWORKS:
        gpu, network = NETWORKS[folder]
    elif "_pairwise_nvlink" in folder:
        gpu, network = canonical_gpu(folder.split("_")[0]), "pairwise-nvlink"
    else:
        gpu, _, network = folder.partition("_")
        gpu = canonical_gpu(gpu)
    source = f"vidur:{folder}/{path.name}"
    rows, rejected = [], []
    for r in df.to_dict("records"):
        op = str(r["collective"]).strip()
        median = f"time_stats.{op}.median"
        if median not in r:
            raise UserError(f"{path}: missing column '{median}' for format {fmt}")
        group, per_node = int(r["num_workers"]), int(r["devices_per_node"])
        if per_node <= 0:
            rejected.append("non-positive group size")
            continue
        rows.append(collective_row(source, gpu, network, op, int(r["size"]), group, per_node, "fp16",
                                   _num(r[median]) * MS, _num(r.get(f"time_stats.{op}.std", math.nan)) * MS,
                                   num_nodes=max(1, group // per_node)))
    return ImportResult(str(path), fmt, {"collectives": to_frame(rows, "collectives")}, rejected)


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _nan(value) -> bool:
    return math.isnan(_num(value))
