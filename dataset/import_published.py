"""Published, measured training runs (`../shared/data/published/runs.csv`, one row per public run).

Each upstream row gives the configuration its source states and one measured number
(`measured_metric` / `measured_value`). This module turns a row into a `runs` row (canonical
fields, iteration time in s) or refuses it with every reason it cannot be expressed today.

Everything that maps upstream columns and values onto canonical fields lives in the tables at the
top of this file (COLUMNS, GPUS, RECOMPUTE, PRECISIONS, NOT_MODELLED, ASSUMED, FLOP_CONVENTIONS):
extending the simulator means editing them.

`source` of a kept row is 'published:<file>#<source_id>'; `source_group(source_id)` strips the
row suffix (`_r01`, `_L947`) and names the group the bench and `vtrain validate` report by.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from vtrain.costmodel.spec import ConfigError, build_config
from vtrain.dataset.readers import read_csv
from vtrain.dataset.rows import ImportResult, run_row, to_frame

FORMAT = "published_runs"
REQUIRED_COLUMNS = ("source_id", "num_layers", "hidden_size", "num_attention_heads", "gpu", "num_gpus",
                    "measured_metric", "measured_value")

# Upstream column -> canonical field, for columns whose values are numbers or booleans as given.
COLUMNS = {
    "num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_attention_heads", "num_kv_heads": "num_kv_heads", "seq_len": "seq_len",
    "vocab_size": "vocab_size", "num_gpus": "num_gpus", "tp": "tp", "pp": "pp", "dp": "dp",
    "micro_batch": "micro_batch", "global_batch": "global_batch", "seq_parallel": "sequence_parallel",
    "cp": "cp",
}
# Columns mapped by the rules below: gpu (GPUS), recompute (RECOMPUTE), precision (PRECISIONS),
# zero_stage (first integer of the text), virtual_pp (-> vpp, and schedule=interleaved when > 1),
# model (-> arch: 'llama' when the name says Llama, else 'gpt').

# Upstream GPU text (lower-case substring, first match wins) -> canonical cluster fields, or the
# reason the row is refused. Network figures follow the README of the published set.
# torchtitan's H100s ("96GB HBM2e, 500W power limit"; the 405B page's "95GB HBM2e, lower TDP" is the
# same part as torch reports it): the h100-sxm preset with
# - gpu_memory_GiB 95: torchtitan's "GPU capacity ... 95.00GiB";
# - hbm_bandwidth_GBps 2400: six HBM2e stacks at the H100 PCIe's pin rate (five stacks, 2.0 TB/s);
# - peak_tflops 884: 989 TFLOP/s x (500 W / 700 W)^(1/3), the clock a 500 W cap leaves when power
#   grows with the cube of the clock (an assumption: no datasheet exists for this part).
H100_POWER_CAPPED = dict(gpu="h100-sxm", peak_tflops=884.0, hbm_bandwidth_GBps=2400.0, gpu_memory_GiB=95.0)
GPUS = [
    ("h100 96gb hbm2e", H100_POWER_CAPPED),
    ("h100 sxm 95gb hbm2e", H100_POWER_CAPPED),
    ("h100 80gb hbm3", dict(gpu="h100-sxm")),
    ("jean zay", dict(gpu="a100-80gb", inter_node_bw_Gbps=50.0)),  # 4 x 100 Gb/s Omni-Path per 8 GPUs
    ("dgx-a100, 2020", dict(gpu="a100-40gb")),  # DGX A100 shipped with 40 GB parts in 2020
    ("a100", dict(gpu="a100-80gb")),  # Selene / DGX A100 80GB: one 200 Gb/s HDR NIC per GPU
    ("v100 (dgx-2)", dict(gpu="v100", gpus_per_node=16)),  # DGX-2: 16 V100 on NVSwitch
    ("tpu", "TPU: no preset (the simulator models GPUs on NVLink + InfiniBand)"),
]
# Upstream recompute text (lower-case prefix, first match wins) -> canonical value or refusal reason.
RECOMPUTE = [
    ("full", "full"),
    ("selective (attention core only)", "selective"),
    ("selective (per op)", "selective-op"),  # torchtitan's op-level selective AC
    ("selective (per layer)", "selective-layer"),  # torchtitan's per-layer AC: every second layer
    ("selective", "selective"),
    ("none", "none"),
    ("rematerialization", "recompute 'rematerialization': PaLM's policy, not modelled"),
]
# Upstream precision text without its parenthesised remarks (lower-case substring, first match wins)
# -> canonical precision, or the reason the row is refused. The simulator's fp8 is torchao's default
# tensorwise-scaled Float8 linear (one scale per tensor); rowwise scaling (a scale per row, other
# GEMM kernels; measured no faster than bf16 in torchtitan's async-TP table) is not modelled.
PRECISIONS = [("rowwise", "float8 rowwise scaling: not modelled (fp8 is tensorwise-scaled linears)"),
              ("fp8", "fp8"), ("float8", "fp8"), ("bf16", "bf16"), ("fp16", "fp16"), ("16-bit", "fp16")]
# Parallelism the simulator cannot express yet: column -> the only value it accepts.
NOT_MODELLED = {"ep": (1, "expert parallelism (ep={})")}
# Features a row's notes name (lower-case substrings) -> canonical field values.
NOTE_FEATURES = [(("async tp", "asynctp"), dict(async_tp=True))]
# Values a source leaves empty that its own code fixes (source-id prefix, field, value, why).
ASSUMED = [
    ("korthikanti2022", "zero_stage", 0, "Megatron-LM without the distributed optimizer"),
    ("megatron_readme", "zero_stage", 0, "Megatron-LM of 2020/2021 has no ZeRO"),
    ("megatron_readme", "sequence_parallel", False, "sequence parallelism postdates these READMEs"),
    ("megatron_readme2020", "recompute", "full",
     "Megatron-LM 2020 trains with --checkpoint-activations; its TFLOP/s follow Eq. 3, which counts the recompute"),
    ("bloom", "sequence_parallel", False, "Megatron-DeepSpeed has no sequence parallelism"),
    ("bloom", "vocab_size", 250880, "BLOOM's tokenizer padded to 250,880 (tr11 --pad-vocab-size-to)"),
    ("torchtitan_a100_r04", "vocab_size", 32000, "Llama 2 tokenizer"),
    ("torchtitan_a100_r05", "vocab_size", 32000, "Llama 2 tokenizer"),
    ("torchtitan_a100_r06", "vocab_size", 32000, "Llama 2 tokenizer"),
    ("torchtitan_a100_r07", "vocab_size", 32000, "Llama 2 tokenizer"),
    ("torchtitan_a100_r08", "vocab_size", 32000, "Llama 2 tokenizer"),
]
UNFUSED_ATTENTION = ("korthikanti2022", "megatron_readme", "bloom")
# Sources whose rows list torch.compile among their optimizations: a row without it ran in PyTorch
# eager mode (torchtitan's Dec-2024 H100 tables: "FSDP" against "FSDP + torch.compile"). Elsewhere
# the fused default stands (Megatron's fused kernels; torchtitan's other docs do not say).
EAGER_UNLESS_COMPILED = ("torchtitan_h100_2412",)
# Fields a row must give (or ASSUMED must fill) before it is predicted; anything else has a safe default.
NEEDED = ("tp", "pp", "dp", "micro_batch", "global_batch", "seq_len", "vocab_size", "recompute")
# Peak dense 16-bit FLOP/s each FLOP-based metric is quoted against, per source prefix.
MFU_PEAK = {"korthikanti2022": 312e12}


def is_published(head: str) -> bool:
    first = head.lstrip("\ufeff").splitlines()[0] if head.strip() else ""
    cols = {c.strip() for c in first.split(",")}
    return {"source_id", "measured_metric", "measured_value"} <= cols


def source_group(source_id: str) -> str:
    """The row's source group: its id without the row suffix ('bloom_prequel_L947' -> 'bloom_prequel')."""
    return re.sub(r"_(r\d+|L\d+)$", "", str(source_id))


