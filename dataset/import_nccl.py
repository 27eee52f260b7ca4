"""Plain nccl-tests text logs (all_reduce_perf, all_gather_perf, ... stdout).

The table header ('#  size  count  type  redop  root  time  algbw  busbw  #wrong  time ...')
gives the column positions; the in-place (second) `time` column, in us, becomes time_s.
`size` is kept as nccl-tests prints it (the full buffer: all_gather output, reduce_scatter
input). Group size = number of '#  Rank' lines (else nThread * nGpus); nodes = distinct hosts;
GPU from the first rank's device name.
"""
from __future__ import annotations

import re
from pathlib import Path

from vtrain.costmodel.errors import UserError
from vtrain.dataset.rows import ImportResult, collective_row, guess_gpu, to_frame

TESTS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
         "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "send_recv", "send_recv": "send_recv"}
DTYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
          "float32": "fp32", "float16": "fp16"}
RANK = re.compile(r"^#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+)$")
TEST_NAME = re.compile(r"(\w+)_perf")


def is_nccl_log(head: str) -> bool:
    return "# nThread" in head or "nccl-tests" in head.lower() or "Collective test starting" in head


def import_log(path: Path) -> ImportResult:
    fmt = "nccl_tests_log"
    text = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    lines = text.splitlines()
    match = TEST_NAME.search(text[:4000]) or TEST_NAME.search(path.name)
    test = match.group(1).lower() if match else ""
    header = next((ln.lstrip("#").split() for ln in lines if ln.startswith("#") and " size " in ln and "time" in ln),
                  None)
    if header is None or "time" not in header:
        raise UserError(f"{path}: missing column 'time' (no nccl-tests table header) for format {fmt}")
    time_cols = [i for i, name in enumerate(header) if name == "time"]
    time_col = time_cols[-1]  # in-place
    size_col, type_col = header.index("size"), header.index("type") if "type" in header else -1
    ranks = [RANK.match(ln.strip()) for ln in lines]
    ranks = [r for r in ranks if r]
    if ranks:
        group, nodes, device = len(ranks), len({r.group(1) for r in ranks}), ranks[0].group(2)
    else:
        nthread = re.search(r"nThread\s+(\d+)", text)
        ngpus = re.search(r"nGpus\s+(\d+)", text)
        group = int(nthread.group(1) if nthread else 1) * int(ngpus.group(1) if ngpus else 1)
        nodes, device = 1, ""
    gpu = guess_gpu(device) if device else ""
    op = TESTS.get(test)
    source = f"nccl-tests:{path.name}"
    rows, rejected = [], []
    for ln in lines:
        cells = ln.split()
        if not cells or ln.lstrip().startswith("#") or not cells[0].isdigit() or len(cells) <= time_col:
            continue
        if op is None:
            rejected.append(f"unsupported collective '{test or 'unknown'}'")
            continue
        if not gpu:
            rejected.append("unknown GPU (no '#  Rank ... device' lines)")
            continue
        dtype = DTYPES.get(cells[type_col].lower(), cells[type_col].lower()) if type_col >= 0 else "fp32"
        try:
            time_s = float(cells[time_col]) * 1e-6
        except ValueError:
            rejected.append(f"non-numeric time '{cells[time_col]}'")
            continue
        network = "intra-node" if nodes == 1 else "inter-node"
        rows.append(collective_row(source, gpu, network, op, int(cells[size_col]), group, max(1, group // nodes),
                                   dtype, time_s, bw_convention="busbw", num_nodes=nodes))
    return ImportResult(str(path), fmt, {"collectives": to_frame(rows, "collectives")}, rejected)
