"""`vtrain predict` end to end, through a fresh interpreter like a user's shell."""
import json

import pytest

from vtrain import load_config, predict

REQUIRED_KEYS = {"iteration_time_s", "tokens_per_s", "mfu", "memory_gib_per_gpu", "fits_memory", "breakdown"}


def test_json_output_has_the_documented_keys(cli, tmp_path):
    result = cli("predict", "examples/gpt3-175b.toml", "--json", "--checkpoint", "none",
                 "--tokens", "300e9", "--price-per-gpu-hour", "2.5")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert REQUIRED_KEYS <= out.keys()
    assert set(out["breakdown"]) >= {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"}
    assert sum(out["breakdown"].values()) == pytest.approx(out["iteration_time_s"])
    # cost = GPU-hours * price, GPU-hours = days * 24 * GPUs
    assert out["cost"] == pytest.approx(out["gpu_hours"] * 2.5)
    assert out["gpu_hours"] == pytest.approx(out["train_days"] * 24 * 1024)
    # consistent with the Python API
    api = predict(load_config("examples/gpt3-175b.toml"), checkpoint="none")
    assert out["iteration_time_s"] == pytest.approx(api.iteration_time_s)
    assert out["tokens_per_s"] == pytest.approx(api.tokens_per_s)


def test_flags_override_the_file(cli):
    base = json.loads(cli("predict", "examples/gpt3-175b.toml", "--json", "-c", "none").stdout)
    more_pp = json.loads(cli("predict", "examples/gpt3-175b.toml", "--json", "-c", "none", "--pp", "32").stdout)
    assert more_pp["config"]["pp"] == 32 and more_pp["config"]["dp"] == 4
    assert more_pp["iteration_time_s"] != base["iteration_time_s"]


def test_table_output_and_presets(cli):
    result = cli("predict", "--model", "llama2-7b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "2",
                 "--global-batch", "64", "-c", "none", "--tokens", "1e12")
    assert result.returncode == 0, result.stderr
    for word in ("iteration time", "MFU", "memory per GPU", "pipeline bubble", "days"):
        assert word in result.stdout


@pytest.mark.parametrize("args, field", [
    (["--model", "gpt3-175b", "--num-gpus", "100", "--tp", "8"], "num_gpus"),
    (["--model", "gpt3-175b", "--tp", "7", "--num-gpus", "7"], "tp"),
    (["--model", "gpt3-175b", "--tp", "7", "--num-gpus", "1024"], "tp: 7 does not divide num_attention_heads=96"),
    (["--model", "gpt3-175b", "--gpu", "a200"], "gpu"),
    (["--model", "not-a-model"], "model"),
    (["missing-file.toml"], "config"),
    (["--model", "llama2-7b", "--recompute", "half"], "recompute"),
    (["--model", "llama2-7b", "--global-batch", "0"], "global-batch"),
])
def test_bad_input_is_one_line_exit_2_no_traceback(cli, args, field):
    result = cli("predict", *args, "-c", "none")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and field in lines[0], result.stderr


def test_corrupt_checkpoint_is_a_clear_error(cli, tmp_path):
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"not a zip file")
    result = cli("predict", "examples/gpt3-175b.toml", "--checkpoint", str(bad))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "broken.npz" in result.stderr and "vtrain fit" in result.stderr
    not_npz = cli("predict", "examples/gpt3-175b.toml", "--checkpoint", "pyproject.toml")
    assert not_npz.returncode == 2 and "pyproject.toml" in not_npz.stderr and ".npz" in not_npz.stderr


def test_vtrain_config_file_front_door(cli, tmp_path):
    path = tmp_path / "vtrain.json"
    path.write_text(json.dumps({"num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
                                "max_length": 1024, "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                                "data_parallel_size": 2, "micro_batch_size": 4, "global_batch_size": 32,
                                "node_size": 8}))
    result = cli("predict", path, "--json", "-c", "none")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["config"]["tp"] == 2 and out["config"]["recompute"] == "full"


