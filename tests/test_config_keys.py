"""Every key of a vTrain config, a Hugging Face config.json and a canonical file is honoured with its
meaning, refused in one line naming it, or reported as assumed; and `predict` prints what it assumed."""
import json

import pytest

from vtrain.costmodel.config_files import (VTRAIN_KEYS, VTRAIN_OTHER_KEYS, read_config_file, resolve_config,
                                           resolve_config_assumed)
from vtrain.costmodel.presets import lookup_model
from vtrain.costmodel.spec import ConfigError, build_config

# GPT-3 175B-like, 64 GPUs as tp 2 x pp 4 x dp 8, in vTrain's key names
VTRAIN_BASE = {
    "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96, "max_length": 2048, "vocab_size": 51200,
    "tensor_parallel_size": 2, "pipeline_parallel_size": 4, "data_parallel_size": 8, "micro_batch_size": 1,
    "global_batch_size": 64, "num_gpus": 64, "node_size": 8, "inter_node_bandwidth": 200,
    "intra_node_bandwidth": 300,
}
# For each mapped vTrain key: the changes (kept consistent), the canonical field and its new value.
VTRAIN_CHANGES = {
    "num_layers": ({"num_layers": 48}, "num_layers", 48),
    "hidden_size": ({"hidden_size": 6144}, "hidden_size", 6144),
    "num_attention_heads": ({"num_attention_heads": 48}, "num_attention_heads", 48),
    "max_length": ({"max_length": 1024}, "seq_len", 1024),
    "sequence_length": ({"max_length": None, "sequence_length": 1024}, "seq_len", 1024),
    "seq_length": ({"max_length": None, "seq_length": 1024}, "seq_len", 1024),
    "vocab_size": ({"vocab_size": 50257}, "vocab_size", 50257),
    "tensor_parallel_size": ({"tensor_parallel_size": 4, "data_parallel_size": 4}, "tp", 4),
    "pipeline_parallel_size": ({"pipeline_parallel_size": 8, "data_parallel_size": 4}, "pp", 8),
    "data_parallel_size": ({"data_parallel_size": 4, "num_gpus": 32}, "dp", 4),
    "micro_batch_size": ({"micro_batch_size": 2}, "micro_batch", 2),
    "global_batch_size": ({"global_batch_size": 128}, "global_batch", 128),
    "num_gpus": ({"num_gpus": 128, "data_parallel_size": 16}, "num_gpus", 128),
    "node_size": ({"node_size": 4}, "gpus_per_node", 4),
    "inter_node_bandwidth": ({"inter_node_bandwidth": 100}, "inter_node_bw_Gbps", 100.0),
    "intra_node_bandwidth": ({"intra_node_bandwidth": 150}, "intra_node_bw_GBps", 150.0),
}


def _vtrain(tmp_path, **changes):
    data = dict(VTRAIN_BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "vtrain.json"
    path.write_text(json.dumps(data))
    return path


def test_every_vtrain_key_is_covered_here():
    assert set(VTRAIN_CHANGES) == set(VTRAIN_KEYS)
    assert set(VTRAIN_OTHER_KEYS) == {"gpu_name", "use_checkpoint", "trace_path"}


@pytest.mark.parametrize("key", list(VTRAIN_CHANGES))
def test_vtrain_key_changes_its_field(tmp_path, key):
    changes, field, value = VTRAIN_CHANGES[key]
    base = resolve_config(_vtrain(tmp_path)).flat()
    got = resolve_config(_vtrain(tmp_path, **changes)).flat()
    assert got[field] == value and base[field] != value


@pytest.mark.parametrize("name,preset", [("A100", "a100-80gb"), ("V100", "v100"), ("a100", "a100-80gb")])
def test_vtrain_gpu_name_picks_the_gpu(tmp_path, name, preset):
    cfg, assumed = resolve_config_assumed(_vtrain(tmp_path, gpu_name=name))
    assert cfg.cluster.gpu == preset
    assert "gpu" not in {a["field"] for a in assumed}


def test_vtrain_without_gpu_name_assumes_a100_and_says_so(tmp_path):
    cfg, assumed = resolve_config_assumed(_vtrain(tmp_path))
    assert cfg.cluster.gpu == "a100-80gb"
    assert {"field": "gpu", "value": "a100-80gb"}.items() <= next(a for a in assumed if a["field"] == "gpu").items()


@pytest.mark.parametrize("name", ["T4", "MI250", 7])
def test_vtrain_unknown_gpu_name_is_refused(tmp_path, name):
    with pytest.raises(ConfigError, match=r"^gpu_name: .* is not a GPU vtrain has a preset for"):
        resolve_config(_vtrain(tmp_path, gpu_name=name))


@pytest.mark.parametrize("flag,mode", [(True, "full"), (False, "none")])
def test_vtrain_use_checkpoint_switches_recompute(tmp_path, flag, mode):
    cfg, assumed = resolve_config_assumed(_vtrain(tmp_path, use_checkpoint=flag))
    assert cfg.parallel.recompute == mode
    assert "recompute" not in {a["field"] for a in assumed}


def test_vtrain_without_use_checkpoint_assumes_full_and_says_so(tmp_path):
    cfg, assumed = resolve_config_assumed(_vtrain(tmp_path))
    assert cfg.parallel.recompute == "full" and "recompute" in {a["field"] for a in assumed}


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_vtrain_use_checkpoint_must_be_a_boolean(tmp_path, value):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(dict(VTRAIN_BASE, use_checkpoint=value)))
    with pytest.raises(ConfigError, match="^use_checkpoint: .* is not true or false"):
        resolve_config(path)


