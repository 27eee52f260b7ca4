"""MoE layer placement (first dense layers, every k-th layer MoE), capacity factor and routing
imbalance: physics, stage counts, validation, Hugging Face import, tables, search and the CLI."""
import json

import numpy as np
import pytest

from vtrain.costmodel import moe
from vtrain.costmodel.config_files import from_hf
from vtrain.costmodel.encode import config_row
from vtrain.costmodel.pipeline import chunk_layers
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.presets import lookup_model
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.tables.columns import encode_table

ANALYTICAL = Predictor.load("none")
# a small Llama MoE: 8 layers, 8 experts top-2 on 16 A100 (tp=2 with SP, pp=1, dp=8, ep=4)
BASE = dict(arch="llama", num_layers=8, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=5632,
            seq_len=2048, vocab_size=32000, num_gpus=16, tp=2, pp=1, micro_batch=2, global_batch=64,
            sequence_parallel=True, gpu="a100-80gb", num_experts=8, experts_per_token=2, ep=4)


def predict(**fields):
    return ANALYTICAL.predict(build_config(fields))


def dense_of(fields):
    return {k: v for k, v in fields.items() if k not in ("num_experts", "experts_per_token", "ep")}


# ----------------------------------------------------------------------------- layer placement

def test_moe_layer_freq_two_halves_the_moe_layers_and_their_cost():
    all_moe, half, dense = predict(**BASE), predict(**BASE, moe_layer_freq=2), predict(**dense_of(BASE))
    assert half.config.model.num_moe_layers == 4 and all_moe.config.model.num_moe_layers == 8
    assert [half.config.model.is_moe_layer(i) for i in range(8)] == [False, True] * 4
    # one stage: 4 dense + 4 MoE layers = the mean of the all-MoE and the all-dense model
    for key in ("compute", "tp_comm"):
        assert half.breakdown[key] == pytest.approx((all_moe.breakdown[key] + dense.breakdown[key]) / 2, rel=1e-9)
    assert half.breakdown["ep_comm"] == pytest.approx(all_moe.breakdown["ep_comm"] / 2, rel=1e-12)
    assert half.model_flops == pytest.approx((all_moe.model_flops + dense.model_flops) / 2, rel=1e-12)
    params = (all_moe.config.model.num_parameters + dense.config.model.num_parameters) / 2
    assert half.config.model.num_parameters == pytest.approx(params, rel=1e-12)
    assert half.memory_breakdown_gib["weights"] < all_moe.memory_breakdown_gib["weights"]
    # two stages (4 layers each, MoE layers 1, 3 | 5, 7): the all-to-all halves too
    two = dict(BASE, pp=2, num_gpus=32)
    assert predict(**two, moe_layer_freq=2).breakdown["ep_comm"] == pytest.approx(
        predict(**two).breakdown["ep_comm"] / 2, rel=1e-12)


@pytest.mark.parametrize("layers, pp, vpp, dense, freq", [
    (8, 1, 1, 0, 2), (61, 16, 1, 3, 1), (61, 16, 1, 3, 2), (48, 4, 1, 1, 5), (30, 4, 1, 0, 3), (24, 3, 1, 2, 4),
    (32, 4, 2, 1, 3), (16, 8, 1, 0, 2)])
def test_stage_moe_layer_counts_follow_the_layer_placement(layers, pp, vpp, dense, freq):
    fields = dict(BASE, num_layers=layers, pp=pp, num_gpus=16 * pp, first_dense_layers=dense, moe_layer_freq=freq,
                  **(dict(schedule="interleaved", vpp=vpp, global_batch=64 * pp) if vpp > 1 else {}))
    cfg = build_config(fields)
    n = moe.stage_moe_layers(config_row(cfg), np)
    placed = [cfg.model.is_moe_layer(i) for i in range(layers)]
    assert n["total"][0] == sum(placed) == cfg.model.num_moe_layers
    chunks = chunk_layers(layers, pp, vpp)
    starts = np.cumsum([0] + chunks)
    per_gpu = [sum(sum(placed[starts[c]:starts[c + 1]]) for c in range(g, pp * vpp, pp)) for g in range(pp)]
    if vpp == 1:  # stages are contiguous: first and last exact
        assert n["first"][0] == per_gpu[0] and n["last"][0] == per_gpu[-1]
    if pp > 2:
        middle = per_gpu[1:-1]
        assert n["middle_avg"][0] == pytest.approx(np.mean(middle), rel=1e-12)
        assert max(middle) <= n["middle"][0] <= max(chunks)  # the heaviest middle stage: never undercounted
        if freq == 1:
            assert n["middle"][0] == max(middle)


