"""`vtrain fit` (train the correction, write a checkpoint) and `vtrain validate` (held-out accuracy)."""
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from vtrain.cli.app import app

# In the working directory: a fit never writes into the installed package unless asked to.
DEFAULT_OUTPUT = Path("vtrain-checkpoint.npz")


def _shipped_checkpoint_dirs() -> set[Path]:
    """The folders `--checkpoint NAME` reads shipped checkpoints from (the package's checkpoints/)."""
    from vtrain.costmodel.checkpoint import CHECKPOINT_DIR

    dirs = {CHECKPOINT_DIR.resolve()}
    try:
        from importlib.resources import files

        dirs.add(Path(str(files("vtrain.checkpoints"))).resolve())
    except ModuleNotFoundError:
        pass
    return dirs


def check_output(output: Path, replace_shipped: bool) -> None:
    """Refuse to write into the installed package's checkpoints/ folder (where the shipped
    default lives) unless --replace-shipped is given."""
    from vtrain.costmodel.errors import UserError

    target = output if output.suffix == ".npz" else output.with_suffix(".npz")
    folder = target.resolve().parent
    if folder in _shipped_checkpoint_dirs() and not replace_shipped:
        raise UserError(f"--output: '{output}' is in the installed package's checkpoints folder ({folder}), "
                        "where the shipped model lives; write elsewhere (e.g. -o my-checkpoint.npz) or pass "
                        "--replace-shipped to replace it on purpose")


def coverage_notes(ds) -> list[str]:
    """What a fit on `ds` can learn and what stays analytical, one line each."""
    from vtrain.costmodel.correction import OP_CLASSES

    notes = []
    trained_classes = sorted(ds.kernels.by_class) if ds.kernels.rows else []
    if len(ds.runs) == 0:
        learned = []
        if trained_classes:
            learned.append(f"op efficiencies of {', '.join(trained_classes)} from {ds.kernels.rows} kernels")
        if ds.collectives.rows:
            learned.append(f"collective bandwidth/latency from {ds.collectives.rows} collectives")
        notes.append(f"note: the dataset has no runs: this fit learns only {' and '.join(learned)}, as measured "
                     "standalone; what a training iteration adds (in-situ kernels, overlap, framework overhead: "
                     "the in-situ and global terms) stays analytical; import measured iteration times "
                     "(`vtrain dataset import`) to learn it")
    missing = [cls for cls in OP_CLASSES if cls not in trained_classes]
    if missing and (ds.kernels.rows or len(ds.runs) == 0):
        notes.append(f"note: no kernels of {', '.join(missing)}: their op efficiencies keep the analytical default"
                     + ("" if len(ds.runs) == 0 else " except for what the runs teach"))
    if ds.collectives.rows == 0:
        notes.append("note: no collectives: the collective network keeps the analytical bandwidths and latencies")
    return notes


