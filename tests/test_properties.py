"""Property-based tests (hypothesis) over the three entry points: one config (build_config + predict),
a table (vtrain.forecast) and a strategy grid (vtrain.search's enumeration).

- valid configs: no NaN/inf, positive times, MFU in (0, 1), tokens/s == global_batch*seq_len/time,
  memory per GPU never grows when recompute (none >= selective >= full) or the ZeRO stage goes up
  (0 >= 1 >= 2; stage 3 <= stage 0, see the test for why not <= 2);
- any values (valid fields with some replaced by junk: wrong types, huge, negative, NaN, inf, empty
  or unicode text): a one-line UserError naming a field, or a sane prediction; never another
  exception; definitely-invalid values are always refused, naming the field;
- a table mixing good and bad rows: each bad row's error is the one build_config gives that row,
  each good row's figures are identical to predicting it alone.

CI runs a fixed seed and a small budget (profile "ci", tests/conftest.py); `HYPOTHESIS_PROFILE=long
python -m pytest tests/test_properties.py` runs random seeds with 25x the examples.
"""
from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import vtrain
from vtrain import UserError

SCALE = 25 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1
CHECKPOINTS = ("none", "default")
# The grid runs search's jitted evaluation: compiling it with the correction networks takes 20-100 s on
# 2 cores, so CI searches with the analytical model only (its exact re-evaluation shares the numpy code
# the other properties test with both); the long profile searches with both.
GRID_CHECKPOINTS = CHECKPOINTS if SCALE > 1 else ("none",)
_PREDICTORS: dict = {}
ALL_FIELDS = tuple(vtrain.build_config(dict(num_layers=1, hidden_size=1, num_attention_heads=1)).flat())
INT_FIELDS = tuple(k for k, v in vtrain.build_config(dict(num_layers=1, hidden_size=1, num_attention_heads=1))
                   .flat().items() if type(v) is int)
FLOAT_FIELDS = ("intra_node_bw_GBps", "inter_node_bw_Gbps")
BOOL_FIELDS = ("sequence_parallel", "overlap_grad_reduce")
GPUS = ("v100", "a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x", "cpu")
PRECISIONS = {"v100": ("fp16",), "cpu": ("fp16", "bf16")}


def budget(n: int) -> int:
    return n * SCALE


def predictor(name: str):
    if name not in _PREDICTORS:
        _PREDICTORS[name] = vtrain.get_predictor(name)
    return _PREDICTORS[name]


# ---------------------------------------------------------------- generators

