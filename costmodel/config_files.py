"""Front doors for configurations: canonical TOML/JSON, vTrain JSON, Hugging Face config.json, presets.

Every loader returns a flat dict of canonical field names (see `spec.ALL_FIELDS`) with raw
values; `resolve_config` layers preset < file < overrides and validates with `build_config`.
Every key of a file is honoured, refused in one line naming it, or (Hugging Face keys that change
the cost but are not modelled) reported: `read_config_file` returns the fields together with what
reading them assumed, and `resolve_config_assumed` adds the defaults that filled the rest.
"""
from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vtrain.costmodel.errors import user_file
from vtrain.costmodel.hardware import gpu_names, lookup_gpu
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
# vTrain keys that are not a canonical field: gpu_name picks the GPU (vTrain ships A100 and V100
# traces), use_checkpoint switches activation recomputation, trace_path is where vTrain keeps its
# profiled kernel traces (vtrain has its own kernel model, so it is read but reported as unused).
VTRAIN_OTHER_KEYS = ("gpu_name", "use_checkpoint", "trace_path")
VTRAIN_ALL_KEYS = tuple(VTRAIN_KEYS) + VTRAIN_OTHER_KEYS
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
                  "yi", "deepseek", "olmo", "phi3",
                  # MoE decoders whose expert keys _hf_moe reads
                  "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmoe", "phimoe")
# Decoder-only transformers with LayerNorm/GeLU MLPs, costed as arch gpt.
HF_GPT_TYPES = ("gpt2", "gpt_neox", "gptj", "gpt_neo", "opt", "bloom", "falcon", "gpt_bigcode", "codegen",
                "starcoder2", "phi")
HF_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
HF_MAX_SEQ_LEN = 8192  # long-context checkpoints are trained mostly at <= 8k; override with --seq-len


@dataclass
class ConfigSource:
    """A config file read: its canonical `fields` and what reading it `assumed` (a list of
    {"field", "value", "reason"} dicts: a default the format implies, or a key not modelled)."""

    fields: dict
    assumed: list = field(default_factory=list)


def _assumed(name: str, value, reason: str) -> dict:
    return dict(field=name, value=value, reason=reason)


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
    """Canonical fields from a vTrain config JSON (see `read_vtrain`)."""
    return read_vtrain(data).fields


def read_vtrain(data: dict) -> ConfigSource:
    """A vTrain config JSON with vTrain's meaning of every key; an unknown key is refused.

    gpu_name picks the GPU preset (A100 -> a100-80gb, V100 -> v100), use_checkpoint the
    recomputation (true -> full, false -> none). Without them vTrain's validation setup is assumed
    (A100, activation checkpointing); vTrain models fp16 mixed precision and Megatron's unfused
    attention."""
    for key in data:
        if key not in VTRAIN_ALL_KEYS:
            close = difflib.get_close_matches(key, VTRAIN_ALL_KEYS, n=1)
            hint = (f" (did you mean '{close[0]}'?)" if close else
                    f" ('{key}' is a vtrain field: give it as a flag, --{key.replace('_', '-')})"
                    if key in ALL_FIELDS else "")
            raise ConfigError(key, f"not a vTrain config key{hint}; vTrain keys: {', '.join(VTRAIN_ALL_KEYS)}")
    out: dict = {}
    for key, canon in VTRAIN_KEYS.items():
        if key not in data:
            continue
        if canon in out and out[canon] != data[key]:
            other = next(k for k, c in VTRAIN_KEYS.items() if c == canon and k in data)
            raise ConfigError(key, f"{data[key]} differs from {other} = {data[other]}; keep one of them")
        out[canon] = data[key]
    assumed = []
    if "gpu_name" in data:
        gpu = lookup_gpu(str(data["gpu_name"])) if isinstance(data["gpu_name"], str) else None
        if gpu is None:
            raise ConfigError("gpu_name", f"'{data['gpu_name']}' is not a GPU vtrain has a preset for; use A100 or "
                              f"V100 (vTrain's traces) or one of {', '.join(gpu_names())}")
        out["gpu"] = gpu.name
    else:
        out["gpu"] = "a100-80gb"
        assumed.append(_assumed("gpu", "a100-80gb", "no gpu_name: vTrain's A100"))
    if "use_checkpoint" in data:
        flag = data["use_checkpoint"]
        if not isinstance(flag, bool):
            raise ConfigError("use_checkpoint", f"'{flag}' is not true or false (JSON booleans)")
        out["recompute"] = "full" if flag else "none"
    else:
        out["recompute"] = "full"
        assumed.append(_assumed("recompute", "full", "no use_checkpoint: vTrain's validation runs checkpoint "
                                                      "activations"))
    out["precision"] = "fp16"
    assumed.append(_assumed("precision", "fp16", "vTrain models fp16 mixed precision"))
    out["attention"] = "unfused"
    assumed.append(_assumed("attention", "unfused", "Megatron's unfused attention, as vTrain's runs; --attention"))
    if "trace_path" in data:
        assumed.append(_assumed("trace_path", data["trace_path"], "not read: vtrain costs kernels with its own "
                                "model (--allreduce-table DIR uses vTrain's all-reduce LUTs)"))
    return ConfigSource(out, assumed)


