"""ZeRO-3 / FSDP (zero_stage=3) as FSDP2 runs it: per-layer all-gather of the weights in forward and
backward and reduce-scatter of the gradients, each overlapped with the layer's compute (issue 17)."""
import numpy as np
import pytest

from vtrain.costmodel.collectives import collective_time
from vtrain.costmodel.encode import encode
from vtrain.costmodel.ops import layer_parameters
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.simulator import BREAKDOWN_KEYS, simulate
from vtrain.costmodel.spec import build_config

ANALYTICAL = Predictor.load("none")
# 8 nodes of 8 GPUs, pure FSDP over 64 ranks: the gathers cross the nodes (8 NICs per node)
LLAMA = dict(num_layers=8, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
             vocab_size=32000, arch="llama", gpu="h100-sxm", num_gpus=64, tp=1, pp=1, micro_batch=1,
             recompute="none", zero_stage=3)


def predict(**fields):
    return ANALYTICAL.predict(build_config(dict(LLAMA, **fields)))


def test_fsdp_comm_is_its_own_breakdown_entry_and_zero3_has_no_iteration_level_reduction():
    r = predict(seq_len=1024, global_batch=64)
    assert "fsdp_comm" in BREAKDOWN_KEYS and r.breakdown["fsdp_comm"] > 0
    assert r.breakdown["dp_comm"] == 0.0  # the gradients were reduce-scattered layer by layer
    assert sum(r.breakdown.values()) == pytest.approx(r.iteration_time_s)
    # ZeRO-1 has no per-layer traffic, only the iteration's reduce-scatter + all-gather
    z1 = predict(seq_len=1024, global_batch=64, zero_stage=1)
    assert z1.breakdown["fsdp_comm"] == 0.0 and z1.breakdown["dp_comm"] > 0


def test_exposed_fsdp_comm_shrinks_with_more_compute_to_hide_behind():
    # the same weights are gathered per micro-batch; longer sequences give each layer more compute
    exposed = [predict(seq_len=s, global_batch=64).breakdown["fsdp_comm"] for s in (256, 1024, 4096, 16384)]
    assert exposed[0] > exposed[1] > exposed[2] >= exposed[3]
    # once compute hides every prefetched gather, only the unhidden ends are left: the first gather,
    # the last reduce-scatter, the root unit (embedding + output) and the copy-outs on the compute
    # stream; that floor is far below the whole model's traffic
    d = encode([build_config(dict(LLAMA, seq_len=16384, global_batch=64))])
    net = dict(intra_bw=d.intra_bw, inter_bw=d.inter_bw)
    per_node = np.float64(8.0)
    params = layer_parameters(d)
    gather = collective_time("all_gather", 2.0 * params, d.dp, per_node, net, None, np)
    scatter = collective_time("reduce_scatter", 4.0 * params, d.dp, per_node, net, None, np)
    whole = float((LLAMA["num_layers"] * (2.0 * gather + scatter))[0])
    assert exposed[3] < 0.5 * whole
    assert exposed[3] > float((gather + scatter)[0])  # at least the first gather and the last scatter


def test_fsdp_comm_grows_with_a_slower_network_and_vanishes_on_one_rank():
    fast = predict(seq_len=1024, global_batch=64)
    slow = predict(seq_len=1024, global_batch=64, inter_node_bw_Gbps=50)
    assert slow.breakdown["fsdp_comm"] > fast.breakdown["fsdp_comm"]
    one = predict(seq_len=1024, global_batch=1, num_gpus=1)
    assert one.breakdown["fsdp_comm"] == 0.0  # nothing is sharded over one rank


def test_fsdp_is_paid_per_micro_batch():
    # gradient accumulation: FSDP gathers and reduce-scatters every micro-batch (FSDP2's default)
    one = predict(seq_len=256, global_batch=64)
    four = predict(seq_len=256, global_batch=256)
    assert four.breakdown["fsdp_comm"] == pytest.approx(4 * one.breakdown["fsdp_comm"])


def test_fsdp_runs_under_jax_too():
    jnp = pytest.importorskip("jax.numpy")
    d = encode([build_config(dict(LLAMA, seq_len=1024, global_batch=64))])
    ref = simulate(d)["breakdown"]["fsdp_comm"]
    got = simulate(d.map(jnp.asarray), xp=jnp)["breakdown"]["fsdp_comm"]
    assert float(got[0]) == pytest.approx(float(ref[0]), rel=1e-5)
