"""Context parallelism `cp` (issue 17 item 3): validation, physics of the ring attention, search."""
import pytest

from vtrain.costmodel import ops
from vtrain.costmodel.encode import encode
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.strategy.search import SearchSpace, enumerate_strategies
from vtrain.tables.columns import encode_table

ANALYTICAL = Predictor.load("none")
GIB = 1024**3
LLAMA = dict(num_layers=4, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
             vocab_size=128256, arch="llama", seq_len=65536, gpu="h100-sxm", micro_batch=1, global_batch=1,
             recompute="full", zero_stage=1)


def cfg(**kw):
    return build_config(dict(LLAMA, **kw))


def test_cp_is_validated_in_one_line():
    assert cfg(num_gpus=2, cp=2).parallel.dp == 1 and cfg(num_gpus=8, cp=2, global_batch=4).parallel.dp == 4
    with pytest.raises(ConfigError, match=r"^cp: 3 needs seq_len=65536 divisible by 2\*cp=6"):
        cfg(num_gpus=3, cp=3)
    with pytest.raises(ConfigError, match=r"^cp: 2 needs attention=flash"):
        cfg(num_gpus=2, cp=2, attention="unfused")
    with pytest.raises(ConfigError, match=r"^num_gpus: 6 != tp\*pp\*cp\*dp = 1\*1\*2\*4 = 8"):
        cfg(num_gpus=6, cp=2, dp=4)
    with pytest.raises(ConfigError, match=r"^num_gpus: 6 is not divisible by tp\*pp\*cp=4"):
        cfg(num_gpus=6, cp=2, tp=2)
    with pytest.raises(ConfigError, match=r"^cp: 0 must be a positive integer"):
        cfg(num_gpus=2, cp=0)
    with pytest.raises(ConfigError, match=r"^cp: 2: context parallelism with mixture-of-experts is not modelled"):
        cfg(num_gpus=2, cp=2, num_experts=8, experts_per_token=2)
    d, errors = encode_table({k: [v] * 2 for k, v in LLAMA.items()} | {"num_gpus": [2, 3], "cp": [2, 3]})
    assert errors[0] is None and errors[1].startswith("cp: 3 needs seq_len=65536 divisible by 2*cp=6")
    one = encode([cfg(num_gpus=2, cp=2)])
    assert all(float(a[0]) == float(b[0]) for a, b in zip(d.take([0]), one))


def test_cp_halves_the_attention_compute_and_the_activations_per_gpu():
    one, two = encode([cfg(num_gpus=1), cfg(num_gpus=2, cp=2)]).take([0]), encode([cfg(num_gpus=2, cp=2)])
    flash = {n: next(op for op in ops.layer_forward_ops(d, __import__("numpy")) if op["name"] == "flash_attention")
             for n, d in (("1", one), ("2", two))}
    assert float(flash["2"]["flops"][0]) == pytest.approx(float(flash["1"]["flops"][0]) / 2)
    r1 = ANALYTICAL.predict(cfg(num_gpus=1, recompute="none"))
    r2 = ANALYTICAL.predict(cfg(num_gpus=2, cp=2, recompute="none"))
    # half the tokens' activations, plus the ring's K/V send + receive buffers (2 x 2 x 2 bytes x s/cp x kv x d)
    ring = 2 * 2 * 2 * (65536 // 2) * 8 * 128 / GIB
    assert r2.memory_breakdown_gib["activations"] == pytest.approx(r1.memory_breakdown_gib["activations"] / 2 + ring)
    # the same work on twice the GPUs: model FLOP per iteration unchanged, about half the time
    assert r2.model_flops == pytest.approx(r1.model_flops)
    assert 0.45 < r2.iteration_time_s / r1.iteration_time_s < 0.6


def test_cp_gradients_reduce_over_dp_times_cp_and_the_ring_hides_behind_attention():
    # dp=1, cp=2: the weights are replicated on the two cp ranks, their gradients are reduced
    assert ANALYTICAL.predict(cfg(num_gpus=1)).breakdown["dp_comm"] == 0.0
    r = ANALYTICAL.predict(cfg(num_gpus=2, cp=2))
    assert r.breakdown["dp_comm"] > 0.0
    # ZeRO shards the optimizer state over dp*cp ranks
    assert r.memory_breakdown_gib["optimizer"] == pytest.approx(
        ANALYTICAL.predict(cfg(num_gpus=1)).memory_breakdown_gib["optimizer"] / 2)
    # inside a node the K/V exchange of a 64k sequence is hidden behind the attention compute ...
    assert r.breakdown["cp_comm"] == 0.0
    # ... across nodes on a slow network it is not
    slow = ANALYTICAL.predict(cfg(num_gpus=16, cp=16, seq_len=16384, gpus_per_node=1, inter_node_bw_Gbps=10))
    assert slow.breakdown["cp_comm"] > 0.0


def test_search_enumerates_cp_for_long_sequences_only():
    long = enumerate_strategies(cfg(num_gpus=8, global_batch=8), SearchSpace(num_gpus=8, max_micro_batch=1))
    assert set(long["cp"]) == {1, 2, 4, 8}
    assert all((long["tp"] * long["pp"] * long["cp"] * long["dp"]) == 8)
    short = enumerate_strategies(cfg(num_gpus=8, global_batch=8, seq_len=4096), SearchSpace(num_gpus=8))
    assert set(short["cp"]) == {1}