def from_hf(data: dict) -> dict:
    """Canonical model fields from a Hugging Face config.json (see `read_hf`)."""
    return read_hf(data).fields


def _check_hf_architecture(data: dict) -> str:
    """The model_type (lower case), or a one-line refusal for what vtrain cannot cost."""
    model_type = str(data.get("model_type", "")).lower()
    costable = HF_LLAMA_TYPES + HF_GPT_TYPES
    if data.get("is_encoder_decoder"):
        raise ConfigError("is_encoder_decoder", "encoder-decoder models are not modelled; vtrain costs decoder-only "
                          "transformers")
    if model_type and model_type not in costable:
        raise ConfigError("model_type", f"'{model_type}' is not an architecture vtrain can cost (decoder-only "
                          f"transformers: {', '.join(costable)}); give its shape in a vtrain config instead")
    archs = data.get("architectures") or []
    if not model_type and archs and not any(str(a).endswith(HF_CAUSAL_SUFFIXES) for a in archs):
        raise ConfigError("architectures", f"{archs} is not a causal language model (*ForCausalLM); vtrain costs "
                          "decoder-only transformers")
    return model_type


def _as_integer(value) -> int | None:
    """`value` as an int when it is an integer-valued number (or numeric text), else None."""
    try:
        number = float(value)
        return int(number) if number == int(number) else None
    except (TypeError, ValueError, OverflowError):  # text, None, NaN, inf
        return None


def _hf_integer(key: str, value, fix: str) -> int:
    """An integer field of a Hugging Face config, or a one-line ConfigError naming `key` and the fix."""
    number = _as_integer(value)
    if number is None:
        raise ConfigError(key, f"'{value}' in the Hugging Face config is not an integer; {fix}")
    return number


def read_hf(data: dict) -> ConfigSource:
    """Canonical model fields from a Hugging Face config.json, and the keys that change the cost
    but are not modelled (reported as assumed)."""
    model_type = _check_hf_architecture(data)
    out = {}
    for canon, keys in HF_KEYS.items():
        for key in keys:
            if data.get(key) is not None:
                out[canon] = data[key]
                break
    gated = model_type in HF_LLAMA_TYPES or str(data.get("hidden_act", "")).lower() in ("silu", "swiglu")
    out["arch"] = "llama" if gated else "gpt"
    assumed = [_assumed("arch", out["arch"], f"from model_type '{model_type}'" if model_type else
                        f"from hidden_act '{data.get('hidden_act', 'gelu')}'")]
    head_dim, hidden, heads = data.get("head_dim"), out.get("hidden_size"), out.get("num_attention_heads")
    if head_dim:
        head_dim = _hf_integer("head_dim", head_dim, "fix it or remove the key")
    hidden, heads = _as_integer(hidden), _as_integer(heads)  # non-integers: build_config names them
    if head_dim and hidden and heads and head_dim * heads != hidden:
        raise ConfigError("head_dim", f"{head_dim} differs from hidden_size/num_attention_heads = {hidden}/{heads}; "
                          "vtrain models head_dim = hidden_size/heads only")
    if "seq_len" in out:
        key = next(k for k in HF_KEYS["seq_len"] if data.get(k) is not None)
        seq = _hf_integer(key, out["seq_len"], "fix it or give --seq-len")
        out["seq_len"] = min(seq, HF_MAX_SEQ_LEN)
        capped = ", capped" if seq > HF_MAX_SEQ_LEN else ""
        assumed.append(_assumed("seq_len", out["seq_len"], f"{key} = {seq}{capped}; --seq-len"))
    out.update(_hf_moe(data, out.get("num_layers")))
    assumed += _hf_unmodelled(data, out)
    return ConfigSource(out, assumed)


