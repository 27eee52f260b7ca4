"""Compute-optimal planning: given GPUs and days, which model size and token count fit?

Chinchilla-style rule (Hoffmann et al. 2022): train on `tokens_per_param` tokens per parameter
(20 by default). For each model shape on a ladder of sizes, the strategy search finds the fastest
feasible strategy on at most `num_gpus` GPUs; the predicted tokens/s (not peak FLOP/s) gives the
days needed for tokens_per_param * parameters tokens. The recommendation is the largest shape that
finishes within the budget. A continuous estimate sqrt(C / (6 r)) with C = days * GPUs * peak *
predicted MFU is given too, next to the (optimistic) one that assumes peak FLOP/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from vtrain.costmodel.cost import default_price
from vtrain.costmodel.errors import ParameterError, UserError
from vtrain.costmodel.spec import build_config
from vtrain.costmodel.units import SECONDS_PER_DAY
from vtrain.strategy.search import SearchSpace, search

# Hidden sizes of the candidate ladder; layers = hidden / 128 (GPT-3's aspect ratio for >= 6.7B),
# heads = hidden / 128 (head dimension 128).
HIDDEN_LADDER = (1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384,
                 20480, 25600, 32768)


def ladder_shape(hidden: int, arch: str = "gpt", seq_len: int = 2048, vocab_size: int = 51200) -> dict:
    """Canonical model fields of the ladder model with this hidden size."""
    layers = max(8, int(round(hidden / 128.0 / 4.0)) * 4)
    return dict(arch=arch, num_layers=layers, hidden_size=hidden, num_attention_heads=hidden // 128,
                seq_len=seq_len, vocab_size=vocab_size)


@dataclass
class PlanResult:
    gpu: str
    num_gpus: int
    days: float
    tokens_per_param: float
    price_per_gpu_hour: float
    rows: list[dict]
    recommended: dict | None
    continuous: dict = field(default_factory=dict)


def plan(gpu: str, num_gpus: int, days: float, predictor, tokens_per_param: float = 20.0, arch: str = "gpt",
         seq_len: int = 2048, vocab_size: int = 51200, global_batch: int = 1024, precision: str | None = None,
         price_per_gpu_hour: float | None = None, hidden_sizes=HIDDEN_LADDER, max_tp: int | None = None) -> PlanResult:
    """Largest ladder model trainable on tokens_per_param tokens per parameter within `days` on at
    most `num_gpus` GPUs, using predicted (not peak) throughput."""
    if num_gpus is None or num_gpus <= 0:
        raise ParameterError("num_gpus", f"{num_gpus} must be a positive integer")
    if days is None or days <= 0:
        raise ParameterError("days", f"{days} must be positive")
    if tokens_per_param <= 0:
        raise ParameterError("tokens_per_param", f"{tokens_per_param} must be positive")
    price = default_price(gpu) if price_per_gpu_hour is None else float(price_per_gpu_hour)
    rows = []
    failures_in_a_row = 0
    for hidden in hidden_sizes:
        fields = ladder_shape(hidden, arch, seq_len, vocab_size)
        cfg = build_config(dict(fields, gpu=gpu, global_batch=global_batch, precision=precision))
        params = cfg.model.num_parameters
        tokens = tokens_per_param * params
        row = dict(num_parameters=params, num_layers=cfg.model.num_layers, hidden_size=hidden,
                   num_attention_heads=cfg.model.num_attention_heads, tokens=tokens)
        try:
            res = search(cfg, SearchSpace(max_gpus=num_gpus, max_tp=max_tp), predictor, objective="time", top=1,
                         price_per_gpu_hour=price, tokens=tokens)
        except UserError as err:
            row.update(fits_budget=False, reason=str(err))
            rows.append(row)
            failures_in_a_row += 1
            if failures_in_a_row >= 2:
                break
            continue
        best = res.top[0]
        row.update(strategy=best["config"], gpus_used=best["num_gpus"], tokens_per_s=best["tokens_per_s"],
                   mfu=best["mfu"], train_days=best["train_days"], cost=best["cost"], gpu_hours=best["gpu_hours"],
                   fits_budget=best["train_days"] <= days, reason="")
        if not row["fits_budget"]:
            row["reason"] = f"needs {best['train_days']:.1f} days"
        rows.append(row)
        failures_in_a_row = 0 if row["fits_budget"] else failures_in_a_row + 1
        if failures_in_a_row >= 2:
            break  # two sizes in a row over budget: larger ones only take longer
    fitting = [r for r in rows if r.get("fits_budget")]
    if not fitting:
        first = rows[0]
        why = first.get("reason") or "too slow"
        raise UserError(f"even the smallest candidate ({first['num_parameters'] / 1e9:.2f}B parameters, "
                        f"{first['tokens'] / 1e9:.0f}B tokens) does not fit {num_gpus} x {gpu} for {days:g} days "
                        f"({why}); allow more days or GPUs, or fewer tokens per parameter")
    best = max(fitting, key=lambda r: r["num_parameters"])
    peak = build_config(dict(ladder_shape(1024, arch, seq_len, vocab_size), gpu=gpu, precision=precision))
    from vtrain.costmodel.hardware import lookup_gpu

    peak_flops = lookup_gpu(peak.cluster.gpu).flops(peak.cluster.precision)
    seconds = days * SECONDS_PER_DAY
    compute_real = seconds * best["gpus_used"] * peak_flops * best["mfu"]
    compute_peak = seconds * num_gpus * peak_flops

    def optimal(c):
        n = math.sqrt(c / (6.0 * tokens_per_param))
        return dict(num_parameters=n, tokens=tokens_per_param * n, flops=c)

    continuous = dict(predicted=optimal(compute_real), peak=optimal(compute_peak), mfu=best["mfu"])
    return PlanResult(gpu=peak.cluster.gpu, num_gpus=num_gpus, days=days, tokens_per_param=tokens_per_param,
                      price_per_gpu_hour=price, rows=rows, recommended=best, continuous=continuous)
