"""The canonical training-job specification: model, parallelization and cluster.

Field names here are the canonical names used everywhere: TOML/JSON config files,
CSV/parquet columns, and the Python API. Units: bandwidths in GB/s (intra-node, per GPU
per direction) and Gb/s (inter-node, per GPU); sizes in tokens; everything else counts.
"""
from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields

from vtrain.costmodel.errors import UserError
from vtrain.costmodel.hardware import gpu_names, lookup_gpu

ARCHS = ("gpt", "llama")
ATTENTIONS = ("flash", "unfused")  # fused FlashAttention kernel | Megatron's unfused QK^T-softmax-PV
# selective: Korthikanti et al. / Megatron (attention core recomputed); full: whole layers;
# selective-op: torchtitan's op-level selective AC (every second matmul output and the attention
# output kept, the rest recomputed). The codes are the indices (full = 2 for compatibility).
RECOMPUTE_MODES = ("none", "selective", "full", "selective-op")
SCHEDULES = ("1f1b", "interleaved", "gpipe")
PRECISIONS = ("fp16", "bf16", "fp8")


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

    def __post_init__(self):
        if self.num_kv_heads == 0:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.ffn_hidden_size == 0:
            object.__setattr__(self, "ffn_hidden_size", default_ffn(self.arch, self.hidden_size))

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
        return int(self.num_layers * (attn + mlp + norms + biases) + emb + final_norm)


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

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration."""
        return self.global_batch // (self.dp * self.micro_batch)


@dataclass(frozen=True)
class ClusterSpec:
    """Hardware. Bandwidths of 0 / gpus_per_node of 0 take the GPU preset's values."""

    gpu: str = "a100-80gb"
    gpus_per_node: int = 0
    intra_node_bw_GBps: float = 0.0
    inter_node_bw_Gbps: float = 0.0
    precision: str = ""


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


def suggest_field(name: str) -> str:
    """' (did you mean X?)' for a misspelt field name, else ''."""
    close = difflib.get_close_matches(name, ALL_FIELDS, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


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
    if name in _INT_FIELDS:
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, f"'{value}' is not an integer; give a whole number") from None
        if as_float != as_float or as_float in (float("inf"), float("-inf")):
            raise ConfigError(name, f"'{value}' is not a finite number; give a whole number")
        if as_float != int(as_float):
            raise ConfigError(name, f"{value} is not a whole number; give an integer")
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


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _fmt_choices(values) -> str:
    values = list(values)
    return "{" + ", ".join(str(v) for v in values[:12]) + (", ..." if len(values) > 12 else "") + "}"


