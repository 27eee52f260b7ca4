"""The canonical measurement dataset: three pyarrow tables stored as parquet.

- `runs`: one measured training iteration per row, with the full canonical config
  (`vtrain.costmodel.spec.ALL_FIELDS`, same names and types) plus `iteration_time_s`.
- `kernels`: one measured op (GEMM, attention, norm, ...) per row.
- `collectives`: one measured collective per row.

Units: times in seconds, sizes in bytes, FLOP counts in FLOP, bandwidths as in the spec
(GB/s intra-node, Gb/s inter-node). Units are also stored as field metadata (`unit`).
Every row carries `source` ("<format>:<file name>") and its hardware.
"""
from __future__ import annotations

from dataclasses import fields

import pyarrow as pa

from vtrain.costmodel.correction import COLLECTIVE_OPS  # noqa: F401 (re-exported)
from vtrain.costmodel.ops import OP_CLASSES  # noqa: F401 (re-exported)
from vtrain.costmodel.spec import ClusterSpec, ModelSpec, ParallelSpec

TABLES = ("runs", "kernels", "collectives")
DTYPES = ("fp16", "bf16", "fp8", "fp32")
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}
DIRECTIONS = ("fwd", "bwd")
BW_CONVENTIONS = ("algbw", "busbw", "none")

_ARROW_OF = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
_SPEC_UNITS = {"seq_len": "tokens", "vocab_size": "tokens", "intra_node_bw_GBps": "GB/s per GPU per direction",
               "inter_node_bw_Gbps": "Gb/s per GPU"}


def _field(name: str, type_: pa.DataType, unit: str = "", doc: str = "") -> pa.Field:
    meta = {}
    if unit:
        meta["unit"] = unit
    if doc:
        meta["doc"] = doc
    return pa.field(name, type_, metadata=meta or None)


def _spec_fields() -> list[pa.Field]:
    out = []
    for cls in (ModelSpec, ParallelSpec, ClusterSpec):
        for f in fields(cls):
            out.append(_field(f.name, _ARROW_OF[f.type], _SPEC_UNITS.get(f.name, "")))
    return out


RUNS = pa.schema(
    _spec_fields() + [
        _field("iteration_time_s", pa.float64(), "s", "measured time of one training iteration"),
        _field("interconnect", pa.string(), doc="free text, e.g. 'nvlink+ib-hdr'"),
        _field("source", pa.string(), doc="'<format>:<file name>'"),
    ],
    metadata={"table": "runs", "time_unit": "s"},
)

KERNELS = pa.schema(
    [
        _field("source", pa.string(), doc="'<format>:<file name>'"),
        _field("gpu", pa.string(), doc="canonical GPU preset name when known, else raw device name lower-case"),
        _field("dtype", pa.string(), doc="fp16|bf16|fp8|fp32"),
        _field("op_class", pa.string(), doc="gemm|attention|norm|elementwise|softmax|embedding"),
        _field("op_name", pa.string(), doc="the source's op name"),
        _field("direction", pa.string(), doc="fwd|bwd"),
        _field("m", pa.int64(), doc="gemm: out[batch,m,n] = a[batch,m,k] @ b[batch,k,n]; norm/softmax/"
               "elementwise: m rows of width n when known; 0 if n/a"),
        _field("n", pa.int64()),
        _field("k", pa.int64()),
        _field("batch", pa.int64(), doc="gemm batch / attention batch; 0 if n/a"),
        _field("heads", pa.int64(), doc="attention heads (per device); 0 otherwise"),
        _field("seq", pa.int64(), "tokens", "attention sequence length; 0 otherwise"),
        _field("num_elements", pa.int64(), "elements", "tensor elements for norm/elementwise/softmax/embedding"),
        _field("flops", pa.float64(), "FLOP"),
        _field("bytes_moved", pa.float64(), "bytes", "minimum bytes read + written"),
        _field("time_s", pa.float64(), "s", "median time"),
        _field("time_std_s", pa.float64(), "s", "spread (std) of the time; NaN if unknown"),
        _field("repeats", pa.int64(), doc="timed repetitions; 0 if unknown"),
    ],
    metadata={"table": "kernels", "time_unit": "s"},
)

COLLECTIVES = pa.schema(
    [
        _field("source", pa.string(), doc="'<format>:<file name>'"),
        _field("gpu", pa.string()),
        _field("network", pa.string(), doc="e.g. dgx-a100, pairwise-nvlink, nvlink, sm_90"),
        _field("op", pa.string(), doc="all_reduce|all_gather|reduce_scatter|all_to_all|send_recv"),
        _field("bytes", pa.int64(), "bytes", "full logical buffer per rank (nccl-tests 'size')"),
        _field("group_size", pa.int64(), doc="ranks in the collective"),
        _field("ranks_per_node", pa.int64()),
        _field("num_nodes", pa.int64()),
        _field("dtype", pa.string()),
        _field("time_s", pa.float64(), "s"),
        _field("time_std_s", pa.float64(), "s"),
        _field("bw_convention", pa.string(), doc="algbw|busbw|none: the bandwidth the source reported"),
    ],
    metadata={"table": "collectives", "time_unit": "s"},
)

SCHEMAS = {"runs": RUNS, "kernels": KERNELS, "collectives": COLLECTIVES}

# Columns that hold a measurement (not part of what was measured): excluded from the dedupe key.
MEASUREMENT_COLUMNS = {
    "runs": ("iteration_time_s", "source"),
    "kernels": ("time_s", "time_std_s", "repeats", "source"),
    "collectives": ("time_s", "time_std_s", "source"),
}
TIME_COLUMN = {"runs": "iteration_time_s", "kernels": "time_s", "collectives": "time_s"}


def columns(table: str) -> list[str]:
    """Column names of `table`, in schema order."""
    return list(SCHEMAS[table].names)


def key_columns(table: str) -> list[str]:
    """The dedupe key: every column except time/spread/repeats and source."""
    return [c for c in columns(table) if c not in MEASUREMENT_COLUMNS[table]]


