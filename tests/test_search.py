"""Strategy search engine: enumeration validity/completeness, guided == full, objectives, sensitivity."""
import itertools
import math

import numpy as np
import pytest

from vtrain.costmodel.encode import encode
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.presets import lookup_model
from vtrain.strategy.search import (SearchSpace, encode_strategies, enumerate_strategies, guided_search,
                                     search, sensitivity, strategy_values)
from vtrain.costmodel.simulator import simulate
from vtrain.costmodel.spec import RECOMPUTE_MODES, ConfigError, build_config


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load("none")


def small_cfg(**kw):
    return build_config(dict(lookup_model("gpt3-1.3b"), gpu="v100", global_batch=128, **kw))


def test_enumerated_strategies_pass_build_config_and_encode_the_same():
    cfg = small_cfg()
    s = enumerate_strategies(cfg, SearchSpace(max_gpus=32))
    n = len(s["tp"])
    assert n > 1000
    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=150, replace=False)
    configs = []
    for i in sample:
        values = strategy_values(cfg, s, i)
        built = build_config(values)  # raises ConfigError if the enumeration broke a rule
        p = built.parallel
        assert (p.tp, p.pp, p.dp, p.micro_batch, p.vpp, p.zero_stage) == (
            s["tp"][i], s["pp"][i], s["dp"][i], s["micro_batch"][i], s["vpp"][i], s["zero_stage"][i])
        assert p.sequence_parallel == bool(s["sequence_parallel"][i])
        assert p.num_micro_batches == s["num_micro_batches"][i]
        configs.append(built)
    ours = encode_strategies(cfg, {k: v[sample] for k, v in s.items()})
    ref = encode(configs)
    for key in ref._fields:
        np.testing.assert_allclose(getattr(ours, key), getattr(ref, key), err_msg=key)


def test_enumeration_is_complete_on_a_tiny_space():
    base = dict(num_layers=4, hidden_size=256, num_attention_heads=4, seq_len=128, gpu="a100-80gb", global_batch=8)
    cfg = build_config(base)
    s = enumerate_strategies(cfg, SearchSpace(num_gpus=4))
    got = {tuple(int(s[k][i]) for k in ("tp", "pp", "dp", "micro_batch", "schedule", "vpp", "recompute",
                                        "sequence_parallel", "zero_stage")) for i in range(len(s["tp"]))}
    assert len(got) == len(s["tp"])  # no duplicates
    want = set()
    for tp, pp, mb, sched, vpp, rec, sp, zero in itertools.product(range(1, 5), range(1, 5), range(1, 9), (0, 1),
                                                                   range(1, 5), range(len(RECOMPUTE_MODES)), (0, 1), range(4)):
        if sched == 1 and vpp == 1:
            continue  # interleaved with one virtual stage is plain 1F1B
        try:
            c = build_config(dict(base, tp=tp, pp=pp, num_gpus=4, micro_batch=mb, schedule=("1f1b", "interleaved")[sched],
                                  vpp=vpp, recompute=RECOMPUTE_MODES[rec], sequence_parallel=bool(sp),
                                  zero_stage=zero))
        except ConfigError:
            continue
        if sp and not c.parallel.sequence_parallel:
            continue  # normalised away (tp == 1): same strategy as sp=False
        if zero and c.parallel.dp == 1:
            continue  # ZeRO without data parallelism is a no-op
        want.add((tp, pp, c.parallel.dp, mb, sched, vpp, rec, sp, zero))
    assert got == want


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_guided_search_finds_the_enumeration_best(predictor, objective):
    cfg = small_cfg()
    space = SearchSpace(max_gpus=32)
    full = search(cfg, space, predictor, objective=objective, top=3)
    guided = guided_search(cfg, space, predictor, objective=objective, top=3)
    assert guided.num_evaluated < full.num_fit  # guidance skipped part of the space
    assert guided.top[0]["config"] == full.top[0]["config"]
    assert guided.top[0]["iteration_time_s"] == pytest.approx(full.top[0]["iteration_time_s"], rel=1e-12)


