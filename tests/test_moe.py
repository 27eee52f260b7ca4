"""Mixture-of-experts models and expert parallelism: physics, validation, tables and config files."""
import json

import numpy as np
import pytest

from vtrain.costmodel.collectives import all_to_all_time
from vtrain.costmodel.config_files import from_hf
from vtrain.costmodel.encode import encode
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.presets import lookup_model
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.tables.columns import encode_table

ANALYTICAL = Predictor.load("none")
DENSE = dict(arch="llama", num_layers=8, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=5632,
             seq_len=2048, vocab_size=32000, num_gpus=16, tp=2, pp=2, micro_batch=2, global_batch=64,
             sequence_parallel=True, gpu="a100-80gb")


def predict(**fields):
    return ANALYTICAL.predict(build_config(fields))


def test_one_expert_top_one_equals_the_dense_model():
    dense = predict(**DENSE)
    moe = predict(**DENSE, num_experts=1, experts_per_token=1)
    router = DENSE["num_layers"] * DENSE["hidden_size"]  # one h x 1 router per layer
    assert moe.config.model.num_parameters == dense.config.model.num_parameters + router
    router_flops = 3 * 2 * DENSE["global_batch"] * DENSE["seq_len"] * DENSE["hidden_size"] * DENSE["num_layers"]
    assert moe.model_flops == pytest.approx(dense.model_flops + router_flops, rel=1e-12)
    # the router, top-k, permutation and the routed tokens' gather/scatter cost a little time and memory
    assert dense.iteration_time_s < moe.iteration_time_s < 1.10 * dense.iteration_time_s
    assert moe.breakdown["ep_comm"] == 0.0
    assert moe.memory_gib_per_gpu == pytest.approx(dense.memory_gib_per_gpu, rel=0.10)


def test_doubling_experts_at_fixed_top_k_keeps_compute_and_raises_memory():
    base = dict(DENSE, num_experts=8, experts_per_token=2, ep=2)
    small, big = predict(**base), predict(**dict(base, num_experts=16))
    # per-token FLOP: unchanged but for the router's h x experts GEMM
    assert big.model_flops == pytest.approx(small.model_flops, rel=5e-3)
    assert big.breakdown["compute"] == pytest.approx(small.breakdown["compute"], rel=0.03)
    assert big.memory_gib_per_gpu > small.memory_gib_per_gpu + 1.0
    assert big.memory_breakdown_gib["weights"] > 1.8 * small.memory_breakdown_gib["weights"] - 0.2
    assert big.config.model.num_parameters > 1.9 * small.config.model.num_parameters - 1e9
    assert big.config.model.active_parameters == pytest.approx(small.config.model.active_parameters, rel=1e-3)


def test_expert_parallelism_moves_all_to_all_from_nvlink_to_the_nic_across_nodes():
    cfg = dict(lookup_model("mixtral-8x7b"), num_gpus=16, tp=1, pp=1, ep=8, micro_batch=1, global_batch=16,
               gpu="a100-80gb", zero_stage=1)
    in_node = predict(**cfg)  # ep ranks 0..7: one node
    across = predict(**cfg, gpus_per_node=4)  # the same 8 ep ranks span two nodes
    assert in_node.breakdown["ep_comm"] > 0
    assert across.breakdown["ep_comm"] > 3.0 * in_node.breakdown["ep_comm"]
    # only the cross-node case depends on the NIC
    assert predict(**cfg, inter_node_bw_Gbps=100).breakdown["ep_comm"] == pytest.approx(in_node.breakdown["ep_comm"])
    assert predict(**cfg, gpus_per_node=4, inter_node_bw_Gbps=100).breakdown["ep_comm"] > \
        1.5 * across.breakdown["ep_comm"]


def test_all_to_all_across_nodes_sends_the_off_node_share_through_each_gpus_nic():
    net = dict(intra_bw=np.array(300e9), inter_bw=np.array(25e9))
    size = np.array(1e9)
    t = all_to_all_time(size, np.array(16.0), np.array(8.0), net, None, np)
    off_node = 8 / 16 * 1e9 / (25e9 * 0.75)
    assert off_node < t < off_node * 1.01
    assert all_to_all_time(size, np.array(1.0), np.array(1.0), net, None, np) == 0.0


