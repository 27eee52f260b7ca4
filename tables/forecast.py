"""Batch cost forecasting: one training job per table row, streamed in chunks.

    forecast_file("jobs.parquet", "out.parquet", checkpoint="none")   # CSV or parquet, in and out
    forecast_frame(df)                                                 # pandas in, pandas out

Every input column is kept (in order, rows in order) and these are added:
iteration_time_s with its 90 % prediction interval iteration_time_s_low / _high (null when the
checkpoint has no calibration; costmodel/intervals.py), tokens_per_s, mfu, memory_gib_per_gpu,
fits_memory, correction_weight (the share of the learned correction applied: 1 inside the training
runs, towards 0 outside, where the answer is mostly the analytical model's; null for the analytical
model); with a `tokens` column
also train_days, gpu_hours and cost (gpu_hours * price_per_gpu_hour, from the row's column or
the default price); and `error`, the reason a row could not be forecast (null when it could).
Invalid rows keep their place with null results.

Evaluation is numpy by default. `devices="all"` evaluates each chunk with jax.jit, sharding the
row axis over all local JAX devices (a 1-D jax.sharding.Mesh; the chunk is padded to a multiple
of the device count). For many hosts, run one process per host after jax.distributed.initialize(),
each on its own input shard (see docs/forecast.md).
Output files are written to a temporary file in the output folder and renamed into place at
the end, so a failed run never leaves a partial or clobbered output.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vtrain.costmodel.encode import SimInput
from vtrain.costmodel.errors import ParameterError, UserError, one_line, user_file
from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.atomic import atomic_path
from vtrain.costmodel.cost import training_cost
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import ALL_FIELDS
from vtrain.costmodel.units import GiB
from vtrain.tables.columns import PRESET_COLUMN, as_text_if_nested, check_columns, encode_table

RESULT_COLUMNS = ("iteration_time_s", "iteration_time_s_low", "iteration_time_s_high", "tokens_per_s", "mfu",
                  "memory_gib_per_gpu", "fits_memory", "correction_weight")
COST_COLUMNS = ("train_days", "gpu_hours", "cost")
ERROR_COLUMN = "error"
TOKENS_COLUMN, PRICE_COLUMN, TEAM_COLUMN = "tokens", "price_per_gpu_hour", "team"
LABEL_COLUMNS = ("job", "job_id", "name", "id")
DEFAULT_CHUNK_ROWS = 65536
CSV_BLOCK_BYTES = 1 << 22  # CSV read granularity: 4 MiB blocks (~50k rows of a typical job table)
FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


# ---------------------------------------------------------------- evaluation

class NumpyEvaluator:
    """Simulate encoded rows with numpy (the default: no JAX import, no compilation)."""

    devices = 1

    def __init__(self, predictor: Predictor):
        self.predictor = predictor

    def __call__(self, d: SimInput) -> dict:
        with np.errstate(all="ignore"):
            out = self.predictor.simulate(d)
        return _pick(out, d, np)


def _pick(out: dict, d: SimInput, xp) -> dict:
    shape = d.tp.shape
    return dict(iteration_time_s=xp.broadcast_to(out["iteration_time_s"], shape),
                tokens_per_s=xp.broadcast_to(out["tokens_per_s"], shape),
                mfu=xp.broadcast_to(out["mfu"], shape),
                memory=xp.broadcast_to(out["memory"]["total"], shape),
                fits_memory=xp.broadcast_to(out["fits_memory"], shape))


class ShardedEvaluator:
    """Simulate encoded rows under jax.jit with the row axis sharded over local JAX devices.

    Runs in float64 (jax.enable_x64) so results match the numpy path. Chunks are padded to a
    power of two rows (at least the device count, a multiple of it) to bound recompilations."""

    def __init__(self, predictor: Predictor, devices: str | int = "all"):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        from vtrain.costmodel.simulator import simulate

        local = jax.local_devices()
        if devices in ("all", None):
            chosen = local
        else:
            try:
                count = int(devices)
            except ValueError:
                raise ParameterError("devices", f"'{devices}' must be 'all', 'numpy' or a device count") from None
            if not 1 <= count <= len(local):
                raise ParameterError("devices", f"{count} is out of range; this process has {len(local)} JAX devices")
            chosen = local[:count]
        self.jax = jax
        self.predictor = predictor
        self.devices = len(chosen)
        self.mesh = Mesh(np.array(chosen), ("rows",))
        self.sharding = NamedSharding(self.mesh, PartitionSpec("rows"))
        predictor_ = predictor

        def run(d):
            import jax.numpy as jnp
            out = simulate(d, predictor_.correction, xp=jnp, allreduce_table=predictor_.allreduce_table)
            return _pick(out, d, jnp)

        self._fn = jax.jit(run, in_shardings=(self.sharding,), out_shardings=self.sharding)

    def __call__(self, d: SimInput) -> dict:
        n = d.rows
        size = max(self.devices, 1 << max(n - 1, 0).bit_length())
        size = -(-size // self.devices) * self.devices
        padded = d.map(lambda v: np.concatenate([v, np.repeat(v[:1] if n else np.ones(1), size - n)]))
        with self.jax.enable_x64(True):
            arrays = padded.map(lambda v: self.jax.device_put(v, self.sharding))
            out = self._fn(arrays)
            self.last_device_count = len(out["iteration_time_s"].sharding.device_set)
            return {k: np.asarray(v)[:n] for k, v in out.items()}


def make_evaluator(predictor: Predictor, devices: str | int | None = None):
    """numpy for devices None/'numpy'/'cpu-numpy'; otherwise the sharded JAX evaluator."""
    if devices is None or str(devices).lower() in ("numpy", "none", ""):
        return NumpyEvaluator(predictor)
    return ShardedEvaluator(predictor, devices)


# ---------------------------------------------------------------- one chunk

def _float_column(name: str, arr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, present, errors) for a numeric side column such as tokens or price. A null cell is
    absent (pandas' NaN and CSV's empty/'nan' cells arrive as null); a NaN or infinite value that is
    present is that row's error."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = as_text_if_nested(arr)
    n = len(arr)
    errors = np.full(n, None, dtype=object)
    t = arr.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        values = arr.cast(pa.float64(), safe=False).fill_null(np.nan).to_numpy(zero_copy_only=False)
        present = arr.is_valid().to_numpy(zero_copy_only=False)
    else:
        text = arr.cast(pa.string())
        enc = pc.dictionary_encode(text)
        uniques = enc.dictionary.to_pylist()
        parsed, bad = [], []
        for u in uniques:
            try:
                parsed.append(float(u))
                bad.append(None)
            except ValueError:
                parsed.append(np.nan)
                bad.append(one_line(f"{name}: '{u}' is not a number"))
        idx = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        safe = np.where(idx >= 0, idx, 0)
        values = np.where(idx >= 0, np.array(parsed + [np.nan])[safe], np.nan)
        errors = np.where(idx >= 0, np.array(bad + [None], dtype=object)[safe], None)
        present = (idx >= 0) & (errors == None)  # noqa: E711
    for i in np.flatnonzero(present & ~np.isfinite(values)):
        errors[i] = f"{name}: {values[i]:g} is not a finite number; give a finite value (or leave the cell empty)"
    return values, present, errors


def _first_error(errors: np.ndarray, new_mask: np.ndarray, make) -> None:
    for i in np.flatnonzero(new_mask & (errors == None)):  # noqa: E711
        errors[i] = make(i)


def _weight_column(predictor, d, n: int, bad) -> pa.Array:
    """The learned correction's weight per row (1 inside the training runs, towards 0 outside; null
    for the analytical model and for rows with an error)."""
    if not n:
        return pa.nulls(0, type=pa.float64())
    with np.errstate(all="ignore"):  # rows with errors hold placeholder values; masked below
        weight = predictor.correction_weight(d)
    if weight is None:
        return pa.nulls(n, type=pa.float64())
    return pa.array(weight, mask=np.asarray(bad) | ~np.isfinite(weight), type=pa.float64())


def forecast_chunk(batch: pa.RecordBatch | pa.Table, evaluator, default_price: float | None = None) -> pa.Table:
    """Forecast every row of `batch`; returns its columns plus the result columns."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    names = batch.schema.names
    n = batch.num_rows
    columns = {name: batch.column(name) for name in names if name in ALL_FIELDS or name == PRESET_COLUMN}
    d, errors = encode_table(columns, n)
    errors = errors.copy()
    has_tokens = TOKENS_COLUMN in names
    if has_tokens:
        tokens, tok_present, tok_err = _float_column(TOKENS_COLUMN, batch.column(TOKENS_COLUMN))
        _first_error(errors, tok_err != None, lambda i: tok_err[i])  # noqa: E711
        _first_error(errors, tok_present & ~(tokens > 0), lambda i: f"tokens: {tokens[i]:g} must be positive, "
                                                                    "e.g. 300e9")
        if PRICE_COLUMN in names:
            price, pr_present, pr_err = _float_column(PRICE_COLUMN, batch.column(PRICE_COLUMN))
            _first_error(errors, pr_err != None, lambda i: pr_err[i])  # noqa: E711
            _first_error(errors, pr_present & (price < 0), lambda i: f"price_per_gpu_hour: {price[i]:g} must be >= 0")
        else:
            price = np.full(n, np.nan)
        if default_price is not None:
            price = np.where(np.isnan(price), float(default_price), price)
    res = evaluator(d) if n else {k: np.zeros(0) for k in ("iteration_time_s", "tokens_per_s", "mfu", "memory",
                                                               "fits_memory")}
    it = np.asarray(res["iteration_time_s"], dtype=np.float64)
    if has_tokens:
        with np.errstate(all="ignore"):
            # d.seq is one cp rank's share of a sequence
            c = training_cost(it, d.num_gpus, d.global_batch * d.seq * d.cp, tokens, price)
        _first_error(errors, tok_present & ~np.isfinite(c.gpu_hours),
                     lambda i: f"tokens: {tokens[i]:g} gives a non-finite GPU-hour count; give a realistic count")
        _first_error(errors, tok_present & ~np.isnan(price) & ~np.isfinite(c.cost),
                     lambda i: f"price_per_gpu_hour: {price[i]:g} gives a non-finite cost; give a realistic price")
    bad = errors != None  # noqa: E711
    with np.errstate(all="ignore"):  # rows with errors hold placeholder values; masked below
        band = evaluator.predictor.interval(d, it) if n else dict(low=np.zeros(0), high=np.zeros(0))
    no_band = bad | np.isnan(band["low"])
    new: dict[str, pa.Array] = {
        "iteration_time_s": pa.array(it, mask=bad, type=pa.float64()),
        "iteration_time_s_low": pa.array(np.asarray(band["low"], np.float64), mask=no_band, type=pa.float64()),
        "iteration_time_s_high": pa.array(np.asarray(band["high"], np.float64), mask=no_band, type=pa.float64()),
        "tokens_per_s": pa.array(np.asarray(res["tokens_per_s"], np.float64), mask=bad, type=pa.float64()),
        "mfu": pa.array(np.asarray(res["mfu"], np.float64), mask=bad, type=pa.float64()),
        "memory_gib_per_gpu": pa.array(np.asarray(res["memory"], np.float64) / GiB, mask=bad, type=pa.float64()),
        "fits_memory": pa.array(np.asarray(res["fits_memory"], bool), mask=bad, type=pa.bool_()),
        "correction_weight": _weight_column(evaluator.predictor, d, n, bad),
    }
    if has_tokens:
        no_tokens = bad | ~tok_present
        new["train_days"] = pa.array(c.train_days, mask=no_tokens, type=pa.float64())
        new["gpu_hours"] = pa.array(c.gpu_hours, mask=no_tokens, type=pa.float64())
        new["cost"] = pa.array(c.cost, mask=no_tokens | np.isnan(price), type=pa.float64())
    new[ERROR_COLUMN] = pa.array(errors, type=pa.string())
    out = batch
    for name, arr in new.items():
        if name in names:  # re-forecasting an output file: replace the old results in place
            out = out.set_column(names.index(name), name, arr)
        else:
            out = out.append_column(name, arr)
    return out


