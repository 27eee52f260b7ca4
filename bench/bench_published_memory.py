"""Public runs (../shared/data/published/runs.csv): how many are refused, how many that really ran
are predicted not to fit in memory (false OOM), and the iteration-time error per source, with the
shipped checkpoint and with the analytical model (--checkpoint none).

A minimal reader of its own (the dataset importer for this file is another issue's work): it maps
the CSV's free-text columns onto canonical fields with the rules in `to_fields` below, each of
which follows the source notes in published/README.md. A row whose config is incomplete (no
micro-batch, global batch or recompute policy given, or not a GPU) is counted apart and not
predicted. Time is compared where the source gives iteration time or tokens/s per GPU
(T = global_batch * seq_len / (tokens_per_s_per_gpu * num_gpus)).

Run: python bench/bench_published.py [--rows]
"""
import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

SOURCES = ("korthikanti2022", "megatron_readme2020", "megatron_readme2021", "bloom176b_tr11", "bloom_prequel",
           "torchtitan", "llama3_405b", "opt175b", "palm540b", "llama1_65b")


def source_of(source_id: str) -> str:
    return next(s for s in SOURCES if source_id.startswith(s))


def _int(text):
    return int(float(text)) if str(text).strip() else None


def to_fields(r: dict):
    """(canonical fields, None) or (None, why the config is incomplete)."""
    sid, gpu, notes = r["source_id"], r["gpu"], r["notes"]
    if "TPU" in gpu:
        return None, "not a GPU (TPU v4)"
    for col in ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "num_gpus", "micro_batch",
                "global_batch"):
        if not r[col].strip():
            return None, f"{col} not given"
    rec = r["recompute"].lower()
    if not rec:
        return None, "recompute not given"
    torchtitan = sid.startswith("torchtitan")
    if rec.startswith(("full", "remat")):
        recompute = "full"
    elif rec.startswith("selective (per layer)") and torchtitan:
        recompute = "selective-layer"  # torchtitan's per-layer AC: every second layer fully checkpointed
    elif rec.startswith("selective") and torchtitan:
        recompute = "selective-op"  # torchtitan's selective AC: 'op' (its default)
    elif rec.startswith("selective"):
        recompute = "selective"
    else:
        recompute = "none"
    llama = torchtitan or sid.startswith(("llama3", "llama1"))
    f = dict(num_layers=_int(r["num_layers"]), hidden_size=_int(r["hidden_size"]),
             num_attention_heads=_int(r["num_attention_heads"]), seq_len=_int(r["seq_len"]),
             num_gpus=_int(r["num_gpus"]), micro_batch=_int(r["micro_batch"]), global_batch=_int(r["global_batch"]),
             recompute=recompute, arch="llama" if llama else "gpt",
             # Megatron-LM 2020-2022 and Megatron-DeepSpeed (BLOOM) ran the unfused attention
             attention="flash" if llama else "unfused")
    for col, name in (("num_kv_heads", "num_kv_heads"), ("ffn_hidden_size", "ffn_hidden_size"), ("tp", "tp"),
                      ("pp", "pp"), ("dp", "dp"), ("cp", "cp")):
        if r[col].strip():
            f[name] = _int(r[col])
    if r["vocab_size"].strip():
        f["vocab_size"] = _int(r["vocab_size"])
    elif sid.startswith("bloom"):
        f["vocab_size"] = 250880  # the padded BLOOM vocabulary (tr11 slurm script)
    elif "Llama 2" in notes:
        f["vocab_size"] = 32000  # Llama 2 SentencePiece tokenizer
    if f.get("cp", 1) == 1:
        f.pop("cp", None)
    if r["virtual_pp"].strip() and _int(r["virtual_pp"]) > 1:
        f.update(schedule="interleaved", vpp=_int(r["virtual_pp"]))
    if r["seq_parallel"].strip().lower() == "yes" or (torchtitan and f.get("tp", 1) > 1):
        f["sequence_parallel"] = True  # torchtitan's TP plan shards norms and residuals over the sequence
    zero = r["zero_stage"].strip()
    if zero[:1].isdigit():
        f["zero_stage"] = int(zero[0])
    elif "FSDP" in zero:
        f["zero_stage"] = 3
    prec = r["precision"].lower()
    f["precision"] = ("fp8" if prec.startswith(("fp8", "float8")) else "bf16" if prec.startswith("bf16")
                      else "fp16")  # 'fp16 mixed (pre BF16-optimizer)', 'mixed 16-bit', 'mixed fp16', 'fp16'
    if not prec and "A100" in gpu:
        f["precision"] = "bf16"
    if "V100" in gpu:
        f["gpu"] = "v100"
    elif "A100" in gpu:
        f["gpu"] = "a100-40gb" if "2020" in gpu else "a100-80gb"
    elif "HBM2e" in gpu:  # torchtitan's power-capped 96 GB parts (figures: the importer's)
        from vtrain.dataset.import_published import H100_POWER_CAPPED
        f.update(H100_POWER_CAPPED)
    elif "H100" in gpu:
        f["gpu"] = "h100-sxm"
    if sid.startswith("bloom"):
        f["inter_node_bw_Gbps"] = 50.0  # four 100 Gb/s Omni-Path links per 8-GPU node
    return f, None