def test_one_expert_top_one_still_equals_the_dense_model_with_the_new_fields():
    one = dict(BASE, num_experts=1, experts_per_token=1, ep=1)
    plain = predict(**one)
    # with a single expert (ep = 1) no rank can receive more than its share: imbalance and capacity change nothing
    assert predict(**one, moe_imbalance=3.0, capacity_factor=1.5).iteration_time_s == plain.iteration_time_s
    dense = predict(**dense_of(BASE))
    assert dense.iteration_time_s < plain.iteration_time_s < 1.10 * dense.iteration_time_s
    half = predict(**one, moe_layer_freq=2)
    assert dense.iteration_time_s < half.iteration_time_s < plain.iteration_time_s


# ----------------------------------------------------------------------------- routing load

def test_imbalance_raises_expert_time_and_all_to_all_and_never_goes_below_balanced():
    balanced = predict(**BASE)
    runs = {x: predict(**BASE, moe_imbalance=x) for x in (1.0, 1.25, 1.5, 2.0, 4.0)}
    times = [runs[x].iteration_time_s for x in sorted(runs)]
    assert times == sorted(times) and times[0] == balanced.iteration_time_s
    two = runs[2.0]
    assert two.breakdown["compute"] > 1.1 * balanced.breakdown["compute"]
    # the busiest rank receives twice the tokens: the all-to-all moves 2x the bytes (plus the same latency),
    # so its time is affine in the load
    a2a = {x: runs[x].breakdown["ep_comm"] for x in runs}
    assert 1.4 * a2a[1.0] < a2a[2.0] <= 2.0 * a2a[1.0]
    assert a2a[4.0] - a2a[2.0] == pytest.approx(2.0 * (a2a[2.0] - a2a[1.0]), rel=1e-9)
    assert two.memory_breakdown_gib["activations"] > balanced.memory_breakdown_gib["activations"]
    # useful FLOP count balanced routing: MFU falls as the time rises
    assert two.model_flops == balanced.model_flops and two.mfu < balanced.mfu
    # ep=4 of 8 experts, top-2: a rank receives at most 4 x 2 / 2 = 4x its share
    assert predict(**BASE, moe_imbalance=100.0).iteration_time_s == runs[4.0].iteration_time_s
    # ep=1: every token's experts are local, nothing to imbalance between ranks
    local = dict(BASE, ep=1)
    assert predict(**local, moe_imbalance=4.0).iteration_time_s == predict(**local).iteration_time_s


def test_capacity_factor_caps_the_routing_load():
    capped = predict(**BASE, moe_imbalance=2.0, capacity_factor=1.25)
    assert capped.iteration_time_s == pytest.approx(predict(**BASE, moe_imbalance=1.25).iteration_time_s, rel=1e-12)
    assert predict(**BASE, moe_imbalance=3.0, capacity_factor=1.0).iteration_time_s == \
        pytest.approx(predict(**BASE).iteration_time_s, rel=1e-12)
    # a capacity above the load drops nothing
    assert predict(**BASE, moe_imbalance=1.5, capacity_factor=4.0).iteration_time_s == \
        predict(**BASE, moe_imbalance=1.5).iteration_time_s
    # with balanced routing a capacity factor >= 1 changes nothing
    assert predict(**BASE, capacity_factor=1.0).iteration_time_s == predict(**BASE).iteration_time_s
    loads = moe.routing_load(config_row(build_config(dict(BASE, moe_imbalance=2.0, capacity_factor=1.25))), np)
    assert loads[0] == 1.25


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("fields, field, text", [
    (dict(moe_layer_freq=0), "moe_layer_freq", "must be >= 1"),
    (dict(moe_layer_freq=9), "moe_layer_freq", "leaves no MoE layer of num_layers=8; use moe_layer_freq <= 8"),
    (dict(first_dense_layers=4, moe_layer_freq=5), "moe_layer_freq", "use moe_layer_freq <= 4"),
    (dict(capacity_factor=0.5), "capacity_factor", "drops tokens even under balanced routing"),
    (dict(capacity_factor=-1.0), "capacity_factor", "must be >= 1"),
    (dict(moe_imbalance=0.5), "moe_imbalance", "must be >= 1"),
    (dict(moe_imbalance=1e9), "moe_imbalance", "implausibly large"),
    (dict(num_experts=0, experts_per_token=0, ep=1, moe_layer_freq=2), "moe_layer_freq", "needs a mixture-of-experts"),
    (dict(num_experts=0, experts_per_token=0, ep=1, capacity_factor=1.5), "capacity_factor", "needs a mixture-of"),
    (dict(num_experts=0, experts_per_token=0, ep=1, moe_imbalance=2.0), "moe_imbalance", "needs a mixture-of"),
])
def test_invalid_routing_fields_are_one_line_errors_in_configs_and_tables(fields, field, text):
    values = {**BASE, **fields}
    with pytest.raises(ConfigError) as err:
        build_config(values)
    assert err.value.field == field and text in str(err.value) and "\n" not in str(err.value)
    _, errors = encode_table({k: [v] for k, v in values.items()})
    assert errors[0] == str(err.value)


