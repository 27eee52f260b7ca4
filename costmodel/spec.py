"""The canonical training-job specification: model, parallelization and cluster.

Field names here are the canonical names used everywhere: TOML/JSON config files,
CSV/parquet columns, and the Python API. Units: bandwidths in GB/s (intra-node, per GPU
per direction) and Gb/s (inter-node, per GPU); sizes in tokens; everything else counts.
"""
from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from vtrain.costmodel import rules
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.rules import (  # noqa: F401 (re-exported: the choices belong to the spec)
    ARCHS, ATTENTIONS, GPU_LIST, PRECISIONS, RECOMPUTE_MODES, SCHEDULES, UNKNOWN, UNSET, divisors, fmt_choices,
)



class ConfigError(UserError):
    """A bad configuration value. `str(err)` is one line naming the field and the fix."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        super().__init__(f"{field_name}: {message}")


@dataclass(frozen=True)
class ModelSpec:
    """Transformer shape. `ffn_hidden_size`/`num_kv_heads` of 0 mean 'use the default'."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_len: int = 2048
    num_kv_heads: int = 0
    ffn_hidden_size: int = 0
    vocab_size: int = 51200
    arch: str = "gpt"
    attention: str = "flash"
    # Mixture of experts (0 experts = dense). moe_ffn_hidden_size 0 = ffn_hidden_size.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_ffn_hidden_size: int = 0
    shared_experts: int = 0
    first_dense_layers: int = 0
    # after the first_dense_layers, every moe_layer_freq-th layer is MoE (the k-th, 2k-th, ...;
    # Qwen's decoder_sparse_step); capacity_factor 0 = dropless; moe_imbalance: routed tokens of the
    # most loaded expert-parallel rank / the balanced share (1 = balanced; docs/moe.md)
    moe_layer_freq: int = 1
    capacity_factor: float = 0.0
    moe_imbalance: float = 1.0

    def __post_init__(self):
        if self.num_kv_heads == 0:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.ffn_hidden_size == 0:
            object.__setattr__(self, "ffn_hidden_size", default_ffn(self.arch, self.hidden_size))
        if self.num_experts and self.moe_ffn_hidden_size == 0:
            object.__setattr__(self, "moe_ffn_hidden_size", self.ffn_hidden_size)

    @property
    def num_moe_layers(self) -> int:
        if not self.num_experts:
            return 0
        return max(self.num_layers - self.first_dense_layers, 0) // max(self.moe_layer_freq, 1)

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer i (0-based) is an MoE layer: i >= first_dense_layers and (i - first_dense_layers + 1)
        a multiple of moe_layer_freq."""
        f, k = self.first_dense_layers, max(self.moe_layer_freq, 1)
        return bool(self.num_experts) and i >= f and (i - f + 1) % k == 0

    def _expert_parameters(self) -> int:
        h, f = self.hidden_size, self.moe_ffn_hidden_size
        return 3 * h * f if self.arch == "llama" else 2 * h * f + f + h

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses: all but the routed experts it is not sent to (= total for dense)."""
        unused = self.num_moe_layers * (self.num_experts - self.experts_per_token) * self._expert_parameters()
        return self.num_parameters - unused

    @property
    def num_parameters(self) -> int:
        """Total parameter count (embedding counted once; tied input/output embedding for gpt)."""
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.num_kv_heads
        head_dim = h // self.num_attention_heads
        attn = h * h + 2 * h * kv * head_dim + h * h  # Q, K, V, output projection
        if self.arch == "llama":
            mlp = 3 * h * f
            norms = 2 * h
            biases = 0
            emb = 2 * self.vocab_size * h  # untied input and output embeddings
            final_norm = h
        else:
            mlp = 2 * h * f
            norms = 4 * h
            biases = 3 * h + h + f + h
            emb = self.vocab_size * h + self.seq_len * h  # tied embedding + learned positions
            final_norm = 2 * h
        dense_layer = attn + mlp + norms + biases
        total = self.num_layers * dense_layer + emb + final_norm
        if self.num_experts:
            # MoE layer: the dense MLP (and its fc2 bias) replaced by router + routed + shared experts
            gpt_mlp_biases = 0 if self.arch == "llama" else f + h
            moe_mlp = (h * self.num_experts + (self.num_experts + self.shared_experts) * self._expert_parameters())
            total += self.num_moe_layers * (moe_mlp - mlp - gpt_mlp_biases)
        return int(total)


