"""Validation of canonical configs: every rule gives a one-line error naming the field."""
import pytest

from vtrain.costmodel.spec import ConfigError, build_config

BASE = dict(num_layers=24, hidden_size=1024, num_attention_heads=16, seq_len=1024, num_gpus=8, tp=2, pp=2,
            micro_batch=2, global_batch=32)


def error_for(**changes):
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, **changes})
    message = str(info.value)
    assert "\n" not in message
    return info.value.field, message


def test_valid_config_derives_dp_and_defaults():
    cfg = build_config(BASE)
    assert cfg.parallel.dp == 2
    assert cfg.parallel.num_micro_batches == 32 // (2 * 2)
    assert cfg.model.ffn_hidden_size == 4 * 1024
    assert cfg.model.num_kv_heads == 16
    assert cfg.cluster.intra_node_bw_GBps > 0 and cfg.cluster.precision == "bf16"


@pytest.mark.parametrize("changes, field, hint", [
    (dict(num_gpus=8, tp=2, pp=2, dp=3), "num_gpus", "tp*pp*dp"),
    (dict(num_gpus=6, tp=4, pp=1), "num_gpus", "multiple of 4"),
    (dict(tp=3, num_gpus=12, pp=1), "tp", "{1, 2, 4, 8, 16}"),
    (dict(pp=5, num_gpus=10, tp=1), None, None),  # valid: uneven stages 5+5+5+5+4... (every stage >= 1 layer)
    (dict(pp=25, num_gpus=25, tp=1), "pp", "pp*vpp"),
    (dict(global_batch=30), "global_batch", "multiple of 4"),
    (dict(num_kv_heads=5), "num_kv_heads", "does not divide"),
    (dict(num_layers=0), "num_layers", "positive"),
    (dict(micro_batch=-1), "micro_batch", "positive"),
    (dict(recompute="sometimes"), "recompute", "none, selective, full"),
    (dict(schedule="zigzag"), "schedule", "1f1b"),
    (dict(zero_stage=4), "zero_stage", "0, 1, 2 or 3"),
    (dict(gpu="tpu-v9"), "gpu", "a100-80gb"),
    (dict(gpu="v100", precision="bf16"), "precision", "fp16"),
    (dict(precision="fp4"), "precision", "fp16, bf16, fp8"),
    (dict(arch="mamba"), "arch", "gpt, llama"),
    (dict(schedule="interleaved", vpp=4, num_layers=24), None, None),  # valid: 24 % (2*4) == 0
    (dict(schedule="interleaved", vpp=5), None, None),  # valid: 10 uneven chunks of 24 layers
    (dict(schedule="interleaved", vpp=13), "pp", "pp*vpp"),
    (dict(first_stage_layers=-1), "first_stage_layers", ">= 1"),
    (dict(last_stage_layers=19, first_stage_layers=4), "first_stage_layers", "must equal"),
    (dict(pp=4, num_gpus=8, first_stage_layers=20, last_stage_layers=3), "first_stage_layers", "at least one"),
    (dict(pp=1, num_gpus=2, last_stage_layers=3), "last_stage_layers", "needs pp > 1"),
    (dict(vpp=2), "vpp", "interleaved"),
    (dict(schedule="interleaved", vpp=2, global_batch=4), "global_batch", "multiple of pp=2"),
    (dict(zero_stage=3), "zero_stage", "pp=1"),
    (dict(tp="two"), "tp", "integer"),
    (dict(tp=float("nan")), "tp", "finite"),
    (dict(intra_node_bw_GBps=float("inf")), "intra_node_bw_GBps", "finite"),
    (dict(hidden_sise=4), "hidden_sise", "did you mean 'hidden_size'"),
])
def test_each_rule_names_field_and_fix(changes, field, hint):
    if field is None:
        build_config({**BASE, **changes})
        return
    got_field, message = error_for(**changes)
    assert got_field == field
    assert hint in message


def test_missing_model_field():
    values = dict(BASE)
    del values["hidden_size"]
    with pytest.raises(ConfigError) as info:
        build_config(values)
    assert info.value.field == "hidden_size" and "missing" in str(info.value)


def test_gqa_and_llama_defaults():
    cfg = build_config(dict(arch="llama", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                            tp=8, global_batch=8))
    assert cfg.model.ffn_hidden_size % 256 == 0 and cfg.model.ffn_hidden_size > 2 * 4096
    assert cfg.parallel.num_gpus == 8
