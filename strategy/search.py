"""Strategy search: enumerate every valid parallelization strategy as arrays, drop those that do
not fit in memory, evaluate the rest in one batched, jitted call of the combined predictor, and rank.

    space = SearchSpace(num_gpus=3360)                       # or max_gpus=..., max_tp=16, ...
    result = search(base_config, space, predictor, objective="cost", top=10)
    result.top[0]["tp"], result.top[0]["iteration_time_s"]

The parts live one module each, re-exported here:
- `grid`: SearchSpace and its checks, the strategy grid as numpy arrays (the validity rules of
  `spec.build_config`, vectorised), encoded inputs and memory (float64 numpy; cheap, checked first);
- `evaluation`: times from `simulate` under `jax.jit` in float32, padded to fixed batch sizes so one
  search compiles once (persistent XLA cache);
- `ranking`: objectives, the exact float64 re-evaluation of the leaders (figures equal
  `vtrain predict`'s), the Pareto front, SearchResult;
- `guided`: gradient guidance (`guided_search`, `sensitivity`) over relaxed log2-degrees.
"""
from __future__ import annotations

import time

import numpy as np

from vtrain.costmodel.spec import TrainConfig
# The search's parts, one module each (re-exported here: `vtrain.strategy.search` is the entry point)
from vtrain.strategy.evaluation import (BUCKETS, _table_key, enable_compilation_cache,  # noqa: F401
                                        evaluate)
from vtrain.strategy.grid import (OBJECTIVES, STRATEGY_FIELDS, SearchSpace, candidates,  # noqa: F401
                                  check_run_parameters, encode_strategies, enumerate_strategies,
                                  explain_no_strategy, memory_bytes, strategy_values)
from vtrain.strategy.guided import guided_search, relaxed_gradient, sensitivity  # noqa: F401
from vtrain.strategy.ranking import (LIMIT_LABELS, SearchResult, _finish, exact_rows,  # noqa: F401
                                     interval_bounds, objective_key, pareto_front, ranking_times)


def search(cfg: TrainConfig, space: SearchSpace, predictor, objective: str = "time", top: int = 10,
           price_per_gpu_hour: float | None = None, tokens: float | None = None) -> SearchResult:
    """Full enumeration: every valid strategy that fits, evaluated in one batched jitted call."""
    top, price, tokens = check_run_parameters(cfg, objective, top, price_per_gpu_hour, tokens)
    t0 = time.perf_counter()
    strategies, d, mem, fits = candidates(cfg, space)
    t1 = time.perf_counter()
    idx = np.flatnonzero(fits)
    out = evaluate(predictor, d.take(idx))
    t2 = time.perf_counter()
    result = _finish(predictor, cfg, space, strategies, d, mem, fits, idx, out["iteration_time_s"], objective, top,
                     price, tokens, "enumeration", {})
    result.timings = dict(enumerate_s=t1 - t0, evaluate_s=t2 - t1, rank_s=time.perf_counter() - t2)
    return result