def default_ffn(arch: str, hidden: int) -> int:
    """4*h for GPT; for Llama, 8h/3 rounded up to a multiple of 256 (as in Llama's code)."""
    if arch == "llama":
        return int(-(-(8 * hidden // 3) // 256) * 256)
    return 4 * hidden


@dataclass(frozen=True)
class ParallelSpec:
    """How the job is split. `dp`/`num_gpus`/`global_batch` of 0 are derived from the others."""

    tp: int = 1
    pp: int = 1
    dp: int = 0
    num_gpus: int = 0
    micro_batch: int = 1
    global_batch: int = 0
    sequence_parallel: bool = False
    recompute: str = "none"
    zero_stage: int = 0
    schedule: str = "1f1b"
    vpp: int = 1
    overlap_grad_reduce: bool = False
    # Async TP (torchtitan's micro-pipelined TP, Megatron-Core's tp-comm-overlap): the SP all-gathers /
    # reduce-scatters run chunk by chunk under the GEMMs they feed; needs sequence_parallel
    async_tp: bool = False
    # PyTorch eager mode (no torch.compile, no fused norm / activation kernels): each norm, RoPE and
    # MLP activation runs as its composite kernels, each a pass over HBM (ops.EAGER_PASSES)
    eager: bool = False
    ep: int = 1
    # expert tensor parallel: each expert's FFN split over etp ranks (0 = tp, Megatron-Core's default);
    # etp < tp lets the expert-parallel group take tp ranks too (Megatron-Core's parallel folding)
    etp: int = 0
    # Context parallelism: each sequence split over cp ranks (ring attention); dp = num_gpus/(tp*pp*cp)
    cp: int = 1
    # Uneven pipeline stages (Megatron's --decoder-first/last-pipeline-num-layers): layers of the
    # first / last stage (model chunk with vpp > 1); 0 = spread evenly (pipeline.chunk_layers)
    first_stage_layers: int = 0
    last_stage_layers: int = 0

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration."""
        return self.global_batch // (self.dp * self.micro_batch)


@dataclass(frozen=True)
class ClusterSpec:
    """Hardware. Bandwidths, gpus_per_node and the GPU figures of 0 take the GPU preset's values.

    peak_tflops: dense 16-bit (bf16, else fp16) tensor-core peak in TFLOP/s (the fp8 peak scales
    with it); hbm_bandwidth_GBps: HBM GB/s; gpu_memory_GiB: device memory in GiB. Together they
    describe a variant of a preset (e.g. a power-capped H100 with other HBM) without code changes.
    attention_efficiency: the fraction of the 16-bit peak the fused FlashAttention kernel reaches
    (the preset's: 0.45, 0.25 on Hopper for FlashAttention-2; see costmodel/hardware.py)."""

    gpu: str = "a100-80gb"
    gpus_per_node: int = 0
    intra_node_bw_GBps: float = 0.0
    inter_node_bw_Gbps: float = 0.0
    precision: str = ""
    peak_tflops: float = 0.0
    hbm_bandwidth_GBps: float = 0.0
    gpu_memory_GiB: float = 0.0
    attention_efficiency: float = 0.0


@dataclass(frozen=True)
class TrainConfig:
    model: ModelSpec
    parallel: ParallelSpec
    cluster: ClusterSpec = field(default_factory=ClusterSpec)

    def flat(self) -> dict:
        """All canonical fields in one flat dict (the CSV/parquet column layout)."""
        return {**asdict(self.model), **asdict(self.parallel), **asdict(self.cluster)}

    @property
    def tokens_per_iteration(self) -> int:
        return self.parallel.global_batch * self.model.seq_len


MODEL_FIELDS = tuple(f.name for f in fields(ModelSpec))
PARALLEL_FIELDS = tuple(f.name for f in fields(ParallelSpec))
CLUSTER_FIELDS = tuple(f.name for f in fields(ClusterSpec))
ALL_FIELDS = MODEL_FIELDS + PARALLEL_FIELDS + CLUSTER_FIELDS
# Each canonical field's value type: "int", "float", "bool" or "str".
FIELD_KINDS = {f.name: f.type for cls in (ModelSpec, ParallelSpec, ClusterSpec) for f in fields(cls)}
_INT_FIELDS = {name for name, kind in FIELD_KINDS.items() if kind == "int"}
_FLOAT_FIELDS = {name for name, kind in FIELD_KINDS.items() if kind == "float"}
_BOOL_FIELDS = {name for name, kind in FIELD_KINDS.items() if kind == "bool"}
REQUIRED_MODEL_FIELDS = ("num_layers", "hidden_size", "num_attention_heads")
# Choice fields as coerced text (their codes go to rules.check) and every other field's default.
CHOICE_DEFAULTS = dict(arch="gpt", attention="flash", gpu=ClusterSpec.gpu, precision="", schedule="1f1b", recompute="none")
FIELD_DEFAULTS = {f.name: (1 if f.name in REQUIRED_MODEL_FIELDS else f.default)
                  for cls in (ModelSpec, ParallelSpec, ClusterSpec) for f in fields(cls) if f.name not in CHOICE_DEFAULTS}


def suggest_field(name: str) -> str:
    """' (did you mean X?)' for a misspelt field name, else ''."""
    close = difflib.get_close_matches(name, ALL_FIELDS, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


MAX_INT = 2 ** 40  # integer fields must stay below this (far above any real config; keeps int64 and divisors exact)


def _coerce(name: str, value):
    """Convert a raw value (str from CSV/flags, number from JSON) to the field's type."""
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on", "1.0"):
            return True
        if text in ("0", "false", "no", "off", "0.0", ""):
            return False
        raise ConfigError(name, f"'{value}' is not a boolean; use true or false")
    if name in (_INT_FIELDS | _FLOAT_FIELDS) and isinstance(value, (bool, np.bool_, bytes, bytearray)):
        # float(True) is 1.0 and float(b"8") 8.0: a flag or raw bytes where a number belongs is a mistake
        kind = "an integer; give a whole number" if name in _INT_FIELDS else "a number"
        what = "a boolean" if isinstance(value, (bool, np.bool_)) else "bytes"
        raise ConfigError(name, f"{value} is {what}, not {kind}")
    if name in _INT_FIELDS:
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, f"'{value}' is not an integer; give a whole number") from None
        if as_float != as_float or as_float in (float("inf"), float("-inf")):
            raise ConfigError(name, f"'{value}' is not a finite number; give a whole number")
        if as_float != int(as_float):
            raise ConfigError(name, f"{value} is not a whole number; give an integer")
        if abs(as_float) >= MAX_INT:
            raise ConfigError(name, f"{value} is too large; give a whole number below 2**40 (1.1e12)")
        return int(as_float)
    if name in _FLOAT_FIELDS:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, f"'{value}' is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ConfigError(name, f"'{value}' is not a finite number")
        return number
    return str(value).strip().lower()


def _row(v: dict, name: str, default):
    """One-row array of a coerced field (or its default)."""
    return np.array([v.get(name, default)])


def _code(value, choices) -> int:
    return choices.index(value) if value in choices else UNKNOWN


def build_config(values: dict) -> TrainConfig:
    """Build and validate a TrainConfig from a flat dict of canonical fields.

    Fills defaults (dp from num_gpus, global batch, GPU link figures), then checks every
    constraint (rules.check); raises ConfigError naming the first bad field.
    """
    values = {k: v for k, v in values.items() if v is not None}
    for key in values:
        if key not in ALL_FIELDS:
            raise ConfigError(key, f"unknown field{suggest_field(key)}; known fields: {', '.join(ALL_FIELDS)}")
    v = {k: _coerce(k, val) for k, val in values.items()}
    for name in REQUIRED_MODEL_FIELDS:
        if name not in v:
            raise ConfigError(name, "missing; give it in the config's [model] table, as a flag, or pick --model PRESET")
    text = {name: np.array([v.get(name, default)], dtype=object) for name, default in CHOICE_DEFAULTS.items()}
    f = {name: _row(v, name, default) for name, default in FIELD_DEFAULTS.items()}
    for name, choices in (("arch", ARCHS), ("attention", ATTENTIONS), ("schedule", SCHEDULES),
                          ("recompute", RECOMPUTE_MODES)):
        f[name] = np.array([_code(text[name][0], choices)])
    gpu = lookup_gpu(text["gpu"][0])
    f["gpu"] = np.array([UNKNOWN if gpu is None else GPU_LIST.index(gpu)])
    f["precision"] = np.array([UNSET if not text["precision"][0] else _code(text["precision"][0], PRECISIONS)])
    r, errors = rules.check(f, text)
    if not errors.ok[0]:
        raise ConfigError(errors.field[0], errors.msg[0])
    return config_from_fields(r, 0)


def config_from_fields(r: dict, i: int) -> TrainConfig:
    """The TrainConfig of row `i` of resolved fields (rules.check's output; the row is valid)."""
    def py(name):
        kind = FIELD_KINDS[name]
        x = r[name][i]
        return int(x) if kind == "int" else float(x) if kind == "float" else bool(x) if kind == "bool" else x

    model = ModelSpec(**{k: py(k) for k in MODEL_FIELDS if k not in ("arch", "attention")}, arch=ARCHS[int(r["arch"][i])],
                      attention=ATTENTIONS[int(r["attention"][i])])
    enums = dict(schedule=SCHEDULES[int(r["schedule"][i])], recompute=RECOMPUTE_MODES[int(r["recompute"][i])])
    parallel = ParallelSpec(**{k: py(k) for k in PARALLEL_FIELDS if k not in enums}, **enums)
    cluster = ClusterSpec(gpu=GPU_LIST[int(r["gpu"][i])].name, gpus_per_node=py("gpus_per_node"),
                          intra_node_bw_GBps=py("intra_node_bw_GBps"), inter_node_bw_Gbps=py("inter_node_bw_Gbps"),
                          precision=PRECISIONS[int(r["precision"][i])], peak_tflops=py("peak_tflops"),
                          hbm_bandwidth_GBps=py("hbm_bandwidth_GBps"), gpu_memory_GiB=py("gpu_memory_GiB"),
                          attention_efficiency=py("attention_efficiency"))
    return TrainConfig(model=model, parallel=parallel, cluster=cluster)


def with_changes(config: TrainConfig, **changes) -> TrainConfig:
    """A re-validated copy of `config` with some canonical fields changed. Changing tp/pp keeps the
    GPU count and re-derives dp; changing dp (without num_gpus) re-derives the GPU count."""
    flat = config.flat()
    if "gpu" in changes:  # figures taken from the old preset follow the new one (explicit overrides stay)
        old = lookup_gpu(flat["gpu"])
        preset = dict(rules.preset_figures(old), gpus_per_node=old.gpus_per_node,
                      intra_node_bw_GBps=float(old.nvlink_GBps), inter_node_bw_Gbps=float(old.nic_Gbps),
                      precision=PRECISIONS[int(rules.gpu_default_precision(np.array([GPU_LIST.index(old)]))[0])])
        for name, value in preset.items():
            if name not in changes and flat.get(name) == value:
                flat.pop(name)
    if "dp" in changes and "num_gpus" not in changes:
        flat.pop("num_gpus")
    elif any(k in changes for k in ("tp", "pp", "cp", "num_gpus")) and "dp" not in changes:
        flat.pop("dp")
    flat.update(changes)
    return build_config(flat)


def gpu_overrides(cluster: ClusterSpec) -> dict:
    """The cluster fields whose values differ from the GPU preset's (the ones a user set)."""
    spec = lookup_gpu(cluster.gpu)
    preset = dict(rules.preset_figures(spec), gpus_per_node=spec.gpus_per_node,
                  intra_node_bw_GBps=float(spec.nvlink_GBps), inter_node_bw_Gbps=float(spec.nic_Gbps))
    return {name: getattr(cluster, name) for name, value in preset.items() if getattr(cluster, name) != value}


def gpu_line(cluster: ClusterSpec) -> str:
    """One line with the GPU figures a prediction used; '*' marks a value that overrides the preset."""
    changed = gpu_overrides(cluster)

    def v(name, text):
        return text + ("*" if name in changed else "")

    line = (f"GPU {cluster.gpu}: {v('peak_tflops', f'{cluster.peak_tflops:g} TFLOP/s')} dense 16-bit, "
            f"HBM {v('hbm_bandwidth_GBps', f'{cluster.hbm_bandwidth_GBps:g} GB/s')}, "
            f"{v('gpu_memory_GiB', f'{cluster.gpu_memory_GiB:g} GiB')}, "
            f"FlashAttention at {v('attention_efficiency', f'{cluster.attention_efficiency:g}')} of peak, "
            f"NVLink {v('intra_node_bw_GBps', f'{cluster.intra_node_bw_GBps:g} GB/s')}, "
            f"NIC {v('inter_node_bw_Gbps', f'{cluster.inter_node_bw_Gbps:g} Gb/s')}, "
            f"{v('gpus_per_node', str(cluster.gpus_per_node))} per node")
    return line + (" (* = set in the config, not the preset's)" if changed else "")


__all__ = ["ConfigError", "ModelSpec", "ParallelSpec", "ClusterSpec", "TrainConfig", "build_config",
           "with_changes", "gpu_line", "gpu_overrides", "ALL_FIELDS", "FIELD_KINDS"]