@app.command()
def fit(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory (from `vtrain dataset import` / `vtrain profile`)."),
    output: Path = typer.Option(DEFAULT_OUTPUT, "--output", "-o", help="Checkpoint path (.npz; a .json with "
                                "the metadata is written beside it). Use it with predict --checkpoint PATH."),
    replace_shipped: bool = typer.Option(False, "--replace-shipped", help="Allow writing into the installed "
                                         "package's checkpoints folder (e.g. replacing the shipped default)."),
    steps: int = typer.Option(6000, "--steps", help="Maximum Adam steps (early stopping may end sooner)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (training is deterministic for a seed)."),
    intervals: bool = typer.Option(False, "--intervals", help="Also calibrate the 90 % prediction intervals (the "
                                   "runs-only grouped CV of this recipe, 5 folds: about 5x the fit's time; "
                                   "`vtrain calibrate` does it later)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Train the learned correction on a dataset and write a checkpoint atomically."""
    from vtrain.costmodel.errors import UserError

    if steps <= 0:
        raise UserError(f"--steps: {steps} must be a positive number of steps, e.g. 6000")
    from vtrain import __version__
    from vtrain.costmodel import checkpoint as ckpt
    from vtrain.training.data import load_dataset
    from vtrain.training.fit import FitSettings
    from vtrain.training.train import train

    check_output(output, replace_shipped)
    from vtrain.dataset.store import check_output_dir

    check_output_dir(output.parent, "--output")  # refuse an unwritable place before training
    settings = FitSettings(steps=steps, seed=seed, progress=not quiet)
    ds = load_dataset(dataset_dir, seed=seed)
    for note in coverage_notes(ds):
        typer.echo(note, err=True)
    # report["validation"]: figures on the fit's own held-out slice (rows early stopping watched,
    # never trained on)
    params, report = train(ds, settings)
    meta = dict(
        vtrain_version=__version__, data_hash=ds.fingerprint, dataset_dir=str(dataset_dir), sources=ds.sources,
        command=f"vtrain fit {dataset_dir} -o {output} --steps {steps} --seed {seed}"
                + (" --replace-shipped" if replace_shipped else "") + (" --intervals" if intervals else ""), **report,
    )
    if intervals:
        from vtrain.cli.calibrate_cmd import calibrate_checkpoint, published_runs

        calibration, _ = calibrate_checkpoint(ds, settings, 5, published=published_runs(None))
        if calibration is None:
            typer.echo("note: --intervals needs runs of at least two model shapes; no intervals stored", err=True)
        else:
            meta["intervals"] = dict(calibration, data_hash=ds.fingerprint)
    validation = report["validation"]
    path = ckpt.save(output, params, meta)
    typer.echo(f"wrote {path} and {path.with_suffix('.json')} ({report['parameters']} parameters, "
               f"{report['rows']['runs']} runs, {report['rows']['kernels']} kernels, "
               f"{report['rows']['collectives']} collectives, {report['seconds']} s)")
    if validation:
        v = validation["runs_holdout"]
        typer.echo(f"held-out runs (random {settings.validation_fraction:.0%}): MAPE {v['mape']:.2f}%, "
                   f"median {v['median']:.2f}%, p90 {v['p90']:.2f}%  (grouped CV: `vtrain validate`)")


@app.command()
def validate(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory with `runs` (and kernels/collectives)."),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", "-c", help="Also score this checkpoint "
                                             "directly on the dataset's rows (e.g. new hardware it never saw)."),
    folds: Optional[int] = typer.Option(None, "--folds", "-k", help="Folds grouped by model shape (default: "
                                                                     "leave one shape out)."),
    steps: int = typer.Option(6000, "--steps", help="Maximum Adam steps per fold (the same recipe as `vtrain fit`)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (kernel subsampling, initial weights, "
                                                 "batches): the same seed gives the same figures."),
    with_measurements: bool = typer.Option(True, "--kernels/--no-kernels", help="Hold out kernel and collective "
                                           "shape groups in each fold too and score them (--no-kernels: runs only, "
                                           "every fold trains on all measurements; faster)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Save a predicted-vs-measured scatter (PNG)."),
    published: Optional[Path] = typer.Option(None, "--published", help="Public runs (published/runs.csv) for the "
                                             "interval coverage table (default: the shared data's, if present); "
                                             "scored with --checkpoint (default: the shipped one)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or per-fold lines on stderr "
                                                             "(the tables or --json still print)."),
):
    """Cross-validated accuracy: MAPE, median and p90 error per group, held out by model shape."""
    from rich.console import Console

    from vtrain.costmodel.errors import UserError
    from vtrain.training.data import load_dataset
    from vtrain.training.fit import FitSettings
    from vtrain.training.validation import validate as run_validation

    if folds is not None and folds < 2:
        raise UserError(f"--folds: {folds} must be at least 2 (or omit it for leave-one-shape-out)")
    if plot is not None:
        from vtrain.dataset.store import check_output_dir

        check_output_dir(plot.parent, "--plot")  # refuse an unwritable place before cross-validating
    settings = FitSettings(steps=steps, seed=seed, progress=not quiet)
    ds = load_dataset(dataset_dir, seed=seed)
    console = Console()

    def on_fold(what):
        """A progress line on stderr after each fold (not with --quiet)."""
        def report(fold, count, rows, mape, seconds):
            if not quiet:
                score = f", held-out MAPE {mape:.2f} %" if mape is not None else ""
                print(f"{what}: fold {fold + 1}/{count} done ({rows} runs held out{score}, {seconds:.0f} s)",
                      file=sys.stderr, flush=True)
        return report

    def show(title, rows, baseline_rows):
        """Print one table as soon as its figures are ready (not with --json: one object at the end)."""
        if not as_json:
            _print_validation_table(console, title, rows, baseline_rows)

    result = run_validation(ds, settings, folds, checkpoint, with_measurements, on_fold=on_fold, on_table=show)
    figures = result.figures
    if plot and result.grouped_cv is not None:
        from vtrain.training.evaluate import plot_predictions

        plot_predictions(result.grouped_cv, plot)
    if len(ds.runs):
        figures["interval_coverage"] = _interval_coverage(result.grouped_cv, ds.runs, published, checkpoint)
    if as_json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
        return
    if figures.get("interval_coverage"):
        from rich.table import Table

        table = Table(title="90 % prediction interval: coverage of held-out runs (target 85-95 %)")
        for col in ("predictor", "group", "rows", "coverage %", "median width %"):
            table.add_column(col, justify="left" if col in ("predictor", "group") else "right")
        for r in figures["interval_coverage"]:
            table.add_row(r["predictor"], r["group"], str(r["rows"]), f"{r['coverage']:.1f}", f"{r['median_width']:.1f}")
        console.print(table)
    if plot and "grouped_cv" in figures:
        console.print(f"wrote {plot}")


def _print_validation_table(console, title: str, rows: list, baseline_rows) -> None:
    from rich.table import Table

    base = {r["group"]: r["mape"] for r in baseline_rows} if baseline_rows else {}
    table = Table(title=title)
    for col in ("group", "rows", "MAPE %", "median %", "p90 %") + (("analytical MAPE %",) if base else ()) + \
            ("vTrain paper MAPE %",):
        table.add_column(col, justify="left" if col == "group" else "right")
    for r in rows:
        cells = [r["group"], str(r["rows"]), f"{r['mape']:.2f}", f"{r['median']:.2f}", f"{r['p90']:.2f}"]
        if base:
            cells.append(f"{base.get(r['group'], float('nan')):.2f}")
        published = r.get("vtrain_published")
        cells.append(f"{published:.2f}" if isinstance(published, (int, float)) and published == published else "")
        table.add_row(*cells)
    console.print(table)


def _interval_coverage(cv, runs, published: Optional[Path], checkpoint: Optional[str]) -> list[dict]:
    """Rows of training/intervals.coverage_report: the grouped-CV residuals, the public runs (scored with
    `checkpoint`, default the shipped one) and the analytical predictor."""
    from vtrain.costmodel.predictor import Predictor
    from vtrain.training.intervals import coverage_report
    from vtrain.training.published import default_path, load_published

    path = published or default_path()
    pub = load_published(path)[0] if path else None
    predictor = Predictor.load(checkpoint or "default")
    return coverage_report(cv, runs, pub, predictor.correction, predictor.calibration,
                           checkpoint=f"checkpoint {predictor.name}")
