"""Vectorised validation and encoding of a table of configurations (one job per row).

`encode_table(columns)` takes canonical-field columns (pyarrow arrays, numpy arrays or lists;
optionally a `model` preset column) and returns the simulator's input arrays for every row
(the same keys and values as `encode.encode([build_config(row)])`) plus one error string per row
(None where the row is valid). It applies the rules of `spec.build_config` in the same order,
so a row is rejected exactly when build_config would reject it, with a message naming the same
field, the bad value and what would fit. Invalid rows get the encoding of a small valid stand-in
config, so the arrays can be simulated as a whole and the invalid rows masked afterwards.

Null cells (and NaN in float columns) mean "not given", like a missing key in build_config.
"""
from __future__ import annotations

import numpy as np

from vtrain.costmodel.encode import GRAD_BYTES
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.hardware import GPUS, gpu_names, lookup_gpu
from vtrain.costmodel.presets import lookup_model, model_names
from vtrain.costmodel.spec import (
    _BOOL_FIELDS, _FLOAT_FIELDS, _INT_FIELDS, ALL_FIELDS, ARCHS, ATTENTIONS, MODEL_FIELDS, PRECISIONS, RECOMPUTE_MODES,
    REQUIRED_MODEL_FIELDS, SCHEDULES, ConfigError, _coerce, _divisors, _fmt_choices, suggest_field,
)

PRESET_COLUMN = "model"
ENCODED_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "llama", "flash", "tp", "pp", "dp", "num_gpus",
                "micro_batch", "global_batch", "num_micro_batches", "sp", "recompute", "zero_stage", "schedule",
                "vpp", "overlap", "peak_flops", "peak_flops_16", "hbm_bw", "hbm_bytes", "intra_bw", "inter_bw",
                "gpus_per_node", "grad_bytes")
_GPU_LIST = list(GPUS.values())
_MODEL_DEFAULTS = dict(seq_len=2048, num_kv_heads=0, ffn_hidden_size=0, vocab_size=51200, arch="gpt", attention="flash")


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
    try:
        return pa.array(list(values), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed python types: keep them as text
        return pa.array([None if _is_null(v) else str(v) for v in values], type=pa.string())


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
        t = arr.type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    if numeric and name in (_INT_FIELDS | _FLOAT_FIELDS | _BOOL_FIELDS):
        present = arr.is_valid().to_numpy(zero_copy_only=False)
        if pa.types.is_boolean(t):
            raw = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.float64)
        else:
            raw = arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
            if pa.types.is_integer(t):
                ints = arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        present &= ~np.isnan(raw)
        raw = np.where(present, raw, 0.0)
        errors = none.copy()
        if name in _FLOAT_FIELDS:
            return raw, present, errors
        if name in _BOOL_FIELDS:
            bad = present & (raw != 0.0) & (raw != 1.0)
            for i in np.flatnonzero(bad):
                text = str(arr[int(i)].as_py())
                errors[i] = f"{name}: '{text}' is not a boolean; use true or false"
            return np.where(bad, False, raw == 1.0), present, errors
        # integer field
        if pa.types.is_integer(t):
            return ints, present, errors
        finite = np.isfinite(raw)
        bad = present & (~finite | (raw != np.trunc(np.where(finite, raw, 0.0))))
        for i in np.flatnonzero(bad):
            v = arr[int(i)].as_py()
            errors[i] = (f"{name}: {v} is not a whole number; give an integer" if np.isfinite(v)
                         else f"{name}: '{v}' is not an integer; give a whole number")
        return np.where(bad, 0, raw).astype(np.int64), present, errors

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


# ---------------------------------------------------------------- validation

class _Errors:
    """First error per row, in build_config's order."""

    def __init__(self, n: int):
        self.msg = np.full(n, None, dtype=object)
        self.ok = np.ones(n, dtype=bool)

    def fail(self, mask, field: str, make):
        rows = np.flatnonzero(mask & self.ok)
        for i in rows:
            self.msg[i] = f"{field}: {make(i)}"
        self.ok[rows] = False

    def fail_msg(self, errors):
        """Coercion errors (already full messages)."""
        rows = np.flatnonzero((errors != None) & self.ok)  # noqa: E711
        self.msg[rows] = errors[rows]
        self.ok[rows] = False


def _safe(x, ok):
    """Denominator that is never zero (rows already failing use 1)."""
    return np.where(ok & (x != 0), x, 1)


