"""The fields for today's training stacks (issue 17): attention kernel, ... Validation and physics."""
import pytest

from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.tables.columns import encode_table
from vtrain.costmodel.encode import encode

ANALYTICAL = Predictor.load("none")
GIB = 1024**3
GPT = dict(num_layers=4, hidden_size=1024, num_attention_heads=16, seq_len=4096, micro_batch=1, global_batch=8,
           num_gpus=8, tp=1, gpu="h100-sxm")


def predict(**fields):
    return ANALYTICAL.predict(build_config(fields))


def test_attention_defaults_to_flash_for_every_arch_and_is_validated():
    assert build_config(dict(GPT)).model.attention == "flash"
    assert build_config(dict(GPT, arch="llama")).model.attention == "flash"
    with pytest.raises(ConfigError, match="^attention: 'fused' is unknown; use one of flash, unfused$"):
        build_config(dict(GPT, attention="fused"))
    d, errors = encode_table({k: [v] * 2 for k, v in GPT.items()} | {"attention": ["unfused", "fused"]})
    assert errors[0] is None and errors[1] == "attention: 'fused' is unknown; use one of flash, unfused"
    assert d.flash[0] == encode([build_config(dict(GPT, attention="unfused"))]).flash[0] == 0.0


def test_flash_removes_the_s2_activation_memory():
    # Unfused stores 5*a*s^2*b bytes of scores per layer (Korthikanti); flash stores 4*s*b*a of LSE.
    s, a, b, layers = GPT["seq_len"], GPT["num_attention_heads"], GPT["micro_batch"], GPT["num_layers"]
    unfused = predict(**GPT, attention="unfused").memory_breakdown_gib["activations"] * GIB
    flash = predict(**GPT, attention="flash").memory_breakdown_gib["activations"] * GIB
    assert unfused - flash == pytest.approx(layers * (5 * a * s * s * b - 4 * s * b * a))
    # doubling the sequence doubles flash memory (no s^2 term) but more than doubles unfused memory
    flash2 = predict(**dict(GPT, seq_len=2 * s), attention="flash").memory_breakdown_gib["activations"] * GIB
    unfused2 = predict(**dict(GPT, seq_len=2 * s), attention="unfused").memory_breakdown_gib["activations"] * GIB
    assert flash2 == pytest.approx(2 * flash)
    assert unfused2 > 2.5 * unfused


def test_flash_is_faster_at_long_sequences_for_gpt_too():
    fast = predict(**dict(GPT, seq_len=16384), attention="flash")
    slow = predict(**dict(GPT, seq_len=16384), attention="unfused")
    assert fast.iteration_time_s < 0.7 * slow.iteration_time_s


LLAMA8B = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
               vocab_size=128000, seq_len=8192, arch="llama", gpu="h100-sxm", num_gpus=8, micro_batch=2,
               global_batch=16, zero_stage=3, precision="bf16")


def test_swiglu_gqa_flash_layer_activations_match_a_hand_count():
    # one layer, no TP: norm inputs + GEMM inputs 8sbh, Q 2sbh, K and V 2 x 2sbh*g/a, context 2sbh,
    # fused SwiGLU 6sbf, fp32 LSE 4sba
    s, b, h, a, g, f = 8192, 2, 4096, 32, 8, 14336
    want = 8 * s * b * h + 2 * s * b * h * (1 + 2 * g / a) + 2 * s * b * h + 6 * s * b * f + 4 * s * b * a
    r = predict(**dict(LLAMA8B, num_layers=1, recompute="none"))
    assert r.memory_breakdown_gib["activations"] * GIB == pytest.approx(want)


def test_torchtitan_llama3_8b_fsdp_selective_op_fits_as_it_ran():
    # torchtitan ran Llama 3.1 8B on 8 H100 (FSDP, op-level selective AC, local batch 2, seq 8192)
    r = predict(**LLAMA8B, recompute="selective-op")
    assert r.fits_memory and 40 < r.memory_gib_per_gpu < 80
    none = predict(**LLAMA8B, recompute="none")
    full = predict(**LLAMA8B, recompute="full")
    assert full.memory_gib_per_gpu < r.memory_gib_per_gpu < none.memory_gib_per_gpu
    assert none.iteration_time_s < r.iteration_time_s < full.iteration_time_s
    # with flash attention, Korthikanti's selective recompute has no s^2 tensors left to drop
    selective = predict(**LLAMA8B, recompute="selective")
    assert selective.memory_gib_per_gpu == pytest.approx(none.memory_gib_per_gpu)


def test_fsdp_keeps_16_bytes_per_parameter_sharded_plus_an_unsharded_working_set():
    r = predict(**dict(LLAMA8B, recompute="full"))
    cfg = r.config
    p = cfg.model.num_parameters
    layer = (p - 2 * 128000 * 4096 - 4096) / 32
    states = sum(r.memory_breakdown_gib[k] for k in ("weights", "gradients", "optimizer")) * GIB
    working = (2 * 2 + 4) * max(layer, 128000 * 4096)  # two unsharded bf16 layers + one fp32 gradient
    assert states == pytest.approx(16 * p / 8 + working, rel=1e-3)


def test_selective_op_recompute_is_validated_and_listed():
    with pytest.raises(ConfigError, match="^recompute: 'op' is unknown; use one of none, selective, full, "
                                          "selective-op$"):
        build_config(dict(LLAMA8B, recompute="op"))
