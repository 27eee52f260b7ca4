"""Load a dataset directory into what the fit needs, and fingerprint it."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vtrain.costmodel.errors import UserError
from vtrain.dataset import store
from vtrain.training.fit import FitData
from vtrain.training.measurements import (CollectiveSet, KernelSet, collective_set, kernel_set,
                                          subsample_collectives, subsample_kernels)
from vtrain.training.runs import encode_runs, setting_label

MAX_KERNEL_ROWS = 15000  # per fit: a uniform sample keeps training under a few minutes on 2 cores
MAX_COLLECTIVE_ROWS = 8000


@dataclass
class Dataset:
    runs: pd.DataFrame
    kernels: KernelSet
    collectives: CollectiveSet
    fingerprint: str
    sources: dict  # table -> sorted list of the `source` labels its rows came from


def fingerprint(dataset_dir: Path) -> str:
    """sha256 over the dataset's parquet part files (names and bytes)."""
    digest = hashlib.sha256()
    for table in ("runs", "kernels", "collectives"):
        for part in sorted(store.part_files(dataset_dir, table)):
            digest.update(f"{table}/{part.name}".encode())
            digest.update(part.read_bytes())
    return digest.hexdigest()


def load_dataset(dataset_dir: str | Path, seed: int = 0) -> Dataset:
    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise UserError(f"DATASET_DIR: '{dataset_dir}' is not a directory; create one with "
                        "`vtrain dataset import SRC... -o DATASET_DIR`")
    runs = store.load(dataset_dir, "runs").reset_index(drop=True)
    kernel_rows, collective_rows = store.load(dataset_dir, "kernels"), store.load(dataset_dir, "collectives")
    kernels = subsample_kernels(kernel_set(kernel_rows), MAX_KERNEL_ROWS, seed)
    collectives = subsample_collectives(collective_set(collective_rows), MAX_COLLECTIVE_ROWS, seed)
    sources = {name: sorted(frame["source"].astype(str).unique().tolist())
               for name, frame in (("runs", runs), ("kernels", kernel_rows), ("collectives", collective_rows))}
    if len(runs) == 0 and kernels.rows == 0 and collectives.rows == 0:
        raise UserError(f"DATASET_DIR: '{dataset_dir}' has no usable runs, kernels or collectives rows; import "
                        "measurements with `vtrain dataset import` or `vtrain profile`")
    return Dataset(runs, kernels, collectives, fingerprint(dataset_dir), sources)


def balanced_run_weights(runs: pd.DataFrame) -> np.ndarray:
    """Equal total weight for single-node and multi-node runs (multi-node rows are few)."""
    labels = pd.Series(setting_label(runs))
    return (1.0 / labels.map(labels.value_counts())).to_numpy(dtype=np.float64)


def fit_data(ds: Dataset, runs: pd.DataFrame | None = None, with_measurements: bool = True) -> FitData:
    runs = ds.runs if runs is None else runs
    if len(runs):
        d, times, weights = encode_runs(runs), runs["iteration_time_s"].to_numpy(np.float64), balanced_run_weights(runs)
    else:
        d = times = weights = None
    kernels = ds.kernels if with_measurements and ds.kernels.rows else None
    collectives = ds.collectives if with_measurements and ds.collectives.rows else None
    return FitData(d, times, kernels, collectives, weights)