def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_values(draw, moe: bool | None = None):
    """A flat dict of canonical fields that build_config accepts (valid by construction)."""
    arch = draw(st.sampled_from(["gpt", "llama"]))
    heads = draw(st.sampled_from([1, 4, 8, 12, 16, 32, 40, 64, 96]))
    hidden = heads * draw(st.sampled_from([32, 64, 80, 128]))
    kv = draw(st.sampled_from([0] + _divisors(heads)))
    kv_eff = kv or heads
    tp = draw(st.sampled_from([t for t in _divisors(heads) if t <= 16 and (kv_eff % t == 0 or t % kv_eff == 0)]))
    pp = draw(st.sampled_from([1, 2, 4, 8]))
    schedule = draw(st.sampled_from(["1f1b", "gpipe"] + (["interleaved"] if pp > 1 else [])))
    vpp = draw(st.sampled_from([2, 3, 4])) if schedule == "interleaved" else 1
    layers = pp * vpp * draw(st.integers(1, 6))
    dp = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64]))
    micro = draw(st.sampled_from([1, 2, 4, 8]))
    micro_batches = draw(st.integers(1, 3 * pp))
    if schedule == "interleaved":
        micro_batches = pp * -(-micro_batches // pp)
    seq = draw(st.sampled_from([128, 512, 2048, 4096, 32768]))
    sp = draw(st.booleans()) and seq % tp == 0
    gpu = draw(st.sampled_from(GPUS))
    values = dict(
        arch=arch, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv,
        seq_len=seq, vocab_size=draw(st.sampled_from([1000, 32000, 50257, 128256])),
        tp=tp, pp=pp, dp=dp, micro_batch=micro, global_batch=dp * micro * micro_batches, schedule=schedule, vpp=vpp,
        sequence_parallel=sp, recompute=draw(st.sampled_from(["none", "selective", "full"])),
        zero_stage=draw(st.sampled_from([0, 1, 2] + ([3] if pp == 1 else []))),
        overlap_grad_reduce=draw(st.booleans()), gpu=gpu)
    if draw(st.booleans()):
        values["ffn_hidden_size"] = draw(st.integers(1, 8)) * hidden // 2
    if draw(st.booleans()):
        values["precision"] = draw(st.sampled_from(PRECISIONS.get(gpu, ("fp16", "bf16"))))
    if draw(st.integers(0, 3)) == 0:
        values["gpus_per_node"] = draw(st.sampled_from([1, 2, 4, 8, 16]))
        values["intra_node_bw_GBps"] = draw(st.floats(1.0, 2000.0))
        values["inter_node_bw_Gbps"] = draw(st.floats(1.0, 3200.0))
    if moe is None:
        moe = draw(st.integers(0, 3)) == 0
    if moe and (tp == 1 or seq % tp == 0):
        experts = draw(st.sampled_from([2, 4, 8, 16, 64]))
        values.update(num_experts=experts, experts_per_token=draw(st.integers(1, min(experts, 8))),
                      ep=draw(st.sampled_from([e for e in _divisors(experts) if dp % e == 0])),
                      shared_experts=draw(st.integers(0, 2)), first_dense_layers=draw(st.integers(0, layers - 1)),
                      sequence_parallel=tp > 1)
        if draw(st.booleans()):
            values["moe_ffn_hidden_size"] = draw(st.integers(1, 4)) * hidden // 4
        if draw(st.booleans()):  # MoE layer placement, capacity and routing imbalance (docs/moe.md)
            values.update(moe_layer_freq=draw(st.integers(1, layers - values["first_dense_layers"])),
                          moe_imbalance=draw(st.sampled_from([1.0, 1.5, 4.0, 100.0])),
                          capacity_factor=draw(st.sampled_from([0.0, 1.0, 1.25, 8.0])))
        if tp > 1 and draw(st.booleans()):  # expert tensor parallel below tp (ep still divides dp)
            values["etp"] = draw(st.sampled_from(_divisors(tp)))
    return values


# Junk: values of the wrong type, huge, negative, NaN/inf, empty or unicode text (each kind drawn often).
SPECIAL_NUMBERS = [float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 2 ** 40, 2 ** 63, 10 ** 30, -1, -7, 0, 2.5,
                   -0.5, 1e-300, 1e300]
SPECIAL_TEXT = ["", " ", "abc", "1e400", "nan", "inf", "-inf", "None", "true", "２.５", "\u200b", "\x00", "🙂",
                "8\n", "a\r\nb"]
CONTAINERS = [[], [1], {}, {"a": 1}, (1, 2), b"\xff", b"8"]
junk = st.one_of(st.sampled_from(SPECIAL_NUMBERS), st.sampled_from(SPECIAL_TEXT), st.sampled_from(CONTAINERS),
                 st.booleans(), st.text(max_size=6), st.integers(-2 ** 70, 2 ** 70),
                 st.floats(allow_nan=True, allow_infinity=True))


def _is_number_text(v) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def _not_integer(v) -> bool:
    """True when `v` can never be an integer field's value."""
    if isinstance(v, bool) or isinstance(v, (list, dict, tuple, bytes)):
        return True
    if isinstance(v, str) and not _is_number_text(v):
        return True
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return True
    return not math.isfinite(x) or x != int(x) or abs(x) >= 2 ** 40 or x < 0


def _not_float(v) -> bool:
    """True when `v` can never be a bandwidth (wrong type, NaN, inf, negative)."""
    if isinstance(v, bool) or isinstance(v, (list, dict, tuple, bytes)):
        return True
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return True
    return not math.isfinite(x) or x < 0


CHOICES = dict(gpu=GPUS, arch=("gpt", "llama"), schedule=("1f1b", "interleaved", "gpipe"),
               recompute=("none", "selective", "full", "selective-op"))
definitely_invalid = st.one_of(
    st.tuples(st.sampled_from(INT_FIELDS), junk.filter(_not_integer)),
    st.tuples(st.sampled_from(FLOAT_FIELDS), junk.filter(_not_float)),
    st.tuples(st.sampled_from(BOOL_FIELDS), st.one_of(st.sampled_from([2, -1, 0.5, "maybe", "２", [], {}, "nan"]),
                                                     st.text(min_size=1, max_size=6).filter(
                                                         lambda s: s.strip().lower() not in (
                                                             "1", "true", "yes", "on", "1.0", "0", "false", "no",
                                                             "off", "0.0", "")))),
    # (junk that is a valid choice once lower-cased, e.g. "None" for recompute, is not invalid)
    st.tuples(st.sampled_from(["gpu", "arch", "schedule", "recompute"]), junk).filter(
        lambda fv: str(fv[1]).strip().lower() not in CHOICES[fv[0]]),
)


@st.composite
def perturbed_values(draw):
    """Valid values with one to three fields replaced by junk (or by another field's junk)."""
    values = draw(valid_values())
    for _ in range(draw(st.integers(1, 3))):
        values[draw(st.sampled_from(ALL_FIELDS))] = draw(junk)
    return values


# ---------------------------------------------------------------- checks

def _check_sane(p) -> None:
    """A prediction that is a number in every figure and consistent with itself."""
    cfg = p.config
    figures = dict(iteration_time_s=p.iteration_time_s, tokens_per_s=p.tokens_per_s, mfu=p.mfu,
                   memory_gib_per_gpu=p.memory_gib_per_gpu, model_flops=p.model_flops,
                   **{f"breakdown.{k}": v for k, v in p.breakdown.items()},
                   **{f"memory.{k}": v for k, v in p.memory_breakdown_gib.items()})
    for name, value in figures.items():
        assert math.isfinite(value), (name, value)
    assert p.iteration_time_s > 0
    assert all(v >= 0 for v in p.breakdown.values()), p.breakdown
    assert all(v >= 0 for v in p.memory_breakdown_gib.values()), p.memory_breakdown_gib
    assert math.isclose(sum(p.breakdown.values()), p.iteration_time_s, rel_tol=1e-9)
    assert 0.0 < p.mfu < 1.0, p.mfu
    assert p.memory_gib_per_gpu > 0
    assert p.tokens_per_s == pytest.approx(cfg.parallel.global_batch * cfg.model.seq_len / p.iteration_time_s,
                                           rel=1e-12)
    assert p.fits_memory == (p.memory_gib_per_gpu <= p.gpu_memory_gib)


def _one_line(err: BaseException) -> str:
    message = str(err)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    assert message.split(": ", 1)[0] in ALL_FIELDS or message.startswith("model: "), message
    return message


def _outcome(values: dict, checkpoint: str):
    """('error', message) or ('ok', Prediction); anything else than a UserError fails the test."""
    try:
        cfg = vtrain.build_config(values)
    except UserError as err:
        return "error", _one_line(err)
    return "ok", predictor(checkpoint).predict(cfg)


# ---------------------------------------------------------------- one config

@settings(max_examples=budget(60))
@given(valid_values(), st.sampled_from(CHECKPOINTS))
def test_valid_config_gives_sane_figures(values, checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow / invalid-value warnings either
        kind, p = _outcome(values, checkpoint)
    assert kind == "ok", p
    _check_sane(p)


@settings(max_examples=budget(40))
@given(valid_values(), st.sampled_from(CHECKPOINTS))
def test_memory_never_grows_with_recompute_or_zero_stage(values, checkpoint):
    stages = (0, 1, 2, 3) if values["pp"] == 1 else (0, 1, 2)
    recompute = [vtrain.build_config({**values, "recompute": r}) for r in ("none", "selective", "full")]
    zero = [vtrain.build_config({**values, "zero_stage": z}) for z in stages]
    mem = [p.memory_gib_per_gpu for p in predictor(checkpoint).predict_many(recompute + zero)]
    by_recompute, by_zero = mem[:3], mem[3:]
    assert by_recompute == sorted(by_recompute, reverse=True), by_recompute
    assert by_zero[:3] == sorted(by_zero[:3], reverse=True), by_zero  # 0 >= 1 >= 2: sharding only divides
    # ZeRO-3 / FSDP keeps fp32 parameter and gradient shards (16 B/param / dp) plus one unit's unsharded
    # buffers, so at dp=2 in fp16 it is by design no smaller than ZeRO-2 (2 + 14/dp B/param); it is never
    # above no ZeRO at all, and over one rank (nothing sharded) it is stage 0's layout.
    if len(by_zero) == 4:
        assert by_zero[3] <= by_zero[0], by_zero
        if values["dp"] == 1:
            assert by_zero[3] == by_zero[0], by_zero


@settings(max_examples=budget(150))
@given(perturbed_values(), st.sampled_from(CHECKPOINTS))
def test_any_values_give_one_line_error_or_sane_figures(values, checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kind, p = _outcome(values, checkpoint)
    if kind == "ok":
        _check_sane(p)


@settings(max_examples=budget(150))
@given(valid_values(), definitely_invalid)
def test_invalid_value_is_refused_naming_its_field(values, bad):
    name, value = bad
    values[name] = value
    with pytest.raises(UserError) as err:
        vtrain.build_config(values)
    message = _one_line(err.value)
    if name in INT_FIELDS + FLOAT_FIELDS + BOOL_FIELDS and not (isinstance(value, (int, float)) and value < 0):
        assert message.startswith(f"{name}: "), message  # a type/range error names the field itself


# ---------------------------------------------------------------- a table

def _table_value(v):
    """What build_config is given for a table cell: NaN/None cells mean 'not given'."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


@settings(max_examples=budget(40))
@given(st.lists(st.one_of(valid_values(), perturbed_values()), min_size=1, max_size=8),
       st.sampled_from(CHECKPOINTS))
def test_table_rows_match_build_config_and_good_rows_match_alone(rows, checkpoint):
    frame = pd.DataFrame(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = vtrain.forecast(frame, checkpoint=checkpoint)
    assert len(out) == len(rows)
    for i, row in enumerate(rows):
        # the row's cells in column order: a row with several bad cells reports the first column's
        given_values = {k: _table_value(row[k]) for k in frame.columns if k in row}
        kind, expected = _outcome(given_values, checkpoint)
        error = out["error"].iloc[i]
        if kind == "error":
            assert isinstance(error, str) and "\n" not in error, (error, expected)
            assert error.split(": ", 1)[0] == expected.split(": ", 1)[0], (error, expected)
            assert pd.isna(out["iteration_time_s"].iloc[i])
            continue
        assert pd.isna(error), (error, given_values)
        _check_sane(expected)
        assert out["iteration_time_s"].iloc[i] == expected.iteration_time_s
        assert out["tokens_per_s"].iloc[i] == expected.tokens_per_s
        assert out["mfu"].iloc[i] == expected.mfu
        assert out["memory_gib_per_gpu"].iloc[i] == expected.memory_gib_per_gpu
        assert bool(out["fits_memory"].iloc[i]) == expected.fits_memory


# ---------------------------------------------------------------- a strategy grid

@st.composite
def grid_cases(draw):
    values = draw(valid_values(moe=False))
    for key in ("tp", "pp", "dp", "vpp", "schedule", "zero_stage", "recompute", "sequence_parallel", "micro_batch"):
        values.pop(key, None)
    values["global_batch"] = draw(st.sampled_from([8, 16, 32, 48, 64]))
    values["gpu"] = draw(st.sampled_from(["a100-80gb", "h100-sxm", "b200", "mi300x"]))
    values["precision"] = None
    return values, draw(st.sampled_from([1, 2, 4, 6, 8, 16]))


def _search_or_none(cfg, checkpoint, num_gpus):
    try:
        return vtrain.search(cfg, checkpoint=checkpoint, num_gpus=num_gpus, top=100000)
    except UserError as err:  # no strategy fits / none is valid for this GPU count
        assert str(err) and "\n" not in str(err)
        return None


@settings(max_examples=budget(12))
@given(grid_cases(), st.sampled_from(GRID_CHECKPOINTS))
def test_strategy_grid_gives_sane_figures_and_memory_order(case, checkpoint):
    values, num_gpus = case
    cfg = vtrain.build_config(values)  # its own layout (one GPU) is ignored by the search
    result = _search_or_none(cfg, checkpoint, num_gpus)
    if result is None:
        return
    times = np.asarray(result.feasible["iteration_time_s"])
    assert np.isfinite(times).all() and (times > 0).all()
    rows = result.top
    assert rows
    tokens = cfg.parallel.global_batch * cfg.model.seq_len
    for r in rows:
        figures = [r["iteration_time_s"], r["tokens_per_s"], r["mfu"], r["memory_gib"], r["cost"]]
        assert all(math.isfinite(x) for x in figures), r
        assert r["iteration_time_s"] > 0 and 0 < r["mfu"] < 1 and r["memory_gib"] > 0
        assert r["tokens_per_s"] == pytest.approx(tokens / r["iteration_time_s"], rel=1e-12)
        assert r["num_gpus"] == r["tp"] * r["pp"] * r["cp"] * r["dp"] == num_gpus
    # memory order inside the grid: strategies equal but for the ZeRO stage / the recompute mode
    # (ZeRO-3 <= ZeRO-0 only: its fp32 shards plus gather buffers can exceed ZeRO-2 at small dp)
    layout = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp", "schedule", "sequence_parallel")
    for vary, order in (("zero_stage", (0, 1, 2)), ("zero_stage", (0, 3)), ("recompute", ("none", "selective", "full"))):
        groups: dict = {}
        for r in rows:
            key = tuple(r[k] for k in layout + ("zero_stage", "recompute") if k != vary)
            groups.setdefault(key, {})[r[vary]] = r["memory_gib"]
        for mem in groups.values():
            seq = [mem[v] for v in order if v in mem]
            assert seq == sorted(seq, reverse=True), (vary, mem)
    # the grid's reported figures are vtrain.predict's for the same config
    for r in rows[:: max(len(rows) // 4, 1)]:
        p = predictor(checkpoint).predict(vtrain.build_config(r["config"]))
        assert p.iteration_time_s == r["iteration_time_s"] and p.memory_gib_per_gpu == r["memory_gib"]


SEARCH_PARAMETERS = ("num_gpus", "max_gpus", "top", "tokens", "price_per_gpu_hour", "max_tp", "max_pp",
                     "max_micro_batch")


@settings(max_examples=budget(40))
@given(st.sampled_from(SEARCH_PARAMETERS), junk)
def test_search_parameter_junk_gives_one_line_error_or_a_result(parameter, value):
    cfg = vtrain.build_config(dict(num_layers=4, hidden_size=256, num_attention_heads=4, num_gpus=8, global_batch=16))
    kwargs = {parameter: value}
    if parameter == "max_gpus":
        kwargs["num_gpus"] = None
    try:
        result = vtrain.search(cfg, checkpoint="none", **kwargs)
    except UserError as err:
        assert str(err) and "\n" not in str(err)
        return
    for r in result.top:
        assert all(math.isfinite(r[k]) for k in ("iteration_time_s", "cost", "gpu_hours", "train_days")), r
        assert r["iteration_time_s"] > 0 and r["cost"] >= 0
