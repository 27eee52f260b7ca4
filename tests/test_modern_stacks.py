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
                                          "selective-op, selective-layer$"):
        build_config(dict(LLAMA8B, recompute="op"))


# ---- GPU figure overrides (peak_tflops, hbm_bandwidth_GBps, gpu_memory_GiB) ----

def test_gpu_overrides_are_validated_in_one_line():
    with pytest.raises(ConfigError, match=r"^peak_tflops: -1 must be positive \(leave peak_tflops out"):
        build_config(dict(GPT, peak_tflops=-1))
    with pytest.raises(ConfigError, match=r"^peak_tflops: 9.89e\+14 is implausibly large; give it in TFLOP/s"):
        build_config(dict(GPT, peak_tflops=989e12))
    with pytest.raises(ConfigError, match=r"^gpu_memory_GiB: .* is implausibly large; give it in GiB"):
        build_config(dict(GPT, gpu_memory_GiB=80 * GIB))
    d, errors = encode_table({k: [v] * 2 for k, v in GPT.items()} | {"hbm_bandwidth_GBps": [2400.0, -5.0]})
    assert errors[0] is None and errors[1].startswith("hbm_bandwidth_GBps: -5 must be positive")
    # absent = the preset's figures, resolved into the config
    c = build_config(dict(GPT)).cluster
    assert (c.peak_tflops, c.hbm_bandwidth_GBps, c.gpu_memory_GiB) == (989.0, 3350.0, 80.0)


def test_gpu_overrides_change_the_physics_they_name():
    base = dict(GPT, num_layers=8, hidden_size=4096, num_attention_heads=32)
    ref = predict(**base)
    slow = predict(**base, peak_tflops=989.0 / 2)
    # compute-bound layers: half the peak, about twice the compute time (GEMMs at the roofline)
    assert 1.7 < slow.breakdown["compute"] / ref.breakdown["compute"] <= 2.0
    small = predict(**base, gpu_memory_GiB=4)
    assert small.gpu_memory_gib == 4 and not small.fits_memory and ref.fits_memory
    assert small.iteration_time_s == ref.iteration_time_s
    # bandwidth-bound ops (norms, residuals) slow down with less HBM bandwidth; GEMM-bound ones do not
    narrow = predict(**base, hbm_bandwidth_GBps=3350.0 / 4)
    assert narrow.breakdown["compute"] > 1.05 * ref.breakdown["compute"]
    # fp8 peak scales with the 16-bit override
    fp8 = encode([build_config(dict(base, precision="fp8", peak_tflops=800))])
    assert fp8.peak_flops[0] == pytest.approx(1979e12 * 800 / 989) and fp8.peak_flops_16[0] == 800e12


def test_gpu_overrides_reach_tables_search_and_follow_a_gpu_change():
    from vtrain.costmodel.spec import gpu_line, with_changes

    cfg = build_config(dict(GPT, peak_tflops=884, hbm_bandwidth_GBps=2400, gpu_memory_GiB=95))
    d, errors = encode_table({k: [v] for k, v in cfg.flat().items()})
    one = encode([cfg])
    assert errors[0] is None and all(float(a[0]) == float(b[0]) for a, b in zip(d, one))
    assert (one.peak_flops_16[0], one.hbm_bw[0], one.hbm_bytes[0]) == (884e12, 2400e9, 95 * GIB)
    line = gpu_line(cfg.cluster)
    assert "884 TFLOP/s*" in line and "2400 GB/s*" in line and "95 GiB*" in line and "NIC 400 Gb/s," in line
    # another GPU: the preset's figures follow it, the explicit ones stay
    moved = with_changes(build_config(dict(GPT, gpu_memory_GiB=95)), gpu="a100-80gb")
    assert (moved.cluster.peak_tflops, moved.cluster.inter_node_bw_Gbps, moved.cluster.gpu_memory_GiB) == \
        (312.0, 200.0, 95.0)


def test_search_honours_the_gpu_memory_override():
    from vtrain.strategy.search import SearchSpace, search

    big = dict(num_layers=16, hidden_size=4096, num_attention_heads=32, seq_len=2048, global_batch=64,
               num_gpus=8, gpu="h100-sxm")
    full = search(build_config(big), SearchSpace(num_gpus=8), ANALYTICAL, top=3)
    tight = search(build_config(dict(big, gpu_memory_GiB=12)), SearchSpace(num_gpus=8), ANALYTICAL, top=3)
    assert tight.num_fit < full.num_fit and all(r["memory_gib"] <= 12 for r in tight.top)
    assert all(r["gpu_memory_gib"] == 12 for r in tight.top)


def test_fused_attention_efficiency_is_the_gpus_prior_and_overridable():
    from vtrain.costmodel.assumed import assumed_defaults
    from vtrain.costmodel.hardware import lookup_gpu

    long_seq = dict(GPT, num_layers=4, hidden_size=4096, num_attention_heads=32, seq_len=32768, recompute="full")
    hopper = predict(**long_seq)
    # FlashAttention-2 on Hopper reaches a smaller share of peak than the generic prior
    assert lookup_gpu("h100-sxm").attention_efficiency < lookup_gpu("a100-80gb").attention_efficiency
    generic = predict(**long_seq, attention_efficiency=lookup_gpu("a100-80gb").attention_efficiency)
    fa3 = predict(**long_seq, attention_efficiency=0.6)
    assert fa3.iteration_time_s < generic.iteration_time_s < hopper.iteration_time_s
    # the unfused attention (batched GEMMs and a softmax) does not take the fused kernel's prior
    unfused = dict(long_seq, attention="unfused", seq_len=4096)
    assert predict(**unfused).iteration_time_s == predict(**unfused, attention_efficiency=0.9).iteration_time_s
    # validated; the Hopper prior is printed as an assumption, a given value is not
    with pytest.raises(ConfigError, match=r"^attention_efficiency: 1.5 is implausibly large"):
        build_config(dict(GPT, attention_efficiency=1.5))
    cfg = build_config(dict(long_seq))
    assumed = {a["field"]: a["value"] for a in assumed_defaults(set(long_seq), cfg)}
    assert assumed["attention_efficiency"] == lookup_gpu("h100-sxm").attention_efficiency
    assert "attention_efficiency" not in {a["field"] for a in assumed_defaults(set(long_seq) | {"attention_efficiency"},
                                                                                  build_config(dict(long_seq, attention_efficiency=0.6)))}
    a100 = build_config(dict(long_seq, gpu="a100-80gb"))
    assert "attention_efficiency" not in {a["field"] for a in assumed_defaults(set(long_seq), a100)}


