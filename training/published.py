"""Published training runs (`published/runs.csv`) as an evaluation set: load, predict, summarize by source.

Rows the simulator cannot express are refused at import (`dataset/import_published.py`) and counted
here with their reasons, never dropped silently.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from vtrain.costmodel.errors import UserError
from vtrain.dataset.import_published import FORMAT, REQUIRED_COLUMNS, convert_rows, source_group
from vtrain.dataset.paths import data_root
from vtrain.dataset.readers import read_csv
from vtrain.dataset.rows import check_rows


def default_path() -> Path | None:
    """`published/runs.csv` under the shared data folder, or None."""
    root = data_root()
    path = root / "published" / "runs.csv" if root else None
    return path if path and path.is_file() else None


def load_published(path: str | Path) -> tuple[pd.DataFrame, list[tuple[str, list[str]]]]:
    """(runs table with a `source_id` and `group` column, [(source_id, reasons)] of refused rows)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the published runs.csv (../shared/data/published/runs.csv)")
    runs, refused = convert_rows(read_csv(path, list(REQUIRED_COLUMNS), FORMAT), path.name)
    runs, bad = check_rows("runs", runs)
    if bad:  # the converter only emits positive times; kept for safety
        refused += [("?", [reason]) for reason in bad]
    source_id = runs["source"].str.split("#").str[-1]
    return runs.assign(source_id=source_id, group=source_id.map(source_group)), refused


def signed_errors(pred, measured) -> np.ndarray:
    """Signed error in percent of the measured value (positive = over-predicted)."""
    return (np.asarray(pred, dtype=float) / np.asarray(measured, dtype=float) - 1.0) * 100.0


def _stats(err: np.ndarray) -> dict:
    if not len(err):
        return dict(median=float("nan"), p90=float("nan"), bias=float("nan"))
    return dict(median=float(np.median(np.abs(err))), p90=float(np.percentile(np.abs(err), 90)),
                bias=float(np.mean(err)))


def summarize_by_source(runs: pd.DataFrame, predictions: dict[str, np.ndarray],
                        refused: list[tuple[str, list[str]]]) -> pd.DataFrame:
    """One row per source group and one 'all' row: rows predicted, rows refused (with the top reasons)
    and, per predictor name in `predictions`, the median and p90 of |error| and the mean signed error
    (bias), all in percent."""
    refused_groups = Counter(source_group(sid) for sid, _ in refused)
    reasons_of: dict[str, Counter] = {}
    for sid, reasons in refused:
        reasons_of.setdefault(source_group(sid), Counter()).update(reasons)
    groups = sorted(set(runs["group"]) | set(refused_groups))
    rows = []
    for group in groups + ["all"]:
        mask = np.ones(len(runs), bool) if group == "all" else (runs["group"] == group).to_numpy()
        row = dict(group=group, rows=int(mask.sum()),
                   refused=sum(refused_groups.values()) if group == "all" else refused_groups.get(group, 0))
        for name, pred in predictions.items():
            err = signed_errors(np.asarray(pred)[mask], runs["iteration_time_s"].to_numpy()[mask])
            row.update({f"{name}_{k}": v for k, v in _stats(err).items()})
        counts = sum(reasons_of.values(), Counter()) if group == "all" else reasons_of.get(group, Counter())
        row["top_reasons"] = "; ".join(f"{reason} ({n})" for reason, n in counts.most_common(3))
        rows.append(row)
    return pd.DataFrame(rows)
