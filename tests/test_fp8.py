"""precision=fp8 (issue 17 item 4): only the linears' GEMMs run at the FP8 peak, their inputs' amax and
cast are elementwise ops, everything else stays bf16, and memory keeps bf16/fp32 copies."""
import numpy as np
import pytest

from vtrain.costmodel import ops as opgraph
from vtrain.costmodel.encode import encode
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.simulator import op_times
from vtrain.costmodel.spec import ConfigError, build_config

ANALYTICAL = Predictor.load("none")
LLAMA = dict(num_layers=4, hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
             vocab_size=128000, seq_len=8192, arch="llama", gpu="h100-sxm", num_gpus=8, tp=1, micro_batch=1,
             global_batch=8, recompute="none")
LINEARS = ("qkv_proj", "attn_out_proj", "mlp_up_proj", "mlp_down_proj")


def times(precision):
    d = encode([build_config(dict(LLAMA, precision=precision))])
    hw = dict(peak_flops=d.peak_flops, peak_flops_16=d.peak_flops_16, hbm_bw=d.hbm_bw,
              peak_flops_gemm16=np.where(d.fp8 > 0, d.peak_flops_16, d.peak_flops))
    fwd = opgraph.layer_forward_ops(d, np)
    ops = fwd + opgraph.backward_ops(fwd, np) + opgraph.head_ops(d, np)
    return {op["name"]: (op, float(t[0])) for op, t in zip(ops, op_times(ops, hw, None, np))}


def test_fp8_speeds_up_only_the_linear_gemms():
    bf16, fp8 = times("bf16"), times("fp8")
    assert bf16.keys() == fp8.keys()
    for name, (op, t16) in bf16.items():
        t8 = fp8[name][1]
        base = name.split(".")[0]
        if base in LINEARS:
            # forward, data- and weight-gradient GEMMs: twice the peak, half the input bytes
            assert op["cls"] == "gemm" and t8 == pytest.approx(t16 / 2.0, rel=0.02), name
        elif base.startswith("fp8_cast"):
            assert t16 == 0.0 and t8 > 0.0, name  # the casts exist only in the FP8 run
        else:
            # attention, norms, activations, the logits GEMM and cross-entropy stay bf16
            assert t8 == t16, name
    # the casts read each linear input twice (amax, cast) and write its FP8 copy and transpose
    cast = fp8["fp8_cast_mlp"][0]
    s, h, f = LLAMA["seq_len"], LLAMA["hidden_size"], LLAMA["ffn_hidden_size"]
    elements = s * h + s * f + h * 2 * f + f * h
    assert float(cast["bytes"][0]) == pytest.approx(6.0 * elements)


def test_fp8_iteration_is_faster_but_less_than_the_peak_ratio_and_memory_is_unchanged():
    bf16 = ANALYTICAL.predict(build_config(dict(LLAMA, precision="bf16")))
    fp8 = ANALYTICAL.predict(build_config(dict(LLAMA, precision="fp8")))
    assert bf16.iteration_time_s / 2.0 < fp8.iteration_time_s < bf16.iteration_time_s
    # bf16 weights, fp32 gradients, master weights and Adam moments, bf16 activations as for bf16
    assert fp8.memory_gib_per_gpu == pytest.approx(bf16.memory_gib_per_gpu)
    assert fp8.model_flops == bf16.model_flops


def test_fp8_needs_fp8_tensor_cores():
    with pytest.raises(ConfigError, match="^precision: a100-80gb has no fp8 tensor cores; use one of"):
        build_config(dict(LLAMA, gpu="a100-80gb", precision="fp8"))
