"""Coverage summary of a dataset folder as rich tables (rows, GPUs, ops, shape ranges)."""
from __future__ import annotations

from pathlib import Path

from rich.table import Table

from vtrain.dataset import store


def _span(series) -> str:
    return f"{series.min():g}..{series.max():g}" if len(series) else "-"


def summary_tables(dataset_dir: str | Path) -> list[Table]:
    """One rich table per dataset table, grouped by GPU (and op / op class)."""
    out = []
    runs = store.load(dataset_dir, "runs")
    t = Table(title=f"runs: {len(runs)} rows")
    for col in ("gpu", "rows", "num_gpus", "hidden_size", "seq_len", "iteration_time_s", "sources"):
        t.add_column(col)
    for gpu, g in runs.groupby("gpu"):
        t.add_row(gpu, str(len(g)), _span(g["num_gpus"]), _span(g["hidden_size"]), _span(g["seq_len"]),
                  _span(g["iteration_time_s"]), str(g["source"].nunique()))
    out.append(t)

    kernels = store.load(dataset_dir, "kernels")
    t = Table(title=f"kernels: {len(kernels)} rows")
    for col in ("gpu", "op_class", "dtype", "dir", "rows", "m", "n", "k", "num_elements", "time_s"):
        t.add_column(col)
    for (gpu, op, dtype, direction), g in kernels.groupby(["gpu", "op_class", "dtype", "direction"]):
        t.add_row(gpu, op, dtype, direction, str(len(g)), _span(g["m"]), _span(g["n"]), _span(g["k"]),
                  _span(g["num_elements"]), _span(g["time_s"]))
    out.append(t)

    coll = store.load(dataset_dir, "collectives")
    t = Table(title=f"collectives: {len(coll)} rows")
    for col in ("gpu", "network", "op", "rows", "bytes", "group_size", "num_nodes", "time_s"):
        t.add_column(col)
    for (gpu, network, op), g in coll.groupby(["gpu", "network", "op"]):
        t.add_row(gpu, network, op, str(len(g)), _span(g["bytes"]), _span(g["group_size"]), _span(g["num_nodes"]),
                  _span(g["time_s"]))
    out.append(t)
    return out
