"""Every front door (TOML, JSON, vTrain JSON, Hugging Face config.json, presets, flags) gives the
same canonical config."""
import json

import pytest

from vtrain.costmodel.config_files import load_config_file, resolve_config
from vtrain.costmodel.presets import MODELS
from vtrain.costmodel.spec import ConfigError, build_config


def test_toml_tables_and_flat_json_agree(tmp_path):
    toml = tmp_path / "job.toml"
    toml.write_text('[model]\nnum_layers = 24\nhidden_size = 2048\nnum_attention_heads = 16\nseq_len = 1024\n'
                    '[parallel]\nnum_gpus = 8\ntp = 2\npp = 2\nglobal_batch = 64\nmicro_batch = 4\n'
                    'recompute = "full"\n[cluster]\ngpu = "a100-40gb"\n')
    flat = tmp_path / "job.json"
    flat.write_text(json.dumps(dict(num_layers=24, hidden_size=2048, num_attention_heads=16, seq_len=1024,
                                    num_gpus=8, tp=2, pp=2, global_batch=64, micro_batch=4, recompute="full",
                                    gpu="a100-40gb")))
    a, b = resolve_config(toml), resolve_config(flat)
    assert a == b
    assert a.parallel.dp == 2 and a.cluster.gpu == "a100-40gb"


def test_vtrain_config_json(tmp_path):
    # vTrain's own config format (VIA-Research/vTrain config/*.json field names)
    path = tmp_path / "vtrain_config.json"
    path.write_text(json.dumps({
        "num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "max_length": 1024,
        "vocab_size": 50257, "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2,
        "micro_batch_size": 2, "global_batch_size": 16, "num_gpus": 8, "node_size": 8,
        "inter_node_bandwidth": 200, "intra_node_bandwidth": 300, "trace_path": "trace/a100",
    }))
    cfg = resolve_config(path)
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp) == (2, 2, 2)
    assert cfg.model.seq_len == 1024 and cfg.model.vocab_size == 50257
    assert cfg.cluster.inter_node_bw_Gbps == 200 and cfg.cluster.intra_node_bw_GBps == 300
    assert cfg.parallel.recompute == "full"  # vTrain's validation setting


def test_huggingface_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
    }))
    fields = load_config_file(path)
    assert fields["arch"] == "llama" and fields["num_kv_heads"] == 8 and fields["ffn_hidden_size"] == 14336
    assert fields["seq_len"] == 8192  # capped long-context length
    cfg = resolve_config(path, overrides=dict(tp=8, num_gpus=64, global_batch=64))
    assert cfg.model == build_config(dict(MODELS["llama3-8b"])).model


def test_flags_override_file_and_preset(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('model = "gpt3-175b"\n[parallel]\nnum_gpus = 1024\ntp = 8\npp = 16\nglobal_batch = 1536\n')
    cfg = resolve_config(path, overrides=dict(pp=8, seq_len=4096))
    assert cfg.parallel.pp == 8 and cfg.parallel.dp == 16 and cfg.model.seq_len == 4096
    assert cfg.model.hidden_size == 12288


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_preset_builds(name):
    cfg = build_config(dict(MODELS[name]))
    assert cfg.model.num_parameters > 1e9


def test_bad_files_give_one_line_errors(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found"):
        resolve_config(missing)
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\nnum_layers = 2")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve_config(broken)
    typo = tmp_path / "typo.toml"
    typo.write_text("[parallel]\ntensor_paralel = 2\n")
    with pytest.raises(ConfigError, match="unknown field"):
        resolve_config(typo)
    with pytest.raises(ConfigError, match="not a known model preset"):
        resolve_config(None, model="gpt5")