def test_experts_split_over_ep_divide_expert_weights():
    cfg = dict(DENSE, tp=1, sequence_parallel=False, num_experts=8, experts_per_token=2)
    w1 = predict(**cfg, ep=1).memory_breakdown_gib["weights"]
    w8 = predict(**cfg, ep=8).memory_breakdown_gib["weights"]
    assert w8 < 0.35 * w1


def test_first_dense_layers_are_dense():
    cfg = dict(DENSE, num_experts=8, experts_per_token=2, ep=2)
    all_moe = build_config(cfg).model
    two_dense = build_config(dict(cfg, first_dense_layers=2)).model
    assert two_dense.num_moe_layers == 6
    assert two_dense.num_parameters < all_moe.num_parameters
    # each dense layer has one MLP of ffn_hidden_size instead of a router and top-2 experts of the same size
    h, f = DENSE["hidden_size"], DENSE["ffn_hidden_size"]
    assert all_moe.active_parameters - two_dense.active_parameters == 2 * (h * 8 + 3 * h * f)


def test_presets_match_published_parameter_counts():
    expected = {"mixtral-8x7b": (46.7, 12.9), "mixtral-8x22b": (141, 39), "qwen1.5-moe-a2.7b": (14.3, 2.7),
                "deepseek-v3": (671, 37)}
    for name, (total, active) in expected.items():
        model = build_config(lookup_model(name)).model
        # deepseek-v3: MLA approximated by multi-head attention (+10 % attention parameters)
        tol = 0.06 if name == "deepseek-v3" else 0.01
        assert model.num_parameters / 1e9 == pytest.approx(total, rel=tol), name
        assert model.active_parameters / 1e9 == pytest.approx(active, rel=tol), name


def test_mfu_counts_active_parameters():
    r = predict(**dict(lookup_model("mixtral-8x7b"), num_gpus=8, ep=8, global_batch=8))
    active = r.config.model.active_parameters
    tokens = 8 * 4096
    assert r.model_flops > 6 * active * tokens  # plus attention scores
    assert r.model_flops < 6 * active * tokens * 1.25


@pytest.mark.parametrize("fields, field", [
    (dict(num_experts=8, experts_per_token=2, ep=3), "ep"),
    (dict(num_experts=8, experts_per_token=2, ep=16), "ep"),  # dp = 8
    (dict(num_experts=8), "experts_per_token"),
    (dict(num_experts=8, experts_per_token=9), "experts_per_token"),
    (dict(experts_per_token=2), "experts_per_token"),
    (dict(ep=2), "ep"),
    (dict(num_experts=8, experts_per_token=2, first_dense_layers=8), "first_dense_layers"),
    (dict(num_experts=8, experts_per_token=2, sequence_parallel=False), "sequence_parallel"),
])
def test_invalid_moe_fields_are_one_line_errors_in_configs_and_tables(fields, field):
    values = {**DENSE, **fields}
    with pytest.raises(ConfigError) as err:
        build_config(values)
    assert err.value.field == field and "\n" not in str(err.value)
    _, errors = encode_table({k: [v] for k, v in values.items()})
    assert errors[0] == str(err.value)


def test_table_encoding_of_moe_rows_equals_the_config_encoding():
    rows = [dict(DENSE, num_experts=8, experts_per_token=2, ep=4), dict(model="deepseek-v3", num_gpus=64, tp=1,
            pp=1, ep=64, global_batch=64, gpu="h100-sxm", precision="fp8"), dict(DENSE)]
    columns = {k: [r.get(k) for r in rows] for k in set().union(*rows)}
    d, errors = encode_table(columns)
    assert list(errors) == [None, None, None]
    configs = [build_config({**{k: v for k, v in r.items() if k != "model"},
                             **(lookup_model(r["model"]) if "model" in r else {})}) for r in rows]
    expected = encode(configs)
    for key, values in expected._asdict().items():
        np.testing.assert_array_equal(getattr(d, key), values, err_msg=key)