def test_vtrain_trace_path_is_reported_as_not_read(tmp_path):
    _, assumed = resolve_config_assumed(_vtrain(tmp_path, trace_path="trace/a100"))
    entry = next(a for a in assumed if a["field"] == "trace_path")
    assert entry["value"] == "trace/a100" and "not read" in entry["reason"]


@pytest.mark.parametrize("key,words", [
    ("pipeline_scheduling", "pipeline_scheduling: not a vTrain config key"),
    ("tensor_paralel_size", "did you mean 'tensor_parallel_size'"),
    ("recompute", "'recompute' is a vtrain field: give it as a flag, --recompute"),
])
def test_vtrain_unknown_key_is_refused_by_name(tmp_path, key, words):
    with pytest.raises(ConfigError, match=words):
        resolve_config(_vtrain(tmp_path, **{key: 1}))


def test_vtrain_conflicting_sequence_keys_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="sequence_length: 1024 differs from max_length = 2048"):
        resolve_config(_vtrain(tmp_path, sequence_length=1024))


def test_vtrain_v100_without_checkpointing_is_not_the_a100_answer(tmp_path, cli):
    """The issue's repro: gpu_name V100 and use_checkpoint false used to predict the A100 answer."""
    a100 = tmp_path / "a100.json"
    a100.write_text(json.dumps(dict(VTRAIN_BASE, gpu_name="A100", use_checkpoint=True)))
    v100 = tmp_path / "v100.json"
    v100.write_text(json.dumps(dict(VTRAIN_BASE, gpu_name="V100", use_checkpoint=False)))
    outs = []
    for path in (a100, v100):
        result = cli("predict", path, "--json", "-c", "none")
        assert result.returncode == 0, result.stderr
        outs.append(json.loads(result.stdout))
    assert (outs[0]["config"]["gpu"], outs[0]["config"]["recompute"]) == ("a100-80gb", "full")
    assert (outs[1]["config"]["gpu"], outs[1]["config"]["recompute"]) == ("v100", "none")
    assert outs[0]["iteration_time_s"] != outs[1]["iteration_time_s"]


# ---------------------------------------------------------------- Hugging Face config.json