def measured_time(r: dict, f: dict):
    value = float(r["measured_value"])
    if r["measured_metric"] == "iteration_time_s":
        return value
    if r["measured_metric"] == "tokens_per_s_per_gpu":
        return f["global_batch"] * f["seq_len"] / (value * f["num_gpus"])
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args()
    from vtrain.costmodel.errors import UserError
    from vtrain.costmodel.predictor import Predictor
    from vtrain.costmodel.spec import build_config
    from vtrain.dataset.paths import data_root

    rows = list(csv.DictReader(open(Path(data_root()) / "published" / "runs.csv")))
    predictors = {"default": Predictor.load("default"), "none": Predictor.load("none")}
    stats = defaultdict(lambda: defaultdict(list))
    for r in rows:
        src = source_of(r["source_id"])
        s = stats[src]
        s["rows"].append(1)
        fields, why = to_fields(r)
        if fields is None:
            s["incomplete"].append(why)
            continue
        try:
            cfg = build_config(fields)
        except UserError as err:
            s["refused"].append(f"{r['source_id']}: {err}")
            continue
        t_meas = measured_time(r, fields)
        preds = {name: p.predict(cfg) for name, p in predictors.items()}
        if not preds["none"].fits_memory:
            s["false_oom"].append(f"{r['source_id']}: {preds['none'].memory_gib_per_gpu:.1f} GiB predicted "
                                  f"> {preds['none'].gpu_memory_gib:.0f} GiB")
        s["mem"].append(preds["none"].memory_gib_per_gpu)
        if t_meas:
            for name, p in preds.items():
                s[f"err_{name}"].append(p.iteration_time_s / t_meas - 1.0)
        if args.rows:
            print(f"{r['source_id']:30s} mem {preds['none'].memory_gib_per_gpu:6.1f}/{preds['none'].gpu_memory_gib:.0f}"
                  f" GiB  measured {t_meas or float('nan'):8.3f} s  default {preds['default'].iteration_time_s:8.3f}"
                  f"  analytical {preds['none'].iteration_time_s:8.3f}")

    def pct(errs, q):
        return f"{100 * np.percentile(np.abs(errs), q):5.1f}" if errs else "    -"

    def bias(errs):
        return f"{100 * np.median(errs):+6.1f}" if errs else "     -"

    print(f"\n{'source':22s} {'rows':>4s} {'incompl':>7s} {'refused':>7s} {'falseOOM':>8s} {'timed':>5s} "
          f"{'median%':>7s} {'p90%':>5s} {'bias%':>6s} | {'analytical: median%':>19s} {'p90%':>5s} {'bias%':>6s}")
    totals = defaultdict(int)
    for src in SOURCES:
        s = stats[src]
        n = len(s["rows"])
        if not n:
            continue
        e, a = s["err_default"], s["err_none"]
        print(f"{src:22s} {n:4d} {len(s['incomplete']):7d} {len(s['refused']):7d} {len(s['false_oom']):8d} "
              f"{len(e):5d} {pct(e, 50):>7s} {pct(e, 90):>5s} {bias(e):>6s} | {pct(a, 50):>19s} {pct(a, 90):>5s} "
              f"{bias(a):>6s}")
        for key in ("rows", "incomplete", "refused", "false_oom"):
            totals[key] += len(s[key])
    print(f"{'all':22s} {totals['rows']:4d} {totals['incomplete']:7d} {totals['refused']:7d} {totals['false_oom']:8d}")
    for src in SOURCES:
        for key in ("incomplete", "refused", "false_oom"):
            for item in sorted(set(stats[src][key])):
                print(f"  {key}: {src}: {item}")


if __name__ == "__main__":
    main()