def test_hf_configs_of_moe_models_map_onto_the_fields():
    mixtral = dict(model_type="mixtral", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                   num_key_value_heads=8, intermediate_size=14336, vocab_size=32000, num_local_experts=8,
                   num_experts_per_tok=2, max_position_embeddings=32768, hidden_act="silu")
    fields = from_hf(mixtral)
    assert fields["num_experts"] == 8 and fields["experts_per_token"] == 2
    model = build_config(fields).model
    assert model.num_parameters / 1e9 == pytest.approx(46.7, rel=0.01)
    deepseek = dict(model_type="deepseek_v3", hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
                    num_key_value_heads=128, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                    n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, moe_layer_freq=1,
                    vocab_size=129280, hidden_act="silu")
    assert build_config(from_hf(deepseek)).model == build_config(dict(lookup_model("deepseek-v3"),
                                                                       seq_len=from_hf(deepseek).get("seq_len", 2048))).model
    qwen2 = dict(model_type="qwen2_moe", hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                 intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                 num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1, mlp_only_layers=[], vocab_size=151936,
                 hidden_act="silu")
    assert from_hf(qwen2)["shared_experts"] == 4
    assert from_hf(dict(qwen2, decoder_sparse_step=2))["moe_layer_freq"] == 2  # (tests/test_moe_routing.py)
    with pytest.raises(ConfigError, match="head_dim"):
        from_hf(dict(qwen2, head_dim=64))