def import_runs(path: Path) -> ImportResult:
    """`runs` rows from a published-runs CSV; every refused row gets one reason string."""
    runs, refused = convert_rows(read_csv(path, list(REQUIRED_COLUMNS), FORMAT), path.name)
    return ImportResult(str(path), FORMAT, {"runs": runs}, ["; ".join(reasons) for _, reasons in refused])


def convert_rows(df, file_name: str):
    """(runs frame, [(source_id, reasons)] of the refused rows) for the upstream rows in `df`."""
    rows, refused = [], []
    for raw in df.to_dict("records"):
        values, reasons = canonical_values(raw)
        time_s, why = iteration_time(raw, values)
        if why:
            reasons.append(why)
        if not reasons:
            try:
                rows.append(run_row(values, time_s, f"published:{file_name}#{raw['source_id']}",
                                    _interconnect(values)))
            except ConfigError as err:
                reasons.append(f"impossible config: {err}")
        if reasons:
            refused.append((str(raw["source_id"]), reasons))
    return to_frame(rows, "runs"), refused


def refusal_reasons(rejected: list[str]) -> list[str]:
    """The separate reasons in ImportResult.rejected strings (a row may have several)."""
    return [part for text in rejected for part in text.split("; ")]


def canonical_values(raw: dict) -> tuple[dict, list[str]]:
    """(canonical field values, reasons the row cannot be simulated) for one upstream row."""
    values, reasons = {}, []
    sid = str(raw["source_id"])
    for column, name in COLUMNS.items():
        if not _blank(raw.get(column)):
            values[name] = raw[column]
    for column, (accepted, text) in NOT_MODELLED.items():
        value = raw.get(column)
        if not _blank(value) and float(value) != accepted:
            reasons.append(text.format(int(float(value))))
    gpu_text = str(raw.get("gpu", "")).lower()
    gpu = next((target for key, target in GPUS if key in gpu_text), f"GPU '{raw.get('gpu')}': no preset")
    if isinstance(gpu, str):
        reasons.append(gpu)
    else:
        values.update(gpu)
    recompute = str(raw.get("recompute", "")).strip().lower()
    if not _blank(raw.get("recompute")):
        mapped = next((target for key, target in RECOMPUTE if recompute.startswith(key)),
                      f"recompute '{raw['recompute']}': unknown")
        if mapped == "selective" and sid.startswith("torchtitan"):
            mapped = "selective-op"  # torchtitan's "selective" is its op-level policy (its default option)
        if mapped in ("none", "selective", "full", "selective-op", "selective-layer"):
            values["recompute"] = mapped
        else:
            reasons.append(mapped)
    precision = re.sub(r"\(.*?\)", "", str(raw.get("precision", "")).lower())  # '(pre BF16-optimizer)' is history
    mapped = next((target for key, target in PRECISIONS if key in precision), None)
    if mapped in ("fp8", "bf16", "fp16"):
        values["precision"] = mapped
    elif mapped:
        reasons.append(mapped)
    if not _blank(raw.get("zero_stage")):
        stage = re.match(r"\s*(\d)", str(raw["zero_stage"]))
        if stage:
            values["zero_stage"] = int(stage.group(1))
        else:  # FSDP without a stated stage: shards optimizer state and gradients, not parameters
            values["zero_stage"] = 2 if "not resharded" in str(raw["zero_stage"]) else 3
    vpp = raw.get("virtual_pp")
    if not _blank(vpp) and float(vpp) > 1:
        values.update(vpp=int(float(vpp)), schedule="interleaved")
    values["arch"] = "llama" if "llama" in str(raw.get("model", "")).lower() else "gpt"
    # Megatron-LM 2020-2022 (Korthikanti, the READMEs) and Megatron-DeepSpeed (BLOOM) ran the unfused
    # attention; torchtitan and Llama 3 run FlashAttention (the default)
    if sid.startswith(UNFUSED_ATTENTION):
        values["attention"] = "unfused"
    notes = str(raw.get("notes", "")).lower()
    for keys, fields in NOTE_FEATURES:
        if any(key in notes for key in keys):
            values.update(fields)
    if sid.startswith(EAGER_UNLESS_COMPILED) and "torch.compile" not in notes:
        values["eager"] = True
    # torchtitan's TP plan shards the norms and residuals over the sequence (SequenceParallel): SP
    if sid.startswith("torchtitan") and _num(values.get("tp")) > 1:
        values["sequence_parallel"] = True
    for prefix, name, value, _why in ASSUMED:
        if sid.startswith(prefix) and name not in values:
            values[name] = value
    missing = [name for name in NEEDED if name not in values and not _blank_reason(name, reasons)]
    if missing:
        reasons.append(f"incomplete config: {', '.join(missing)} not given")
    # uneven pipeline stages (BLOOM's 70 layers on pp=12) take the default split of
    # pipeline.chunk_layers, which is the 'type:transformer|embedding' partition BLOOM ran
    return values, reasons


