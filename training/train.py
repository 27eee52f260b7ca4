"""The whole training recipe behind `vtrain fit`: pre-train on kernels and collectives, then
train end to end on measured iterations together with them."""
from __future__ import annotations

import time
from dataclasses import asdict, replace

from vtrain.costmodel.correction import N_COLLECTIVE_FEATURES, N_OP_FEATURES, N_RUN_FEATURES
from vtrain.training.data import Dataset, fit_data
from vtrain.training.fit import FitSettings, fit
from vtrain.training.model import param_count, to_numpy

PRETRAIN_STEPS = 600
FEATURES = {
    "ops": ["log2 m", "log2 n", "log2 k", "log2 batch", "log2 FLOP", "log2 bytes", "log2 FLOP/byte",
            "log2 peak FLOP/s", "log2 HBM bytes/s"],
    "collectives": ["log2 bytes", "log2 group", "crosses node", "log2 link bytes/s", "op one-hot x5"],
    "global": ["log2 tp", "log2 pp", "log2 dp", "log2 micro_batch", "log2 micro-batches", "log2 hidden",
               "log2 seq", "log2 layers/stage", "recompute", "sequence parallel"],
}
assert len(FEATURES["ops"]) == N_OP_FEATURES and len(FEATURES["global"]) == N_RUN_FEATURES
assert N_COLLECTIVE_FEATURES == 9


def pretrain(ds: Dataset, settings: FitSettings) -> dict | None:
    """Correction trained on kernels and collectives only (None if the dataset has neither)."""
    data = fit_data(ds, runs=ds.runs.iloc[:0])
    if data.kernels is None and data.collectives is None:
        return None
    return fit(data, pretrain_settings(settings)).params


def pretrain_settings(settings: FitSettings) -> FitSettings:
    """Pre-training on kernel and collective micro-benchmarks: a short run with a robust (Huber) loss
    on both tables, since single noisy rows (a 2 KB collective at 10x its neighbours' time) are
    common there. (The end-to-end stage keeps the squared error; see FitSettings.robust_tables.)"""
    return replace(settings, steps=min(settings.steps, PRETRAIN_STEPS), robust_tables=("kernels", "collectives"),
                   label="pre-train kernels")


def train(ds: Dataset, settings: FitSettings, runs=None, init: dict | None = None) -> tuple[dict, dict]:
    """(numpy parameters, report) trained on `runs` (default: all runs) plus all measurements."""
    start = time.time()
    if init is None:
        init = pretrain(ds, settings)
    data = fit_data(ds, runs=runs)
    result = fit(data, replace(settings, label="train end to end"), init=init)
    params = to_numpy(result.params)
    report = dict(
        best_step=result.best_step, history=result.history[-5:], seconds=round(time.time() - start, 1),
        validation=result.validation,
        rows=dict(runs=0 if data.runs is None else int(len(data.run_times)), kernels=ds.kernels.rows,
                  collectives=ds.collectives.rows),
        skipped=dict(kernels=ds.kernels.skipped, collectives=ds.collectives.skipped),
        parameters=param_count(params), settings=asdict(settings), pretrain_settings=asdict(pretrain_settings(settings)),
        features=FEATURES,
    )
    return params, report