def test_predict_cli_reports_total_and_active_parameters(cli):
    out = cli("predict", "--model", "mixtral-8x7b", "--num-gpus", "16", "--tp", "2", "--sequence-parallel", "--ep", "8",
              "--global-batch", "64", "--checkpoint", "none", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["num_parameters"] > 3 * data["active_parameters"]
    assert data["breakdown"]["ep_comm"] > 0
    bad = cli("predict", "--model", "mixtral-8x7b", "--num-gpus", "16", "--ep", "3")
    assert bad.returncode == 2 and "ep: 3 does not divide num_experts=8" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_forecast_accepts_moe_columns():
    import pandas as pd

    from vtrain import forecast

    jobs = pd.DataFrame(dict(model=["mixtral-8x7b", "mixtral-8x7b", "llama2-7b"], num_gpus=[16, 16, 8], ep=[8, 3, 1],
                             global_batch=[64, 64, 64]))
    out = forecast(jobs, checkpoint="none")
    single = predict(**lookup_model("mixtral-8x7b"), num_gpus=16, ep=8, global_batch=64)
    assert out["iteration_time_s"][0] == pytest.approx(single.iteration_time_s, rel=1e-12)
    assert out["error"][1].startswith("ep: 3 does not divide num_experts=8")
    assert out["error"][2] is None or out["error"][2] != out["error"][2]


# ----------------------------------------------------------------------------- search over ep

MIXTRAL_64 = dict(lookup_model("mixtral-8x7b"), gpu="h100-sxm", global_batch=256)


@pytest.fixture(scope="module")
def mixtral_search():
    from vtrain.strategy.search import SearchSpace, search

    return search(build_config(MIXTRAL_64), SearchSpace(num_gpus=64), ANALYTICAL, top=40)


def test_search_enumerates_ep_and_every_result_predicts_the_same(mixtral_search):
    res = mixtral_search
    eps = {r["ep"] for r in res.top}
    assert max(eps) > 1 and len(eps) > 1
    assert set(np.unique(res.feasible["ep"])) <= {1, 2, 4, 8}
    assert (res.feasible["dp"] % res.feasible["ep"] == 0).all()
    for r in res.top[:12]:
        assert r["config"]["ep"] == r["ep"]
        pred = ANALYTICAL.predict(build_config(r["config"]))  # raises ConfigError if search broke a rule
        assert r["iteration_time_s"] == pytest.approx(pred.iteration_time_s, rel=1e-12)
        assert r["memory_gib"] == pytest.approx(pred.memory_gib_per_gpu, rel=1e-12)
        assert r["breakdown"]["ep_comm"] == pytest.approx(pred.breakdown["ep_comm"], rel=1e-12)
        assert (r["ep"] > 1) == (r["breakdown"]["ep_comm"] > 0)


def test_enumerated_moe_strategies_pass_build_config_and_encode_the_same():
    from vtrain.strategy.search import SearchSpace, encode_strategies, enumerate_strategies, strategy_values

    cfg = build_config(MIXTRAL_64)
    s = enumerate_strategies(cfg, SearchSpace(max_gpus=64))
    n = len(s["tp"])
    sample = np.random.default_rng(1).choice(n, size=80, replace=False)
    configs = [build_config(strategy_values(cfg, s, i)) for i in sample]
    assert [c.parallel.ep for c in configs] == [int(s["ep"][i]) for i in sample]
    ours, ref = encode_strategies(cfg, {k: v[sample] for k, v in s.items()}), encode(configs)
    for key in ref._fields:
        np.testing.assert_allclose(getattr(ours, key), getattr(ref, key), err_msg=key)
    # each layout is offered with every ep dividing both num_experts and dp
    same = ((s["tp"] == 2) & (s["pp"] == 2) & (s["micro_batch"] == 1) & (s["recompute"] == 0)
            & (s["zero_stage"] == 1) & (s["schedule"] == 0) & (s["num_gpus"] == 64))
    assert sorted(s["ep"][same]) == [1, 2, 4, 8]  # dp = 16


def test_ep_across_nodes_costs_more_all_to_all_in_the_ranking():
    from vtrain.strategy.search import SearchSpace, search

    # tp=2 on 8-GPU nodes: ep=4 spans 8 consecutive GPUs (one node), ep=8 spans 16 (two nodes)
    space = SearchSpace(num_gpus=64, tp=(2,), pp=(4,), micro_batch=(1,), recompute=("selective",), zero_stages=(1,),
                        schedules=("1f1b",), sequence_parallel=(True,))
    res = search(build_config(MIXTRAL_64), space, ANALYTICAL, top=10)
    a2a = {r["ep"]: r["breakdown"]["ep_comm"] for r in res.top}
    assert set(a2a) == {1, 2, 4, 8}
    assert a2a[1] == 0.0
    # same bytes per GPU for every ep (T * k * h); only the share leaving the node changes
    assert a2a[8] > 3.0 * a2a[4]
    slow = build_config(dict(MIXTRAL_64, inter_node_bw_Gbps=100))
    res_slow = search(slow, space, ANALYTICAL, top=10)
    slow_a2a = {r["ep"]: r["breakdown"]["ep_comm"] for r in res_slow.top}
    assert slow_a2a[4] == pytest.approx(a2a[4], rel=1e-12)  # inside a node: the NIC does not matter
    assert slow_a2a[8] > 2.0 * a2a[8]


def test_search_ep_filters_and_errors():
    from vtrain.costmodel.errors import ParameterError
    from vtrain.strategy.search import SearchSpace, enumerate_strategies

    cfg = build_config(MIXTRAL_64)
    s = enumerate_strategies(cfg, SearchSpace(num_gpus=64, ep=(4,)))
    assert len(s["ep"]) > 0 and set(s["ep"]) == {4}
    assert set(enumerate_strategies(cfg, SearchSpace(num_gpus=64, max_ep=2))["ep"]) == {1, 2}
    with pytest.raises(ParameterError, match="ep: 3 leaves no expert-parallel degree dividing num_experts=8"):
        enumerate_strategies(cfg, SearchSpace(num_gpus=64, ep=(3,)))
    dense = build_config(dict(lookup_model("llama2-7b"), gpu="h100-sxm", global_batch=64))
    with pytest.raises(ParameterError, match="ep: 2 needs a mixture-of-experts model"):
        enumerate_strategies(dense, SearchSpace(num_gpus=8, ep=(2,)))
    assert set(enumerate_strategies(dense, SearchSpace(num_gpus=8))["ep"]) == {1}


def test_search_cli_shows_and_filters_ep(cli):
    base = ["search", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--num-gpus", "64", "--global-batch", "256",
            "--checkpoint", "none", "--no-sensitivity", "--top", "5"]
    out = cli(*base, "--ep", "4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["ep"] for r in data["top"]] == [4] * 5 and data["model"]["num_experts"] == 8
    assert data["active_parameters"] < data["num_parameters"]
    csv_out = cli(*base, "--csv")
    assert csv_out.returncode == 0, csv_out.stderr
    assert "ep" in csv_out.stdout.splitlines()[0].split(",")
    table = cli(*base)
    assert table.returncode == 0, table.stderr
    assert "┃ ep ┃" in table.stdout and "--ep " in table.stdout
    bad = cli(*base, "--ep", "3")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--ep: 3 leaves no expert-parallel degree" in bad.stderr


def test_guided_search_finds_the_moe_enumeration_best(mixtral_search):
    from vtrain.strategy.search import SearchSpace, guided_search

    guided = guided_search(build_config(MIXTRAL_64), SearchSpace(num_gpus=64), ANALYTICAL, top=1)
    assert guided.top[0]["iteration_time_s"] == pytest.approx(mixtral_search.top[0]["iteration_time_s"], rel=1e-9)
    assert guided.num_evaluated < mixtral_search.num_evaluated