# ---------------------------------------------------------------- summary accumulation

@dataclass
class ForecastReport:
    """What a run did, plus per-group totals (for --summary) and the most expensive jobs (--plot)."""

    rows: int = 0
    valid: int = 0
    seconds: float = 0.0
    devices: int = 1
    has_cost: bool = False
    has_team: bool = False
    # (gpu, team) -> [jobs, valid, gpu_hours, cost, mfu_sum, rows with gpu_hours, rows with a cost]
    groups: dict = field(default_factory=dict)
    top_value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    top_label: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    top_metric: str = "cost"
    top_n: int = 50

    def add(self, out: pa.Table, row_offset: int) -> None:
        n = out.num_rows
        self.rows += n
        err = out.column(ERROR_COLUMN).is_null().to_numpy(zero_copy_only=False)
        self.valid += int(err.sum())
        self.has_cost = "gpu_hours" in out.schema.names
        self.has_team = TEAM_COLUMN in out.schema.names
        if n == 0:
            return
        gpu = _gpu_labels(out.column("gpu") if "gpu" in out.schema.names else None, n)
        team = (as_text_if_nested(out.column(TEAM_COLUMN).combine_chunks()).cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False).astype(object)
                if self.has_team else np.full(n, "", dtype=object))
        keys = np.char.add(np.char.add(gpu.astype(str), "\x1f"), team.astype(str))
        uniq, inv = np.unique(keys, return_inverse=True)

        def col(name):
            return out.column(name).cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)

        mfu = col("mfu")
        gh = col("gpu_hours") if self.has_cost else np.zeros(n)
        cost = col("cost") if self.has_cost else np.zeros(n)
        counted = [out.column(c).is_valid().to_numpy(zero_copy_only=False) * 1.0 if self.has_cost else np.zeros(n)
                   for c in ("gpu_hours", "cost")]
        weights = (np.ones(n), err * 1.0, gh, cost, mfu, *counted)
        sums = [np.bincount(inv, weights=w, minlength=len(uniq)) for w in weights]
        for j, key in enumerate(uniq):
            g, t = str(key).split("\x1f")
            acc = self.groups.setdefault((g, t), [0, 0, 0.0, 0.0, 0.0, 0, 0])
            for m in range(len(weights)):
                acc[m] += sums[m][j]
        if self.has_cost:
            has_price = out.column("cost").null_count < n
            self.top_metric = "cost" if (has_price or self.top_metric == "cost" and len(self.top_value)) else "gpu_hours"
            metric = out.column(self.top_metric)
            value = metric.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
            keep = np.flatnonzero(~np.isnan(value))
            if len(keep):
                label_col = next((c for c in LABEL_COLUMNS if c in out.schema.names), None)
                if label_col:
                    labels = np.array(out.column(label_col).take(pa.array(keep)).cast(pa.string()).to_pylist(),
                                      dtype=object)
                else:
                    labels = np.array([f"row {row_offset + i}" for i in keep], dtype=object)
                values = np.concatenate([self.top_value, value[keep]])
                labels = np.concatenate([self.top_label, labels])
                order = np.argsort(-values, kind="stable")[: self.top_n]
                self.top_value, self.top_label = values[order], labels[order]


