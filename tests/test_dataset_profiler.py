"""Smoke profile on CPU: every op fwd+bwd yields valid kernels rows; collectives with 2 CPU devices."""
import json
import os
import subprocess
import sys

import pytest

from vtrain.costmodel.errors import UserError
from vtrain.dataset.profiler import layer_shapes, profile
from vtrain.dataset.rows import check_rows


def test_tiny_profile_on_cpu():
    shapes = layer_shapes(tiny=True, tokens=(32,), tp=(2,))
    kernels, collectives = profile(shapes, device="cpu", repeats=2, progress=False)
    assert len(collectives) == 0  # one CPU device
    good, reasons = check_rows("kernels", kernels)
    assert reasons == [] and len(good) == len(kernels) == 2 * 8
    assert set(kernels["op_class"]) == {"gemm", "attention", "norm", "elementwise", "softmax"}
    assert (kernels.groupby(["op_name", "direction"]).size() == 1).all() and len(kernels.groupby("op_name")) == 8
    assert set(kernels["gpu"]) == {"cpu"} and set(kernels["dtype"]) == {"fp32"} and set(kernels["repeats"]) == {2}
    qkv = kernels[kernels.op_name == "qkv"].set_index("direction")
    # tiny layer: h=64, 4 heads, tp=2 -> qkv n = 3*64/2
    assert (qkv.loc["fwd", "m"], qkv.loc["fwd", "n"], qkv.loc["fwd", "k"]) == (32, 96, 64)
    assert qkv.loc["fwd", "flops"] == 2 * 32 * 96 * 64 and qkv.loc["bwd", "flops"] == 2 * qkv.loc["fwd", "flops"]
    attn = kernels[kernels.op_class == "attention"].iloc[0]
    assert (attn["heads"], attn["seq"], attn["k"], attn["batch"]) == (2, 32, 16, 1)


def test_llama_preset_shapes_and_bad_tp():
    (shape,) = layer_shapes("llama2-7b", tokens=(128,), tp=(2,))
    assert (shape.hidden_size, shape.ffn_hidden_size, shape.arch, shape.tp) == (4096, 11008, "llama", 2)
    with pytest.raises(UserError, match="tp=3"):
        layer_shapes("llama2-7b", tokens=(128,), tp=(3,))
    with pytest.raises(UserError, match="not a known preset"):
        layer_shapes("gpt-9", tokens=(128,))


def test_collectives_with_two_cpu_devices():
    code = ("from vtrain.dataset.profiler import profile; "
            "k, c = profile([], device='cpu', repeats=2, progress=False, collective_bytes=(4096,)); "
            "print(c[['op', 'bytes', 'group_size', 'time_s']].to_json(orient='records'))")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["op"] for r in rows] == ["all_reduce", "all_gather", "reduce_scatter"]
    assert all(r["group_size"] == 2 and r["bytes"] == 4096 and r["time_s"] > 0 for r in rows)