def _hf_unmodelled(data: dict, out: dict) -> list:
    """Hugging Face keys that change the cost but that vtrain does not model, as assumed entries."""
    notes = []
    window = data.get("sliding_window")
    if window:
        window = _hf_integer("sliding_window", window, "fix it or remove the key")
    if window and data.get("use_sliding_window", True) is not False and window < out.get("seq_len", 0):
        notes.append(_assumed("sliding_window", window, "not modelled: full causal attention over seq_len"))
    tied = data.get("tie_word_embeddings")
    if tied is not None and bool(tied) != (out["arch"] == "gpt"):
        counted = "tied (one vocab x hidden matrix)" if out["arch"] == "gpt" else "untied (two)"
        notes.append(_assumed("tie_word_embeddings", tied, f"not modelled: embeddings counted {counted}"))
    if data.get("q_lora_rank") or data.get("kv_lora_rank"):
        notes.append(_assumed("kv_lora_rank", data.get("kv_lora_rank"), "multi-head latent attention approximated "
                              "by multi-head attention (docs/moe.md)"))
    for key in ("attention_bias", "mlp_bias"):
        if data.get(key) and out["arch"] == "llama":
            notes.append(_assumed(key, True, "not modelled: llama layers counted without biases"))
    return notes


def _hf_moe(data: dict, layers=None) -> dict:
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
    out.update(_hf_moe_layers(data, layers))
    return out


def _short(indices: list) -> str:
    """'[0, 2, 4, 6, 8, 10, ...]': at most six layer indices."""
    return "[" + ", ".join(map(str, indices[:6])) + (", ...]" if len(indices) > 6 else "]")