def _gpu_labels(column, n: int) -> np.ndarray:
    """Canonical GPU preset name per row (the default a100-80gb when not given; raw text if unknown)."""
    if column is None:
        return np.full(n, "a100-80gb", dtype=object)
    enc = pc.dictionary_encode(as_text_if_nested(column.combine_chunks() if isinstance(column, pa.ChunkedArray)
                                                 else column))
    names = []
    for u in enc.dictionary.to_pylist():
        spec = lookup_gpu(str(u))
        names.append(spec.name if spec else str(u).strip().lower())
    idx = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    table = np.array(names + ["a100-80gb"], dtype=object)
    return table[np.where(idx >= 0, idx, len(names))]


# ---------------------------------------------------------------- files

def file_format(path: Path, parameter: str) -> str:
    """'csv' or 'parquet' from the file name; else a ParameterError naming `parameter`."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ParameterError(parameter, f"'{path}' must end in .csv or .parquet; rename it or convert it")
    return fmt


def _csv_types(path: Path, block_size: int) -> tuple[list[str], dict, int]:
    """Column names and types for a CSV, inferred over the whole file (first pass): each column
    is the narrowest of int64, float64, bool, string that every cell converts to, so a bad cell
    far down the file cannot break the typed second pass."""
    import pyarrow.csv as pcsv

    read = pcsv.ReadOptions(block_size=block_size)
    probe = pcsv.open_csv(path, read_options=read)
    names = probe.schema.names
    probe.close() if hasattr(probe, "close") else None
    as_text = pcsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True)
    candidates = [pa.int64(), pa.float64(), pa.bool_(), pa.string()]
    level = {n: 0 for n in names}
    rows = 0
    for batch in pcsv.open_csv(path, read_options=read, convert_options=as_text):
        rows += batch.num_rows
        for i, name in enumerate(names):
            col = batch.column(i)
            while level[name] < len(candidates) - 1:
                try:
                    col.cast(candidates[level[name]])
                    break
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    level[name] += 1
    return names, {n: candidates[level[n]] for n in names}, rows


def _check_unique(path: Path, names) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise ParameterError("input_path", f"column '{name}' appears more than once in '{path}'; keep one of them")
        seen.add(name)


def iter_input(path: Path, chunk_rows: int):
    """(total rows, schema names, iterator of record batches of at most ~chunk_rows rows)."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError("input_path", f"file '{path}' not found; give a .csv or .parquet table of jobs")
    fmt = file_format(path, "input_path")
    with user_file(path, "input_path", parameter=True):
        total, names, batches = _iter_input(path, fmt, chunk_rows)
    return total, names, CheckedBatches(path, batches)


