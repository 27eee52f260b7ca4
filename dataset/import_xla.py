"""OpenXLA GPU performance tables: GEMM and collective tables, as derived CSV or raw .txtpb.

GEMM: out[b,m,n] = lhs[b,m,k] @ rhs[b,k,n], median kernel time of 5 runs; dtype from the
lhs type (bf16, f16 -> fp16, f32 -> fp32, f8* -> fp8); op_name 'dot <dtype_key>' keeps the
fp8 variants apart. Collectives: bytes = tensor_size_bytes (all-gather output, reduce-scatter
input, else operand size), algbw convention; collective-permute -> send_recv with group_size
2 for pairwise swaps and the ring length for rings.
Devices: sm_90 -> h100-sxm, sm_100_B200 -> b200, sm_100_GB200 -> gb200, sm_103 -> gb300,
gfx950 -> mi355x; `network` keeps the raw device key. 8-GPU nodes except GB200/GB300 (NVL72:
one NVLink domain, ranks_per_node = group).
"""
from __future__ import annotations

import math
from pathlib import Path

from vtrain.dataset.readers import parse_textproto, read_csv
from vtrain.dataset.rows import ImportResult, collective_row, kernel_row, to_frame

DEVICES = {"sm_90": "h100-sxm", "sm_100_b200": "b200", "sm_100_gb200": "gb200", "sm_103": "gb300",
           "gfx950": "mi355x"}
NVL72 = ("sm_100_gb200", "sm_103")
OPCODES = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
           "all-to-all": "all_to_all", "collective-permute": "send_recv"}
ELEMENT_TYPES = {"F32": ("fp32", 4), "BF16": ("bf16", 2), "F16": ("fp16", 2)}
MATMUL_REQUIRED = ["device_key", "b", "m", "n", "k", "dtype_key", "time_us"]
COLLECTIVE_REQUIRED = ["device_key", "opcode", "element_type", "num_devices_per_group", "num_devices",
                       "source_target_pairs", "tensor_size_bytes", "time_us"]


def is_matmul_csv(head: str) -> bool:
    return "device_key" in head and "dtype_key" in head


def is_collective_csv(head: str) -> bool:
    return "device_key" in head and "opcode" in head and "tensor_size_bytes" in head


def is_matmul_txtpb(head: str) -> bool:
    return "proto-message: xla.GemmPerfTable" in head


def is_collective_txtpb(head: str) -> bool:
    return "collective_perf_table_gen" in head or ("DeviceHloInstructionProfiles" in head and
                                                   "network_throughput_bytes_per_sec" in head)


def gpu_of(device_key: str) -> str:
    return DEVICES.get(device_key.strip().lower(), device_key.strip().lower())


def gemm_dtype(dtype_key: str) -> str:
    """Input dtype of an XLA dtype key such as 'bf16xbf16->bf16' or 'f8e4m3fnxf8e5m2->bf16'."""
    lhs = dtype_key.split("x")[0] if not dtype_key.startswith("f8") else "f8"
    return {"bf16": "bf16", "f16": "fp16", "f32": "fp32", "f8": "fp8"}.get(lhs, lhs)


def _gemm_row(source: str, device: str, b: int, m: int, n: int, k: int, dtype_key: str, time_s: float) -> dict:
    return kernel_row(source, gpu_of(device), gemm_dtype(dtype_key), "gemm", f"dot {dtype_key}", "fwd", time_s,
                      repeats=5, m=m, n=n, k=k, batch=b)


def _rows_per_node(device: str, group: int) -> int:
    return group if device.strip().lower() in NVL72 else min(group, 8)


def _collective_row(source: str, device: str, opcode: str, element_type: str, size: int, group: int,
                    time_s: float) -> dict | str:
    op = OPCODES.get(opcode)
    if op is None:
        return f"unknown collective '{opcode}'"
    dtype = ELEMENT_TYPES.get(element_type, (element_type.lower(), 0))[0]
    return collective_row(source, gpu_of(device), device.strip(), op, size, group, _rows_per_node(device, group),
                          dtype, time_s, bw_convention="algbw")