def encode_table(columns: dict, n: int | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Validate and encode a table of canonical-field columns.

    `columns`: name -> column (only canonical fields and `model` are read; others are ignored).
    Returns (arrays, errors): arrays as in encode.encode (float64, one entry per row; stand-in
    values for invalid rows) and errors, an object array of None / one-line messages."""
    names = [c for c in columns if c in ALL_FIELDS or c == PRESET_COLUMN]
    if n is None:
        n = len(next(iter(columns.values()))) if columns else 0
    E = _Errors(n)
    given: dict[str, tuple] = {}

    # --- model presets (resolve_config: preset < explicit fields) ---
    preset_idx = np.full(n, -1)
    if PRESET_COLUMN in columns:
        preset_list: list[dict] = []

        def look(value):
            fields = lookup_model(str(value))
            if fields is None:
                return -1, (f"model: '{value}' is not a known model preset; use one of {', '.join(model_names())}")
            preset_list.append(fields)
            return len(preset_list) - 1, None

        import pyarrow as pa
        arr = _to_arrow(columns[PRESET_COLUMN])
        if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
            arr = arr.cast(pa.string()) if not pa.types.is_null(arr.type) else pa.array([None] * n, pa.string())
        vals, present, errors = _by_unique(arr, look, n)
        E.fail_msg(errors)
        preset_idx = np.where(present & (errors == None), vals, -1).astype(np.int64)  # noqa: E711
    else:
        preset_list = []

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

    def missing_msg(name):
        return lambda i: (f"missing; give a value in column '{name}' or a model preset in column '{PRESET_COLUMN}'")

    f = {}
    for name in REQUIRED_MODEL_FIELDS:
        f[name], present = field(name, 1)
        E.fail(~present, name, missing_msg(name))
    for name in ("seq_len", "vocab_size", "num_kv_heads", "ffn_hidden_size"):
        f[name], _ = field(name, _MODEL_DEFAULTS[name])

    # --- model ---
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size"):
        x = f[name]
        E.fail(x <= 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    for name in ("num_kv_heads", "ffn_hidden_size"):
        x = f[name]
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    arch, _ = field("arch", "gpt")
    E.fail(~np.isin(arch, ARCHS), "arch", lambda i: f"'{arch[i]}' is unknown; use one of {', '.join(ARCHS)}")
    llama = arch == "llama"
    attention, _ = field("attention", "flash")
    E.fail(~np.isin(attention, ATTENTIONS), "attention",
           lambda i: f"'{attention[i]}' is unknown; use one of {', '.join(ATTENTIONS)}")
    layers, hidden, heads = f["num_layers"], f["hidden_size"], f["num_attention_heads"]
    seq, vocab = f["seq_len"], f["vocab_size"]
    kv = np.where(f["num_kv_heads"] == 0, heads, f["num_kv_heads"])
    ffn_llama = -(-(8 * hidden // 3) // 256) * 256
    ffn = np.where(f["ffn_hidden_size"] == 0, np.where(llama, ffn_llama, 4 * hidden), f["ffn_hidden_size"])
    ok = E.ok
    E.fail(hidden % _safe(heads, ok) != 0, "num_attention_heads",
           lambda i: f"hidden_size={hidden[i]} is not divisible by num_attention_heads={heads[i]}; use heads in "
                     f"{_fmt_choices(_divisors(int(hidden[i])))}")
    ok = E.ok
    E.fail(heads % _safe(kv, ok) != 0, "num_kv_heads",
           lambda i: f"{kv[i]} does not divide num_attention_heads={heads[i]}; use one of "
                     f"{_fmt_choices(_divisors(int(heads[i])))}")

    # --- cluster ---
    gpu_name, _ = field("gpu", "a100-80gb")

    def gpu_of(value):
        spec = lookup_gpu(value)
        return (-1 if spec is None else _GPU_LIST.index(spec)), None

    import pyarrow as pa
    gidx, _, _ = _by_unique(pa.array(gpu_name, type=pa.string()), gpu_of, n)
    gidx = gidx.astype(np.int64)
    E.fail(gidx < 0, "gpu", lambda i: f"'{gpu_name[i]}' is not a known GPU; use one of {', '.join(gpu_names())} "
                                      "(or set intra_node_bw_GBps etc. on a known preset)")
    g = np.where(gidx < 0, list(GPUS).index("a100-80gb"), gidx)
    default_prec = np.array(["bf16" if "bf16" in s.peak_flops else "fp16" for s in _GPU_LIST], dtype=object)[g]
    prec_given, _ = field("precision", "")
    precision = np.where(prec_given != "", prec_given, default_prec)
    E.fail(~np.isin(precision, PRECISIONS), "precision",
           lambda i: f"'{precision[i]}' is unknown; use one of {', '.join(PRECISIONS)}")
    supported = np.zeros(n, dtype=bool)
    for p in PRECISIONS:
        has = np.array([p in s.peak_flops for s in _GPU_LIST])[g]
        supported |= (precision == p) & has
    E.fail(~supported, "precision", lambda i: f"{_GPU_LIST[g[i]].name} has no {precision[i]} tensor cores; use one "
                                              f"of {', '.join(p for p in _GPU_LIST[g[i]].peak_flops if p in PRECISIONS)}")
    gpn_v, _ = field("gpus_per_node", 0)
    intra_v, _ = field("intra_node_bw_GBps", 0.0)
    inter_v, _ = field("inter_node_bw_Gbps", 0.0)
    gpus_per_node = np.where(gpn_v != 0, gpn_v, np.array([s.gpus_per_node for s in _GPU_LIST])[g])
    intra = np.where(intra_v != 0, intra_v, np.array([float(s.nvlink_GBps) for s in _GPU_LIST])[g])
    inter = np.where(inter_v != 0, inter_v, np.array([float(s.nic_Gbps) for s in _GPU_LIST])[g])
    for name, val in (("gpus_per_node", gpus_per_node), ("intra_node_bw_GBps", intra), ("inter_node_bw_Gbps", inter)):
        E.fail(val <= 0, name, lambda i, val=val: f"{val[i]} must be positive")

    # --- parallel ---
    p = {}
    for name, default in (("tp", 1), ("pp", 1), ("micro_batch", 1), ("vpp", 1), ("dp", 0), ("num_gpus", 0),
                          ("global_batch", 0), ("zero_stage", 0)):
        p[name], _ = field(name, default)
    for name in ("tp", "pp", "micro_batch", "vpp"):
        x = p[name]
        E.fail(x <= 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    for name in ("dp", "num_gpus", "global_batch"):
        x = p[name]
        E.fail(x < 0, name, lambda i, x=x: f"{x[i]} must be a positive integer")
    tp, pp, mb, vpp = p["tp"], p["pp"], p["micro_batch"], p["vpp"]
    dp, num_gpus = p["dp"].copy(), p["num_gpus"].copy()
    ok = E.ok
    tpp = _safe(tp * pp, ok)
    dp = np.where((dp == 0) & (num_gpus == 0), 1, dp)
    derive = dp == 0
    E.fail(derive & (num_gpus % tpp != 0), "num_gpus",
           lambda i: f"{num_gpus[i]} is not divisible by tp*pp={tp[i] * pp[i]}; use a multiple of "
                     f"{tp[i] * pp[i]} or change tp/pp")
    dp = np.where(derive, num_gpus // tpp, dp)
    num_gpus = np.where(num_gpus == 0, tp * pp * dp, num_gpus)

    def _ng_msg(i):
        t, q, d_, ng = int(tp[i]), int(pp[i]), int(dp[i]), int(num_gpus[i])
        hint = ng // (t * q) if ng % (t * q) == 0 else "?"
        return f"{ng} != tp*pp*dp = {t}*{q}*{d_} = {t * q * d_}; set num_gpus={t * q * d_} or dp={hint}"

    E.fail(tp * pp * dp != num_gpus, "num_gpus", _ng_msg)
    ok = E.ok
    E.fail(heads % _safe(tp, ok) != 0, "tp", lambda i: f"{tp[i]} does not divide num_attention_heads={heads[i]}; "
                                                       f"use tp in {_fmt_choices(_divisors(int(heads[i])))}")
    ok = E.ok
    E.fail((kv % _safe(tp, ok) != 0) & (tp % _safe(kv, ok) != 0), "tp",
           lambda i: f"{tp[i]} neither divides nor is a multiple of num_kv_heads={kv[i]}")
    schedule, _ = field("schedule", "1f1b")
    E.fail(~np.isin(schedule, SCHEDULES), "schedule",
           lambda i: f"'{schedule[i]}' is unknown; use one of {', '.join(SCHEDULES)}")
    interleaved = schedule == "interleaved"
    E.fail(~interleaved & (vpp != 1), "vpp",
           lambda i: f"{vpp[i]} needs schedule='interleaved'; set schedule=interleaved or vpp=1")
    E.fail(interleaved & (pp == 1), "schedule", lambda i: "interleaved needs pp > 1; use schedule=1f1b or raise pp")

    def _pp_msg(i):
        nl, v_ = int(layers[i]), int(vpp[i])
        okd = [d_ for d_ in _divisors(nl) if d_ % v_ == 0] if v_ > 1 else _divisors(nl)
        return f"num_layers={nl} is not divisible by pp*vpp={pp[i]}*{v_}; use pp*vpp in {_fmt_choices(okd)}"

    ok = E.ok
    E.fail(layers % _safe(pp * vpp, ok) != 0, "pp", _pp_msg)
    dpmb = dp * mb
    global_batch = np.where(p["global_batch"] != 0, p["global_batch"], dpmb)
    ok = E.ok
    E.fail(global_batch % _safe(dpmb, ok) != 0, "global_batch",
           lambda i: f"{global_batch[i]} is not divisible by dp*micro_batch={dp[i]}*{mb[i]}={dpmb[i]}; "
                     f"use a multiple of {dpmb[i]}")
    ok = E.ok
    micro_batches = global_batch // _safe(dpmb, ok)
    E.fail(interleaved & (micro_batches % _safe(pp, ok) != 0), "global_batch",
           lambda i: f"the interleaved schedule needs the micro-batches per pipeline ({micro_batches[i]}) to be a "
                     f"multiple of pp={pp[i]}; use a global_batch multiple of {dpmb[i] * pp[i]} or schedule=1f1b")
    recompute, _ = field("recompute", "none")
    E.fail(~np.isin(recompute, RECOMPUTE_MODES), "recompute",
           lambda i: f"'{recompute[i]}' is unknown; use one of {', '.join(RECOMPUTE_MODES)}")
    zero = p["zero_stage"]
    E.fail(~np.isin(zero, (0, 1, 2, 3)), "zero_stage", lambda i: f"{zero[i]} is not a ZeRO stage; use 0, 1, 2 or 3")
    E.fail((zero == 3) & (pp > 1), "zero_stage",
           lambda i: "ZeRO-3 cannot be combined with pp > 1; use zero_stage <= 2 or pp=1")
    sp, _ = field("sequence_parallel", False)
    sp = sp.astype(bool) & (tp != 1)
    ok = E.ok
    E.fail(sp & (seq % _safe(tp, ok) != 0), "sequence_parallel",
           lambda i: f"seq_len={seq[i]} is not divisible by tp={tp[i]}; turn sequence_parallel off or pick tp "
                     "dividing seq_len")
    overlap, _ = field("overlap_grad_reduce", False)

    # --- encode (as encode.config_row) ---
    peak = np.zeros(n)
    for pr in PRECISIONS:
        table = np.array([s.peak_flops.get(pr, 0.0) for s in _GPU_LIST])
        peak = np.where(precision == pr, table[g], peak)
    grad_bytes = np.zeros(n)
    for pr, b in GRAD_BYTES.items():
        grad_bytes = np.where(precision == pr, b, grad_bytes)
    f64 = np.float64
    d = dict(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn=ffn, vocab=vocab, seq=seq,
        llama=llama.astype(f64), flash=(attention == "flash").astype(f64), tp=tp, pp=pp, dp=dp, num_gpus=num_gpus, micro_batch=mb, global_batch=global_batch,
        num_micro_batches=global_batch // _safe(dpmb, E.ok), sp=sp.astype(f64),
        recompute=_index_of(recompute, RECOMPUTE_MODES), zero_stage=zero, schedule=_index_of(schedule, SCHEDULES),
        vpp=vpp, overlap=overlap.astype(bool).astype(f64), peak_flops=peak,
        peak_flops_16=np.array([s.peak_flops.get("bf16", s.peak_flops["fp16"]) for s in _GPU_LIST])[g],
        hbm_bw=np.array([s.hbm_bw for s in _GPU_LIST])[g], hbm_bytes=np.array([s.hbm_bytes for s in _GPU_LIST])[g],
        intra_bw=intra.astype(f64) * 1e9, inter_bw=inter.astype(f64) * 1e9 / 8.0, gpus_per_node=gpus_per_node,
        grad_bytes=grad_bytes,
    )
    d = {k: np.asarray(d[k], dtype=f64) for k in ENCODED_KEYS}
    bad = ~E.ok
    if bad.any():
        stand_in = _stand_in()
        for k in d:
            d[k][bad] = stand_in[k]
    return d, E.msg


def _index_of(values, choices):
    out = np.zeros(len(values), dtype=np.float64)
    for i, c in enumerate(choices):
        out[values == c] = i
    return out


_STAND_IN: dict | None = None


def _stand_in() -> dict:
    """Encoding of a small valid config, used in place of invalid rows."""
    global _STAND_IN
    if _STAND_IN is None:
        from vtrain.costmodel.encode import config_row
        from vtrain.costmodel.spec import build_config
        _STAND_IN = config_row(build_config(dict(num_layers=2, hidden_size=256, num_attention_heads=4)))
    return _STAND_IN


__all__ = ["encode_table", "coerce_column", "check_columns", "ENCODED_KEYS", "PRESET_COLUMN"]