class CheckedBatches:
    """The record batches of an input table, read lazily: a read error part-way through the file
    (a damaged parquet page, a file cut short or changed while being read, a decoding error) is a
    one-line UserError naming the file and the rows read so far, in the library as in the CLI."""

    def __init__(self, path: Path, batches):
        self.path, self._batches, self.rows = Path(path), iter(batches), 0
        self.schema = getattr(batches, "schema", None)

    def __iter__(self):
        return self

    def __next__(self) -> pa.RecordBatch:
        try:
            batch = next(self._batches)
        except StopIteration:
            raise
        except UserError:
            raise
        except (OSError, UnicodeDecodeError, pa.ArrowException) as err:
            reason = " ".join(str(err).split()) or type(err).__name__
            raise ParameterError("input_path", f"'{self.path}' could not be read past row {self.rows} ({reason}); the file is "
                            "damaged or was changed while being read: re-export it") from None
        self.rows += batch.num_rows
        return batch


def _csv_error_line(path: Path, message: str) -> str:
    """' at line N' for a pyarrow CSV parse error that quotes the offending row ("...: <row>"), found by
    reading the file for that row (only on an error, so no cost otherwise); '' when it is not found."""
    _, marker, detail = message.partition("CSV parse error: ")  # "Expected 5 columns, got 6: <row>"
    _, quoted, row = detail.partition(": ")
    if not (marker and quoted):
        return ""
    row = row.rstrip("\r\n")
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if line.rstrip(b"\r\n").decode("utf-8", "replace") == row:
                    return f" at line {number}"
    except OSError:
        pass
    return ""


