"""LLMCompass (PrincetonUniversity/LLMCompass) real-hardware CSVs, all without a header row.

matmul_<GPU>.csv: M, N, K, latency ('0.1900ms'), throughput -> gemm m=M n=N k=K batch=1.
softmax_/layernorm_<GPU>.csv: M rows of N, throughput (G elements/s) -> m=M, n=N, time = M*N / (thr*1e9).
gelu_<GPU>.csv: elements, throughput (G elements/s). All fp16, forward.
A100 -> a100-80gb; other names lower-case (mi210). transformer*_A100.csv (12 per-op latencies
without shapes) are recognized but not imported: each row is rejected with that reason.
"""
from __future__ import annotations

import re
from pathlib import Path

from vtrain.costmodel.errors import UserError
from vtrain.dataset.readers import read_headerless_csv
from vtrain.dataset.rows import ImportResult, canonical_gpu, kernel_row, to_frame

NAME = re.compile(r"^(matmul|softmax|layernorm|gelu|transformer|transformerAR)_([A-Za-z0-9]+)\.csv$")
KINDS = {"matmul": ("gemm", 5), "softmax": ("softmax", 3), "layernorm": ("norm", 3), "gelu": ("elementwise", 2)}


def is_llmcompass(path: Path, head: str) -> bool:
    first = head.splitlines()[0] if head.strip() else ""
    return bool(NAME.match(path.name)) and bool(re.match(r"^\s*[\d.]", first))


def import_file(path: Path) -> ImportResult:
    kind, gpu_name = NAME.match(path.name).groups()
    fmt = f"llmcompass_{kind}"
    gpu = canonical_gpu(gpu_name)
    source = f"llmcompass:{path.name}"
    if kind.startswith("transformer"):
        n = len(read_headerless_csv(path, 1, fmt))
        return ImportResult(str(path), fmt, {}, ["per-layer op latencies without shapes (not imported)"] * n)
    op_class, ncols = KINDS[kind]
    rows, rejected = [], []
    for cells in read_headerless_csv(path, ncols, fmt):
        try:
            if kind == "matmul":
                m, n, k = (int(c) for c in cells[:3])
                if not cells[3].endswith("ms"):
                    raise UserError(f"{path}: latency '{cells[3]}' must end in 'ms' for format {fmt}")
                rows.append(kernel_row(source, gpu, "fp16", "gemm", "matmul", "fwd", float(cells[3][:-2]) * 1e-3,
                                       m=m, n=n, k=k, batch=1))
                continue
            m, n = (int(cells[0]), int(cells[1])) if ncols == 3 else (0, 0)
            elements = m * n if ncols == 3 else int(cells[0])
            rate = float(cells[ncols - 1]) * 1e9
        except ValueError:
            rejected.append("non-numeric value")
            continue
        time_s = elements / rate if rate > 0 else -1.0
        rows.append(kernel_row(source, gpu, "fp16", op_class, kind, "fwd", time_s, m=m, n=n, num_elements=elements))
    return ImportResult(str(path), fmt, {"kernels": to_frame(rows, "kernels")}, rejected)