def test_objectives_order_and_trade_off(predictor):
    cfg = small_cfg()
    space = SearchSpace(max_gpus=32)
    by_time = search(cfg, space, predictor, objective="time", top=10)
    by_cost = search(cfg, space, predictor, objective="cost", top=10)
    by_tpd = search(cfg, space, predictor, objective="tokens-per-dollar", top=10)
    times = [r["iteration_time_s"] for r in by_time.top]
    costs = [r["cost"] for r in by_cost.top]
    assert times == sorted(times) and costs == sorted(costs)
    assert [r["tokens_per_dollar"] for r in by_tpd.top] == sorted((r["tokens_per_dollar"] for r in by_tpd.top),
                                                                 reverse=True)
    assert by_tpd.top[0]["config"] == by_cost.top[0]["config"]
    t_best, c_best = by_time.top[0], by_cost.top[0]
    assert t_best["iteration_time_s"] < c_best["iteration_time_s"]
    assert c_best["cost"] < t_best["cost"]
    assert t_best["num_gpus"] > c_best["num_gpus"]
    # the best by time is the fastest of every fitting strategy
    assert t_best["iteration_time_s"] <= by_time.feasible["iteration_time_s"].min() * (1 + 1e-5)
    assert all(r["fits_memory"] and r["memory_gib"] <= r["gpu_memory_gib"] for r in by_time.top)


def test_top_rows_match_a_single_prediction(predictor):
    cfg = small_cfg()
    res = search(cfg, SearchSpace(num_gpus=16), predictor, objective="time", top=3, price_per_gpu_hour=2.0,
                 tokens=1e10)
    for row in res.top:
        pred = predictor.predict(build_config(row["config"]))
        assert row["iteration_time_s"] == pytest.approx(pred.iteration_time_s, rel=1e-12)
        assert row["memory_gib"] == pytest.approx(pred.memory_gib_per_gpu, rel=1e-12)
        assert row["cost"] == pytest.approx(pred.training_cost(1e10, 2.0).cost, rel=1e-9)
        assert row["num_gpus"] == 16


def test_pareto_front_is_non_dominated(predictor):
    res = search(small_cfg(), SearchSpace(max_gpus=32), predictor, objective="cost", top=1)
    front = res.pareto
    assert len(front) >= 2
    t = np.array([p["iteration_time_s"] for p in front])
    c = np.array([p["gpu_hours"] for p in front])
    assert np.all(np.diff(t) > 0) and np.all(np.diff(c) < 0)
    all_t, all_c = res.feasible["iteration_time_s"], res.feasible["gpu_hours"]
    for ti, ci in zip(t, c):
        assert not np.any((all_t < ti) & (all_c < ci))


def test_impossible_gpu_count_and_nothing_fits_explain_in_one_line(predictor):
    # 29 GPUs: pp=29 leaves stages without a layer (24 layers), dp=29 does not divide the batch
    # (7 GPUs works since uneven stages: pp=7)
    with pytest.raises(UserError, match="no valid strategy for 29 GPUs") as err:
        search(small_cfg(), SearchSpace(num_gpus=29), predictor)
    assert "\n" not in str(err.value)
    suggested = [int(n) for n in str(err.value).split("try num_gpus ")[1].split(" or ")]
    for n in suggested:  # the suggested counts really have valid strategies
        assert len(enumerate_strategies(small_cfg(), SearchSpace(num_gpus=n))["tp"]) > 0
    big = build_config(dict(lookup_model("gpt3-175b"), gpu="v100", global_batch=8))
    with pytest.raises(UserError, match=r"no strategy fits in 32 GiB per GPU: the smallest needs \d") as err:
        search(big, SearchSpace(num_gpus=8), predictor)
    assert "\n" not in str(err.value)


def test_sensitivity_matches_finite_differences(predictor):
    cfg = small_cfg()
    res = search(cfg, SearchSpace(num_gpus=16), predictor, top=1)
    best = res.top[0]
    table = {r["knob"]: r for r in sensitivity(predictor, cfg, best)}
    d = encode([build_config(best["config"])])

    def ln_time(**scale):
        dd = d._replace(**{k: getattr(d, k) * f for k, f in scale.items()})
        dd = dd._replace(num_gpus=dd.tp * dd.pp * dd.dp, num_micro_batches=dd.global_batch / (dd.dp * dd.micro_batch))
        return math.log(float(simulate(dd)["iteration_time_s"][0]))

    eps = 1e-3
    # (pp = 1 and tp = gpus_per_node sit on steps of the model, where derivatives are one-sided)
    knobs = ["micro_batch", "dp"] + (["pp"] if best["pp"] > 1 else [])
    for knob in knobs:
        fd = (ln_time(**{knob: 1 + eps}) - ln_time(**{knob: 1 - eps})) / (math.log(1 + eps) - math.log(1 - eps))
        assert table[knob]["time_elasticity"] == pytest.approx(fd, abs=0.02, rel=0.05), knob
        assert table[knob]["cost_elasticity"] == pytest.approx(
            table[knob]["time_elasticity"] + (knob != "micro_batch"), abs=1e-9)