MIXTRAL = dict(architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=4096, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
               num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768, hidden_act="silu",
               sliding_window=None, tie_word_embeddings=False)


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_hf_mixtral_is_costed_as_moe(tmp_path, cli):
    result = cli("predict", _write(tmp_path, MIXTRAL), "--num-gpus", "16", "--tp", "2", "--ep", "8", "--sequence-parallel",
                 "--global-batch", "64", "--seq-len", "4096", "-c", "none", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    preset = build_config(lookup_model("mixtral-8x7b")).model
    assert out["config"]["num_experts"] == 8 and out["config"]["experts_per_token"] == 2
    assert out["num_parameters"] == preset.num_parameters and out["active_parameters"] == preset.active_parameters
    assert out["breakdown"]["ep_comm"] > 0


@pytest.mark.parametrize("data,field", [
    (dict(model_type="t5", is_encoder_decoder=True, num_layers=12, d_model=768, num_heads=12), "is_encoder_decoder"),
    (dict(model_type="mamba", num_hidden_layers=64, hidden_size=2560), "model_type"),
    (dict(model_type="bert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12), "model_type"),
    (dict(model_type="dbrx", n_layers=40, d_model=6144, n_heads=48, ffn_config={"moe_num_experts": 16}),
     "model_type"),
    (dict(architectures=["BertForMaskedLM"], num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
     "architectures"),
])
def test_hf_architectures_vtrain_cannot_cost_are_refused(tmp_path, cli, data, field):
    result = cli("predict", _write(tmp_path, data), "--num-gpus", "8", "-c", "none")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {field}: ") and len(result.stderr.strip().splitlines()) == 1


def test_hf_keys_that_change_the_cost_but_are_not_modelled_are_reported(tmp_path):
    mistral = dict(MIXTRAL, model_type="mistral", architectures=["MistralForCausalLM"], num_local_experts=None,
                   num_experts_per_tok=None, sliding_window=4096, tie_word_embeddings=True, attention_bias=True)
    _, assumed = resolve_config_assumed(_write(tmp_path, mistral), overrides=dict(num_gpus=8, global_batch=8))
    by_field = {a["field"]: a for a in assumed}
    assert by_field["sliding_window"]["value"] == 4096
    assert "untied" in by_field["tie_word_embeddings"]["reason"]
    assert "attention_bias" in by_field
    assert by_field["seq_len"]["value"] == 8192 and "capped" in by_field["seq_len"]["reason"]
    assert by_field["arch"]["value"] == "llama"
    # a window at least as long as the sequence changes nothing: not reported
    _, assumed = resolve_config_assumed(_write(tmp_path, dict(mistral, sliding_window=32768)))
    assert "sliding_window" not in {a["field"] for a in assumed}


@pytest.mark.parametrize("key", ["sliding_window", "head_dim"])
def test_hf_non_integer_cost_keys_are_refused_in_one_line(tmp_path, key):
    """A non-integer sliding_window or head_dim raised a bare ValueError from int() (a traceback)."""
    mistral = dict(MIXTRAL, model_type="mistral", architectures=["MistralForCausalLM"], num_local_experts=None,
                   num_experts_per_tok=None, **{key: "long"})
    with pytest.raises(ConfigError, match=rf"^{key}: 'long' in the Hugging Face config is not an integer"):
        resolve_config(_write(tmp_path, mistral), overrides=dict(num_gpus=8, global_batch=8))


def test_hf_config_with_an_assumed_global_batch_says_so(tmp_path, cli):
    """The issue's repro: an HF config with --num-gpus 64 --tp 8 silently used a global batch of 8."""
    llama = dict(MIXTRAL, model_type="llama", architectures=["LlamaForCausalLM"], num_local_experts=None,
                 num_experts_per_tok=None, vocab_size=128256)
    path = _write(tmp_path, llama)
    result = cli("predict", path, "--num-gpus", "64", "--tp", "8", "-c", "none", "--json")
    assert result.returncode == 0, result.stderr
    assumed = {a["field"]: a for a in json.loads(result.stdout)["assumed"]}
    assert assumed["global_batch"]["value"] == 8 and "dp x micro_batch = 8 x 1" in assumed["global_batch"]["reason"]
    assert {"precision", "recompute", "attention"} <= set(assumed)
    table = cli("predict", path, "--num-gpus", "64", "--tp", "8", "-c", "none")
    assert table.returncode == 0, table.stderr
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("assumed: "))
    assert "global_batch=8 (dp x micro_batch" in line and "precision=" in line
    given = cli("predict", path, "--num-gpus", "64", "--tp", "8", "--global-batch", "512", "-c", "none", "--json")
    assert "global_batch" not in {a["field"] for a in json.loads(given.stdout)["assumed"]}


# ---------------------------------------------------------------- canonical files

@pytest.mark.parametrize("text,field", [
    ('model = "gpt3-1.3b"\nbatch = 8\n', "batch"),
    ('model = "gpt3-1.3b"\n[parallel]\ntp = 2\ntensor_parallel = 2\n', "parallel.tensor_parallel"),
    ('[model]\npreset = "gpt3-1.3b"\nlayers = 2\n', "model.layers"),
    ('model = "gpt3-1.3b"\n[training]\nsteps = 10\n', "training"),
    ('model = "gpt3-1.3b"\n[cluster]\ngpu = "h100"\nnics = 8\n', "cluster.nics"),
])
def test_canonical_unknown_keys_are_refused_by_name(tmp_path, cli, text, field):
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_config_file(path)
    assert str(err.value).startswith(f"{field}: unknown field")
    result = cli("predict", path, "-c", "none")
    assert result.returncode == 2 and result.stderr.startswith(f"error: {field}: unknown field")


def test_nothing_assumed_when_everything_is_given(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('model = "gpt3-1.3b"\nattention = "unfused"\n[parallel]\nnum_gpus = 8\ntp = 2\n'
                    'micro_batch = 2\nglobal_batch = 64\n'
                    'recompute = "selective"\nzero_stage = 1\nsequence_parallel = true\neager = false\n'
                    '[cluster]\ngpu = "h100-sxm"\nprecision = "bf16"\n')
    _, assumed = resolve_config_assumed(path)
    assert assumed == []
    # a bare family name is a choice between parts: stated, with the other presets of the family
    path.write_text(path.read_text().replace('"h100-sxm"', '"h100"'))
    _, assumed = resolve_config_assumed(path)
    assert [(a["field"], a["value"]) for a in assumed] == [("gpu", "h100-sxm")]
    _, assumed = resolve_config_assumed(None, "gpt3-1.3b", dict(gpu="a100", num_gpus=8, global_batch=64))
    gpu = [a for a in assumed if a["field"] == "gpu"]
    assert gpu and gpu[0]["value"] == "a100-80gb" and "a100-40gb" in gpu[0]["reason"]
