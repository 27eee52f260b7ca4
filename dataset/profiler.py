"""Time transformer-layer ops with JAX on the local device -> `kernels` / `collectives` rows.

For each `LayerShape` (one layer at one token count and TP degree) it times, forward and
backward (the jitted VJP w.r.t. all inputs), the GEMMs of the layer (qkv, proj, fc1, fc2:
out[m,n] = x[m,k] @ w[k,n] with m = tokens), causal attention softmax(QK^T/sqrt(d))V as plain
jnp, the norm (layernorm for gpt, rmsnorm for llama), the activation (gelu / silu) and softmax.
With more than one device it also times psum / all_gather / psum_scatter over all of them.
Each measurement: `warmup` untimed calls, then `repeats` timed calls (block_until_ready);
time_s = median, time_std_s = standard deviation, in seconds.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from vtrain.costmodel.errors import UserError
from vtrain.costmodel.presets import lookup_model, model_names
from vtrain.costmodel.spec import ModelSpec
from vtrain.dataset.rows import collective_row, guess_gpu, kernel_row, to_frame
from vtrain.dataset.schema import DTYPE_BYTES

JNP_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
TINY = dict(hidden_size=64, num_attention_heads=4, num_kv_heads=4, ffn_hidden_size=256, seq_len=32, arch="gpt")
TINY_COLLECTIVE_BYTES = (4096, 65536)
COLLECTIVE_BYTES = (1 << 20, 16 << 20)


@dataclass(frozen=True)
class LayerShape:
    """One transformer layer's per-device shapes: `tokens` rows (micro-batch * seq) at TP degree `tp`."""

    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    seq_len: int
    tokens: int
    tp: int = 1
    arch: str = "gpt"


def layer_shapes(model: str | None = None, tokens: tuple[int, ...] = (256,), tp: tuple[int, ...] = (1,),
                 tiny: bool = False) -> list[LayerShape]:
    """Shapes for a model preset (or the tiny test model) at each token count and TP degree."""
    if tiny or model is None:
        fields = dict(TINY)
    else:
        fields = lookup_model(model)
        if fields is None:
            raise UserError(f"model '{model}' is not a known preset; use one of {', '.join(model_names())}")
    spec = ModelSpec(num_layers=1, **{k: v for k, v in fields.items() if k != "num_layers"})
    out = []
    for t in tp:
        if spec.num_attention_heads % t or spec.num_kv_heads % t or spec.ffn_hidden_size % t:
            raise UserError(f"tp={t} does not divide the heads/kv heads/ffn size of the model; pick another --tp")
        for n in tokens:
            if n <= 0:
                raise UserError(f"tokens={n} must be positive")
            out.append(LayerShape(spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads,
                                  spec.ffn_hidden_size, spec.seq_len, n, t, spec.arch))
    return out


def _device(kind: str):
    try:
        return jax.devices(kind)
    except RuntimeError:
        raise UserError(f"no JAX '{kind}' device here; use --device cpu") from None


def device_name(dev) -> str:
    """The `gpu` column for a JAX device: 'cpu' on CPU, else the preset for its device_kind."""
    return "cpu" if dev.platform == "cpu" else guess_gpu(dev.device_kind)


def _time(fn, args, warmup: int, repeats: int) -> tuple[float, float]:
    for _ in range(max(warmup, 1)):  # the first call compiles
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), (statistics.stdev(times) if len(times) > 1 else float("nan"))


def _attention(q, k, v):
    d = q.shape[-1]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.asarray(d, q.dtype))
    mask = jnp.tril(jnp.ones(scores.shape[-2:], dtype=bool))
    scores = jnp.where(mask, scores, jnp.asarray(-1e4, scores.dtype))
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def _layernorm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b


