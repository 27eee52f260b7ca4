"""The vectorised table validation/encoding agrees with build_config + encode row by row."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from vtrain.costmodel.config_files import preset_fields
from vtrain.costmodel.encode import encode
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.spec import ALL_FIELDS, ConfigError, build_config
from vtrain.tables.columns import check_columns, encode_table

# Per field: sensible values (which still combine into invalid configs: tp not dividing heads,
# batch not divisible by dp, ...) and plainly bad ones; a few fields per row get a bad value.
GOOD = dict(
    model=[None, None, None, None, "gpt3-1.3b", "llama2-7b", "LLaMA3-8B"],
    num_layers=[2, 4, 6, 8, 12, 24, 32],
    hidden_size=[256, 512, 768, 1024, 1536],
    num_attention_heads=[4, 8, 16, 4, 8, 16, 12],
    num_kv_heads=[None, None, 0, 1, 2, 4, 8],
    ffn_hidden_size=[None, None, 0, 1024, 3000],
    vocab_size=[None, 32000, 51200],
    seq_len=[None, 512, 1024, 2048, 1000],
    arch=[None, "gpt", "llama", " Llama "],
    num_gpus=[None, None, None, None, None, None, 8, 16, 64, 12],
    tp=[None, 1, 2, 4, 8],
    pp=[None, 1, 2, 4],
    dp=[None, None, None, 0, 1, 2, 4],
    micro_batch=[None, 1, 2, 4],
    global_batch=[None, None, 0, 16, 64, 512, 100],
    sequence_parallel=[None, True, False],
    recompute=[None, "none", "selective", "full", "FULL"],
    zero_stage=[None, 0, 1, 2, 3],
    schedule=[None, None, None, "1f1b", "interleaved", "gpipe"],
    vpp=[None, None, None, 1, 2],
    overlap_grad_reduce=[None, True, False],
    gpu=[None, "a100-80gb", "h100", "v100", "H200", "mi300x", "b200", "cpu", "a100"],
    gpus_per_node=[None, None, 0, 4, 8],
    intra_node_bw_GBps=[None, 0.0, 150.0, 300.0],
    inter_node_bw_Gbps=[None, 0.0, 100.0, 400.0],
    precision=[None, None, None, None, "bf16", "fp16", "fp8", "BF16"],
)
BAD = dict(
    model=["gpt9-1t"], num_layers=[0, -3, 7.5], hidden_size=[-1, 1000, 0], num_attention_heads=[0, 7],
    num_kv_heads=[3, -1], ffn_hidden_size=[-5], vocab_size=[0], seq_len=[0, -2], arch=["bert"],
    num_gpus=[-8, 3], tp=[0, 3], pp=[-1, 3], dp=[-2, 3], micro_batch=[0], global_batch=[-4, 7],
    sequence_parallel=[2], recompute=["partial"], zero_stage=[4, -1], schedule=["zigzag"], vpp=[0, 3],
    overlap_grad_reduce=[5], gpu=["tpu-v9", ""], gpus_per_node=[-1], intra_node_bw_GBps=[-1.0],
    inter_node_bw_Gbps=[-5.0], precision=["fp4", "int8"],
)
CHOICES = GOOD


def _random_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        row = {k: rng.choice(v) for k, v in GOOD.items()}
        for name in rng.sample(sorted(BAD), rng.choice([0, 0, 0, 1, 1, 2])):
            row[name] = rng.choice(BAD[name])
        if row["model"] is not None and rng.random() < 0.7:  # presets usually give the model shape
            for name in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
                         "arch", "seq_len", "vocab_size"):
                row[name] = None
        elif rng.random() < 0.03:
            row[rng.choice(["num_layers", "hidden_size", "num_attention_heads"])] = None  # missing
        rows.append(row)
    return rows


def _reference(row: dict):
    """What resolve_config/build_config make of the row: a TrainConfig or the ConfigError."""
    values = {}
    if row.get("model") is not None:
        values.update(preset_fields(row["model"]))
    values.update({k: v for k, v in row.items() if k != "model" and v is not None})
    return build_config(values)


def _column(values):
    """Arrow column: typed when the values allow it (ints, floats, bools), else text."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def test_matches_build_config_on_random_rows():
    rows = _random_rows(600, seed=7)
    columns = {name: _column([r[name] for r in rows]) for name in CHOICES}
    arrays, errors = encode_table(columns)
    n_valid = n_invalid = 0
    for i, row in enumerate(rows):
        try:
            ref = encode([_reference(row)])
        except ConfigError as err:
            n_invalid += 1
            assert errors[i] is not None, f"row {i} should fail: {err}\n{row}"
            assert errors[i].split(":")[0] == err.field, (errors[i], str(err), row)
            if err.field != "model" and "missing" not in str(err):
                assert errors[i] == str(err), row
            continue
        n_valid += 1
        assert errors[i] is None, (errors[i], row)
        for key, value in ref._asdict().items():
            assert getattr(arrays, key)[i] == value[0], (key, getattr(arrays, key)[i], value[0], row)
    assert n_valid > 100 and n_invalid > 100


