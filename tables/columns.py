"""Vectorised validation and encoding of a table of configurations (one job per row).

`encode_table(columns)` takes canonical-field columns (pyarrow arrays, numpy arrays or lists;
optionally a `model` preset column) and returns the simulator's input for every row (the same
values as `encode.encode([build_config(row)])`) plus one error string per row (None where the
row is valid). Cells are coerced column-wise with pyarrow; the rules are `rules.check`, the ones
build_config applies, so a row is rejected exactly when build_config would reject it, with the
same message. Invalid rows get the encoding of a small valid stand-in
config, so the arrays can be simulated as a whole and the invalid rows masked afterwards.

Null cells (and NaN in float columns) mean "not given", like a missing key in build_config.
"""
from __future__ import annotations

import numpy as np

from vtrain.costmodel import rules
from vtrain.costmodel.encode import SimInput, config_fields, sim_input
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.presets import lookup_model, model_names
from vtrain.costmodel.rules import ARCHS, ATTENTIONS, GPU_LIST, PRECISIONS, RECOMPUTE_MODES, SCHEDULES, UNKNOWN, UNSET
from vtrain.costmodel.spec import (
    _BOOL_FIELDS, _FLOAT_FIELDS, _INT_FIELDS, ALL_FIELDS, CHOICE_DEFAULTS, FIELD_DEFAULTS, MAX_INT, MODEL_FIELDS,
    REQUIRED_MODEL_FIELDS, ConfigError, _coerce, build_config, suggest_field,
)

PRESET_COLUMN = "model"


def check_columns(names, extra_allowed=()) -> None:
    """Raise UserError for a column that looks like a misspelt canonical field, or when the
    required model columns are absent and there is no `model` preset column."""
    known = set(ALL_FIELDS) | {PRESET_COLUMN} | set(extra_allowed)
    for name in names:
        if name not in known and suggest_field(name):
            raise UserError(f"column '{name}': not a canonical field{suggest_field(name)}; rename the column "
                            "(other columns are passed through unchanged)")
    if PRESET_COLUMN not in names:
        for name in REQUIRED_MODEL_FIELDS:
            if name not in names:
                raise UserError(f"column '{name}': missing; add a '{name}' column or a 'model' preset column "
                                f"(one of {', '.join(model_names())})")


# ---------------------------------------------------------------- column coercion

def _to_arrow(values):
    import pyarrow as pa

    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if isinstance(values, np.ndarray) and values.dtype != object:
        return pa.array(values, from_pandas=True)
    values = list(values)
    try:
        arr = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types, ints beyond int64: as text
        arr = None
    # text mixed with bytes becomes a binary column, whose cells would all read as "b'...'": as text
    if arr is None or ((pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type))
                       and any(isinstance(v, str) for v in values)):
        return pa.array([None if _is_null(v) else str(v) for v in values], type=pa.string())
    return arr


def as_text_if_nested(arr):
    """A column of lists, structs, maps or bytes (no field takes those) as text, so each cell is
    validated like any other value (`'[1]' is not an integer`) instead of breaking the coercion."""
    import pyarrow as pa

    t = arr.type
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)):
        return arr
    return pa.array([None if v is None else str(v) for v in arr.to_pylist()], type=pa.string())


