"""Batched evaluation of encoded strategies. Up to NUMPY_MAX_ROWS strategies: the combined predictor
in numpy (float64, no compile); more: under `jax.jit` in float32, padded to fixed batch sizes so one
search compiles once, with a persistent XLA compile cache.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from vtrain.costmodel.encode import SimInput
from vtrain.costmodel.simulator import BREAKDOWN_KEYS

BUCKETS = (32768,)  # padded batch size of the jitted evaluation (larger batches are chunked): one compile
# Batches up to this many strategies are evaluated in numpy. numpy runs the checkpoint at ~28,000
# strategies/s on one core with nothing to compile; the jitted graph runs at ~150,000/s but compiles
# for ~7 s (cold cache, 2 cores), so it only pays off from ~240,000 strategies (MT-NLG on 3,360 GPUs:
# 2,898 strategies, 0.14 s in numpy).
NUMPY_MAX_ROWS = 100_000
NUMPY_CHUNK_ROWS = 32768  # rows per numpy simulate call (bounds the intermediate arrays' memory)


_COMPILED: dict = {}
# XLA:CPU's fusion emitters make compiling these large elementwise graphs slow (forward ~5 s, derivative
# ~10-20 s on 2 cores); the classic emitters compile them in ~2-3 s and run them as fast.
_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# The derivative graph is evaluated on few rows, so its run time hardly matters while its compile
# time dominates a first `vtrain search`: compile it without backend optimisation (26 s -> 10 s).
_GRADIENT_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}


def enable_compilation_cache() -> None:
    """Persist XLA executables across processes (VTRAIN_JAX_CACHE=dir, or '0' to disable). Does not
    import JAX: if it is not imported yet, the settings go to JAX's own environment variables (read
    when JAX is imported, i.e. only if something is compiled; a search evaluated in numpy never is)."""
    path = os.environ.get("VTRAIN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "vtrain", "jax"))
    if path in ("", "0", "off"):
        return
    settings = {"jax_compilation_cache_dir": path, "jax_persistent_cache_min_compile_time_secs": 0.5}
    if "jax" not in sys.modules:
        for name, value in settings.items():
            os.environ.setdefault(name.upper(), str(value))
        return
    import jax

    try:
        for name, value in settings.items():
            jax.config.update(name, value)
    except Exception:  # an older/newer jax without these options: just no persistent cache
        pass


def _table_key(table: dict | None):
    """A content key for an all-reduce table (it is baked into the compiled function as constants):
    equal tables share a compiled function; an id() could be reused by a new table after a free."""
    if table is None:
        return None
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(table):
        value = np.ascontiguousarray(np.asarray(table[name], dtype=np.float64))
        digest.update(name.encode() + str(value.shape).encode() + value.tobytes())
    return digest.hexdigest()


def _compiled(kind: str, n: int, predictor, build, example_args, options=None):
    import jax

    corr = predictor.correction
    key = (kind, n, jax.tree_util.tree_structure(corr), _table_key(predictor.allreduce_table))
    fn = _COMPILED.get(key)
    if fn is None:
        lowered = jax.jit(build(predictor.allreduce_table)).lower(corr, *example_args)
        try:
            fn = lowered.compile(compiler_options=options) if options else lowered.compile()
        except Exception:  # an XLA without this option: default options
            fn = lowered.compile()
        _COMPILED[key] = fn
    return fn


def has_moe(d: SimInput) -> bool:
    """Whether any config of a (numpy) batch has MoE layers: the static `moe_layers` of simulate
    (a dense batch compiles without the MoE layers' terms)."""
    return bool(np.any(np.asarray(d.experts) > 0))


def _forward_builder(table, moe_layers: bool = True):
    import jax.numpy as jnp

    from vtrain.costmodel.simulator import simulate

    def run(corr, d):
        out = simulate(d, corr, xp=jnp, allreduce_table=table, moe_layers=moe_layers)
        one = jnp.ones_like(d.tp)
        return dict(iteration_time_s=out["iteration_time_s"] * one, mfu=out["mfu"] * one,
                    memory=out["memory"]["total"] * one,
                    **{f"bd_{k}": out["breakdown"][k] * one for k in BREAKDOWN_KEYS})
    return run


def _pad_array(v: np.ndarray, n: int) -> np.ndarray:
    """`v` padded to `n` rows by repeating its first row."""
    return v if len(v) == n else np.concatenate([v, np.repeat(v[:1], n - len(v), axis=0)])


def _bucket(n: int) -> int:
    for b in BUCKETS:
        if n <= b:
            return b
    return BUCKETS[-1]


def _outputs(out: dict, rows: int) -> dict[str, np.ndarray]:
    """The evaluated columns of one simulate output, each as `rows` float64 values."""
    def column(v):
        return np.broadcast_to(np.asarray(v, dtype=np.float64), (rows,))
    return dict(iteration_time_s=column(out["iteration_time_s"]), mfu=column(out["mfu"]),
                memory=column(out["memory"]["total"]),
                **{f"bd_{k}": column(out["breakdown"][k]) for k in BREAKDOWN_KEYS})


def evaluate_numpy(predictor, d: SimInput) -> dict[str, np.ndarray]:
    """`evaluate` in numpy (float64), chunked: the same columns, no JAX."""
    from vtrain.costmodel.simulator import simulate

    parts = []
    for start in range(0, d.rows, NUMPY_CHUNK_ROWS):
        piece = d.take(slice(start, start + NUMPY_CHUNK_ROWS))
        out = simulate(piece, predictor.correction, allreduce_table=predictor.allreduce_table)
        parts.append(_outputs(out, piece.rows))
    if not parts:
        keys = ("iteration_time_s", "mfu", "memory") + tuple(f"bd_{k}" for k in BREAKDOWN_KEYS)
        return {k: np.zeros(0) for k in keys}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def evaluate(predictor, d: SimInput) -> dict[str, np.ndarray]:
    """Batched `simulate` on an encoded dict; returns numpy arrays (iteration_time_s, mfu, memory,
    bd_<component>). Up to NUMPY_MAX_ROWS rows in numpy (`evaluate_numpy`); larger batches jitted in
    float32, padded to BUCKETS sizes and chunked, so compiling happens at most once per bucket size
    per process."""
    n = d.rows
    if n <= NUMPY_MAX_ROWS:
        return evaluate_numpy(predictor, d)
    import jax.numpy as jnp

    chunk = _bucket(n)
    moe_layers = has_moe(d)
    parts = []
    for start in range(0, n, chunk):
        piece = d.take(slice(start, start + chunk))
        m = piece.rows
        padded = piece.map(lambda v: jnp.asarray(_pad_array(v, chunk), dtype=jnp.float32))
        fn = _compiled("forward-moe" if moe_layers else "forward-dense", chunk, predictor,
                       lambda table: _forward_builder(table, moe_layers), (padded,), _COMPILER_OPTIONS)
        out = fn(predictor.correction, padded)
        parts.append({k: np.asarray(v)[:m].astype(np.float64) for k, v in out.items()})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
