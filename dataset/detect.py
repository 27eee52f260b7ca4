"""Find source files, detect each one's format from its name and first bytes, and convert it.

`import_sources(paths)` walks files and folders (skipping *.md, LICENSE* and hidden files),
converts every file and validates its rows (`rows.check_rows`). An explicit file of unknown
format raises UserError; unknown files met while walking a folder are reported as skipped.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vtrain.costmodel.errors import UserError
from vtrain.dataset import (import_generic, import_llmcompass, import_nccl, import_published, import_vidur, import_vtrain,
                            import_xla)
from vtrain.dataset.rows import ImportResult, check_rows

HEAD_BYTES = 8192

# (format name, description, matcher(path, head text), converter(path)), tried in order.
FORMATS: list[tuple[str, str, Callable[[Path, str], bool], Callable[[Path], ImportResult]]] = [
    ("vtrain_ground_truth", "vTrain ground_truth_*.csv", lambda p, h: import_vtrain.is_ground_truth(h),
     import_vtrain.import_ground_truth),
    ("vtrain_lut", "vTrain nccl-tests LUT (AR_GPU<n>_..._LUT)", lambda p, h: import_vtrain.is_lut(h),
     import_vtrain.import_lut),
    ("vidur_mlp", "Vidur mlp.csv", lambda p, h: import_vidur.is_mlp(h), import_vidur.import_mlp),
    ("vidur_attention", "Vidur attention.csv", lambda p, h: import_vidur.is_attention(h),
     import_vidur.import_attention),
    ("vidur_network", "Vidur network all_reduce.csv/send_recv.csv", lambda p, h: import_vidur.is_network(h),
     import_vidur.import_network),
    ("xla_matmul_csv", "XLA matmul_perf_table.csv", lambda p, h: import_xla.is_matmul_csv(h),
     import_xla.import_matmul_csv),
    ("xla_collective_csv", "XLA collective_perf_table.csv", lambda p, h: import_xla.is_collective_csv(h),
     import_xla.import_collective_csv),
    ("xla_matmul_txtpb", "XLA default_matmul_perf_table.txtpb", lambda p, h: import_xla.is_matmul_txtpb(h),
     import_xla.import_matmul_txtpb),
    ("xla_collective_txtpb", "XLA default_collective_perf_table.txtpb",
     lambda p, h: import_xla.is_collective_txtpb(h), import_xla.import_collective_txtpb),
    ("llmcompass", "LLMCompass real_hardware {matmul,softmax,layernorm,gelu}_<GPU>.csv",
     import_llmcompass.is_llmcompass, import_llmcompass.import_file),
    ("published_runs", "published runs.csv (source_id, measured_metric, measured_value)",
     lambda p, h: import_published.is_published(h), import_published.import_runs),
    ("nccl_tests_log", "nccl-tests text log", lambda p, h: import_nccl.is_nccl_log(h), import_nccl.import_log),
    ("generic_csv", "CSV with canonical column names", lambda p, h: import_generic.table_of(h) is not None,
     import_generic.import_file),
]
# Known upstream files that hold no timings: recognized and skipped with a note.
NO_TIMINGS = {"hlo_op_profiles.csv": "XLA per-element clock cycles, no times"}


def supported_formats() -> str:
    return "; ".join(desc for _, desc, _, _ in FORMATS)


def _skip_silently(path: Path) -> bool:
    name = path.name
    return name.startswith(".") or name.lower().endswith(".md") or name.upper().startswith("LICENSE")


def detect(path: Path) -> str | None:
    """The format name of `path`, or None if unknown."""
    try:
        head = path.open("rb").read(HEAD_BYTES).decode("utf-8-sig", errors="replace")
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    if "\x00" in head:
        return None
    for name, _, matches, _ in FORMATS:
        if matches(path, head):
            return name
    return None


def find_files(paths: list[str | Path]) -> list[tuple[Path, bool]]:
    """(file, given explicitly) for every file under `paths`, sorted within folders."""
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out += [(p, False) for p in sorted(path.rglob("*"))
                    if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                    and not _skip_silently(p)]
        elif path.is_file():
            out.append((path, True))
        else:
            raise UserError(f"{path}: no such file or folder")
    return out


def convert(path: Path, fmt: str) -> ImportResult:
    """Convert one file of known format and validate its rows."""
    converter = next(conv for name, _, _, conv in FORMATS if name == fmt)
    result = converter(path)
    for table, df in list(result.tables.items()):
        good, reasons = check_rows(table, df)
        result.tables[table] = good
        result.rejected += reasons
    return result


def import_sources(paths: list[str | Path]) -> list[ImportResult]:
    """Detect and convert every file under `paths` (all detected before any is converted)."""
    plan = []
    for path, explicit in find_files(paths):
        if path.name in NO_TIMINGS:
            plan.append((path, None, NO_TIMINGS[path.name]))
            continue
        fmt = detect(path)
        if fmt is None and explicit:
            raise UserError(f"{path}: unknown format; supported: {supported_formats()}")
        plan.append((path, fmt, "" if fmt else "unknown format, skipped"))
    results = []
    for path, fmt, note in plan:
        results.append(convert(path, fmt) if fmt else ImportResult(str(path), "skipped", note=note))
    return results
