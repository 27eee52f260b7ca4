"""Uneven pipeline stages (issue 17 item 2): splits, validation, the bottleneck stage sets time and memory."""
import pytest

from vtrain.costmodel.pipeline import chunk_layers, gpu_stage_layers
from vtrain.costmodel.predictor import Predictor
from vtrain.strategy.search import SearchSpace, enumerate_strategies
from vtrain.costmodel.spec import build_config

ANALYTICAL = Predictor.load("none")
MODEL = dict(hidden_size=2048, num_attention_heads=16, seq_len=2048, micro_batch=1, global_batch=16, tp=1,
             gpu="a100-80gb", attention="flash")


def predict(**fields):
    return ANALYTICAL.predict(build_config(fields))


def test_default_split_is_blooms_partition_and_overrides_fix_the_ends():
    assert chunk_layers(70, 12) == [5] + [6] * 10 + [5]  # BLOOM-176B's tr11 layout
    assert chunk_layers(26, 4) == [6, 7, 7, 6]
    assert chunk_layers(11, 4) == [3, 3, 3, 2]  # the remainder beyond the middle goes to the first stage
    assert chunk_layers(30, 4, first=6, last=6) == [6, 9, 9, 6]
    assert chunk_layers(31, 4, first=6, last=6) == [6, 10, 9, 6]  # the first middle ones get one more
    assert chunk_layers(24, 4, 3) == [2] * 12 and sum(chunk_layers(25, 4, 3)) == 25
    assert gpu_stage_layers(20, 4, 2) == [5, 5, 5, 5]  # chunk c on GPU c % pp
    assert gpu_stage_layers(126, 16, first=7, last=7) == [7] + [8] * 14 + [7]


def test_the_heaviest_stage_sets_the_steady_state():
    # 24 layers on pp=4 with 2 + 10 + 10 + 2: a middle stage (10 layers, no embedding or logits) is the
    # bottleneck, so the pipeline's compute is m times ten layers: what 10 more layers cost without PP
    uneven = predict(**MODEL, num_layers=24, pp=4, num_gpus=4, first_stage_layers=2, last_stage_layers=2)
    ten = predict(**MODEL, num_layers=20, pp=1, num_gpus=1).breakdown["compute"] - \
        predict(**MODEL, num_layers=10, pp=1, num_gpus=1).breakdown["compute"]
    assert uneven.breakdown["compute"] == pytest.approx(ten, rel=1e-9)
    even = predict(**MODEL, num_layers=24, pp=4, num_gpus=4)
    assert uneven.breakdown["compute"] > 1.1 * even.breakdown["compute"]  # 10 layers vs 6 + the logits
    assert uneven.iteration_time_s > even.iteration_time_s
    # with a small vocabulary (light logits), 25 layers on pp=4 split 6 + 7 + 6 + 6: the 7-layer middle
    # stage is the bottleneck, the steady state is seven layers
    small = dict(MODEL, vocab_size=1024, pp=4, num_gpus=4)
    assert predict(**small, num_layers=25).breakdown["compute"] == pytest.approx(0.7 * ten, rel=1e-9)


def test_a_heavier_middle_stage_sets_the_memory_peak():
    # 1F1B: stage 1 holds pp - 1 = 3 micro-batches of its 10 layers, more than stage 0's 4 x 2 layers
    fields = dict(MODEL, num_layers=24, pp=4, num_gpus=4, global_batch=32)
    even = predict(**fields)
    uneven = predict(**fields, first_stage_layers=2, last_stage_layers=2)
    # activations scale with layers x micro-batches in flight: 10 x 3 on stage 1 vs 6 x 4 on stage 0 (even)
    ratio = uneven.memory_breakdown_gib["activations"] / even.memory_breakdown_gib["activations"]
    assert ratio == pytest.approx(30 / 24, rel=0.05)
    assert uneven.memory_gib_per_gpu > even.memory_gib_per_gpu


def test_search_enumerates_uneven_pipelines():
    cfg = build_config(dict(MODEL, num_layers=24, num_gpus=10, global_batch=20))
    s = enumerate_strategies(cfg, SearchSpace(num_gpus=10))
    assert 5 in set(s["pp"]) and 10 in set(s["pp"])  # 24 layers on 5 or 10 stages
    assert max(s["pp"] * s["vpp"]) <= 24
