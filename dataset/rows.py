"""Row builders for the three tables (with derived FLOP/byte counts), and row validation.

FLOP and byte conventions (documented in docs/dataset.md), with e = dtype bytes:
- gemm out[b,m,n] = a[b,m,k] @ b[b,k,n]: fwd flops 2*b*m*n*k, bytes e*b*(m*k + k*n + m*n); bwd (both
  gradient GEMMs, dA and dB) flops 4*b*m*n*k, bytes e*b*(2*m*k + 2*k*n + m*n).
- attention (causal, k = head_dim): fwd flops 2*b*h*s*s*d (half of the full 4*b*h*s^2*d), bytes
  e*4*b*h*s*d (q, k, v, out); bwd flops 2x fwd, bytes e*8*b*h*s*d.
- norm / softmax / elementwise / embedding over N = num_elements: bytes e*N*io where io = 2 in the
  forward (read, write) and 3 in the backward (read input and grad, write grad) unless given;
  flops per element as the simulator's op graph counts them (costmodel/ops.py FLOPS_PER_ELEMENT): 5 for
  norm and softmax; for elementwise ops by name, 8 for activations (mlp_act, gelu, silu), 3 for rotary
  embeddings (attn_rope, rope), 1 otherwise (add); 0 for embedding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.ops import FLOPS_PER_ELEMENT
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.dataset.schema import (BW_CONVENTIONS, COLLECTIVE_OPS, DIRECTIONS, DTYPE_BYTES, DTYPES, OP_CLASSES,
                                   TIME_COLUMN, columns)


@dataclass
class ImportResult:
    """What one source file produced: rows per table and one reason per rejected row."""

    file: str
    format: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def rows(self) -> int:
        return sum(len(df) for df in self.tables.values())


def canonical_gpu(name: str) -> str:
    """The GPU preset name for `name` when known, else `name` lower-case."""
    gpu = lookup_gpu(name)
    return gpu.name if gpu else str(name).strip().lower()


def guess_gpu(device: str) -> str:
    """A GPU preset name from a device name ('NVIDIA A100-SXM4-80GB' -> 'a100-80gb', 'NVIDIA H200' ->
    'h200'), trying ever shorter dash-joined word prefixes; else the name lower-case."""
    name = device.strip().lower().removeprefix("nvidia").strip()
    words = name.replace(" ", "-").split("-")
    for count in range(len(words), 0, -1):
        gpu = lookup_gpu("-".join(words[:count]))
        if gpu:
            return gpu.name
    return name


# Elementwise op names (Vidur, LLMCompass, the profiler) -> the op graph's FLOP-per-element entry.
ELEMENTWISE_KIND = {"mlp_act": "activation", "gelu": "activation", "silu": "activation", "swiglu": "activation",
                    "attn_rope": "rope", "rope": "rope", "add": "add"}


def flops_per_element(op_class: str, op_name: str) -> float:
    """FLOP per element of a bandwidth-bound kernel (0 for embedding lookups)."""
    if op_class == "elementwise":
        return FLOPS_PER_ELEMENT[ELEMENTWISE_KIND.get(op_name, "add")]
    return FLOPS_PER_ELEMENT.get(op_class, 0.0)


def kernel_row(source: str, gpu: str, dtype: str, op_class: str, op_name: str, direction: str, time_s: float,
               time_std_s: float = math.nan, repeats: int = 0, m: int = 0, n: int = 0, k: int = 0,
               batch: int = 0, heads: int = 0, seq: int = 0, num_elements: int = 0,
               io_tensors: int | None = None) -> dict:
    """One `kernels` row; flops and bytes_moved follow the module docstring. Times in seconds."""
    e = DTYPE_BYTES.get(dtype, 0)
    b = max(batch, 1)
    if op_class == "gemm":
        both = 1 if direction == "fwd" else 2
        flops = 2.0 * both * b * m * n * k
        moved = float(e * b * (both * (m * k + k * n) + m * n))
    elif op_class == "attention":
        fwd = 2.0 * b * heads * seq * seq * k
        flops = fwd if direction == "fwd" else 2 * fwd
        moved = float(e * (4 if direction == "fwd" else 8) * b * heads * seq * k)
    else:
        io = io_tensors if io_tensors is not None else (2 if direction == "fwd" else 3)
        flops = flops_per_element(op_class, op_name) * num_elements
        moved = float(e * num_elements * io)
    return dict(source=source, gpu=gpu, dtype=dtype, op_class=op_class, op_name=op_name, direction=direction,
                m=m, n=n, k=k, batch=batch, heads=heads, seq=seq, num_elements=num_elements, flops=flops,
                bytes_moved=moved, time_s=float(time_s), time_std_s=float(time_std_s), repeats=repeats)


def collective_row(source: str, gpu: str, network: str, op: str, bytes_: int, group_size: int,
                   ranks_per_node: int, dtype: str, time_s: float, time_std_s: float = math.nan,
                   bw_convention: str = "none", num_nodes: int | None = None) -> dict:
    """One `collectives` row. `bytes_` = full logical buffer per rank; times in seconds."""
    if num_nodes is None:
        num_nodes = max(1, -(-group_size // max(ranks_per_node, 1)))
    return dict(source=source, gpu=gpu, network=network, op=op, bytes=int(bytes_), group_size=int(group_size),
                ranks_per_node=int(ranks_per_node), num_nodes=int(num_nodes), dtype=dtype, time_s=float(time_s),
                time_std_s=float(time_std_s), bw_convention=bw_convention)


def run_row(values: dict, iteration_time_s: float, source: str, interconnect: str = "") -> dict:
    """One `runs` row: `values` (canonical fields) validated and completed by `build_config`.

    Raises ConfigError (its message is the rejection reason) for an impossible config.
    """
    flat = build_config(values).flat()
    return {**flat, "iteration_time_s": float(iteration_time_s), "interconnect": interconnect, "source": source}


def to_frame(rows: list[dict], table: str) -> pd.DataFrame:
    """Rows as a frame with the table's columns (empty frame when no rows)."""
    return pd.DataFrame(rows, columns=columns(table))