def _hf_moe_layers(data: dict, layers) -> dict:
    """first_dense_layers / moe_layer_freq reproducing the MoE layers of a Hugging Face config.

    Layer i is MoE there when i >= first_k_dense_replace and i % moe_layer_freq == 0 (DeepSeek),
    i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (Qwen-MoE). vtrain's MoE layers
    are f + k - 1, f + 2k - 1, ... (f = first_dense_layers, k = moe_layer_freq): a pattern that it
    cannot reproduce exactly is refused in one line naming the key."""
    fix = "fix it or remove the key"
    def given(key, default):
        return _hf_integer(key, default if data.get(key) is None else data[key], fix)

    first, freq, step = given("first_k_dense_replace", 0), given("moe_layer_freq", 1), given("decoder_sparse_step", 1)
    only = data.get("mlp_only_layers") or []
    if not isinstance(only, (list, tuple)):
        raise ConfigError("mlp_only_layers", f"'{only}' in the Hugging Face config is not a list of layer indices")
    only = {_hf_integer("mlp_only_layers", i, "give a list of layer indices") for i in only}
    for key, value, low in (("first_k_dense_replace", first, 0), ("moe_layer_freq", freq, 1),
                            ("decoder_sparse_step", step, 1)):
        if value < low:
            raise ConfigError(key, f"{value} in the Hugging Face config must be >= {low}")
    if freq == 1 and step == 1 and not only:
        return dict(first_dense_layers=first) if first else {}
    # the key responsible for a pattern vtrain cannot express (the most specific one given)
    key = "mlp_only_layers" if only else "moe_layer_freq" if freq != 1 else "decoder_sparse_step"
    n = _as_integer(layers) or 0
    if n <= 0:  # no layer count (build_config names it): a stretch long enough to show the pattern
        n = max([first] + [i + 1 for i in only]) + 4 * freq * step
    moe = [i for i in range(n) if i >= first and i % freq == 0 and i not in only and (i + 1) % step == 0]
    if not moe:
        value = _short(sorted(only)) if key == "mlp_only_layers" else data[key]
        raise ConfigError(key, f"{value} leaves no MoE layer of num_hidden_layers={n} in the Hugging Face config")
    for k in range(1, moe[0] + 2):  # vtrain's first MoE layer is f + k - 1
        f = moe[0] - k + 1
        if [i for i in range(n) if i >= f and (i - f + 1) % k == 0] == moe:
            return {**(dict(first_dense_layers=f) if f else {}), **(dict(moe_layer_freq=k) if k > 1 else {})}
    raise ConfigError(key, f"MoE layers {_short(moe)} of {n} do not follow vtrain's placement (first_dense_layers dense, "
                      "then every moe_layer_freq-th layer); give a vtrain config with those two fields instead")


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


def read_config_file(path: str | Path) -> ConfigSource:
    """Canonical fields from any supported config file (format detected from content), with what
    reading it assumed."""
    path = Path(path)
    data = _read_mapping(path)
    if not isinstance(data, dict):
        raise ConfigError("config", f"'{path}' must hold an object/table at top level")
    if is_vtrain_config(data):
        return read_vtrain(data)
    if is_hf_config(data) and not any(k in data for k in ("model", "parallel", "cluster")):
        return read_hf(data)
    return ConfigSource(from_canonical(data, str(path)))


def load_config_file(path: str | Path) -> dict:
    """Flat canonical fields from any supported config file (format detected from content)."""
    return read_config_file(path).fields


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


def resolve_config_assumed(path: str | Path | None = None, model: str | None = None,
                           overrides: dict | None = None) -> tuple[TrainConfig, list]:
    """(config, assumed): `resolve_config`, plus every value that changes the answer and that nobody
    gave (the file format's implied values, unmodelled keys, and the defaults; see costmodel.assumed)."""
    from vtrain.costmodel.assumed import assumed_defaults

    values: dict = {}
    source = read_config_file(path) if path else ConfigSource({})
    values.update(source.fields)
    given = set(source.fields)
    later: dict = {}
    if model:
        later.update(preset_fields(model))
    later.update({k: v for k, v in (overrides or {}).items() if v is not None})
    values.update(later)
    cfg = build_config(values)
    implied = [a for a in source.assumed if a["field"] not in later]
    implied_fields = {a["field"] for a in implied}
    alias = _gpu_alias(values.get("gpu"), cfg.cluster.gpu)
    return cfg, implied + alias + [a for a in assumed_defaults(given | set(later), cfg) if a["field"] not in implied_fields]


def _gpu_alias(given, preset: str) -> list[dict]:
    """An assumed entry when the GPU was named by its bare family ('a100' -> a100-80gb, 'h100' ->
    h100-sxm: a choice between parts), with the presets of the same family it could also have meant;
    [] when it was named exactly or by an unambiguous alias ('a100-sxm4-80gb'), or not at all."""
    from vtrain.costmodel.hardware import GPUS

    if not isinstance(given, str):
        return []
    name = given.strip().lower()
    if name == preset or "-" in name or "-" not in preset:
        return []
    family = preset.split("-")[0]
    others = [other for other in GPUS if other != preset and other.split("-")[0] == family]
    also = f"; for {' or '.join(others)} give it by name" if others else ""
    return [dict(field="gpu", value=preset, reason=f"'{given}' names the {preset} preset{also}")]