def test_measured_allreduce_table_replaces_the_intra_node_model(cli, tmp_path):
    # nccl-tests LUT in vTrain's format: size, count, type, time(ns), busbw, time(ns), busbw (in-place last)
    lut = tmp_path / "AR_GPU8_1M_1024M_LUT"
    rows = ["size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)"]
    for i in range(1, 65):
        size = i * 1024 * 1024
        rows.append(f"{size},{size // 4},float,{i * 1e6:.0f},1.0,{i * 1e6:.0f},1.0")  # 1 ms per MiB: very slow
    lut.write_text("\r\n".join(rows) + "\r\n", encoding="utf-8-sig")
    args = ["predict", "--model", "gpt3-6.7b", "--num-gpus", "8", "--tp", "8", "--global-batch", "8", "--json",
            "-c", "none"]
    modelled = json.loads(cli(*args).stdout)
    measured = json.loads(cli(*args, "--allreduce-table", tmp_path).stdout)
    # 2 MiB... 16 MiB activations at 1 ms/MiB dwarf the modelled NVLink all-reduce
    assert measured["breakdown"]["tp_comm"] > 10 * modelled["breakdown"]["tp_comm"]
    assert measured["breakdown"]["compute"] == pytest.approx(modelled["breakdown"]["compute"])
    # a group size the table does not hold (dp=4 here) falls back to the model instead of costing nothing
    dp_only = ["predict", "--model", "gpt3-1.3b", "--num-gpus", "4", "--global-batch", "8", "--json", "-c", "none"]
    fallback = json.loads(cli(*dp_only, "--allreduce-table", tmp_path).stdout)
    assert fallback["breakdown"]["dp_comm"] == pytest.approx(json.loads(cli(*dp_only).stdout)["breakdown"]["dp_comm"])
    assert fallback["breakdown"]["dp_comm"] > 0
    bad = cli(*args, "--allreduce-table", tmp_path / "empty-dir")
    assert bad.returncode == 2 and "AR_GPU" in bad.stderr


def test_predict_flags_inputs_outside_the_training_data(cli):
    far = cli("predict", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--num-gpus", "3072", "--tp", "8", "--pp", "8",
              "--micro-batch", "1", "--global-batch", "6144", "--recompute", "selective", "--sequence-parallel")
    assert far.returncode == 0, far.stderr
    line = [x for x in far.stdout.splitlines() if x.startswith("outside the training data")]
    assert len(line) == 1 and "hidden=12288" in line[0]
    # inputs named as the config gives them, not as feature codes
    assert "recompute=selective (trained full)" in line[0] and "with sequence_parallel (no training run had it)" in line[0]
    weight = json.loads(cli("predict", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--num-gpus", "3072", "--tp", "8",
                            "--pp", "8", "--micro-batch", "1", "--global-batch", "6144", "--recompute", "selective",
                            "--sequence-parallel", "--json").stdout)["correction_weight"]
    assert 0 < weight < 1 and f"applied at {weight:.0%} weight" in line[0]
    h100 = cli("predict", "--model", "gpt3-13b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "2", "--pp", "2",
               "--global-batch", "16", "--recompute", "full")
    assert h100.returncode == 0 and "peak TFLOP/s=989 (trained 312)" in h100.stdout
    fsdp = cli("predict", "--model", "gpt3-13b", "--gpu", "a100-80gb", "--num-gpus", "8", "--tp", "4", "--pp", "1",
               "--global-batch", "16", "--recompute", "full", "--zero-stage", "3", "--json")
    assert fsdp.returncode == 0 and json.loads(fsdp.stdout)["correction_weight"] < 0.2
    text = cli("predict", "--model", "gpt3-13b", "--gpu", "a100-80gb", "--num-gpus", "8", "--tp", "4", "--pp", "1",
               "--global-batch", "16", "--recompute", "full", "--zero-stage", "3").stdout
    assert "with ZeRO-3 / FSDP (no training run had it)" in text
    none = cli("predict", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--num-gpus", "3072", "--tp", "8", "--pp", "8",
               "--micro-batch", "1", "--global-batch", "6144", "--checkpoint", "none")
    assert none.returncode == 0 and "outside the training data" not in none.stdout