def build_config(values: dict) -> TrainConfig:
    """Build and validate a TrainConfig from a flat dict of canonical fields.

    Fills defaults (dp from num_gpus, global batch, GPU link figures), then checks every
    constraint; raises ConfigError naming the first bad field.
    """
    values = {k: v for k, v in values.items() if v is not None}
    for key in values:
        if key not in ALL_FIELDS:
            raise ConfigError(key, f"unknown field{suggest_field(key)}; known fields: {', '.join(ALL_FIELDS)}")
    v = {k: _coerce(k, val) for k, val in values.items()}
    for name in REQUIRED_MODEL_FIELDS:
        if name not in v:
            raise ConfigError(name, "missing; give it in the config's [model] table, as a flag, or pick --model PRESET")

    # --- model ---
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size"):
        if name in v and v[name] <= 0:
            raise ConfigError(name, f"{v[name]} must be a positive integer")
    for name in ("num_kv_heads", "ffn_hidden_size"):
        if name in v and v[name] < 0:
            raise ConfigError(name, f"{v[name]} must be a positive integer")
    arch = v.get("arch", "gpt")
    if arch not in ARCHS:
        raise ConfigError("arch", f"'{arch}' is unknown; use one of {', '.join(ARCHS)}")
    attention = v.get("attention", "flash")
    if attention not in ATTENTIONS:
        raise ConfigError("attention", f"'{attention}' is unknown; use one of {', '.join(ATTENTIONS)}")
    model = ModelSpec(**{k: v[k] for k in MODEL_FIELDS if k in v})
    heads = model.num_attention_heads
    if model.hidden_size % heads:
        raise ConfigError("num_attention_heads", f"hidden_size={model.hidden_size} is not divisible by "
                          f"num_attention_heads={heads}; use heads in {_fmt_choices(_divisors(model.hidden_size))}")
    if heads % model.num_kv_heads:
        raise ConfigError("num_kv_heads", f"{model.num_kv_heads} does not divide num_attention_heads={heads}; "
                          f"use one of {_fmt_choices(_divisors(heads))}")

    # --- cluster ---
    gpu_name = v.get("gpu", ClusterSpec.gpu)
    gpu = lookup_gpu(gpu_name)
    if gpu is None:
        raise ConfigError("gpu", f"'{gpu_name}' is not a known GPU; use one of {', '.join(gpu_names())} "
                          "(or set intra_node_bw_GBps etc. on a known preset)")
    precision = v.get("precision") or ("bf16" if "bf16" in gpu.peak_flops else "fp16")
    if precision not in PRECISIONS:
        raise ConfigError("precision", f"'{precision}' is unknown; use one of {', '.join(PRECISIONS)}")
    if precision not in gpu.peak_flops or precision not in PRECISIONS:
        raise ConfigError("precision", f"{gpu.name} has no {precision} tensor cores; use one of "
                          f"{', '.join(p for p in gpu.peak_flops if p in PRECISIONS)}")
    gpus_per_node = v.get("gpus_per_node") or gpu.gpus_per_node
    intra = v.get("intra_node_bw_GBps") or gpu.nvlink_GBps
    inter = v.get("inter_node_bw_Gbps") or gpu.nic_Gbps
    for name, val in (("gpus_per_node", gpus_per_node), ("intra_node_bw_GBps", intra), ("inter_node_bw_Gbps", inter)):
        if val <= 0:
            raise ConfigError(name, f"{val} must be positive")
    cluster = ClusterSpec(gpu=gpu.name, gpus_per_node=gpus_per_node, intra_node_bw_GBps=float(intra),
                          inter_node_bw_Gbps=float(inter), precision=precision)

    # --- parallel ---
    for name in ("tp", "pp", "micro_batch", "vpp"):
        if name in v and v[name] <= 0:
            raise ConfigError(name, f"{v[name]} must be a positive integer")
    for name in ("dp", "num_gpus", "global_batch"):
        if name in v and v[name] < 0:
            raise ConfigError(name, f"{v[name]} must be a positive integer")
    tp, pp = v.get("tp", 1), v.get("pp", 1)
    dp, num_gpus = v.get("dp", 0), v.get("num_gpus", 0)
    if dp == 0 and num_gpus == 0:
        dp = 1
    if dp == 0:
        if num_gpus % (tp * pp):
            raise ConfigError("num_gpus", f"{num_gpus} is not divisible by tp*pp={tp * pp}; use a multiple of "
                              f"{tp * pp} or change tp/pp")
        dp = num_gpus // (tp * pp)
    if num_gpus == 0:
        num_gpus = tp * pp * dp
    if tp * pp * dp != num_gpus:
        raise ConfigError("num_gpus", f"{num_gpus} != tp*pp*dp = {tp}*{pp}*{dp} = {tp * pp * dp}; "
                          f"set num_gpus={tp * pp * dp} or dp={num_gpus // (tp * pp) if num_gpus % (tp * pp) == 0 else '?'}")
    if heads % tp:
        raise ConfigError("tp", f"{tp} does not divide num_attention_heads={heads}; use tp in "
                          f"{_fmt_choices(_divisors(heads))}")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ConfigError("tp", f"{tp} neither divides nor is a multiple of num_kv_heads={model.num_kv_heads}")
    schedule = v.get("schedule", "1f1b")
    if schedule not in SCHEDULES:
        raise ConfigError("schedule", f"'{schedule}' is unknown; use one of {', '.join(SCHEDULES)}")
    vpp = v.get("vpp", 1)
    if schedule != "interleaved" and vpp != 1:
        raise ConfigError("vpp", f"{vpp} needs schedule='interleaved'; set schedule=interleaved or vpp=1")
    if schedule == "interleaved" and pp == 1:
        raise ConfigError("schedule", "interleaved needs pp > 1; use schedule=1f1b or raise pp")
    if model.num_layers % (pp * vpp):
        ok = [d for d in _divisors(model.num_layers) if d % vpp == 0] if vpp > 1 else _divisors(model.num_layers)
        raise ConfigError("pp", f"num_layers={model.num_layers} is not divisible by pp*vpp={pp}*{vpp}; "
                          f"use pp*vpp in {_fmt_choices(ok)}")
    micro_batch = v.get("micro_batch", 1)
    global_batch = v.get("global_batch", 0) or dp * micro_batch
    if global_batch % (dp * micro_batch):
        raise ConfigError("global_batch", f"{global_batch} is not divisible by dp*micro_batch={dp}*{micro_batch}"
                          f"={dp * micro_batch}; use a multiple of {dp * micro_batch}")
    if schedule == "interleaved" and (global_batch // (dp * micro_batch)) % pp:
        raise ConfigError("global_batch", f"the interleaved schedule needs the micro-batches per pipeline "
                          f"({global_batch // (dp * micro_batch)}) to be a multiple of pp={pp}; use a global_batch "
                          f"multiple of {dp * micro_batch * pp} or schedule=1f1b")
    recompute = v.get("recompute", "none")
    if recompute not in RECOMPUTE_MODES:
        raise ConfigError("recompute", f"'{recompute}' is unknown; use one of {', '.join(RECOMPUTE_MODES)}")
    zero_stage = v.get("zero_stage", 0)
    if zero_stage not in (0, 1, 2, 3):
        raise ConfigError("zero_stage", f"{zero_stage} is not a ZeRO stage; use 0, 1, 2 or 3")
    if zero_stage == 3 and pp > 1:
        raise ConfigError("zero_stage", "ZeRO-3 cannot be combined with pp > 1; use zero_stage <= 2 or pp=1")
    sp = v.get("sequence_parallel", False)
    if sp and tp == 1:
        sp = False  # sequence parallelism is a no-op without tensor parallelism
    if sp and model.seq_len % tp:
        raise ConfigError("sequence_parallel", f"seq_len={model.seq_len} is not divisible by tp={tp}; "
                          "turn sequence_parallel off or pick tp dividing seq_len")
    parallel = ParallelSpec(tp=tp, pp=pp, dp=dp, num_gpus=num_gpus, micro_batch=micro_batch,
                            global_batch=global_batch, sequence_parallel=sp, recompute=recompute,
                            zero_stage=zero_stage, schedule=schedule, vpp=vpp,
                            overlap_grad_reduce=v.get("overlap_grad_reduce", False))
    return TrainConfig(model=model, parallel=parallel, cluster=cluster)


def with_changes(config: TrainConfig, **changes) -> TrainConfig:
    """A re-validated copy of `config` with some canonical fields changed. Changing tp/pp keeps the
    GPU count and re-derives dp; changing dp (without num_gpus) re-derives the GPU count."""
    flat = config.flat()
    if "dp" in changes and "num_gpus" not in changes:
        flat.pop("num_gpus")
    elif any(k in changes for k in ("tp", "pp", "num_gpus")) and "dp" not in changes:
        flat.pop("dp")
    flat.update(changes)
    return build_config(flat)


__all__ = ["ConfigError", "ModelSpec", "ParallelSpec", "ClusterSpec", "TrainConfig", "build_config",
           "with_changes", "ALL_FIELDS", "FIELD_KINDS"]