def test_text_columns_match_typed_columns():
    """CSV-style text cells give the same arrays and errors as typed cells."""
    rows = _random_rows(200, seed=3)
    rows[0].update(num_layers="abc", intra_node_bw_GBps="fast", sequence_parallel="maybe")
    typed = {name: _column([r[name] for r in rows]) for name in CHOICES}
    text = {name: pa.array([None if r[name] is None else str(r[name]) for r in rows], type=pa.string())
            for name in CHOICES}
    a_typed, e_typed = encode_table(typed)
    a_text, e_text = encode_table(text)
    assert [e is None for e in e_typed] == [e is None for e in e_text]
    for key in a_typed._fields:
        np.testing.assert_array_equal(getattr(a_typed, key), getattr(a_text, key))


def test_nan_and_null_mean_not_given():
    cols = dict(num_layers=[2, 2], hidden_size=[256.0, 256.0], num_attention_heads=[4, 4],
                tp=pa.array([np.nan, 2.0]), gpu=pa.array([None, "h100"]))
    arrays, errors = encode_table(cols)
    assert list(errors) == [None, None]
    ref = encode([build_config(dict(num_layers=2, hidden_size=256, num_attention_heads=4)),
                  build_config(dict(num_layers=2, hidden_size=256, num_attention_heads=4, tp=2, gpu="h100"))])
    for key in ref._fields:
        np.testing.assert_array_equal(getattr(arrays, key), getattr(ref, key))


def test_check_columns_names_the_column():
    with pytest.raises(UserError, match="num_layer.*did you mean 'num_layers'"):
        check_columns(["num_layer", "hidden_size", "num_attention_heads"])
    with pytest.raises(UserError, match="column 'hidden_size': missing"):
        check_columns(["num_layers", "num_attention_heads"])
    check_columns(["model", "team", "job_id"])  # presets supply the model fields; other columns pass through
    check_columns(list(ALL_FIELDS) + ["tokens", "price_per_gpu_hour"])


def test_text_cells_beside_bytes_cells_keep_their_text():
    """pyarrow makes a column of str and bytes binary: the str cells must still read as text."""
    import pandas as pd

    import vtrain
    from vtrain.tables.columns import encode_table

    base = dict(num_layers=[2, 2], hidden_size=[64, 64], num_attention_heads=[1, 1])
    from vtrain.costmodel.rules import RECOMPUTE_MODES

    bad = f"recompute: 'b'\\xff'' is unknown; use one of {', '.join(RECOMPUTE_MODES)}"
    _, errors = encode_table(dict(base, recompute=["none", b"\xff"]))
    assert list(errors) == [None, bad]
    out = vtrain.forecast(pd.DataFrame(dict(base, recompute=["none", b"\xff"])), checkpoint="none")
    assert out["error"].isna().tolist() == [True, False] and out["error"][1] == bad