def test_cli_flags_set_and_refuse_the_routing_fields(cli):
    base = ["predict", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus", "64", "--tp", "1", "--pp", "4",
            "--ep", "8", "--global-batch", "256", "--checkpoint", "none"]
    out = cli(*base, "--moe-imbalance", "9", "--moe-layer-freq", "2", "--first-dense-layers", "1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # 8 experts top-2 over ep=8: one rank can receive at most 8 x 1 / 2 = 4x its share
    assert data["routing_load"] == 4.0 and data["num_moe_layers"] == 15
    assert data["config"]["moe_imbalance"] == 9.0 and data["config"]["moe_layer_freq"] == 2
    table = cli(*base, "--moe-imbalance", "2", "--capacity-factor", "1.5", env=dict(COLUMNS="400"))
    assert table.returncode == 0, table.stderr
    caption = " ".join(table.stdout.split())
    assert "routing imbalance 2 (capped by capacity_factor): the busiest EP rank gets 1.50x the balanced tokens" \
        in caption and "capacity factor 1.5 (tokens beyond it dropped" in caption
    assert "balanced routing: the busiest EP rank gets 1.00x" in " ".join(cli(*base, env=dict(COLUMNS="400")).stdout.split())
    bad = cli(*base, "--capacity-factor", "0.8")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "capacity_factor: 0.8" in bad.stderr


# ----------------------------------------------------------------------------- Hugging Face configs

QWEN2 = dict(model_type="qwen2_moe", hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
             intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
             num_experts_per_tok=4, decoder_sparse_step=1, mlp_only_layers=[], vocab_size=151936, hidden_act="silu")
DEEPSEEK = dict(model_type="deepseek_v3", hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
                num_key_value_heads=128, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, moe_layer_freq=1,
                vocab_size=129280, hidden_act="silu")


def _qwen_rule(data):
    k, only = data.get("decoder_sparse_step", 1), set(data.get("mlp_only_layers", []))
    return [i not in only and (i + 1) % k == 0 for i in range(data["num_hidden_layers"])]


def _deepseek_rule(data):
    f, k = data.get("first_k_dense_replace", 0), data.get("moe_layer_freq", 1)
    return [i >= f and i % k == 0 for i in range(data["num_hidden_layers"])]


@pytest.mark.parametrize("data, rule", [
    (dict(QWEN2, decoder_sparse_step=2), _qwen_rule), (dict(QWEN2, decoder_sparse_step=3), _qwen_rule),
    (dict(QWEN2, mlp_only_layers=[0, 1, 2]), _qwen_rule),
    (dict(QWEN2, decoder_sparse_step=2, mlp_only_layers=[0, 1, 2, 3, 4]), _qwen_rule),
    (DEEPSEEK, _deepseek_rule), (dict(DEEPSEEK, moe_layer_freq=2), _deepseek_rule),
    (dict(DEEPSEEK, first_k_dense_replace=1, moe_layer_freq=3), _deepseek_rule),
])
def test_hf_moe_layer_placement_is_imported_exactly(data, rule):
    model = build_config(from_hf(data)).model
    assert [model.is_moe_layer(i) for i in range(model.num_layers)] == rule(data)


@pytest.mark.parametrize("data, key", [
    (dict(QWEN2, mlp_only_layers=[5]), "mlp_only_layers"),  # a dense layer between MoE layers
    (dict(DEEPSEEK, first_k_dense_replace=0, moe_layer_freq=2), "moe_layer_freq"),  # layer 0 MoE, then every 2nd
    (dict(QWEN2, decoder_sparse_step=100), "decoder_sparse_step"),
    (dict(QWEN2, mlp_only_layers="0,1"), "mlp_only_layers"),
    (dict(DEEPSEEK, moe_layer_freq=0), "moe_layer_freq"),
])
def test_hf_moe_layer_placements_vtrain_cannot_express_are_refused_in_one_line(data, key):
    with pytest.raises(ConfigError) as err:
        from_hf(data)
    assert err.value.field == key and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- tables and search

def test_forecast_accepts_the_routing_columns():
    import pandas as pd

    from vtrain import forecast

    rows = dict(model=["mixtral-8x7b"] * 3, num_gpus=[16] * 3, ep=[8] * 3, global_batch=[64] * 3,
                moe_layer_freq=[2, None, 1], moe_imbalance=[1.5, 2.0, 0.5], capacity_factor=[None, 1.25, None])
    out = forecast(pd.DataFrame(rows), checkpoint="none")
    mixtral = dict(lookup_model("mixtral-8x7b"), num_gpus=16, ep=8, global_batch=64)
    assert out["iteration_time_s"][0] == pytest.approx(
        predict(**mixtral, moe_layer_freq=2, moe_imbalance=1.5).iteration_time_s, rel=1e-12)
    assert out["iteration_time_s"][1] == pytest.approx(
        predict(**mixtral, moe_imbalance=1.25).iteration_time_s, rel=1e-12)
    assert out["error"][2].startswith("moe_imbalance: 0.5 must be >= 1")


def test_search_keeps_the_routing_fields_and_its_rows_predict_the_same():
    from vtrain.strategy.search import SearchSpace, search

    fields = dict(lookup_model("mixtral-8x7b"), gpu="h100-sxm", global_batch=128, moe_layer_freq=2,
                  moe_imbalance=2.0, capacity_factor=1.5)
    res = search(build_config(fields), SearchSpace(num_gpus=32, pp=(1, 2, 4)), ANALYTICAL, top=6)
    assert len(res.top) == 6
    for r in res.top:
        cfg = build_config(r["config"])
        assert (cfg.model.moe_layer_freq, cfg.model.moe_imbalance, cfg.model.capacity_factor) == (2, 2.0, 1.5)
        assert r["iteration_time_s"] == pytest.approx(ANALYTICAL.predict(cfg).iteration_time_s, rel=1e-12)
    balanced = search(build_config(dict(fields, moe_imbalance=1.0, capacity_factor=0.0)),
                      SearchSpace(num_gpus=32, pp=(1, 2, 4)), ANALYTICAL, top=1)
    assert balanced.top[0]["iteration_time_s"] <= res.top[0]["iteration_time_s"]


def test_search_cli_reproduce_line_carries_the_routing_fields(cli):
    out = cli("search", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus", "32", "--global-batch", "128",
              "--pp", "2", "--checkpoint", "none", "--no-sensitivity", "--top", "3", "--moe-imbalance", "2",
              "--moe-layer-freq", "2")
    assert out.returncode == 0, out.stderr
    line = " ".join(out.stdout.split("reproduce #1", 1)[1].split())  # (the console wraps it)
    assert "--moe-layer-freq 2" in line and "--moe-imbalance 2" in line and "--capacity-factor" not in line


def test_sensitivity_reports_ep_from_an_exact_step():
    from vtrain.strategy.search import SearchSpace, search, sensitivity

    cfg = build_config(dict(lookup_model("mixtral-8x7b"), gpu="h100-sxm", global_batch=128))
    res = search(cfg, SearchSpace(num_gpus=32, pp=(2,), micro_batch=(1,), recompute=("full",), zero_stages=(2,),
                                  schedules=("1f1b",), tp=(1,)), ANALYTICAL, top=10)
    by_ep = {r["ep"]: r for r in res.top}
    assert {4, 8} <= set(by_ep)

    def time_of(row, ep):
        return ANALYTICAL.predict(build_config(dict(row["config"], ep=ep))).iteration_time_s

    # ep=4: the step to 8; ep=8: 16 does not divide 8 experts, so the step from 4
    for ep, ratio in ((4, time_of(by_ep[4], 8) / time_of(by_ep[4], 4)),
                      (8, time_of(by_ep[8], 8) / time_of(by_ep[8], 4))):
        knobs = {r["knob"]: r for r in sensitivity(ANALYTICAL, cfg, by_ep[ep])}
        assert knobs["ep"]["value"] == ep
        assert knobs["ep"]["time_elasticity"] == pytest.approx(np.log2(ratio), rel=1e-9, abs=1e-12)
        assert knobs["ep"]["time_change_if_doubled_pct"] == pytest.approx(100 * (ratio - 1), rel=1e-9, abs=1e-12)
        assert knobs["ep"]["cost_elasticity"] == knobs["ep"]["time_elasticity"]
    dense = build_config(dict(lookup_model("llama2-7b"), gpu="h100-sxm", global_batch=64))
    row = search(dense, SearchSpace(num_gpus=8, pp=(1,), tp=(1,)), ANALYTICAL, top=1).top[0]
    assert "ep" not in {r["knob"] for r in sensitivity(ANALYTICAL, dense, row)}


# ----------------------------------------------------------------------------- expert tensor parallelism

ETP = dict(BASE, num_gpus=16, tp=2, ep=8)  # dp = 8


def test_etp_equal_to_tp_is_the_default_and_etp_below_tp_folds_tp_ranks_into_ep():
    default = predict(**ETP)
    assert default.config.parallel.etp == 0
    assert predict(**ETP, etp=2).iteration_time_s == default.iteration_time_s
    folded = predict(**ETP, etp=1)
    # each expert whole on one GPU: twice the expert weights, the same useful FLOP, no routed-token
    # all-gather / reduce-scatter over tp
    assert folded.model_flops == default.model_flops
    assert folded.memory_breakdown_gib["weights"] > default.memory_breakdown_gib["weights"]
    assert folded.breakdown["tp_comm"] < default.breakdown["tp_comm"]
    assert folded.breakdown["compute"] == pytest.approx(default.breakdown["compute"], rel=0.05)
    # EP ranks are etp apart: with etp=1 the 8 EP ranks are one 8-GPU node, with etp=2 they span two
    assert folded.breakdown["ep_comm"] < default.breakdown["ep_comm"] / 3.0
    # ep may now take tp ranks: ep=16 of dp*tp/etp = 16 GPUs (16 experts)
    wide = dict(ETP, num_experts=16, ep=16)
    assert predict(**wide, etp=1).config.parallel.ep == 16
    with pytest.raises(ConfigError, match="ep: 16 does not divide the data-parallel size dp=8"):
        build_config(wide)


@pytest.mark.parametrize("fields, text", [
    (dict(etp=3), "etp: 3 does not divide tp=2"),
    (dict(etp=-1), "etp: -1 must be a positive integer"),
    (dict(etp=1, ep=32, num_experts=32), "ep: 32 does not divide dp*tp/etp=8*2/1=16"),
    (dict(num_experts=0, experts_per_token=0, ep=1, etp=1), "etp: 1 needs a mixture-of-experts model"),
])
def test_invalid_etp_is_a_one_line_error(fields, text):
    values = {**ETP, **fields}
    with pytest.raises(ConfigError) as err:
        build_config(values)
    assert str(err.value).startswith(text) and "\n" not in str(err.value)
    _, errors = encode_table({k: [v] for k, v in values.items()})
    assert errors[0] == str(err.value)


def test_search_keeps_a_fixed_etp_and_its_rows_predict_the_same():
    from vtrain.strategy.search import SearchSpace, search

    cfg = build_config(dict(lookup_model("mixtral-8x7b"), gpu="h100-sxm", global_batch=64, etp=1))
    res = search(cfg, SearchSpace(num_gpus=16, pp=(2,), tp=(2,), recompute=("full",)), ANALYTICAL, top=8)
    assert len(res.top) == 8 and {r["tp"] for r in res.top} == {2}  # etp=1 below tp=2
    for r in res.top:
        config = build_config(r["config"])
        assert config.parallel.etp == 1
        assert r["iteration_time_s"] == pytest.approx(ANALYTICAL.predict(config).iteration_time_s, rel=1e-12)