def _rmsnorm(x, g):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def _ops(s: LayerShape) -> list[tuple[str, str, callable, list[tuple], dict]]:
    """(op_class, op_name, function, input shapes, kernel_row shape kwargs) for one layer shape."""
    h, heads, kv, f, t = s.hidden_size, s.num_attention_heads, s.num_kv_heads, s.ffn_hidden_size, s.tp
    d = h // heads
    m = s.tokens
    seq = min(s.seq_len, s.tokens)
    batch = max(1, s.tokens // seq)
    gated = s.arch == "llama"
    matmul = jnp.matmul
    gemms = {"qkv": (h, (heads + 2 * kv) * d // t), "proj": (h // t, h),
             "fc1": (h, (2 if gated else 1) * f // t), "fc2": (f // t, h)}
    ops = [("gemm", name, matmul, [(m, k), (k, n)], dict(m=m, k=k, n=n, batch=1)) for name, (k, n) in gemms.items()]
    qshape = (batch, heads // t, seq, d)
    ops.append(("attention", "causal_attention", _attention, [qshape] * 3,
                dict(batch=batch, heads=heads // t, seq=seq, k=d)))
    if gated:
        ops.append(("norm", "rmsnorm", _rmsnorm, [(m, h), (h,)], dict(m=m, n=h, num_elements=m * h)))
        ops.append(("elementwise", "silu", jax.nn.silu, [(m, f // t)], dict(m=m, n=f // t, num_elements=m * f // t)))
    else:
        ops.append(("norm", "layernorm", _layernorm, [(m, h), (h,), (h,)], dict(m=m, n=h, num_elements=m * h)))
        ops.append(("elementwise", "gelu", jax.nn.gelu, [(m, f // t)], dict(m=m, n=f // t, num_elements=m * f // t)))
    ops.append(("softmax", "softmax", lambda x: jax.nn.softmax(x, axis=-1), [(batch, heads // t, seq, seq)],
                dict(m=batch * heads // t * seq, n=seq, num_elements=batch * heads // t * seq * seq)))
    return ops


def _backward(fn):
    def bwd(*args):
        out, vjp = jax.vjp(fn, *args[:-1])
        return vjp(args[-1])
    return bwd


def _collectives(devices, dtype: str, sizes, warmup: int, repeats: int, gpu: str, progress) -> list[dict]:
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    n = len(devices)
    mesh = Mesh(np.array(devices), ("i",))
    sharding = NamedSharding(mesh, P("i"))
    e = DTYPE_BYTES[dtype]
    ops = {
        "all_reduce": (lambda x: jax.lax.psum(x, "i"), lambda size: size // e),
        "all_gather": (lambda x: jax.lax.all_gather(x, "i", tiled=True), lambda size: size // (n * e)),
        "reduce_scatter": (lambda x: jax.lax.psum_scatter(x, "i", tiled=True), lambda size: size // e),
    }
    rows = []
    for op, (body, per_rank) in ops.items():
        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        for size in sizes:
            elems = max(n, per_rank(size) // n * n)
            x = jax.device_put(jnp.ones((n * elems,), JNP_DTYPES[dtype]), sharding)
            median, std = _time(fn, (x,), warmup, repeats)
            logical = elems * e * (n if op == "all_gather" else 1)
            rows.append(collective_row("profile:jax", gpu, "local", op, logical, n, n, dtype, median, std,
                                       bw_convention="none"))
            progress()
    return rows


def profile(shapes: list[LayerShape], device: str = "cpu", dtype: str = "fp32", repeats: int = 5, warmup: int = 1,
            progress: bool = True, collective_bytes: tuple[int, ...] = COLLECTIVE_BYTES,
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Time every op of every shape (fwd and bwd) on `device`; returns (kernels_df, collectives_df)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if dtype not in JNP_DTYPES:
        raise UserError(f"dtype '{dtype}' cannot be profiled; use one of {', '.join(JNP_DTYPES)}")
    if repeats < 1:
        raise UserError(f"repeats={repeats} must be at least 1")
    devices = _device(device)
    dev = devices[0]
    gpu = device_name(dev)
    jdtype = JNP_DTYPES[dtype]
    work = [(s, op) for s in shapes for op in _ops(s)]
    n_coll = 3 * len(collective_bytes) if len(devices) > 1 else 0
    kernels, collectives = [], []
    key = jax.random.PRNGKey(0)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress, transient=True) as bar:
        task = bar.add_task(f"profiling on {gpu}", total=2 * len(work) + n_coll)
        for shape, (op_class, op_name, fn, in_shapes, dims) in work:
            args = []
            for shp in in_shapes:
                key, sub = jax.random.split(key)
                args.append(jax.device_put(jax.random.normal(sub, shp, jdtype), dev))
            out = jax.eval_shape(fn, *args)
            grad = jax.device_put(jnp.ones(out.shape, out.dtype), dev)
            for direction, timed, timed_args in (("fwd", jax.jit(fn), args),
                                                 ("bwd", jax.jit(_backward(fn)), args + [grad])):
                bar.update(task, description=f"{op_name} {direction} tokens={shape.tokens} tp={shape.tp}")
                median, std = _time(timed, timed_args, warmup, repeats)
                kernels.append(kernel_row("profile:jax", gpu, dtype, op_class, op_name, direction, median, std,
                                          repeats, **dims))
                bar.advance(task)
        if n_coll:
            collectives = _collectives(devices, dtype, collective_bytes, warmup, repeats, gpu,
                                       lambda: bar.advance(task))
    return to_frame(kernels, "kernels"), to_frame(collectives, "collectives")
