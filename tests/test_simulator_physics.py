"""Physical sanity of the analytical simulator (no learned correction)."""
import numpy as np
import pytest

from vtrain.costmodel.encode import encode
from vtrain.costmodel.pipeline import pipeline_time
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import build_config

ANALYTICAL = Predictor.load("none")
BASE = dict(num_layers=24, hidden_size=2048, num_attention_heads=16, seq_len=2048, num_gpus=16, tp=2, pp=2,
            micro_batch=2, global_batch=64, gpu="a100-80gb")


def predict(**changes):
    return ANALYTICAL.predict(build_config({**BASE, **changes}))


@pytest.mark.parametrize("field, values", [("num_layers", [8, 16, 24, 48]), ("seq_len", [512, 1024, 2048, 4096])])
def test_time_grows_with_layers_and_sequence(field, values):
    times = [predict(**{field: v}).iteration_time_s for v in values]
    assert all(b > a for a, b in zip(times, times[1:])), times


def test_more_data_parallelism_at_fixed_per_gpu_work_never_reduces_compute():
    # Same micro-batch and micro-batches per replica: the global batch grows with dp.
    results = [predict(num_gpus=4 * dp, global_batch=2 * 16 * dp) for dp in (1, 2, 4, 8, 32)]
    computes = [r.breakdown["compute"] for r in results]
    assert np.allclose(computes, computes[0], rtol=1e-9)
    times = [r.iteration_time_s for r in results]
    assert all(b >= a - 1e-12 for a, b in zip(times, times[1:])), times


def test_bubble_fraction_is_pp_minus_one_over_m_for_equal_stages():
    t = np.array([0.01])
    stage = dict(compute=t * 0.8, tp_comm=t * 0.15, pp_comm=t * 0.05)
    for pp, m in [(2, 4), (4, 8), (8, 64), (16, 16)]:
        out = pipeline_time(stage, stage, stage, np.array([m]), np.array([pp]), 1.0, np)
        ideal = m * 0.01
        assert out["bubble"][0] / ideal == pytest.approx((pp - 1) / m)
        assert out["total"][0] == pytest.approx(ideal * (1 + (pp - 1) / m))
        inter = pipeline_time(stage, stage, stage, np.array([m]), np.array([pp]), 4.0, np)
        assert inter["bubble"][0] / ideal == pytest.approx((pp - 1) / (4 * m))


def test_simulated_bubble_matches_formula_when_stages_are_nearly_equal():
    # A deep model with a tiny vocabulary: the first/last-stage extras are negligible.
    for pp, gb in [(2, 32), (4, 64), (8, 64)]:
        r = predict(num_layers=64, vocab_size=512, num_gpus=2 * pp, tp=2, pp=pp, global_batch=gb, micro_batch=2)
        m = r.config.parallel.num_micro_batches
        steady = r.breakdown["compute"] + r.breakdown["tp_comm"] + r.breakdown["pp_comm"]
        assert r.breakdown["bubble"] / steady == pytest.approx((pp - 1) / m, rel=0.05)


def test_breakdown_sums_to_iteration_time():
    r = predict(schedule="interleaved", vpp=3, sequence_parallel=True, zero_stage=1, overlap_grad_reduce=True)
    assert sum(r.breakdown.values()) == pytest.approx(r.iteration_time_s)
    assert 0 < r.mfu < 1


def test_memory_matches_hand_computation_for_a_small_case():
    # GPT, 2 layers, h=64, 4 heads, seq 16, vocab 128, one GPU, fp16, no recompute, unfused attention
    # (Korthikanti et al.'s setting).
    cfg = build_config(dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_len=16, vocab_size=128,
                            micro_batch=1, global_batch=1, precision="fp16", attention="unfused"))
    r = ANALYTICAL.predict(cfg)
    per_layer_params = 12 * 64 * 64 + 13 * 64           # QKV+proj 4h^2, MLP 8h^2, biases 9h, norms 4h
    params = 2 * per_layer_params + 128 * 64 + 16 * 64 + 2 * 64  # + token & position embedding, final norm
    assert params == cfg.model.num_parameters == 109312
    gib = 1024**3
    assert r.memory_breakdown_gib["weights"] * gib == pytest.approx(2 * params)
    assert r.memory_breakdown_gib["gradients"] * gib == pytest.approx(2 * params)  # fp16 grads
    assert r.memory_breakdown_gib["optimizer"] * gib == pytest.approx(12 * params)
    # Korthikanti et al.: s*b*h*(34 + 5*a*s/h) bytes per layer = 1024 * 39
    assert r.memory_breakdown_gib["activations"] * gib == pytest.approx(2 * 1024 * 39)
    assert r.memory_breakdown_gib["logits"] * gib == pytest.approx(2 * 4 * 16 * 128)


def test_recompute_and_zero_trade_memory_for_time():
    # Korthikanti's selective recompute drops the s^2 tensors of unfused attention
    big = dict(num_layers=48, hidden_size=6144, num_attention_heads=48, num_gpus=64, tp=8, pp=4, micro_batch=4,
               global_batch=256, attention="unfused")
    none, selective, full = (predict(**big, recompute=r) for r in ("none", "selective", "full"))
    assert none.memory_gib_per_gpu > selective.memory_gib_per_gpu > full.memory_gib_per_gpu
    assert none.iteration_time_s < selective.iteration_time_s < full.iteration_time_s
    z0, z1, z3 = (predict(**dict(big, pp=1, num_gpus=16), zero_stage=z) for z in (0, 1, 3))
    assert z0.memory_breakdown_gib["optimizer"] > z1.memory_breakdown_gib["optimizer"]
    # ZeRO-3/FSDP keeps fp32 parameter shards (4 B/param / dp) instead of replicated 16-bit weights:
    # the sum of the model states is what it shrinks
    def states(r):
        return sum(r.memory_breakdown_gib[k] for k in ("weights", "gradients", "optimizer"))
    assert states(z1) > states(z3)


def test_sequence_parallel_reduces_activation_memory_and_tp_crossing_nodes_is_slower():
    sp_on = predict(sequence_parallel=True, tp=8, num_gpus=16, pp=1)
    sp_off = predict(sequence_parallel=False, tp=8, num_gpus=16, pp=1)
    assert sp_on.memory_breakdown_gib["activations"] < sp_off.memory_breakdown_gib["activations"]
    inside = predict(tp=8, pp=1, num_gpus=16, gpus_per_node=8)
    across = predict(tp=8, pp=1, num_gpus=16, gpus_per_node=4)
    assert across.breakdown["tp_comm"] > inside.breakdown["tp_comm"]


def test_numpy_and_jax_paths_agree_and_gradients_exist():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from vtrain.costmodel.simulator import simulate

    configs = [build_config({**BASE, "tp": tp, "num_gpus": 2 * tp * 4, "recompute": rc})
               for tp in (1, 2, 4) for rc in ("none", "full")]
    d = encode(configs)
    reference = simulate(d)["iteration_time_s"]
    dj = d.map(lambda v: jnp.asarray(v, jnp.float32))
    jitted = jax.jit(lambda x: simulate(x, xp=jnp)["iteration_time_s"])
    assert np.allclose(np.asarray(jitted(dj)), reference, rtol=1e-4)
    grad = jax.grad(lambda mb: simulate(dj._replace(micro_batch=mb * jnp.ones(len(configs))), xp=jnp)
                    ["iteration_time_s"].sum())(2.0)
    assert np.isfinite(float(grad)) and float(grad) > 0
