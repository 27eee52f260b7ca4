"""The whole training recipe behind `vtrain fit`: pre-train the op and collective networks on
kernels and collectives, then train the in-situ and global terms end to end on measured iterations
(see costmodel/correction.py for the two levels)."""
from __future__ import annotations

import time
from dataclasses import asdict, replace

from vtrain.costmodel.correction import GLOBAL_INPUTS, N_COLLECTIVE_FEATURES, N_OP_FEATURES, N_RUN_FEATURES
from vtrain.training.data import Dataset, fit_data
from vtrain.training.fit import MEASUREMENT_NETWORKS, FitData, FitSettings, fit
from vtrain.training.model import init_correction, param_count, to_numpy

# Pre-training steps (at most) per measurement table. The collective network generalises worse to
# held-out (GPU, network, group size) groups when trained longer (it memorises each system's
# small-message latencies), so it is trained here only and kept fixed afterwards; the op networks
# go on learning from the kernels during the end-to-end stage.
PRETRAIN_STEPS = {"kernels": 600, "collectives": 800}
END_TO_END_NETWORKS = ("ops", "in_situ", "global")
FEATURES = {
    "ops": ["log2 m", "log2 n", "log2 k", "log2 batch", "log2 FLOP", "log2 bytes", "log2 FLOP/byte",
            "log2 peak FLOP/s", "log2 HBM bytes/s"],
    "collectives": ["log2 bytes", "log2 group", "crosses node", "log2 link bytes/s", "op one-hot x5"],
    "global": ["log2 tp", "log2 pp", "log2 micro_batch", "log2 micro-batches", "log2 hidden",
               "log2 seq", "log2 layers/stage", "recompute", "sequence parallel"],
}
assert len(FEATURES["ops"]) == N_OP_FEATURES and len(FEATURES["global"]) == len(GLOBAL_INPUTS) < N_RUN_FEATURES
assert N_COLLECTIVE_FEATURES == 9


def pretrain(ds: Dataset, settings: FitSettings) -> dict | None:
    """Correction whose op networks are trained on the kernels and whose collective network is
    trained on the collectives (None if the dataset has neither)."""
    data = fit_data(ds, runs=ds.runs.iloc[:0])
    params = None
    for table in PRETRAIN_STEPS:
        measured = getattr(data, table)
        if measured is not None:
            part = FitData(None, None, kernels=measured if table == "kernels" else None,
                           collectives=measured if table == "collectives" else None)
            params = fit(part, pretrain_settings(settings, table), init=params).params
    return params


def pretrain_settings(settings: FitSettings, table: str) -> FitSettings:
    """Pre-training one network on its micro-benchmark table, with a robust (Huber) loss, since single
    noisy rows (a 2 KB collective at 10x its neighbours' time) are common there."""
    return replace(settings, steps=min(settings.steps, PRETRAIN_STEPS[table]), robust_tables=(table,),
                   trainable=(MEASUREMENT_NETWORKS[table],), label=f"pre-train on {table}")


def end_to_end_settings(settings: FitSettings) -> FitSettings:
    """The end-to-end stage: iteration times train the in-situ and global terms, the kernels go on
    training the op networks (gradients routed, see fit.loss_terms); the collective network stays
    as pre-trained."""
    return replace(settings, in_situ=True, robust_tables=("kernels", "collectives"), trainable=END_TO_END_NETWORKS,
                   label="train end to end")


def train(ds: Dataset, settings: FitSettings, runs=None, init: dict | None = None) -> tuple[dict, dict]:
    """(numpy parameters, report) trained on `runs` (default: all runs) plus all measurements."""
    start = time.time()
    if init is None:
        init = pretrain(ds, settings)
    data = fit_data(ds, runs=runs)
    if data.runs is None:  # nothing to train end to end: the pre-trained networks are the model
        params = to_numpy(init if init is not None else init_correction(settings.seed))
        best_step, history, validation = 0, [], {}
    else:
        result = fit(data, end_to_end_settings(settings), init=init)
        params, best_step, history = to_numpy(result.params), result.best_step, result.history[-5:]
        validation = result.validation
    report = dict(
        best_step=best_step, history=history, seconds=round(time.time() - start, 1),
        validation=validation,
        rows=dict(runs=0 if data.runs is None else int(len(data.run_times)), kernels=ds.kernels.rows,
                  collectives=ds.collectives.rows),
        skipped=dict(kernels=ds.kernels.skipped, collectives=ds.collectives.skipped),
        parameters=param_count(params), settings=asdict(end_to_end_settings(settings)),
        pretrain_settings={table: asdict(pretrain_settings(settings, table)) for table in PRETRAIN_STEPS},
        features=FEATURES,
    )
    return params, report
