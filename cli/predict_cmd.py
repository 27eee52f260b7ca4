"""`vtrain predict`: one configuration's iteration time, throughput, MFU, memory and breakdown."""
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from vtrain.cli.app import app
from vtrain.cli.options import (CheckpointOpt, GpuOpt, ModelOpt, config_overrides, positive_flag, price_flag,
                                with_field_options)

BREAKDOWN_LABELS = {
    "compute": "compute", "tp_comm": "TP comm", "pp_comm": "PP comm", "ep_comm": "EP all-to-all",
    "cp_comm": "CP ring (exposed)", "fsdp_comm": "FSDP gather/scatter (exposed)", "dp_comm": "DP comm (exposed)",
    "bubble": "pipeline bubble", "optimizer": "optimizer step", "overhead": "framework overhead",
}


def _fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.2f} ms"


def fmt_interval(low: float, high: float, level: float) -> str:
    """'21.9-25.8 s, 90 %' (ms below a second); '' when there is no interval (NaN bounds)."""
    import math

    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    if high < 1.0:
        return f"{low * 1e3:.3g}-{high * 1e3:.3g} ms, {level * 100:.0f} %"
    return f"{low:.3g}-{high:.3g} s, {level * 100:.0f} %"


def interval_note(result) -> str:
    """One line on the interval: how it was widened outside the training data, or that there is none."""
    import math

    if not math.isfinite(result.iteration_time_s_low):
        return (f"no prediction interval: checkpoint '{result.checkpoint}' has no calibration; add one with "
                f"`vtrain calibrate DATASET_DIR -c {result.checkpoint}`")
    if result.interval_widening >= 1.05:
        return (f"the {result.interval_level * 100:.0f} % interval is {result.interval_widening:.1f}x as wide (in log "
                "terms) as inside the measured runs, since the config lies outside those it was calibrated on")
    return ""


@app.command()
@with_field_options
def predict(
    config: Optional[Path] = typer.Argument(None, help="Config file: TOML/JSON, a vTrain config JSON, or a "
                                                        "Hugging Face config.json (model part)."),
    model: Optional[str] = ModelOpt,
    gpu: Optional[str] = GpuOpt,
    checkpoint: str = CheckpointOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Also report days and cost to train this many "
                                                                   "tokens (e.g. 300e9)."),
    price_per_gpu_hour: float = typer.Option(0.0, "--price-per-gpu-hour", help="Price of one GPU-hour (any "
                                                                                  "currency) for the cost estimate."),
    allreduce_table: Optional[Path] = typer.Option(None, "--allreduce-table", help="Folder of measured all-reduce "
                                                   "LUTs (vTrain AR_GPU<n>_*_LUT) used for intra-node all-reduce."),
    **fields,
):
    """Predict one training iteration: time, tokens/s, MFU, memory per GPU and a breakdown."""
    from vtrain.costmodel.assumed import assumed_line
    from vtrain.costmodel.config_files import resolve_config_assumed
    from vtrain.costmodel.errors import UserError
    from vtrain.costmodel.predictor import Predictor

    if config is None and model is None and fields.get("num_layers") is None:
        raise UserError("config: give a config file, --model PRESET, or the model fields (--num-layers ...); "
                        "see `vtrain predict --help`")
    price_flag("--price-per-gpu-hour", price_per_gpu_hour)
    positive_flag("--tokens", tokens, "300e9")
    overrides = config_overrides(gpu=gpu, **fields)
    cfg, assumed = resolve_config_assumed(config, model, overrides)
    table = None
    if allreduce_table:
        from vtrain.dataset.import_vtrain import allreduce_table as read_allreduce_table

        try:
            table = read_allreduce_table(allreduce_table)
        except UserError as err:
            raise UserError(f"--allreduce-table: {err}") from None
    predictor = Predictor.load(checkpoint, allreduce_table=table)
    result = predictor.predict(cfg)
    cost = result.training_cost(tokens, price_per_gpu_hour) if tokens else None
    weight = _correction_weight(predictor, cfg)
    outside = _outside_line(predictor, cfg, weight)

    if as_json:
        out = dict(
            iteration_time_s=result.iteration_time_s,
            iteration_time_s_low=_json_number(result.iteration_time_s_low),
            iteration_time_s_high=_json_number(result.iteration_time_s_high),
            interval_level=result.interval_level, interval_widening=result.interval_widening,
            tokens_per_s=result.tokens_per_s, mfu=result.mfu,
            memory_gib_per_gpu=result.memory_gib_per_gpu, gpu_memory_gib=result.gpu_memory_gib,
            fits_memory=result.fits_memory, breakdown=result.breakdown, memory_breakdown_gib=result.memory_breakdown_gib,
            model_flops_per_iteration=result.model_flops, num_parameters=cfg.model.num_parameters,
            active_parameters=cfg.model.active_parameters,
            checkpoint=result.checkpoint, config=cfg.flat(), outside_training_data=outside,
            correction_weight=weight, assumed=assumed,
        )
        if cfg.model.num_experts:
            out.update(num_moe_layers=cfg.model.num_moe_layers, routing_load=routing_load(cfg))
        if cost:
            out.update(tokens=cost.tokens, iterations=cost.iterations, train_days=cost.train_days,
                       gpu_hours=cost.gpu_hours, cost=cost.cost)
        note = interval_note(result)
        if note:
            out["interval_note"] = note
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    _print_table(cfg, result, cost, price_per_gpu_hour)
    if assumed:
        typer.echo(assumed_line(assumed))
    for line in (outside, interval_note(result)):
        if line:
            typer.echo(line)