def _permute_group(pairs: list[tuple[int, int]]) -> int:
    """2 for pairwise swaps (a->b and b->a), else the number of ranks in the permutation."""
    edges = set(pairs)
    if pairs and all((t, s) in edges for s, t in pairs):
        return 2
    return len({x for pair in pairs for x in pair})


def import_matmul_csv(path: Path) -> ImportResult:
    fmt = "xla_matmul_csv"
    df = read_csv(path, MATMUL_REQUIRED, fmt)
    source = f"xla:{path.name}"
    rows = [_gemm_row(source, str(r["device_key"]), int(r["b"]), int(r["m"]), int(r["n"]), int(r["k"]),
                      str(r["dtype_key"]), float(r["time_us"]) * 1e-6) for r in df.to_dict("records")]
    return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")})


def import_matmul_txtpb(path: Path) -> ImportResult:
    fmt = "xla_matmul_txtpb"
    data = parse_textproto(path.read_text(encoding="utf-8"))
    source = f"xla:{path.name}"
    rows, rejected = [], []
    for device in data.get("entries", []):
        key = device["key"][0]
        for e in device["value"][0].get("entries", []):
            b, m, n, k = (int(e.get(d, [0])[0]) for d in ("b", "m", "n", "k"))
            for flops in e.get("flops", []):
                rate = float(flops.get("value", [0])[0])
                if rate <= 0:
                    rejected.append("non-positive time")
                    continue
                rows.append(_gemm_row(source, key, b, m, n, k, flops["key"][0], 2.0 * b * m * n * k / rate))
    return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")}, rejected)


def import_collective_csv(path: Path) -> ImportResult:
    fmt = "xla_collective_csv"
    df = read_csv(path, COLLECTIVE_REQUIRED, fmt, keep_default_na=False)
    source = f"xla:{path.name}"
    rows, rejected = [], []
    for r in df.to_dict("records"):
        if r["opcode"] == "collective-permute":
            pairs = [tuple(int(x) for x in p.split("->")) for p in str(r["source_target_pairs"]).split(";") if p]
            group = _permute_group(pairs)
        else:
            group = int(r["num_devices_per_group"] or r["num_devices"])
        time_s = float(r["time_us"]) * 1e-6 if str(r["time_us"]).strip() else math.nan
        row = _collective_row(source, str(r["device_key"]), str(r["opcode"]), str(r["element_type"]),
                              int(r["tensor_size_bytes"]), group, time_s)
        (rejected if isinstance(row, str) else rows).append(row)
    return ImportResult(str(path), fmt, {"collectives": to_frame(rows, "collectives")}, rejected)


def import_collective_txtpb(path: Path) -> ImportResult:
    fmt = "xla_collective_txtpb"
    data = parse_textproto(path.read_text(encoding="utf-8"))
    source = f"xla:{path.name}"
    rows, rejected = [], []
    for device in data.get("entries", []):
        key = device["key"][0]
        for e in device["value"][0].get("entries", []):
            instr = e["instruction"][0]
            opcode = instr["opcode"][0]
            shape = instr["shape"][0]
            element_type = str(shape["element_type"][0])
            elems = math.prod(int(x) for x in shape.get("dimensions", [1]))
            elem_bytes = ELEMENT_TYPES.get(element_type, ("", 4))[1]
            if opcode == "collective-permute":
                pairs = [(p.get("source", [0])[0], p.get("target", [0])[0]) for p in instr.get("source_target_pairs", [])]
                group = _permute_group(pairs)
            else:
                iota = instr["iota_collective_device_list"][0]
                group = int(iota["num_devices_per_group"][0])
            size = elems * elem_bytes * (group if opcode == "reduce-scatter" else 1)
            rate = float(e.get("network_throughput_bytes_per_sec", [0])[0])
            if rate <= 0:
                rejected.append("missing time (no throughput)")
                continue
            row = _collective_row(source, key, opcode, element_type, size, group, size / rate)
            (rejected if isinstance(row, str) else rows).append(row)
    return ImportResult(str(path), fmt, {"collectives": to_frame(rows, "collectives")}, rejected)
