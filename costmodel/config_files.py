"""Front doors for configurations: canonical TOML/JSON, vTrain JSON, Hugging Face config.json, presets.

Every loader returns a flat dict of canonical field names (see `spec.ALL_FIELDS`) with raw
values; `resolve_config` layers preset < file < overrides and validates with `build_config`.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

from vtrain.costmodel.errors import user_file
from vtrain.costmodel.presets import lookup_model, model_names
from vtrain.costmodel.spec import ALL_FIELDS, ConfigError, TrainConfig, build_config, suggest_field

# vTrain's own config JSON (VIA-Research/vTrain config/*.json) -> canonical names.
# Bandwidths there: inter_node_bandwidth in Gb/s, intra_node_bandwidth in GB/s (same units as ours).
VTRAIN_KEYS = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "max_length": "seq_len",
    "sequence_length": "seq_len",
    "seq_length": "seq_len",
    "vocab_size": "vocab_size",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "micro_batch_size": "micro_batch",
    "global_batch_size": "global_batch",
    "num_gpus": "num_gpus",
    "node_size": "gpus_per_node",
    "inter_node_bandwidth": "inter_node_bw_Gbps",
    "intra_node_bandwidth": "intra_node_bw_GBps",
}
VTRAIN_MARKERS = ("tensor_parallel_size", "max_length", "node_size", "inter_node_bandwidth", "pipeline_parallel_size")

# Hugging Face transformers config.json -> canonical model fields (first key found wins).
HF_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "multi_query_group_num"),
    "ffn_hidden_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
}
HF_LLAMA_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "internlm", "internlm2",
                  "yi", "deepseek", "olmo", "phi3")
HF_MAX_SEQ_LEN = 8192  # long-context checkpoints are trained mostly at <= 8k; override with --seq-len


def _read_mapping(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError("config", f"file '{path}' not found; give a path to a TOML or JSON config")
    with user_file(path, "config"):
        text = path.read_text(encoding="utf-8-sig")
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        if path.suffix.lower() == ".json":
            return json.loads(text)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise ConfigError("config", f"'{path}' is not valid TOML/JSON ({err}); fix the syntax") from None


def is_vtrain_config(data: dict) -> bool:
    return any(k in data for k in VTRAIN_MARKERS)


def is_hf_config(data: dict) -> bool:
    return "model_type" in data or "architectures" in data or "num_hidden_layers" in data or "n_layer" in data


def from_vtrain(data: dict) -> dict:
    """Canonical fields from a vTrain config JSON (unknown vTrain keys are ignored)."""
    out = {canon: data[key] for key, canon in VTRAIN_KEYS.items() if key in data}
    # vTrain's validation setup (Megatron-DeepSpeed on A100) runs with activation checkpointing.
    out.setdefault("recompute", "full")
    out.setdefault("gpu", "a100-80gb")
    out.setdefault("precision", "fp16")
    out.setdefault("attention", "unfused")  # Megatron's unfused attention, as vTrain's runs used
    return out


def from_hf(data: dict) -> dict:
    """Canonical model fields from a Hugging Face config.json."""
    out = {}
    for canon, keys in HF_KEYS.items():
        for key in keys:
            if data.get(key) is not None:
                out[canon] = data[key]
                break
    model_type = str(data.get("model_type", "")).lower()
    gated = model_type in HF_LLAMA_TYPES or str(data.get("hidden_act", "")).lower() in ("silu", "swiglu")
    out["arch"] = "llama" if gated else "gpt"
    head_dim, hidden, heads = data.get("head_dim"), out.get("hidden_size"), out.get("num_attention_heads")
    if head_dim and hidden and heads and int(head_dim) * int(heads) != int(hidden):
        raise ConfigError("head_dim", f"{head_dim} differs from hidden_size/num_attention_heads = {hidden}/{heads}; "
                          "vtrain models head_dim = hidden_size/heads only")
    if "seq_len" in out:
        key = next(k for k in HF_KEYS["seq_len"] if data.get(k) is not None)
        try:
            seq = float(out["seq_len"])
            if not seq == int(seq):  # NaN, inf and fractions are refused below by build_config
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(key, f"'{out['seq_len']}' in the Hugging Face config is not an integer; fix it or "
                                   "give --seq-len") from None
        out["seq_len"] = min(int(seq), HF_MAX_SEQ_LEN)
    out.update(_hf_moe(data))
    return out


def _hf_moe(data: dict) -> dict:
    """MoE fields of a Mixtral / Qwen-MoE / DeepSeek config.json; refuses what vtrain cannot express."""
    experts = next((data[k] for k in ("num_local_experts", "n_routed_experts", "num_experts") if data.get(k)), 0)
    if not experts:
        return {}
    out = dict(num_experts=experts, experts_per_token=data.get("num_experts_per_tok") or 0)
    if data.get("moe_intermediate_size"):
        out["moe_ffn_hidden_size"] = data["moe_intermediate_size"]
    moe_ffn = out.get("moe_ffn_hidden_size") or data.get("intermediate_size") or 0
    if data.get("n_shared_experts"):
        out["shared_experts"] = data["n_shared_experts"]
    shared_ffn = data.get("shared_expert_intermediate_size") or 0
    if shared_ffn:
        if not moe_ffn or shared_ffn % moe_ffn:
            raise ConfigError("shared_expert_intermediate_size", f"{shared_ffn} is not a multiple of the expert size "
                              f"{moe_ffn}; give shared_experts and moe_ffn_hidden_size in a vtrain config instead")
        out["shared_experts"] = shared_ffn // moe_ffn
    if data.get("first_k_dense_replace"):
        out["first_dense_layers"] = data["first_k_dense_replace"]
    for key in ("moe_layer_freq", "decoder_sparse_step"):
        if data.get(key) not in (None, 1):
            raise ConfigError(key, f"{data[key]}: only every layer being MoE (1) is modelled; give a vtrain config "
                              "with first_dense_layers instead")
    if data.get("mlp_only_layers"):
        raise ConfigError("mlp_only_layers", "dense layers between MoE layers are not modelled; give a vtrain config "
                          "with first_dense_layers instead")
    return out


def from_canonical(data: dict, source: str) -> dict:
    """Flatten [model]/[parallel]/[cluster] tables (flat keys also OK); 'model = "preset"' allowed."""
    out: dict = {}
    for key, value in data.items():
        if key in ("model", "parallel", "cluster") and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                if sub_key == "preset" and key == "model":
                    out.update(preset_fields(sub_value))
                elif sub_key not in ALL_FIELDS:
                    raise ConfigError(f"{key}.{sub_key}", f"unknown field in {source}{suggest_field(sub_key)}")
                else:
                    out[sub_key] = sub_value
        elif key == "model" and isinstance(value, str):
            out.update(preset_fields(value))
        elif key in ALL_FIELDS:
            out[key] = value
        else:
            raise ConfigError(key, f"unknown field in {source}{suggest_field(key)}")
    return out


def preset_fields(name: str) -> dict:
    fields = lookup_model(name)
    if fields is None:
        raise ConfigError("model", f"'{name}' is not a known model preset; use one of {', '.join(model_names())}")
    return fields


def load_config_file(path: str | Path) -> dict:
    """Flat canonical fields from any supported config file (format detected from content)."""
    path = Path(path)
    data = _read_mapping(path)
    if not isinstance(data, dict):
        raise ConfigError("config", f"'{path}' must hold an object/table at top level")
    if is_vtrain_config(data):
        return from_vtrain(data)
    if is_hf_config(data) and not any(k in data for k in ("model", "parallel", "cluster")):
        return from_hf(data)
    return from_canonical(data, str(path))


def layer_fields(path: str | Path | None = None, model: str | None = None, overrides: dict | None = None,
                 ignore_from_file: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """Raw canonical fields layered (lowest to highest priority) a file, a model preset, overrides
    (None values skipped), not yet validated. The file's fields named in `ignore_from_file` are
    left out of the layers and returned apart: (fields, ignored file fields)."""
    values = load_config_file(path) if path else {}
    ignored = {k: values.pop(k) for k in ignore_from_file if k in values}
    if model:
        values.update(preset_fields(model))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return values, ignored


def resolve_config(path: str | Path | None = None, model: str | None = None,
                   overrides: dict | None = None) -> TrainConfig:
    """Validated config from (lowest to highest priority) a file, a model preset flag, and overrides."""
    return build_config(layer_fields(path, model, overrides)[0])