def _iter_input(path: Path, fmt: str, chunk_rows: int):
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise ParameterError("input_path", f"'{path}' is not a readable parquet file ({err})") from None
        _check_unique(path, pf.schema_arrow.names)
        return pf.metadata.num_rows, pf.schema_arrow.names, pf.iter_batches(batch_size=chunk_rows)
    import pyarrow.csv as pcsv

    block = CSV_BLOCK_BYTES
    try:
        with open(path, "rb") as fh:
            header = fh.readline()
        if not header.strip():
            raise ParameterError("input_path", f"'{path}' is empty; give a CSV whose first line names the columns "
                            "(canonical fields or 'model'), one job per following line")
        _check_unique(path, pcsv.read_csv(pa.py_buffer(header)).schema.names if header.strip() else [])
        names, types, rows = _csv_types(path, block)
    except pa.ArrowInvalid as err:
        where = _csv_error_line(path, str(err))
        fix = "; fix that line (one value per column of the header)" if where else ""
        raise ParameterError("input_path", f"'{path}' is not a readable CSV file{where} ({err}){fix}") from None
    convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=True)
    reader = pcsv.open_csv(path, read_options=pcsv.ReadOptions(block_size=block), convert_options=convert)
    return rows, names, reader


class _TableWriter:
    """Streams tables into one CSV or parquet file at `tmp` (opened with the first table's schema).
    OSErrors are one-line UserErrors naming `path`, the file the user asked for."""

    def __init__(self, tmp: str, fmt: str, path: Path):
        self.tmp, self.fmt, self.path = tmp, fmt, path
        self.writer = None

    def write(self, table: pa.Table) -> None:
        with user_file(self.path, "output_path", "write", parameter=True):
            if self.writer is None:
                if self.fmt == "parquet":
                    import pyarrow.parquet as pq
                    self.writer = pq.ParquetWriter(self.tmp, table.schema)
                else:
                    import pyarrow.csv as pcsv
                    self.writer = pcsv.CSVWriter(self.tmp, table.schema)
            self.writer.write_table(table)

    def close(self) -> None:
        with user_file(self.path, "output_path", "write", parameter=True):
            if self.writer is not None:
                self.writer.close()
                self.writer = None

    def abort(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- best effort; atomic_path removes the temp file
            pass


def forecast_file(input_path, output_path, checkpoint: str | None = "default", devices=None,
                  chunk_rows: int = DEFAULT_CHUNK_ROWS, default_price: float | None = None,
                  progress: bool = False, predictor: Predictor | None = None, top_n: int = 50,
                  require_tokens: bool = False) -> ForecastReport:
    """Forecast every job in a CSV/parquet table into a CSV/parquet output (written atomically).
    require_tokens: refuse a table without a tokens column (costs are needed). Bad parameters and
    unreadable files are ParameterErrors naming the parameter (input_path, output_path, devices, ...)."""
    t0 = time.perf_counter()
    input_path, output_path = Path(input_path), Path(output_path)
    out_fmt = file_format(output_path, "output_path")
    if chunk_rows <= 0:
        raise ParameterError("chunk_rows", f"{chunk_rows} must be positive")
    total, names, batches = iter_input(input_path, chunk_rows)
    check_columns(names, extra_allowed=(TOKENS_COLUMN, PRICE_COLUMN, TEAM_COLUMN))
    if require_tokens and TOKENS_COLUMN not in names:
        raise ParameterError("require_tokens", f"needs a '{TOKENS_COLUMN}' column (tokens to train per job) "
                             "to compute cost; add one, e.g. 300e9")
    predictor = predictor or Predictor.load(checkpoint)
    evaluator = make_evaluator(predictor, devices)
    report = ForecastReport(devices=evaluator.devices, top_n=top_n)
    with atomic_path(output_path, "output_path", create_folder=False, suffix=".tmp", parameter=True) as tmp:
        writer = _TableWriter(tmp, out_fmt, output_path)
        try:
            with _progress(progress, total) as advance:
                empty = True
                for batch in batches:
                    out = forecast_chunk(batch, evaluator, default_price)
                    report.add(out, report.rows)
                    writer.write(out)
                    advance(batch.num_rows)
                    empty = False
                if empty:  # header-only input: still write the output schema
                    schema = batches.schema if hasattr(batches, "schema") else None
                    if schema is None:
                        import pyarrow.parquet as pq
                        schema = pq.ParquetFile(input_path).schema_arrow
                    out = forecast_chunk(schema.empty_table(), evaluator, default_price)
                    writer.write(out)
            writer.close()
        except BaseException:
            writer.abort()
            raise
    report.seconds = time.perf_counter() - t0
    return report


class _progress:
    """A rich progress bar over rows (on stderr), or a no-op."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total = enabled, total

    def __enter__(self):
        if not self.enabled:
            return lambda k: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("forecast"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
                            TimeRemainingColumn(), console=Console(stderr=True), transient=False)
        self.bar.__enter__()
        task = self.bar.add_task("rows", total=self.total)
        return lambda k: self.bar.advance(task, k)

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)
        return False


# ---------------------------------------------------------------- pandas

def _frame_to_table(df) -> pa.Table:
    """Arrow table of a DataFrame; a column of mixed python types becomes text (then validated)."""
    arrays, names = [], []
    for name in df.columns:
        col = df[name]
        try:
            arr = pa.array(col, from_pandas=True)
            # text mixed with bytes becomes a binary column whose text cells would read "b'...'"
            mixed = (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)) and \
                any(isinstance(v, str) for v in col)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types, ints beyond int64
            mixed = True
        if mixed:
            arr = pa.array([None if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v)
                            for v in col], type=pa.string())
        arrays.append(arr)
        names.append(str(name))
    return pa.Table.from_arrays(arrays, names=names) if names else pa.table({})


def forecast_frame(df, checkpoint: str | None = "default", devices=None, price_per_gpu_hour: float | None = None,
                   chunk_rows: int = DEFAULT_CHUNK_ROWS, predictor: Predictor | None = None):
    """Forecast every row of a pandas DataFrame; returns a copy with the result columns added
    (same index, same input columns and dtypes)."""
    table = _frame_to_table(df)
    _check_unique("the DataFrame", table.schema.names)
    check_columns(table.schema.names, extra_allowed=(TOKENS_COLUMN, PRICE_COLUMN, TEAM_COLUMN))
    predictor = predictor or Predictor.load(checkpoint)
    evaluator = make_evaluator(predictor, devices)
    parts = [forecast_chunk(table.slice(start, chunk_rows), evaluator, price_per_gpu_hour)
             for start in range(0, max(table.num_rows, 1), chunk_rows)]
    out = pa.concat_tables(parts)
    result = df.copy()
    added = [c for c in out.schema.names if c not in table.schema.names or c in RESULT_COLUMNS + COST_COLUMNS
             + (ERROR_COLUMN,)]
    for name in added:
        series = out.column(name).to_pandas()
        series.index = result.index
        result[name] = series
    return result


__all__ = ["forecast_file", "forecast_frame", "forecast_chunk", "ForecastReport", "make_evaluator",
           "RESULT_COLUMNS", "COST_COLUMNS", "ERROR_COLUMN"]