def test_measured_attention_kernels_start_from_their_gpus_prior():
    """A fit compares a measured attention kernel with the same prior the simulator's fused op uses,
    so what the network learns on a GPU adds to that GPU's prior instead of the generic one."""
    import numpy as np
    import pandas as pd

    from vtrain.costmodel.hardware import lookup_gpu
    from vtrain.costmodel.simulator import kernel_time
    from vtrain.training.measurements import kernel_set

    flops = 2.0 * 8 * 32 * 4096 * 4096 * 128
    rows = [dict(source="test", gpu=gpu, dtype="bf16", op_class="attention", op_name="flash", direction="fwd", m=0,
                 n=0, k=128, batch=8, heads=32, seq=4096, num_elements=0, flops=flops, bytes_moved=1e6,
                 time_s=flops / (lookup_gpu(gpu).attention_efficiency * lookup_gpu(gpu).peak_flops["bf16"]),
                 time_std_s=0.0, repeats=1) for gpu in ("h100-sxm", "a100-80gb")]
    v = kernel_set(pd.DataFrame(rows)).by_class["attention"]
    assert list(v["op"]["base_eff"]) == [lookup_gpu("h100-sxm").attention_efficiency,
                                         lookup_gpu("a100-80gb").attention_efficiency]
    predicted = kernel_time(v["op"], v["peak"], v["hbm_bw"], None, np)
    assert np.allclose(predicted, v["time"], rtol=1e-12)


def _layer_ops(**fields):
    from vtrain.costmodel.ops import layer_forward_ops
    d = encode([build_config(fields)])
    return {op["name"]: op for op in layer_forward_ops(d, __import__("numpy"))}


def test_eager_mode_adds_the_composite_kernels_passes():
    from vtrain.costmodel.ops import ACT_BYTES, EAGER_EXTRA
    llama = dict(GPT, arch="llama", num_kv_heads=4)
    fused, eager = _layer_ops(**llama), _layer_ops(**llama, eager=True)
    tokens, h = GPT["micro_batch"] * GPT["seq_len"], GPT["hidden_size"]
    for name in ("input_norm", "post_attn_norm"):
        assert eager[name]["bytes"] - fused[name]["bytes"] == pytest.approx(EAGER_EXTRA["rmsnorm"][0] * ACT_BYTES * tokens * h)
        assert eager[name]["kernels"] == fused[name]["kernels"] + EAGER_EXTRA["rmsnorm"][1]
    assert eager["mlp_residual"]["bytes"] == fused["mlp_residual"]["bytes"]  # one add kernel either way
    assert eager["qkv_proj"]["flops"] == fused["qkv_proj"]["flops"]  # GEMMs are the same kernels
    # GPT: LayerNorm is one native kernel in eager mode too; bias-dropout-add splits into three
    gpt_fused, gpt_eager = _layer_ops(**GPT), _layer_ops(**GPT, eager=True)
    assert gpt_eager["input_norm"]["bytes"] == gpt_fused["input_norm"]["bytes"]
    assert gpt_eager["attn_residual"]["kernels"] == gpt_fused["attn_residual"]["kernels"] + 1
    # the whole iteration: slower, and more so where bandwidth is scarce relative to compute
    def slowdown(gpu):
        base = dict(llama, gpu=gpu)
        return predict(**base, eager=True).iteration_time_s / predict(**base).iteration_time_s
    assert slowdown("h100-sxm") > slowdown("a100-80gb") > 1.02


def test_eager_is_a_config_key_a_flag_and_fades_the_correction(cli, tmp_path):
    from vtrain.costmodel.correction import trust_weight
    assert build_config(dict(GPT, eager=True)).parallel.eager is True
    assert build_config(dict(GPT)).parallel.eager is False
    args = ["predict", "--model", "llama3-8b", "--gpu", "a100-80gb", "--num-gpus", "8", "--micro-batch", "1",
            "--global-batch", "8", "--json"]
    import json
    fused = json.loads(cli(*args).stdout)
    eager = json.loads(cli(*args, "--eager").stdout)
    assert eager["iteration_time_s"] > fused["iteration_time_s"]
    text = cli(*args[:-1], "--eager").stdout
    assert " eager" in text and "PyTorch eager kernels" in text  # the strategy line and the out-of-domain line
    shipped = Predictor.load("default")
    cfg = build_config(dict(GPT, arch="llama", gpu="a100-80gb", eager=True))
    assert float(trust_weight(shipped.correction, encode([cfg]), __import__("numpy"))[0]) < \
        float(trust_weight(shipped.correction, encode([build_config(dict(GPT, arch="llama", gpu="a100-80gb"))]),
                           __import__("numpy"))[0])
