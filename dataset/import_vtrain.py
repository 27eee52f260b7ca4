"""vTrain (VIA-Research/vTrain) files: ground-truth iteration times and nccl-tests all-reduce LUTs.

Ground truth (`ground_truth_{single,multi}.csv`, UTF-8 BOM, CRLF): Megatron-DeepSpeed on A100
with the settings vTrain's configs imply: gpu a100-80gb, recompute full, schedule 1f1b,
precision fp16, vocab_size 50257, gpus_per_node 8, arch gpt, attention unfused
(vTrain's Megatron runs used the unfused QK^T-softmax-PV attention); iteration time ms -> s.
LUTs (`trace/<gpu>/AR_GPU<n>_1M_1024M_LUT`): in-place time (column -2, ns) -> s, group size n
from the file name, ranks_per_node = n, dtype from `type` (float = fp32).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from vtrain.costmodel.errors import UserError, user_file
from vtrain.dataset.readers import read_csv
from vtrain.dataset.rows import ImportResult, canonical_gpu, collective_row, runs_frame, to_frame
from vtrain.costmodel.hardware import lookup_gpu

GROUND_TRUTH_COLUMNS = {
    "# GPUs": "num_gpus",
    "global batch": "global_batch",
    "micro batch": "micro_batch",
    "hidden size": "hidden_size",
    "attention heads": "num_attention_heads",
    "# layers": "num_layers",
    "sequence length": "seq_len",
    "tensor parallelism": "tp",
    "data parallelism": "dp",
    "pipeline parallelism": "pp",
}
TIME_COLUMN = "iteration time (ms)"
FIXED = dict(gpu="a100-80gb", recompute="full", schedule="1f1b", precision="fp16", vocab_size=50257,
             gpus_per_node=8, arch="gpt", attention="unfused")
NCCL_DTYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
LUT_NAME = re.compile(r"AR_GPU(\d+)_")
LUT_FORMAT = "vtrain_lut"


def is_ground_truth(head: str) -> bool:
    first = head.lstrip("\ufeff").splitlines()[0] if head.strip() else ""
    return TIME_COLUMN in first and "tensor parallelism" in first


def is_lut(head: str) -> bool:
    return head.lstrip("\ufeff").startswith("size(B),count,type,time(ns)")


def import_ground_truth(path: Path) -> ImportResult:
    """`runs` rows from a vTrain ground-truth CSV."""
    fmt = "vtrain_ground_truth"
    df = read_csv(path, list(GROUND_TRUTH_COLUMNS) + [TIME_COLUMN], fmt)
    items, rejected = [], []
    for raw in df.to_dict("records"):
        missing = [c for c in GROUND_TRUTH_COLUMNS if _missing(raw[c])]
        if missing:
            rejected.append(f"missing value in '{missing[0]}'")
            continue
        values = {canon: raw[col] for col, canon in GROUND_TRUTH_COLUMNS.items()} | FIXED
        items.append((values, float(raw[TIME_COLUMN]) / 1e3))
    runs, bad = runs_frame(items, f"vtrain:{path.name}")
    runs["interconnect"] = ["nvlink" if n <= 8 else "nvlink+ib" for n in runs["num_gpus"]]
    return ImportResult(str(path), fmt, {"runs": runs}, rejected + bad)


def read_lut(path: Path) -> tuple[int, pd.DataFrame]:
    """(group size from the file name, the table) of one vTrain nccl-tests LUT; columns: size(B),
    count, type, time(ns), busbw, time(ns) in place (column -2), busbw."""
    match = LUT_NAME.search(path.name)
    if not match:
        raise UserError(f"{path}: vTrain LUT file name must look like AR_GPU<n>_..._LUT to give the group size")
    df = read_csv(path, ["size(B)", "type"], LUT_FORMAT)
    if len(df.columns) < 7:
        raise UserError(f"{path}: missing column 'time(ns)' (in-place) for format {LUT_FORMAT}")
    return int(match.group(1)), df


def allreduce_table(folder: str | Path) -> dict:
    """The simulator's measured all-reduce table from a folder of LUTs (AR_GPU<n>_*_LUT): `sizes`
    (bytes, the first file's), `times` (s, in place; one row per group size, interpolated onto
    `sizes`), `groups` (ascending)."""
    folder = Path(folder)
    files = sorted(folder.glob("AR_GPU*_LUT")) if folder.is_dir() else []
    if not files:
        raise UserError(f"no AR_GPU<n>_*_LUT files in '{folder}'; point it at a folder like "
                        "../shared/data/vtrain/trace/a100")
    groups, times, sizes = [], [], None
    for f in files:
        with user_file(f, "LUT"):
            group, df = read_lut(f)
        s = pd.to_numeric(df.iloc[:, 0], errors="coerce").to_numpy(np.float64)
        t = pd.to_numeric(df.iloc[:, -2], errors="coerce").to_numpy(np.float64) * 1e-9  # ns -> s
        if len(s) < 1 or not np.all(np.isfinite(s)) or not np.all(np.isfinite(t)):
            raise UserError(f"'{f}' has a row that is not 'bytes,...,time_ns,...' numbers; give vTrain's "
                            "AR_GPU<n>_*_LUT files unchanged")
        if sizes is None:
            sizes = s
        groups.append(group)
        times.append(np.interp(sizes, s, t))
    order = np.argsort(groups)
    return dict(sizes=sizes, times=np.array(times)[order], groups=[groups[i] for i in order])


def import_lut(path: Path) -> ImportResult:
    """`collectives` all-reduce rows from a vTrain nccl-tests LUT (header row; no BOM)."""
    group, df = read_lut(path)
    folder = path.parent.name
    gpu = lookup_gpu(folder)
    rows, rejected = [], []
    source = f"vtrain:{folder}/{path.name}"
    for raw in df.itertuples(index=False):
        if gpu is None:
            rejected.append(f"unknown GPU '{folder}' (taken from the folder name; expected a100 or v100)")
            continue
        dtype = NCCL_DTYPES.get(str(raw[2]).strip().lower())
        if dtype is None:
            rejected.append(f"unknown dtype '{raw[2]}'")
            continue
        rows.append(collective_row(source, canonical_gpu(folder), "nvlink", "all_reduce", int(raw[0]), group, group,
                                   dtype, float(raw[-2]) * 1e-9, bw_convention="busbw"))
    return ImportResult(str(path), LUT_FORMAT, {"collectives": to_frame(rows, "collectives")}, rejected)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""
