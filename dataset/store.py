"""Parquet store: DATASET_DIR/{runs,kernels,collectives}/part-*.parquet.

Appending never rewrites existing files: it writes one new part file (temp file in the same
folder, then `os.replace`) holding only rows whose dedupe key (`schema.key_columns`: every
column except the time/spread/repeats columns and `source`) is not already stored.
The first measurement of a (configuration, hardware) wins.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vtrain.costmodel.atomic import atomic_path
from vtrain.costmodel.errors import UserError, user_file
from vtrain.dataset.schema import SCHEMAS, TABLES, columns, key_columns


def _check_table(table: str) -> None:
    if table not in TABLES:
        raise UserError(f"table '{table}' is unknown; use one of {', '.join(TABLES)}")


def to_arrow(df: pd.DataFrame, table: str) -> pa.Table:
    """`df` as an arrow table with exactly the schema of `table` (missing columns raise UserError)."""
    _check_table(table)
    missing = [c for c in columns(table) if c not in df.columns]
    if missing:
        raise UserError(f"{table} rows lack column(s) {', '.join(missing)}")
    return pa.Table.from_pandas(df[columns(table)], schema=SCHEMAS[table], preserve_index=False)


def conform(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """`df` with the schema's columns, order and dtypes (round trip through arrow)."""
    return to_arrow(df, table).to_pandas()


def empty(table: str) -> pd.DataFrame:
    """An empty frame with the columns and dtypes of `table`."""
    return SCHEMAS[table].empty_table().to_pandas()


def check_output_dir(dataset_dir: str | Path, flag: str = "dataset_dir") -> None:
    """Refuse (UserError starting with `flag`: the caller's name for the folder, e.g. the CLI's
    --output) a dataset folder that cannot be created or written, before any work."""
    path = Path(dataset_dir)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UserError(f"{flag}: cannot write '{path}' ('{probe}' is a file, not a folder); choose another folder")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{flag}: cannot write '{path}' (no write permission on '{probe}'); choose a writable folder")


def part_files(dataset_dir: str | Path, table: str) -> list[Path]:
    return sorted((Path(dataset_dir) / table).glob("part-*.parquet"))


def load(dataset_dir: str | Path, table: str) -> pd.DataFrame:
    """All rows of `table` in the store (an empty frame with the schema's columns if none)."""
    _check_table(table)
    with user_file(dataset_dir, "dataset"):
        parts = part_files(dataset_dir, table)
        if not parts:
            return empty(table)
        tables = []
        for p in parts:
            try:
                tables.append(pq.read_table(p, schema=SCHEMAS[table]))
            except pa.ArrowException as err:
                raise UserError(f"dataset: '{p}' is not a readable {table} parquet part ({err}); remove it or "
                                "re-import") from None
    return pa.concat_tables(tables).to_pandas()


def _row_keys(df: pd.DataFrame, table: str) -> pd.Series:
    return pd.util.hash_pandas_object(df[key_columns(table)], index=False)


def new_rows(dataset_dir: str | Path, table: str, df: pd.DataFrame) -> pd.DataFrame:
    """Rows of `df` (conformed) not yet in the store, duplicates within `df` dropped (first kept)."""
    df = conform(df, table)
    keys = _row_keys(df, table)
    stored = load(dataset_dir, table)
    fresh = ~keys.duplicated()
    if len(stored):
        fresh &= ~keys.isin(set(_row_keys(stored, table)))
    return df[fresh.to_numpy()].reset_index(drop=True)


def write_part(dataset_dir: str | Path, table: str, df: pd.DataFrame) -> int:
    """Write `df` as one new part file, atomically; no dedupe. Returns rows written. An unwritable
    folder is a ParameterError naming `dataset_dir` (the CLI names its own flag)."""
    if len(df) == 0:
        return 0
    folder = Path(dataset_dir) / table
    with user_file(folder, "dataset_dir", "write", parameter=True):
        folder.mkdir(parents=True, exist_ok=True)
    arrow = to_arrow(df, table)
    part = folder / f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
    with atomic_path(part, "dataset_dir", parameter=True) as tmp, \
            user_file(part, "dataset_dir", "write", parameter=True):
        pq.write_table(arrow, tmp)
    return len(df)


def append(dataset_dir: str | Path, table: str, df: pd.DataFrame) -> int:
    """Append the rows of `df` that are new to the store as one new part file; returns rows written."""
    return write_part(dataset_dir, table, new_rows(dataset_dir, table, df))
