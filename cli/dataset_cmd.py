"""`vtrain dataset import|info` and `vtrain profile`: build the measurement dataset.

Only typer is imported here; pandas/pyarrow/jax are imported inside the commands.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

from vtrain.cli.app import app
from vtrain.cli.options import parameters_as_flags
from vtrain.costmodel.errors import UserError

# The store's parameter names -> this command's flags.
STORE_FLAGS = {"dataset_dir": "--output"}

dataset_app = typer.Typer(help="Import measurements into a dataset folder and summarize it.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"{flag}: '{text}' must be comma-separated integers, e.g. 256,512") from None
    if not values:
        raise UserError(f"{flag}: give at least one integer")
    return values


@dataset_app.command("import")
def import_cmd(
    sources: list[Path] = typer.Argument(..., help="Files or folders (walked) of upstream measurements."),
    output: Path = typer.Option(..., "-o", "--output", help="Dataset folder (created; appended to)."),
) -> None:
    """Detect each source's format, convert, dedupe and append to DATASET_DIR."""
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from vtrain.dataset import store
    from vtrain.dataset.detect import import_sources
    from vtrain.dataset.schema import TABLES

    store.check_output_dir(output, "--output")
    results = import_sources(sources)
    kept: Counter = Counter()
    written = {}
    for table in TABLES:
        frames = [r.tables[table] for r in results if len(r.tables.get(table, ()))]
        if not frames:
            continue
        fresh = store.new_rows(output, table, pd.concat(frames, ignore_index=True))
        with parameters_as_flags(STORE_FLAGS):
            written[table] = store.write_part(output, table, fresh)
        kept.update(fresh["source"].tolist())
    report = Table(title=f"import into {output}")
    for col in ("file", "format", "rows kept", "duplicates", "rejected", "top reasons"):
        report.add_column(col, justify="right" if col in ("rows kept", "duplicates", "rejected") else "left")
    for r in results:
        sources_of = {s for df in r.tables.values() for s in df["source"].unique()}
        new = sum(kept.pop(s, 0) for s in sources_of)
        reasons = "; ".join(f"{reason} ({n})" for reason, n in Counter(r.rejected).most_common(3)) or r.note
        report.add_row(r.file, r.format, str(new), str(r.rows - new), str(len(r.rejected)), reasons)
    Console(width=200).print(report)
    total = ", ".join(f"{table} +{n}" for table, n in written.items() if n)
    typer.echo(f"wrote {total} rows to {output}" if total else f"nothing new to write to {output}")


@dataset_app.command("info")
def info_cmd(dataset_dir: Path = typer.Argument(..., help="Dataset folder.")) -> None:
    """Summarize a dataset folder: rows, GPUs, ops and shape ranges per table."""
    from rich.console import Console

    from vtrain.dataset.summary import summary_tables

    if not dataset_dir.is_dir():
        raise UserError(f"{dataset_dir}: no such dataset folder; create it with 'vtrain dataset import ... -o DIR'")
    console = Console(width=200)
    for table in summary_tables(dataset_dir):
        console.print(table)


@app.command("profile")
def profile_cmd(
    output: Path = typer.Option(..., "-o", "--output", help="Dataset folder to append to."),
    device: str = typer.Option("cpu", "--device", help="cpu or gpu."),
    model: str = typer.Option(None, "--model", help="Model preset whose layer shapes to time."),
    shapes: str = typer.Option(None, "--shapes", help="'tiny': a small test layer (default when no --model)."),
    tokens: str = typer.Option("256", "--tokens", help="Comma-separated token counts (GEMM m = micro-batch*seq)."),
    tp: str = typer.Option("1", "--tp", help="Comma-separated tensor-parallel degrees."),
    repeats: int = typer.Option(5, "--repeats", help="Timed repetitions per op (median, std)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed calls before timing (at least 1: compiles)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, bf16 or fp16."),
) -> None:
    """Time GEMM/attention/norm/elementwise ops (fwd+bwd) with JAX and append them to DATASET_DIR."""
    if device not in ("cpu", "gpu"):
        raise UserError(f"--device: '{device}' is unknown; use cpu or gpu")
    if shapes not in (None, "tiny"):
        raise UserError(f"--shapes: '{shapes}' is unknown; use tiny (or --model PRESET)")
    if model and shapes:
        raise UserError("give either --model or --shapes, not both")
    from vtrain.dataset import store
    from vtrain.dataset.profiler import TINY_COLLECTIVE_BYTES, COLLECTIVE_BYTES, layer_shapes, profile

    store.check_output_dir(output, "--output")
    tiny = model is None
    layer = layer_shapes(model, _ints(tokens, "--tokens"), _ints(tp, "--tp"), tiny=tiny)
    kernels, collectives = profile(layer, device=device, dtype=dtype, repeats=repeats, warmup=warmup,
                                   collective_bytes=TINY_COLLECTIVE_BYTES if tiny else COLLECTIVE_BYTES)
    with parameters_as_flags(STORE_FLAGS):
        n_k = store.append(output, "kernels", kernels)
        n_c = store.append(output, "collectives", collectives)
    gpu = kernels["gpu"].iloc[0] if len(kernels) else device
    typer.echo(f"profiled {len(kernels)} kernel and {len(collectives)} collective timings on {gpu}; "
               f"wrote kernels +{n_k}, collectives +{n_c} to {output}")