def _is_null(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _by_unique(arr, func, n):
    """Apply `func(python_value) -> (value, error)` once per distinct value; map back to rows."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    uniques = enc.dictionary.to_pylist()
    idx = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    vals, errs = [], []
    for u in uniques:
        val, err = func(u)
        vals.append(val)
        errs.append(err)
    present = idx >= 0
    safe = np.where(present, idx, 0)
    val_arr = np.empty(len(uniques) or 1, dtype=object)
    err_arr = np.empty(len(uniques) or 1, dtype=object)
    val_arr[:len(vals)] = vals
    err_arr[:len(errs)] = errs
    values = val_arr[safe]
    errors = np.where(present, err_arr[safe], None)
    return values, present, errors


def coerce_column(name: str, values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, present, errors) for one canonical column, following spec._coerce.

    values: int64 for integer fields, float64 for float fields, bool for flags, object (str) for
    the rest; present: the cell was given; errors: None or the message for a bad cell."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _to_arrow(values)
    n = len(arr)
    t = arr.type
    none = np.full(n, None, dtype=object)
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
    arr = as_text_if_nested(arr)
    t = arr.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if numeric and name in (_INT_FIELDS | _FLOAT_FIELDS | _BOOL_FIELDS):
        present = arr.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_boolean(t):
            raw = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.float64)
        else:
            # unsafe casts: uint64 beyond int64 / 2**53 are refused below as too large, not by arrow
            raw = arr.cast(pa.float64(), safe=False).fill_null(0.0).to_numpy(zero_copy_only=False)
            if pa.types.is_integer(t):
                ints = arr.cast(pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False)
        present &= ~np.isnan(raw)
        raw = np.where(present, raw, 0.0)
        errors = none.copy()
        if pa.types.is_boolean(t) and name not in _BOOL_FIELDS:  # as spec._coerce: a flag is not a number
            kind = "an integer; give a whole number" if name in _INT_FIELDS else "a number"
            for i in np.flatnonzero(present):
                errors[i] = f"{name}: {arr[int(i)].as_py()} is a boolean, not {kind}"
            return np.where(present, 0, raw).astype(np.int64 if name in _INT_FIELDS else np.float64), present, errors
        if name in _FLOAT_FIELDS:
            return raw, present, errors
        if name in _BOOL_FIELDS:
            bad = present & (raw != 0.0) & (raw != 1.0)
            for i in np.flatnonzero(bad):
                text = str(arr[int(i)].as_py())
                errors[i] = f"{name}: '{text}' is not a boolean; use true or false"
            return np.where(bad, False, raw == 1.0), present, errors
        # integer field (a value beyond MAX_INT is that row's error, as in spec._coerce)
        if pa.types.is_integer(t):
            huge = present & (np.abs(raw) >= MAX_INT)
            for i in np.flatnonzero(huge):
                errors[i] = f"{name}: {arr[int(i)].as_py()} is too large; give a whole number below 2**40 (1.1e12)"
            return np.where(huge, 0, ints), present, errors
        finite = np.isfinite(raw)
        whole = np.where(finite, raw, 0.0)
        bad = present & (~finite | (raw != np.trunc(whole)) | (np.abs(whole) >= MAX_INT))
        for i in np.flatnonzero(bad):
            v = arr[int(i)].as_py()
            errors[i] = (f"{name}: '{v}' is not an integer; give a whole number" if not np.isfinite(v)
                         else f"{name}: {v} is not a whole number; give an integer" if v != int(v)
                         else f"{name}: {v} is too large; give a whole number below 2**40 (1.1e12)")
        return np.where(bad, 0.0, raw).astype(np.int64), present, errors

    def one(value):
        try:
            return _coerce(name, value), None
        except ConfigError as err:
            return None, str(err)

    if pa.types.is_floating(t):  # NaN = not given
        arr = pc.if_else(pc.is_nan(arr), pa.scalar(None, t), arr)
    vals, present, errors = _by_unique(arr, one, n)
    present &= errors == None  # noqa: E711 (elementwise)
    bad_or_missing = ~present
    if name in _INT_FIELDS:
        out = np.where(bad_or_missing, 0, vals).astype(np.int64)
    elif name in _FLOAT_FIELDS:
        out = np.where(bad_or_missing, 0.0, vals).astype(np.float64)
    elif name in _BOOL_FIELDS:
        out = np.where(bad_or_missing, False, vals).astype(bool)
    else:
        out = np.where(bad_or_missing, "", vals).astype(object)
    present = present | (errors != None)  # noqa: E711 -- a bad cell counts as given
    return out, present, errors


# ---------------------------------------------------------------- validation and encoding

def _codes(values: np.ndarray, choices) -> np.ndarray:
    """Index of each (coerced, lower-case) text value in `choices`; rules.UNKNOWN elsewhere."""
    out = np.full(len(values), UNKNOWN, dtype=np.int64)
    for i, c in enumerate(choices):
        out[values == c] = i
    return out


def encode_table(columns: dict, n: int | None = None) -> tuple[SimInput, np.ndarray]:
    """Validate and encode a table of canonical-field columns.

    `columns`: name -> column (only canonical fields and `model` are read; others are ignored).
    Returns (inputs, errors): the SimInput (float64, one entry per row; stand-in values for
    invalid rows) and errors, an object array of None / one-line messages."""
    import pyarrow as pa

    names = [c for c in columns if c in ALL_FIELDS or c == PRESET_COLUMN]
    if n is None:
        n = len(next(iter(columns.values()))) if columns else 0
    E = rules.Errors(n)
    given: dict[str, tuple] = {}

    # --- model presets (resolve_config: preset < explicit fields) ---
    preset_idx = np.full(n, -1)
    preset_list: list[dict] = []
    if PRESET_COLUMN in columns:
        def look(value):
            fields = lookup_model(str(value))
            if fields is None:
                return -1, (f"model: '{value}' is not a known model preset; use one of {', '.join(model_names())}")
            preset_list.append(fields)
            return len(preset_list) - 1, None

        arr = as_text_if_nested(_to_arrow(columns[PRESET_COLUMN]))
        if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string()) if not pa.types.is_null(arr.type) else pa.array([None] * n, pa.string())
        vals, present, errors = _by_unique(arr, look, n)
        E.fail_msg(errors)
        preset_idx = np.where(present & (errors == None), vals, -1).astype(np.int64)  # noqa: E711

    # --- coercion, in column order ---
    for name in names:
        if name == PRESET_COLUMN:
            continue
        vals, present, errors = coerce_column(name, columns[name])
        E.fail_msg(errors)
        given[name] = (vals, present)

    def field(name, default):
        """Per-row value: explicit cell, else the row's preset, else `default`. Also `present`."""
        if name in given:
            vals, present = given[name]
        else:
            kind = object if name not in (_INT_FIELDS | _FLOAT_FIELDS | _BOOL_FIELDS) else \
                (np.int64 if name in _INT_FIELDS else np.float64 if name in _FLOAT_FIELDS else bool)
            vals, present = np.full(n, default, dtype=kind), np.zeros(n, dtype=bool)
        if name in MODEL_FIELDS and preset_list:
            pv = np.array([p.get(name, None) for p in preset_list] + [None], dtype=object)
            from_preset = (~present) & (preset_idx >= 0) & (pv[preset_idx] != None)  # noqa: E711
            if from_preset.any():
                vals = vals.copy()
                vals[from_preset] = pv[preset_idx[from_preset]]
                vals = vals.astype(np.int64) if name in _INT_FIELDS else vals
                present = present | from_preset
        vals = np.where(present, vals, default)
        if name in _INT_FIELDS:
            vals = vals.astype(np.int64)
        return vals, present

    f = {}
    for name in REQUIRED_MODEL_FIELDS:
        f[name], present = field(name, 1)
        E.fail(~present, name, lambda i, name=name: f"missing; give a value in column '{name}' or a model preset "
                                                    f"in column '{PRESET_COLUMN}'")
    for name, default in FIELD_DEFAULTS.items():
        if name not in f:
            f[name], _ = field(name, default)
    text = {name: field(name, default)[0] for name, default in CHOICE_DEFAULTS.items()}
    for name, choices in (("arch", ARCHS), ("attention", ATTENTIONS), ("schedule", SCHEDULES),
                          ("recompute", RECOMPUTE_MODES)):
        f[name] = _codes(text[name], choices)
    f["precision"] = np.where(text["precision"] == "", UNSET, _codes(text["precision"], PRECISIONS))

    def gpu_of(value):
        spec = lookup_gpu(value)
        return (UNKNOWN if spec is None else GPU_LIST.index(spec)), None

    gidx, _, _ = _by_unique(pa.array(text["gpu"], type=pa.string()), gpu_of, n)
    f["gpu"] = gidx.astype(np.int64)
    r, E = rules.check(f, text, E)
    bad = ~E.ok
    if bad.any():  # stand-in values, so the whole table can be simulated and the bad rows masked
        stand_in = _stand_in()
        for k, v in r.items():
            r[k] = np.where(bad, stand_in[k], v)
    return sim_input(r), E.lines()


_STAND_IN: dict | None = None


def _stand_in() -> dict:
    """Resolved fields of a small valid config, used in place of invalid rows."""
    global _STAND_IN
    if _STAND_IN is None:
        _STAND_IN = {k: v[0] for k, v in config_fields([build_config(
            dict(num_layers=2, hidden_size=256, num_attention_heads=4))]).items()}
    return _STAND_IN


__all__ = ["encode_table", "coerce_column", "check_columns", "PRESET_COLUMN"]