def test_numpy_and_jitted_evaluation_agree(monkeypatch):
    # a search of up to NUMPY_MAX_ROWS strategies runs in numpy (no compile); larger ones under jax.jit
    # in float32: both must give the same times (the shipped checkpoint, with its networks)
    from vtrain.strategy import evaluation

    shipped = Predictor.load("default")
    cfg = small_cfg()
    s = enumerate_strategies(cfg, SearchSpace(max_gpus=32))
    d = encode_strategies(cfg, s).take(np.arange(300))
    in_numpy = evaluation.evaluate(shipped, d)
    monkeypatch.setattr(evaluation, "NUMPY_MAX_ROWS", 0)
    monkeypatch.setattr(evaluation, "BUCKETS", (512,))
    jitted = evaluation.evaluate(shipped, d)
    assert set(in_numpy) == set(jitted)
    for key in in_numpy:
        np.testing.assert_allclose(in_numpy[key], jitted[key], rtol=2e-5, atol=1e-9, err_msg=key)
    reference = simulate(d, shipped.correction)["iteration_time_s"]
    np.testing.assert_array_equal(in_numpy["iteration_time_s"], reference)


def test_sensitivity_derivatives_match_jax_grad(predictor):
    # the sensitivity table's finite differences (numpy) against jax.grad of the same relaxed model,
    # at points between the model's steps (tp inside a node, pp > 1)
    from vtrain.strategy.guided import KNOBS, relaxed_gradient, relaxed_time_gradient

    cfg = small_cfg()
    s = enumerate_strategies(cfg, SearchSpace(num_gpus=16))
    pick = np.flatnonzero((s["tp"] == 2) & (s["pp"] == 2) & (s["micro_batch"] == 2))[:4]
    assert len(pick) == 4
    base = encode_strategies(cfg, {k: v[pick] for k, v in s.items()})
    x = np.log2(np.stack([s[k][pick] for k in KNOBS], axis=1).astype(np.float64))
    x[:, :4] += 0.3  # off the integer degrees (a stage boundary or a node edge would be a step)
    g_jax, _, _ = relaxed_gradient(predictor, x, base, np.tile([[-1.0, 0.0, 0.0, 0.0]], (len(x), 1)))
    g_numpy = relaxed_time_gradient(predictor, x, base)
    np.testing.assert_allclose(g_numpy, g_jax, atol=2e-3, rtol=2e-3)
    assert np.abs(g_numpy[:, :3]).min() > 0.01  # the degrees move the time (not a vacuous match)


def test_compile_cache_is_keyed_on_the_table_content_not_its_id():
    from vtrain.strategy.search import _table_key

    table = dict(sizes=np.array([1e3, 1e6]), times=np.array([[1e-5, 1e-3]]), groups=[8])
    same = {k: (v.copy() if isinstance(v, np.ndarray) else list(v)) for k, v in table.items()}
    other = dict(table, times=np.array([[2e-5, 2e-3]]))
    assert _table_key(table) == _table_key(same) != _table_key(other)
    assert _table_key(None) is None


def test_library_errors_name_parameters_and_the_cli_names_flags():
    from vtrain.costmodel.errors import ParameterError

    cfg = small_cfg()
    with pytest.raises(ParameterError) as err:
        search(cfg, SearchSpace(num_gpus=16), Predictor.load("none"), objective="speed")
    assert str(err.value).startswith("objective: 'speed' is unknown") and "--" not in str(err.value)
    assert err.value.flag_message().startswith("--objective: 'speed' is unknown")
    with pytest.raises(ParameterError, match="^price_per_gpu_hour: -1.0 must be >= 0") as err:
        search(cfg, SearchSpace(num_gpus=16), Predictor.load("none"), price_per_gpu_hour=-1)
    assert err.value.flag_message().startswith("--price-per-gpu-hour: ")
