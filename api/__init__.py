"""vtrain: predict LLM training iteration time and search parallelization strategies.

Python API:
    import vtrain
    config = vtrain.load_config("examples/gpt3-175b.toml", tp=8)     # or model="llama2-70b", ...
    result = vtrain.predict(config)                                   # shipped checkpoint
    result.iteration_time_s, result.mfu, result.breakdown
    vtrain.predict(config, checkpoint="none")                         # analytical only
"""
from __future__ import annotations

from vtrain.costmodel.config_files import resolve_config
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.cost import TrainingCost
from vtrain.costmodel.predictor import Prediction, Predictor
from vtrain.costmodel.spec import ConfigError, TrainConfig, build_config, with_changes

__version__ = "0.1.0"


def load_config(path: str | None = None, model: str | None = None, **fields) -> TrainConfig:
    """A validated config from a file (TOML/JSON/vTrain/HF), a model preset and canonical fields."""
    return resolve_config(path, model, fields)


def get_predictor(checkpoint: str | None = "default") -> Predictor:
    """A predictor for a checkpoint name/path; 'none' for the analytical model."""
    return Predictor.load(checkpoint)


def predict(config: TrainConfig | str | dict, checkpoint: str | None = "default", **fields) -> Prediction:
    """Predict one iteration. `config` may be a TrainConfig, a config file path, or a dict of
    canonical fields; keyword fields override it."""
    if isinstance(config, TrainConfig):
        if fields:
            config = with_changes(config, **fields)  # changing tp/pp re-derives dp at the same GPU count
    elif isinstance(config, dict):
        config = build_config({**config, **fields})
    else:
        config = resolve_config(config, None, fields)
    return get_predictor(checkpoint).predict(config)


def forecast(jobs, checkpoint: str | None = "default", devices=None, price_per_gpu_hour: float | None = None):
    """Forecast a table of jobs (a pandas DataFrame, one job per row in canonical column names or a
    'model' preset column; optional 'tokens' and 'price_per_gpu_hour'). Returns a copy with
    iteration_time_s, tokens_per_s, mfu, memory_gib_per_gpu, fits_memory, (train_days, gpu_hours,
    cost) and error columns. `devices="all"` shards the rows over all local JAX devices."""
    from vtrain.tables.forecast import forecast_frame

    return forecast_frame(jobs, checkpoint=checkpoint, devices=devices, price_per_gpu_hour=price_per_gpu_hour)


def search(config: TrainConfig, checkpoint: str | None = "default", objective: str = "time", top: int = 10,
           num_gpus: int | None = None, max_gpus: int | None = None, tokens: float | None = None,
           price_per_gpu_hour: float | None = None, **space):
    """Best strategies for `config`'s model, cluster and global batch (its own layout is ignored):
    every valid strategy on `num_gpus` (default: the config's) or on up to `max_gpus` GPUs that fits
    in memory, ranked by `objective` ('time', 'cost' or 'tokens-per-dollar'). Extra keywords go to
    `vtrain.strategy.search.SearchSpace` (max_tp=..., recompute=("selective", "full"), ...)."""
    from vtrain.strategy.search import SearchSpace, search as run_search

    if num_gpus is None and max_gpus is None:
        num_gpus = config.parallel.num_gpus
    space = SearchSpace(num_gpus=num_gpus, max_gpus=max_gpus, **space)
    return run_search(config, space, get_predictor(checkpoint), objective=objective, top=top,
                      price_per_gpu_hour=price_per_gpu_hour, tokens=tokens)


__all__ = ["ConfigError", "Prediction", "Predictor", "TrainConfig", "TrainingCost", "UserError", "build_config",
           "forecast", "get_predictor", "load_config", "predict", "search"]
