"""`vtrain forecast`: iteration time, throughput, memory and training cost for a table of jobs.

Only typer is imported at module level; pyarrow/numpy (and jax with --devices) load inside.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer

from vtrain.cli.app import app
from vtrain.cli.options import CheckpointOpt, parameters_as_flags, price_flag
from vtrain.costmodel.atomic import atomic_write
from vtrain.costmodel.errors import UserError

PLOT_FORMATS = (".png", ".svg", ".pdf")
# forecast_file's parameter names -> what this command calls them (the others are --parameter-name)
FORECAST_FLAGS = {"input_path": "JOBS", "output_path": "--output", "require_tokens": "--plot"}


@app.command()
def forecast(
    jobs: Path = typer.Argument(..., help="Jobs table (.csv or .parquet): one job per row in canonical column names "
                                          "(or a 'model' preset column); optional 'tokens', 'price_per_gpu_hour', "
                                          "'team'. Other columns are passed through."),
    output: Path = typer.Option(..., "-o", "--output", help="Output table (.csv or .parquet), written atomically."),
    checkpoint: str = CheckpointOpt,
    summary: bool = typer.Option(False, "--summary", help="Print totals per GPU type (and per team)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw cost per job (the 50 most expensive) to this "
                                                              ".png/.svg/.pdf."),
    devices: str = typer.Option("numpy", "--devices", help="'numpy' (default, no JAX), 'all' to shard rows over "
                                                           "all local JAX devices, or a JAX device count."),
    price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour",
                                                       help="Price for rows without a price_per_gpu_hour value."),
    chunk_rows: int = typer.Option(65536, "--chunk-rows", help="Rows per chunk (memory grows with this)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Forecast every job in a table: time per iteration, tokens/s, MFU, memory, fit, and (with
    tokens) days, GPU-hours and cost. Invalid rows keep their place with an 'error'."""
    from vtrain.tables.forecast import forecast_file

    if plot is not None and plot.suffix.lower() not in PLOT_FORMATS:
        raise UserError(f"--plot: '{plot}' must end in {', '.join(PLOT_FORMATS)}")
    price_flag("--price-per-gpu-hour", price_per_gpu_hour)
    with parameters_as_flags(FORECAST_FLAGS):
        report = forecast_file(jobs, output, checkpoint=checkpoint, devices=devices, chunk_rows=chunk_rows,
                               default_price=price_per_gpu_hour, progress=progress and sys.stderr.isatty(),
                               require_tokens=plot is not None)
    rate = report.rows / report.seconds * 60 if report.seconds > 0 else 0.0
    print(f"{report.rows:,} jobs ({report.valid:,} valid, {report.rows - report.valid:,} with an error) in "
          f"{report.seconds:.1f} s ({rate:,.0f} rows/min, {report.devices} device(s)) -> {output}", file=sys.stderr)
    if summary:
        print_summary(report)
    if plot is not None:
        draw_plot(report, plot)
        print(f"plot -> {plot}", file=sys.stderr)


def print_summary(report) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Forecast totals")
    table.add_column("gpu")
    if report.has_team:
        table.add_column("team")
    for name in ("jobs", "valid", "GPU-hours", "cost", "mean MFU"):
        table.add_column(name, justify="right")
    totals = [0, 0, 0.0, 0.0, 0.0, 0, 0]

    def cells(acc):
        jobs, valid, gpu_hours, cost, mfu_sum, with_hours, with_cost = acc
        mean_mfu = f"{mfu_sum / valid * 100:.1f} %" if valid else "-"
        if not report.has_cost:
            money = ("-", "-")
        else:  # 'n/a' for jobs without tokens (GPU-hours) or without a price (cost), never a 0 for them
            if not (math.isfinite(gpu_hours) and math.isfinite(cost)):  # each row is finite; a sum can overflow
                raise UserError("--summary: the GPU-hour or cost total overflows a float; check the tokens and "
                                "price_per_gpu_hour columns for absurd values")
            hours = f"{gpu_hours:,.0f}" if with_hours else "n/a"
            price_missing = int(with_hours - with_cost)
            money_cell = "n/a" if not with_cost else f"{cost:,.0f}" + (f" (+{price_missing:,} n/a)"
                                                                      if price_missing else "")
            money = (hours, money_cell)
        return [f"{int(jobs):,}", f"{int(valid):,}", *money, mean_mfu]

    for (gpu, team), acc in sorted(report.groups.items()):
        table.add_row(gpu, *([team or "-"] if report.has_team else []), *cells(acc))
        totals = [t + a for t, a in zip(totals, acc)]
    table.add_section()
    table.add_row("total", *([""] if report.has_team else []), *cells(totals))
    if report.has_cost and totals[6] < totals[1]:
        table.caption = ("n/a: jobs without tokens (no GPU-hours) or without a price (no cost; give a "
                         "price_per_gpu_hour column or --price-per-gpu-hour)")
    Console().print(table)


def draw_plot(report, path: Path) -> None:
    """Horizontal bars of the most expensive jobs, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values, labels = report.top_value, report.top_label
    if not len(values):
        raise UserError("--plot: no job has a cost to plot; every row has an error or lacks tokens")
    metric = "cost" if report.top_metric == "cost" else "GPU-hours (no price given)"
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.22 * len(values) + 1.2)))
    ax.barh(range(len(values)), values, color="tab:blue")
    ax.set_yticks(range(len(values)), [str(x) for x in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(metric)
    shown = f"top {len(values)} of {report.valid:,} valid jobs" if report.valid > len(values) else "all valid jobs"
    ax.set_title(f"{metric} per job ({shown})")
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lower().lstrip(".")))
    finally:
        plt.close(fig)
