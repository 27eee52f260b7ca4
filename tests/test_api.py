"""The Python API: the same answers as the lower layers, in typed results."""
import pytest

import vtrain
from vtrain.costmodel.predictor import Predictor


def test_predict_accepts_config_dict_and_path_alike():
    cfg = vtrain.load_config("examples/gpt3-175b.toml")
    from_config = vtrain.predict(cfg, checkpoint="none")
    from_path = vtrain.predict("examples/gpt3-175b.toml", checkpoint="none")
    from_dict = vtrain.predict(cfg.flat(), checkpoint="none")
    assert from_config.iteration_time_s == from_path.iteration_time_s == from_dict.iteration_time_s
    changed = vtrain.predict(cfg, checkpoint="none", pp=8)
    assert changed.config.parallel.dp == 16 and changed.iteration_time_s != from_config.iteration_time_s
    cost = from_config.training_cost(tokens=cfg.tokens_per_iteration * 1000, price_per_gpu_hour=2.0)
    assert cost.iterations == pytest.approx(1000)
    assert cost.gpu_hours == pytest.approx(1000 * from_config.iteration_time_s / 3600 * 1024)


def test_shipped_checkpoint_loads_and_differs_from_analytical():
    cfg = vtrain.load_config("examples/gpt3-175b.toml")
    shipped = vtrain.predict(cfg)
    assert shipped.checkpoint == "default"
    assert shipped.iteration_time_s != vtrain.predict(cfg, checkpoint="none").iteration_time_s
    assert Predictor.load("default").metadata["data_hash"]


def test_search_api_ranks_by_time():
    cfg = vtrain.load_config(model="gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=128)
    result = vtrain.search(cfg, checkpoint="none", top=5)
    times = [row["iteration_time_s"] for row in result.top]
    assert times == sorted(times) and len(times) == 5
    best = result.top[0]
    check = vtrain.predict(cfg, checkpoint="none", **{k: best[k] for k in ("tp", "pp", "dp", "micro_batch")},
                           num_gpus=16, schedule=best["schedule"], vpp=best["vpp"], recompute=best["recompute"],
                           sequence_parallel=best["sequence_parallel"], zero_stage=best["zero_stage"])
    assert check.iteration_time_s == pytest.approx(best["iteration_time_s"], rel=1e-9)