def routing_load(cfg) -> float:
    """The routing load the prediction used: routed tokens of the most loaded EP rank / balanced."""
    import numpy as np

    from vtrain.costmodel.encode import config_row
    from vtrain.costmodel.moe import routing_load as load

    return float(load(config_row(cfg), np)[0])


def moe_line(cfg) -> str:
    """'MoE assumed: ...' with the MoE layer count and the effective routing load."""
    m, p = cfg.model, cfg.parallel
    load = routing_load(cfg)
    placement = ([f"{m.first_dense_layers} dense first"] if m.first_dense_layers else []) + \
        ([f"then every moe_layer_freq={m.moe_layer_freq}-th" if m.first_dense_layers else
          f"every moe_layer_freq={m.moe_layer_freq}-th"] if m.moe_layer_freq > 1 else [])
    layers = f"{m.num_moe_layers} of {m.num_layers} layers MoE" + (f" ({', '.join(placement)})" if placement else "")
    if m.moe_imbalance == 1:
        routing = "balanced routing"
    else:
        routing = f"routing imbalance {m.moe_imbalance:g}"
        capped = [why for why, limit in (("by what one of ep=" + str(p.ep) + " ranks can receive",
                                          p.ep * min(m.experts_per_token, m.num_experts / p.ep) / m.experts_per_token),
                                         ("by capacity_factor", m.capacity_factor or float("inf")))
                  if limit < m.moe_imbalance and abs(limit - load) < 1e-9]
        routing += f" (capped {capped[0]})" if capped else ""
    routing += f": the busiest EP rank gets {load:.2f}x the balanced tokens"
    dropping = (f"capacity factor {m.capacity_factor:g} (tokens beyond it dropped, MFU counts them)"
                if m.capacity_factor else "no token dropping")
    expert_tp = f"etp={p.etp}" if p.etp else "tp"
    return f"MoE assumed: {layers}; {routing}; {dropping}; expert TP = {expert_tp}; all-to-all not overlapped"


def _json_number(value: float):
    """`value`, or None (JSON null) for NaN."""
    return value if value == value else None


def _correction_weight(predictor, cfg) -> float | None:
    """The learned correction's trust weight for `cfg` (1 inside the training runs), None when analytical."""
    from vtrain.costmodel.encode import encode

    weight = predictor.correction_weight(encode([cfg]))
    return None if weight is None else float(weight[0])


def _outside_line(predictor, cfg, weight: float | None) -> str:
    """One line naming the inputs outside the checkpoint's training runs and the correction's trust
    `weight` there ('' when none or analytical)."""
    import numpy as np

    from vtrain.costmodel.correction import CONFIG_FEATURE_NAMES, out_of_domain
    from vtrain.costmodel.encode import encode

    flags = tuple(n for n in CONFIG_FEATURE_NAMES if n != "context-parallel degree")  # 0/1 execution flags
    items = (out_of_domain(predictor.correction, encode([cfg]), np) or [[]])[0]
    if not items:
        return ""

    # the hardware figures in the units the config gives them (out_of_domain reports FLOP/s and bytes/s)
    units = {"peak FLOP/s": ("peak TFLOP/s", 1e-12), "HBM bytes/s": ("HBM GB/s", 1e-9),
             "intra-node bytes/s": ("intra-node GB/s", 1e-9), "inter-node bytes/s": ("inter-node Gb/s", 8e-9)}
    recompute_names = {0: "none", 1: "selective", 2: "full"}  # the recompute feature's levels

    def num(v: float) -> str:  # whole numbers plainly (hidden=12288), others in 4 digits
        return f"{round(v):d}" if abs(v - round(v)) < 1e-6 * max(1.0, abs(v)) else f"{v:.4g}"

    def span(lo: str, hi: str) -> str:
        return lo if lo == hi else f"{lo}-{hi}"

    def part(name, v, lo, hi) -> str:
        if name in flags or name == "sequence_parallel":
            return f"with {name} (no training run had it)" if v > 0 else f"without {name} (every training run had it)"
        if name == "recompute":
            names = [recompute_names.get(int(round(x)), f"{x:g}") for x in (v, lo, hi)]
            return f"recompute={names[0]} (trained {span(names[1], names[2])})"
        label, scale = units.get(name, (name, 1.0))
        return f"{label}={num(v * scale)} (trained {span(num(lo * scale), num(hi * scale))})"

    parts = ", ".join(part(*item) for item in items)
    dp_note = (" (dp beyond the runs enters through the modelled collectives only)"
               if any(name == "dp" for name, *_ in items) else "")
    return (f"outside the training data: {parts}; the learned correction is applied at {weight:.0%} weight "
            f"and the analytical model carries the rest{dp_note}, so treat this answer as an extrapolation "
            "(--checkpoint none: analytical)")


