"""The validation protocol behind `vtrain validate`: which held-out evaluations run on a dataset.

- analytical: the physics alone on every run (the baseline);
- grouped CV by model shape (needs two shapes): runs, kernels and collectives held out together, or
  runs only (`with_measurements=False`, every fold starts from a fit on all measurements);
- leave-one-GPU-count-out on multi-node runs (needs two counts);
- a given checkpoint scored directly (rows it trained on are not held out);
- kernels and collectives held out by shape group (final model and pre-trained stage).
Errors are MAPE / median / p90 in %, per group (evaluate.summarize).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import pandas as pd

from vtrain.training import evaluate as ev
from vtrain.training.data import Dataset
from vtrain.training.fit import FitSettings


@dataclass
class ValidationResult:
    """figures: JSON-ready summaries by evaluation name; tables: (title, rows, analytical rows or None)
    in display order; grouped_cv: the grouped-CV run predictions (None without two shapes)."""

    figures: dict = field(default_factory=dict)
    tables: list = field(default_factory=list)
    grouped_cv: pd.DataFrame | None = None


def validate(ds: Dataset, settings: FitSettings, folds: int | None = None, checkpoint: str | None = None,
             with_measurements: bool = True) -> ValidationResult:
    """Run the protocol on `ds` with the fit recipe `settings`; `folds` None = leave one shape out."""
    out = ValidationResult()
    figures, tables = out.figures, out.tables
    measured = None
    if len(ds.runs):
        baseline = ds.runs.assign(predicted_s=ev.predict_runs(ds.runs, None),
                                  setting=ev.setting_label(ds.runs), shape=ev.shape_key(ds.runs))
        figures["analytical"] = ev.summarize(baseline).to_dict("records")
        # Pre-trained on all measurements, for the splits that hold out runs only (computed once, if needed)
        pretrained = functools.cache(lambda: ev.pretrain(ds, settings))
        if ev.shape_key(ds.runs).nunique() > 1:  # holding out a shape needs another one to train on
            if with_measurements:
                cv, measured = ev.cross_validate(ds, settings, folds)
            else:
                cv = ev.cross_validate_runs(ds, settings, folds, init=pretrained())
            out.grouped_cv = cv
            figures["grouped_cv"] = ev.summarize(cv).to_dict("records")
            split = "runs, kernels and collectives held out together" if with_measurements else "runs held out"
            tables.append((f"Grouped CV by model shape ({split})", figures["grouped_cv"], figures["analytical"]))
        multi = ev.setting_label(ds.runs) == "multi-node"
        if ds.runs.loc[multi, "num_gpus"].nunique() > 1:
            gpus = ev.cross_validate_runs(ds, settings, init=pretrained(), split="gpus")
            figures["leave_one_gpu_count_out"] = ev.summarize(gpus).to_dict("records")
            tables.append(("Leave-one-GPU-count-out (multi-node runs)", figures["leave_one_gpu_count_out"], None))
        if checkpoint:
            from vtrain.costmodel.checkpoint import load

            params, _ = load(checkpoint)
            direct = ds.runs.assign(predicted_s=ev.predict_runs(ds.runs, params), setting=ev.setting_label(ds.runs),
                                    shape=ev.shape_key(ds.runs))
            figures["checkpoint"] = ev.summarize(direct).to_dict("records")
            tables.append((f"Checkpoint {checkpoint} scored directly (rows it trained on are not held out)",
                           figures["checkpoint"], None))
    if with_measurements and (ds.kernels.rows or ds.collectives.rows):
        if measured is None:  # no grouped run CV above: hold out measurement groups only (trained without runs)
            _, measured = ev.cross_validate(replace(ds, runs=ds.runs.iloc[:0]), settings, folds or 5)
        final = measured[measured["stage"] == "final"]
        figures["kernels_collectives_cv"] = ev.summarize_measurements(final).to_dict("records")
        figures["kernels_collectives_cv_pretrained"] = ev.summarize_measurements(
            measured[measured["stage"] == "pre-trained"]).to_dict("records")
        tables.append(("Kernels and collectives, held-out shapes (the same folds; the trained model, standalone)",
                       figures["kernels_collectives_cv"], None))
    return out
