"""`vtrain calibrate`: prediction intervals for a checkpoint (or the analytical predictor) from
held-out residuals, stored with it."""
from pathlib import Path
from typing import Optional

import typer

from vtrain.cli.app import app


def calibrate_checkpoint(ds, settings, folds: int, init=None, published=None):
    """(calibration dict, residual frame): the runs-only grouped CV of the `vtrain fit` recipe (folds by
    model shape, every fold trained on all kernels and collectives, pre-trained once with `init`),
    its held-out log ratios calibrated per setting (training/intervals.py). The stored held-out
    coverage is that of the interval a prediction shows: blended with the analytical calibration of
    the other shapes and the public runs `published` (a runs table, or None)."""
    from vtrain.training import evaluate as ev
    from vtrain.training import intervals as iv

    if ev.shape_key(ds.runs).nunique() < 2:
        return None, None
    if init is None:
        init = ev.pretrain(ds, settings)
    cv = ev.cross_validate_runs(ds, settings, folds, init=init)
    frame = iv.residual_frame(cv)
    cal = iv.calibrate(frame["log_ratio"], frame["setting"], frame["distance"])
    _, covered, _ = iv.cv_blended_coverage(cv, iv.analytical_leave_one_out(*iv.analytical_rows(ds.runs, published)))
    cal["coverage_leave_one_group_out"] = iv.coverage_by_setting(covered, frame["setting"])
    cal["method"] = (f"split conformal on log(measured/predicted), symmetric about the median, of the runs-only "
                     "grouped CV by model shape "
                     f"({cv['fold'].nunique()} folds, seed {settings.seed}, at most {settings.steps} steps); "
                     "scores divided by 1 + widening * domain distance")
    return cal, frame


@app.command()
def calibrate(
    dataset_dir: Path = typer.Argument(..., help="Dataset directory with `runs` (the one the checkpoint was fitted on)."),
    checkpoint: str = typer.Option(..., "--checkpoint", "-c", help="Checkpoint whose .json gets the intervals "
                                   "('default', a .npz path), or 'none' for the analytical predictor."),
    published: Optional[Path] = typer.Option(None, "--published", help="Public runs (published/runs.csv) added to the "
                                             "analytical calibration, which a checkpoint's intervals blend in where "
                                             "its correction fades (default: the shared data's, if present)."),
    folds: int = typer.Option(5, "--folds", "-k", help="Folds grouped by model shape."),
    replace_shipped: bool = typer.Option(False, "--replace-shipped", help="Allow writing into the installed "
                                         "package's checkpoints folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Calibrate 90 % prediction intervals from held-out residuals and store them with the checkpoint."""
    from vtrain.cli.fit_cmd import check_output
    from vtrain.costmodel import checkpoint as ckpt
    from vtrain.costmodel.errors import UserError
    from vtrain.training import intervals as iv
    from vtrain.training.data import load_dataset
    from vtrain.training.fit import FitSettings

    if folds < 2:
        raise UserError(f"--folds: {folds} must be at least 2")
    ds = load_dataset(dataset_dir)
    if not len(ds.runs):
        raise UserError(f"DATASET_DIR: '{dataset_dir}' has no runs; intervals are calibrated on measured iteration "
                        "times (`vtrain dataset import`)")
    analytical = checkpoint.lower() in ("none", "analytical")
    if analytical:
        target = ckpt.shipped_dir() / ckpt.ANALYTICAL_INTERVALS
        check_output(target.with_suffix(".npz"), replace_shipped)
        pub = published_runs(published)
        frame, features = iv.analytical_rows(ds.runs, pub)
        cal = iv.analytical_calibration(frame, features)
        covered, _ = iv.analytical_coverage(frame, features)
        public = frame["group"].str.startswith("published:").to_numpy()
        cal["coverage_leave_one_group_out"] = iv.coverage_by_setting(covered[~public], frame["setting"][~public])
        if public.any():
            cal["coverage_leave_one_group_out"]["public"] = round(float(covered[public].mean() * 100), 1)
        cal.update(method="split conformal on log(measured/predicted), symmetric about the median, of the analytical "
                          "model on every run "
                          "(no fitted parameters); the feature range of those runs, beyond which the far widening "
                          "applies; coverage: leave one model shape / public source out",
                   data_hash=ds.fingerprint, published_rows=0 if pub is None else len(pub))
        path = ckpt.write_json(target, cal)
    else:
        path = ckpt.resolve_path(checkpoint)
        params, meta = ckpt.load(path)
        check_output(path, replace_shipped)
        stored = meta.get("settings", {})
        settings = FitSettings(steps=int(stored.get("steps", 6000)), seed=int(stored.get("seed", 0)),
                               ema_decay=float(stored.get("ema_decay", 0.0)),  # checkpoints before it had none
                               progress=not quiet)
        if meta.get("data_hash") not in (None, ds.fingerprint):
            typer.echo(f"note: '{dataset_dir}' is not byte for byte the dataset '{path}' was fitted on "
                       "(data hash differs); the intervals describe this dataset's recipe", err=True)
        cal, _ = calibrate_checkpoint(ds, settings, folds, published=published_runs(published))
        if cal is None:
            raise UserError(f"DATASET_DIR: '{dataset_dir}' has runs of one model shape only; holding one out for "
                            "honest residuals needs at least two")
        cal["data_hash"] = ds.fingerprint
        path = ckpt.set_intervals(path, cal)
    typer.echo(f"wrote the intervals into {path}: {_describe(cal)}")


def published_runs(path):
    from vtrain.training.published import default_path, load_published

    path = path or default_path()
    return None if path is None else load_published(path)[0]


def _describe(cal: dict) -> str:
    parts = []
    for name, pair in cal["log_ratio"].items():
        rows = cal["rows"].get(name, 0)
        if pair is None:
            parts.append(f"{name}: none ({rows} rows, too few)")
        else:
            import math

            parts.append(f"{name} {math.exp(pair[0]) * 100 - 100:+.1f} / {math.exp(pair[1]) * 100 - 100:+.1f} % "
                         f"({rows} rows)")
    covered = ", ".join(f"{k} {v:.1f} %" for k, v in cal.get("coverage_leave_one_group_out", {}).items())
    return "; ".join(parts) + f"; widening {cal['widening']:g} ({cal['widening_choice']}); held-out coverage {covered}"
