"""The batched evaluations give the same numbers as the one-at-a-time ones: the feature-major numpy
MLP, one efficiency network call per op class, and the MoE layers skipped for dense batches."""
import numpy as np

from vtrain.costmodel import correction as C
from vtrain.costmodel import ops as opgraph
from vtrain.costmodel.encode import encode
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.presets import lookup_model
from vtrain.costmodel.simulator import kernel_time, op_peak, op_times_many, simulate
from vtrain.costmodel.spec import build_config

DEFAULT = Predictor.load("default")


def _configs():
    """Dense Llama 3 8B on 16 GPUs: several layouts, recompute modes and ZeRO stages."""
    return [build_config(dict(lookup_model("llama3-8b"), gpu="h100-sxm", num_gpus=16, tp=tp, pp=pp, global_batch=64,
                              micro_batch=mb, recompute=rc, zero_stage=z))
            for tp, pp, mb, rc, z in ((1, 1, 1, "none", 0), (2, 2, 2, "full", 1), (4, 1, 1, "selective", 3),
                                      (8, 2, 4, "none", 0))]


def test_feature_major_mlp_is_bit_identical_to_the_row_major_passes():
    rng = np.random.default_rng(0)
    net = DEFAULT.correction["ops"]["gemm"]
    # more rows than one block, not a multiple of it
    x = rng.normal(size=(3, C.NUMPY_BLOCK_ROWS // 2 + 7, C.N_OP_FEATURES))
    layers = [(net[name]["kernel"], net[name]["bias"]) for name in sorted(net)]
    row_major = C._dense(np.tanh(C._dense(x, *layers[0], np)), *layers[1], np)
    assert np.array_equal(C.mlp_apply(net, x, np), row_major)
    assert np.array_equal(C.mlp_apply(net, x[:, :3], np), row_major[:, :3])  # small batch: row-major


def test_op_times_many_equals_kernel_time_op_by_op():
    d = encode(_configs())
    hw = dict(peak_flops=d.peak_flops, peak_flops_16=d.peak_flops_16, hbm_bw=d.hbm_bw,
              peak_flops_gemm16=np.where(d.fp8 > 0, d.peak_flops_16, d.peak_flops))
    fwd = opgraph.layer_forward_ops(d, np)
    head = opgraph.head_ops(d, np)
    batched = op_times_many([fwd, head], hw, DEFAULT.correction, np)
    for op_list, times in zip([fwd, head], batched):
        for op, t in zip(op_list, times):
            alone = kernel_time(op, op_peak(op, hw, np), hw["hbm_bw"], DEFAULT.correction, np)
            assert np.array_equal(np.broadcast_to(alone, t.shape), t), op["name"]


def test_dense_batch_without_moe_layers_gives_the_same_results():
    d = encode(_configs())
    for corr in (None, DEFAULT.correction):
        full, skipped = simulate(d, corr, moe_layers=True), simulate(d, corr, moe_layers=False)
        assert np.array_equal(full["iteration_time_s"], skipped["iteration_time_s"])
        for k, v in full["breakdown"].items():
            assert np.array_equal(np.broadcast_to(v, d.tp.shape), np.broadcast_to(skipped["breakdown"][k], d.tp.shape))
    # numpy decides by itself: a dense batch skips them
    assert np.array_equal(simulate(d, DEFAULT.correction)["iteration_time_s"], full["iteration_time_s"])