def _blank_reason(name: str, reasons: list[str]) -> bool:
    """True when `name` is missing because a refusal already explains it (e.g. an unmodelled recompute)."""
    return name == "recompute" and any(r.startswith("recompute") for r in reasons)


def iteration_time(raw: dict, values: dict) -> tuple[float, str]:
    """(seconds per iteration, '') from the row's measured metric, or (nan, reason)."""
    metric = str(raw["measured_metric"]).strip()
    try:
        value = float(raw["measured_value"])
    except (TypeError, ValueError):
        return math.nan, "missing measured value"
    if not math.isfinite(value) or value <= 0:
        return math.nan, "non-positive measured value"
    if metric == "iteration_time_s":
        return value, ""
    batch, seq, gpus = (_num(values.get(k)) for k in ("global_batch", "seq_len", "num_gpus"))
    if metric in ("tokens_per_s_per_gpu", "tokens_per_s_total"):
        if not (batch and seq and gpus):
            return math.nan, f"{metric} needs global_batch, seq_len and num_gpus to give a time"
        per_gpu = value if metric == "tokens_per_s_per_gpu" else value / gpus
        return batch * seq / (per_gpu * gpus), ""
    if metric == "mfu_percent":
        peak = next((p for prefix, p in MFU_PEAK.items() if str(raw["source_id"]).startswith(prefix)), None)
        if peak is None or not (batch and seq and gpus):
            return math.nan, "MFU with an unstated FLOP convention or an incomplete config"
        return korthikanti_model_flops(values) / (value / 100.0 * gpus * peak), ""
    if metric == "tflops_per_gpu":
        return math.nan, "TFLOP/s per GPU with an unstated FLOP convention"
    return math.nan, f"unknown measured_metric '{metric}'"


def korthikanti_model_flops(values: dict) -> float:
    """Korthikanti et al. 2022 Eq. 7 model FLOP per iteration: 72 B s l h^2 (1 + s/(6h) + V/(12 h l))."""
    b, s, l_, h, v = (_num(values[k]) for k in ("global_batch", "seq_len", "num_layers", "hidden_size",
                                                 "vocab_size"))
    return 72.0 * b * s * l_ * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * l_))


def assumptions(source_id: str) -> list[str]:
    """'field=value (why)' for every ASSUMED value that applies to a source id."""
    return [f"{name}={value} ({why})" for prefix, name, value, why in ASSUMED if str(source_id).startswith(prefix)]


def _interconnect(values: dict) -> str:
    config = build_config(values)
    if config.parallel.num_gpus <= config.cluster.gpus_per_node:
        return "nvlink"
    return "nvlink+omni-path" if values.get("inter_node_bw_Gbps") == 50.0 else "nvlink+ib"


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == ""
