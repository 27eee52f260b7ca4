"""Training cost from an iteration time: wall-clock days, GPU-hours and money, in one place.

`training_cost` works on Python floats and numpy arrays alike (seconds, tokens, US$ per GPU-hour).
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

# Approximate on-demand cloud prices in US$ per GPU-hour (rough placeholders from public list prices
# of 8-GPU instances in 2024-2025, divided by 8; real prices vary widely by provider, region and
# commitment). Callers can always pass their own price.
PRICE_PER_GPU_HOUR = {
    "v100": 3.06,
    "a100-40gb": 4.10,
    "a100-80gb": 5.12,
    "h100-sxm": 6.88,
    "h200": 7.90,
    "b200": 10.00,
    "mi300x": 6.00,
    "cpu": 0.05,
}


def default_price(gpu: str) -> float:
    """The placeholder US$ per GPU-hour of `gpu` (any alias), 0.0 if it has none."""
    spec = lookup_gpu(gpu)
    return PRICE_PER_GPU_HOUR.get(spec.name if spec else gpu, 0.0)


@dataclass(frozen=True)
class TrainingCost:
    """Cost of training on `tokens` tokens: wall-clock days, GPU-hours and money (price * GPU-hours)."""

    tokens: float
    iterations: float
    train_days: float
    gpu_hours: float
    cost: float


def training_cost(iteration_time_s, num_gpus, tokens_per_iteration, tokens,
                  price_per_gpu_hour=0.0) -> TrainingCost:
    """Iterations = tokens / tokens_per_iteration; days of wall clock; GPU-hours = seconds * GPUs;
    cost = GPU-hours * price. Scalars or numpy arrays (broadcast); fields have the inputs' shape."""
    iterations = tokens / tokens_per_iteration
    seconds = iterations * iteration_time_s
    gpu_hours = seconds / SECONDS_PER_HOUR * num_gpus
    return TrainingCost(tokens=tokens, iterations=iterations, train_days=seconds / SECONDS_PER_DAY,
                        gpu_hours=gpu_hours, cost=gpu_hours * price_per_gpu_hour)
