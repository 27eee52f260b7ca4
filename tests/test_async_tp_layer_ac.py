"""Async TP (`async_tp`) and torchtitan's per-layer activation checkpointing (`recompute=selective-layer`),
issue 17: validation and physics."""
import pytest

from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import ConfigError, build_config

ANALYTICAL = Predictor.load("none")
LLAMA = dict(num_layers=8, hidden_size=8192, num_attention_heads=64, num_kv_heads=8, ffn_hidden_size=28672,
             vocab_size=128000, seq_len=8192, arch="llama", gpu="h100-sxm", num_gpus=8, tp=8, micro_batch=1,
             global_batch=4, sequence_parallel=True, recompute="none")


def predict(**fields):
    return ANALYTICAL.predict(build_config(dict(LLAMA, **fields)))


def test_async_tp_is_validated_in_one_line():
    with pytest.raises(ConfigError, match="^async_tp: needs sequence_parallel=true .* or async_tp=false$"):
        build_config(dict(LLAMA, sequence_parallel=False, async_tp=True))
    assert build_config(dict(LLAMA, tp=1, global_batch=8, sequence_parallel=False, async_tp=True)).parallel.async_tp is False
    with pytest.raises(ConfigError, match="^async_tp: 'maybe' is not a boolean"):
        build_config(dict(LLAMA, async_tp="maybe"))


def test_async_tp_hides_tp_comm_behind_the_gemms_but_not_all_of_it():
    sync, overlapped = predict(), predict(async_tp=True)
    assert overlapped.breakdown["compute"] == sync.breakdown["compute"]
    assert 0.0 < overlapped.breakdown["tp_comm"] < sync.breakdown["tp_comm"]
    # at least the first of tp chunks of every collective stays exposed
    assert overlapped.breakdown["tp_comm"] >= sync.breakdown["tp_comm"] / LLAMA["tp"] - 1e-12
    # a slow TP link (TP across nodes of one GPU each) cannot hide behind the same GEMMs: more exposed
    slow = predict(async_tp=True, gpus_per_node=1, inter_node_bw_Gbps=100)
    assert slow.breakdown["tp_comm"] > overlapped.breakdown["tp_comm"]


def test_selective_layer_lies_between_none_and_full_in_time_and_memory():
    none, layer, full = (predict(recompute=r) for r in ("none", "selective-layer", "full"))
    assert none.iteration_time_s < layer.iteration_time_s < full.iteration_time_s
    assert none.memory_gib_per_gpu > layer.memory_gib_per_gpu > full.memory_gib_per_gpu
    # half the layers re-run their forward: half of full recompute's extra compute
    extra_full = full.breakdown["compute"] - none.breakdown["compute"]
    extra_layer = layer.breakdown["compute"] - none.breakdown["compute"]
    assert extra_layer == pytest.approx(extra_full / 2.0, rel=0.05)
    # half the layers keep only their input (x), half everything (a), plus one recomputed layer's
    # working set (a - x) in both recompute modes: with n layers, full = n x + (a - x),
    # selective-layer = n (x + a) / 2 + (a - x), none = n a, so layer - full = n/(n-1) (none - full) / 2
    act = {r.config.parallel.recompute: r.memory_breakdown_gib["activations"] for r in (none, layer, full)}
    n = LLAMA["num_layers"]
    assert act["selective-layer"] - act["full"] == pytest.approx(n / (n - 1) * (act["none"] - act["full"]) / 2.0)