def _print_table(cfg, result, cost, price):
    from rich.console import Console
    from rich.table import Table

    from vtrain.costmodel.pipeline import gpu_stage_layers
    from vtrain.costmodel.spec import gpu_line

    m, p, c = cfg.model, cfg.parallel, cfg.cluster
    console = Console()
    params = f"{m.num_parameters / 1e9:.1f}B" + (
        f" total, {m.active_parameters / 1e9:.1f}B active, {m.num_experts} experts top-{m.experts_per_token}"
        if m.num_experts else "")
    title = (f"{m.arch} {params} ({m.num_layers}L, h={m.hidden_size}, seq={m.seq_len}) on "
             f"{p.num_gpus} x {c.gpu} ({c.precision})")
    strategy = (f"tp={p.tp} pp={p.pp} dp={p.dp} micro_batch={p.micro_batch} global_batch={p.global_batch} "
                f"({p.num_micro_batches} micro-batches) schedule={p.schedule}"
                + (f" vpp={p.vpp}" if p.vpp > 1 else "") + f" recompute={p.recompute} zero={p.zero_stage}"
                + (" sp" if p.sequence_parallel else "") + (" async-tp" if p.async_tp else "")
                + (" eager" if p.eager else "")
                + (f" ep={p.ep}" if m.num_experts else "") + (f" cp={p.cp}" if p.cp > 1 else ""))
    stages = gpu_stage_layers(m.num_layers, p.pp, p.vpp, p.first_stage_layers, p.last_stage_layers)
    if len(set(stages)) > 1:
        strategy += f"\nuneven stages: layers per pipeline GPU {'+'.join(map(str, stages))} (the heaviest sets the pace)"
    caption = strategy + f"\n{gpu_line(c)}\ncheckpoint: {result.checkpoint}"
    if m.num_experts and p.ep * p.tp > c.gpus_per_node and result.checkpoint != "none":
        caption += " (the all-to-all across nodes is analytical: no measured cross-node all-to-all)"
    if m.num_experts:
        caption += "\n" + moe_line(cfg)
    table = Table(title=title, caption=caption, show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    band = fmt_interval(result.iteration_time_s_low, result.iteration_time_s_high, result.interval_level)
    table.add_row("iteration time", _fmt_time(result.iteration_time_s) + (f" ({band})" if band else ""))
    table.add_row("tokens/s", f"{result.tokens_per_s:,.0f}")
    table.add_row("MFU", f"{result.mfu * 100:.1f} %")
    fits = "[green]fits[/green]" if result.fits_memory else "[red]does NOT fit[/red]"
    table.add_row("memory per GPU", f"{result.memory_gib_per_gpu:.1f} / {result.gpu_memory_gib:.0f} GiB ({fits})")
    table.add_section()
    for key, seconds in result.breakdown.items():
        if key in ("overhead", "ep_comm", "cp_comm", "fsdp_comm") and seconds == 0:
            continue
        share = seconds / result.iteration_time_s * 100
        table.add_row(f"  {BREAKDOWN_LABELS[key]}", f"{_fmt_time(seconds)}  ({share:4.1f} %)")
    table.add_section()
    for key, gib in result.memory_breakdown_gib.items():
        table.add_row(f"  memory: {key}", f"{gib:.2f} GiB")
    if cost:
        table.add_section()
        table.add_row(f"training {cost.tokens:.3g} tokens", f"{cost.train_days:,.1f} days")
        table.add_row("GPU-hours", f"{cost.gpu_hours:,.0f}")
        if price:
            table.add_row("cost", f"{cost.cost:,.0f} (at {price}/GPU-hour)")
    console.print(table)
    if not result.fits_memory:
        console.print("[yellow]warning:[/yellow] this configuration exceeds GPU memory; try recompute=selective/"
                      "full, a larger tp/pp, zero_stage>=1 or a smaller micro_batch.")
