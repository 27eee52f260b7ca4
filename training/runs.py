"""Turn `runs` rows (measured iteration times) into simulator inputs and evaluation groups."""
from __future__ import annotations

import numpy as np
import pandas as pd

from vtrain.costmodel.encode import encode
from vtrain.costmodel.spec import ALL_FIELDS, build_config

SHAPE_COLUMNS = ("arch", "num_layers", "hidden_size", "num_attention_heads", "seq_len")


def runs_to_configs(runs: pd.DataFrame) -> list:
    """Validated TrainConfig per row (rows were validated on import, so this does not fail)."""
    cols = [c for c in ALL_FIELDS if c in runs.columns]
    return [build_config({k: v for k, v in row.items() if not _is_missing(v)}) for row in runs[cols].to_dict("records")]


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def encode_runs(runs: pd.DataFrame) -> dict[str, np.ndarray]:
    """Simulator input arrays for every row of a `runs` table."""
    return encode(runs_to_configs(runs))


def shape_key(runs: pd.DataFrame) -> pd.Series:
    """One label per model shape (arch, layers, hidden, heads, seq): the grouped-CV unit."""
    return runs[list(SHAPE_COLUMNS)].astype(str).agg("-".join, axis=1)


def setting_label(runs: pd.DataFrame) -> pd.Series:
    """'single-node' for runs inside one node, else 'multi-node': the reporting groups."""
    return np.where(runs["num_gpus"] <= runs["gpus_per_node"], "single-node", "multi-node")