def runs_frame(items: list[tuple[dict, float]], source: str, interconnect: str = "") -> tuple[pd.DataFrame, list[str]]:
    """`runs` rows from (canonical values, iteration time in s) pairs; impossible configs are rejected."""
    rows, rejected = [], []
    for values, time_s in items:
        try:
            rows.append(run_row(values, time_s, source, interconnect))
        except ConfigError as err:
            kind = "unknown GPU" if err.field == "gpu" else "impossible config"
            rejected.append(f"{kind}: {err}")
    return to_frame(rows, "runs"), rejected


def _reason(table: str, row) -> str:
    """Why a (raw) row is invalid, or '' when it is fine."""
    t = row[TIME_COLUMN[table]]
    if t is None or not math.isfinite(t) or t <= 0:
        return "non-positive time" if t is not None and math.isfinite(t) else "missing time"
    if table == "kernels":
        if row["op_class"] not in OP_CLASSES:
            return f"unknown op class '{row['op_class']}'"
        if row["dtype"] not in DTYPES:
            return f"unknown dtype '{row['dtype']}'"
        if row["direction"] not in DIRECTIONS:
            return f"unknown direction '{row['direction']}'"
        if any(row[c] < 0 for c in ("m", "n", "k", "batch", "heads", "seq", "num_elements")):
            return "negative shape"
        if row["op_class"] == "gemm" and min(row["m"], row["n"], row["k"]) <= 0:
            return "non-positive gemm shape"
        if row["op_class"] == "attention" and min(row["heads"], row["seq"], row["k"]) <= 0:
            return "non-positive attention shape"
        if row["op_class"] not in ("gemm", "attention") and row["num_elements"] <= 0:
            return "non-positive num_elements"
    if table == "collectives":
        if row["op"] not in COLLECTIVE_OPS:
            return f"unknown collective '{row['op']}'"
        if row["dtype"] not in DTYPES:
            return f"unknown dtype '{row['dtype']}'"
        if row["bytes"] <= 0:
            return "non-positive size"
        if row["group_size"] < 1 or row["ranks_per_node"] < 1 or row["num_nodes"] < 1:
            return "non-positive group size"
        if row["bw_convention"] not in BW_CONVENTIONS:
            return f"unknown bw_convention '{row['bw_convention']}'"
    if not str(row["gpu"]).strip():
        return "unknown GPU (empty name)"
    return ""


def check_rows(table: str, df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Split `df` into valid rows and one rejection reason per invalid row."""
    if len(df) == 0:
        return df, []
    reasons = [_reason(table, row) for row in df.to_dict("records")]
    ok = [not r for r in reasons]
    return df[ok].reset_index(drop=True), [r for r in reasons if r]
