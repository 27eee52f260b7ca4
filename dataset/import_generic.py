"""Generic CSV with canonical column names (docs/dataset.md lists them), one table per file.

The table is picked from the columns: `iteration_time_s` -> runs (canonical config fields,
completed by build_config), `op_class` + `time_s` -> kernels, `op` + `group_size` + `time_s`
-> collectives. Optional columns take defaults (shape 0, direction fwd, ...); flops and
bytes_moved are derived when absent; a `source` column is kept, else 'generic:<file>'.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from vtrain.costmodel.spec import ALL_FIELDS
from vtrain.dataset.readers import read_csv
from vtrain.dataset.rows import ImportResult, canonical_gpu, collective_row, kernel_row, runs_frame, to_frame

KERNEL_REQUIRED = ["gpu", "dtype", "op_class", "time_s"]
COLLECTIVE_REQUIRED = ["gpu", "op", "bytes", "group_size", "dtype", "time_s"]
SHAPE = ("m", "n", "k", "batch", "heads", "seq", "num_elements")


def table_of(head: str) -> str | None:
    """Which table a generic CSV holds, from its header line (None if not a generic CSV)."""
    first = head.lstrip("\ufeff").splitlines()[0] if head.strip() else ""
    cols = {c.strip() for c in first.split(",")}
    if "iteration_time_s" in cols and "num_layers" in cols:
        return "runs"
    if "op_class" in cols and "time_s" in cols:
        return "kernels"
    if "op" in cols and "group_size" in cols and "time_s" in cols:
        return "collectives"
    return None


def import_file(path: Path) -> ImportResult:
    head = path.read_text(encoding="utf-8-sig", errors="replace")[:4096]
    table = table_of(head)
    fmt = f"generic_{table}"
    default_source = f"generic:{path.name}"
    if table == "runs":
        df = read_csv(path, ["iteration_time_s"], fmt)
        fields = [c for c in df.columns if c in ALL_FIELDS]
        rows, rejected = [], []
        for r in df.to_dict("records"):
            values = {f: r[f] for f in fields if not _blank(r[f])}
            one, bad = runs_frame([(values, _float(r["iteration_time_s"]))], _text(r.get("source")) or default_source,
                                  _text(r.get("interconnect")))
            rows.append(one)
            rejected += bad
        frames = [f for f in rows if len(f)]
        runs = pd.concat(frames, ignore_index=True) if frames else to_frame([], "runs")
        return ImportResult(str(path), fmt, {"runs": runs}, rejected)
    if table == "kernels":
        df = read_csv(path, KERNEL_REQUIRED, fmt)
        rows = []
        for r in df.to_dict("records"):
            shape = {c: int(_float(r.get(c, 0)) or 0) for c in SHAPE}
            row = kernel_row(_text(r.get("source")) or default_source, canonical_gpu(r["gpu"]), _text(r["dtype"]),
                             _text(r["op_class"]), _text(r.get("op_name")) or _text(r["op_class"]),
                             _text(r.get("direction")) or "fwd", _float(r["time_s"]), _float(r.get("time_std_s")),
                             int(_float(r.get("repeats", 0)) or 0), **shape)
            for col in ("flops", "bytes_moved"):
                if not _blank(r.get(col)):
                    row[col] = _float(r[col])
            rows.append(row)
        return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")})
    df = read_csv(path, COLLECTIVE_REQUIRED, fmt)
    rows = []
    for r in df.to_dict("records"):
        group = int(_float(r["group_size"]))
        per_node = int(_float(r.get("ranks_per_node")) if not _blank(r.get("ranks_per_node")) else group)
        nodes = None if _blank(r.get("num_nodes")) else int(_float(r["num_nodes"]))
        rows.append(collective_row(_text(r.get("source")) or default_source, canonical_gpu(r["gpu"]),
                                   _text(r.get("network")), _text(r["op"]), int(_float(r["bytes"])), group,
                                   per_node, _text(r["dtype"]), _float(r["time_s"]), _float(r.get("time_std_s")),
                                   _text(r.get("bw_convention")) or "none", nodes))
    return ImportResult(str(path), fmt, {"collectives": to_frame(rows, "collectives")})


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _text(value) -> str:
    return "" if _blank(value) else str(value).strip()
