"""`vtrain search` (best parallelization strategies) and `vtrain plan` (compute-optimal model size).

Imports only typer and light modules at import time; numpy/JAX/matplotlib load inside the commands.
"""
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from vtrain.cli.app import app
from vtrain.costmodel.atomic import atomic_write
from vtrain.cli.options import (CheckpointOpt, GpuOpt, ModelOpt, config_overrides, parameters_as_flags,
                                positive_flag, price_flag, with_field_options)

# Canonical parallel fields that restrict the search space when given as flags.
RESTRICT_FIELDS = ("tp", "pp", "dp", "micro_batch", "vpp", "ep", "recompute", "zero_stage", "schedule", "sequence_parallel")
FILE_LAYOUT_FIELDS = RESTRICT_FIELDS + ("num_gpus",)
ROUTING_DEFAULTS = dict(moe_layer_freq=1, capacity_factor=0.0, moe_imbalance=1.0)  # carried by the reproduce line
MOE_MODEL_FIELDS = ("num_experts", "experts_per_token", "moe_ffn_hidden_size", "shared_experts", "first_dense_layers",
                    "moe_layer_freq", "capacity_factor", "moe_imbalance")


def _fmt_time(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1.0 else f"{seconds * 1e3:.1f} ms"


def _fmt_money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _list(value: Optional[str], name: str, allowed) -> Optional[tuple]:
    """Comma-separated flag value -> tuple (None if not given)."""
    from vtrain.costmodel.errors import UserError

    if value is None:
        return None
    items = tuple(v.strip().lower() for v in str(value).split(",") if v.strip())
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise UserError(f"--{name}: '{value}' is not a comma-separated list of {', '.join(allowed)}")
    return items


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        return

    def write(tmp):
        Path(tmp).write_text(text, encoding="utf-8")
    atomic_write(output, write)


def build_search_inputs(config: Optional[Path], model: Optional[str], gpu: Optional[str], fields: dict,
                        max_gpus, min_gpus, max_tp, max_pp, max_dp, max_micro_batch, max_vpp, max_ep=None):
    """(base TrainConfig, SearchSpace) from the command's flags (layer: file < preset < flags)."""
    from vtrain.costmodel.config_files import layer_fields
    from vtrain.costmodel.errors import UserError
    from vtrain.strategy.search import SearchSpace
    from vtrain.costmodel.spec import RECOMPUTE_MODES, SCHEDULES, build_config

    if config is None and model is None and fields.get("num_layers") is None:
        raise UserError("search: give a config file, --model PRESET, or the model fields (--num-layers ...); "
                        "see `vtrain search --help`")
    flags = config_overrides(gpu=gpu, **fields)
    restrict = {k: flags.pop(k) for k in RESTRICT_FIELDS if k in flags}
    num_gpus = flags.pop("num_gpus", None)
    # The file's layout is ignored (the search chooses it); its num_gpus is the default GPU count.
    values, file_layout = layer_fields(config, model, flags, ignore_from_file=FILE_LAYOUT_FIELDS)
    file_gpus = file_layout.get("num_gpus")
    if not values.get("global_batch"):
        raise UserError("--global-batch: required for search (sequences per iteration, e.g. --global-batch 1536)")
    if num_gpus is not None and max_gpus is not None:
        raise UserError("search: give either --num-gpus or --max-gpus, not both")
    if num_gpus is None and max_gpus is None:
        num_gpus = file_gpus
    if num_gpus is None and max_gpus is None:
        raise UserError("search: give --num-gpus N (exactly N GPUs) or --max-gpus N (any count up to N)")
    cfg = build_config(values)
    for name, val in (("max-gpus", max_gpus), ("max-tp", max_tp), ("max-pp", max_pp), ("max-dp", max_dp),
                      ("max-micro-batch", max_micro_batch), ("max-vpp", max_vpp), ("max-ep", max_ep),
                      ("min-gpus", min_gpus)):
        if val is not None and val <= 0:
            raise UserError(f"--{name}: {val} must be a positive integer")
    space = dict(num_gpus=num_gpus, max_gpus=max_gpus, min_gpus=min_gpus or 1, max_tp=max_tp, max_pp=max_pp,
                 max_dp=max_dp, max_micro_batch=max_micro_batch, max_vpp=max_vpp, max_ep=max_ep)
    for name in ("tp", "pp", "dp", "micro_batch", "vpp", "ep"):
        if name in restrict:
            space[name] = (int(restrict[name]),)
    if "recompute" in restrict:
        space["recompute"] = _list(restrict["recompute"], "recompute", RECOMPUTE_MODES)
    if "schedule" in restrict:
        space["schedules"] = _list(restrict["schedule"], "schedule", SCHEDULES)
    if "zero_stage" in restrict:
        if restrict["zero_stage"] not in (0, 1, 2, 3):
            raise UserError(f"--zero-stage: {restrict['zero_stage']} is not a ZeRO stage; use 0, 1, 2 or 3")
        space["zero_stages"] = (int(restrict["zero_stage"]),)
    if "sequence_parallel" in restrict:
        space["sequence_parallel"] = (bool(restrict["sequence_parallel"]),)
    if "vpp" in restrict and restrict["vpp"] > 1 and "schedules" not in space:
        space["schedules"] = ("interleaved",)
    with parameters_as_flags():
        return cfg, SearchSpace(**space)


def _row_strategy(r: dict) -> str:
    s = f"tp={r['tp']} pp={r['pp']} dp={r['dp']}" + (f" ep={r['ep']}" if r.get("ep", 1) > 1 else "") \
        + f" mb={r['micro_batch']}"
    if r["schedule"] == "interleaved":
        s += f" vpp={r['vpp']}"
    elif r["schedule"] != "1f1b":
        s += f" {r['schedule']}"
    return s


def _flat_row(r: dict) -> dict:
    out = {k: v for k, v in r.items() if k not in ("breakdown", "config")}
    out.update({f"breakdown_{k}_s": v for k, v in r["breakdown"].items()})
    return out


def plot_pareto(result, path: Path) -> None:
    """Time-versus-cost scatter of every fitting strategy with the Pareto front, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feas = result.feasible
    money = result.price_per_gpu_hour > 0
    y_all = feas["cost"] if money else feas["gpu_hours"]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(feas["iteration_time_s"], y_all, s=6, alpha=0.35, color="tab:gray", label="fitting strategies")
    px = [p["iteration_time_s"] for p in result.pareto]
    py = [p["cost"] if money else p["gpu_hours"] for p in result.pareto]
    ax.plot(px, py, "o-", color="tab:red", ms=4, label="Pareto front")
    if result.top:
        best = result.top[0]
        ax.scatter([best["iteration_time_s"]], [best["cost"] if money else best["gpu_hours"]], marker="*", s=180,
                   color="tab:blue", zorder=5, label=f"best ({result.objective}): {_row_strategy(best)}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel(("cost ($) " if money else "GPU-hours ") + result.cost_basis)
    m = result.config.model
    ax.set_title(f"{m.num_parameters / 1e9:.0f}B params, global batch {result.config.parallel.global_batch} "
                 f"on {result.config.cluster.gpu}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()

    def write(tmp):
        fig.savefig(tmp, dpi=120)
    try:
        atomic_write(path, write)
    finally:
        plt.close(fig)


def _print_search(result, sens, space, source: str = "...") -> None:
    from rich.console import Console
    from rich.table import Table

    from vtrain.costmodel.spec import gpu_line, gpu_overrides
    from vtrain.cli.predict_cmd import fmt_interval

    cfg = result.config
    m, c = cfg.model, cfg.cluster
    console = Console(width=None if sys.stdout.isatty() else 150)
    gpus = f"{space.num_gpus}" if space.num_gpus is not None else f"<= {space.max_gpus}"
    size = (f"{m.num_parameters / 1e9:.1f}B ({m.active_parameters / 1e9:.1f}B active, {m.num_experts} experts "
            f"top-{m.experts_per_token})" if m.num_experts else f"{m.num_parameters / 1e9:.1f}B")
    title = (f"{m.arch} {size} ({m.num_layers}L, h={m.hidden_size}, seq={m.seq_len}), "
             f"global batch {cfg.parallel.global_batch}, {gpus} x {c.gpu} ({c.precision}) - best by {result.objective}")
    table = Table(title=title)
    money = result.price_per_gpu_hour > 0
    moe = bool(m.num_experts)
    cols = ["#", "tp", "pp", "dp"] + (["ep"] if moe else []) + ["GPUs", "mb", "sched", "recomp", "SP", "ZeRO",
                                                                "iter time", "90 % interval", "MFU",
            "mem GiB (free)", ("$ " if money else "GPU-h ") + result.cost_basis, "limited by"]
    if result.tokens:
        cols.append("days")
    for col in cols:
        table.add_column(col, justify="left" if col in ("sched", "recomp", "limited by") else "right")
    for r in result.top:
        sched = f"v{r['vpp']}" if r["schedule"] == "interleaved" else r["schedule"]
        row = [str(r["rank"]), str(r["tp"]), str(r["pp"]), str(r["dp"]) + (f" cp{r['cp']}" if r.get("cp", 1) > 1 else "")] + \
            ([str(r["ep"])] if moe else []) + [
               str(r["num_gpus"]), str(r["micro_batch"]),
               sched, r["recompute"], "y" if r["sequence_parallel"] else "-", str(r["zero_stage"]),
               _fmt_time(r["iteration_time_s"]),
               fmt_interval(r["iteration_time_s_low"] or float("nan"), r["iteration_time_s_high"] or float("nan"),
                            0.9).removesuffix(", 90 %") or "-",
               f"{r['mfu'] * 100:.1f}%",
               f"{r['memory_gib']:.1f} ({r['memory_headroom_pct']:.0f}%)",
               _fmt_money(r["cost"]) if money else f"{r['gpu_hours']:,.0f}",
               f"{r['limiter']} {r['limiter_share_pct']:.0f}%" + (", memory" if r["memory_headroom_pct"] < 5 else "")]
        if result.tokens:
            row.append(f"{r['train_days']:,.1f}")
        table.add_row(*row)
    t = result.timings
    table.caption = (f"{result.num_enumerated:,} valid strategies, {result.num_fit:,} fit in memory, "
                     f"{result.num_evaluated:,} evaluated ({result.method}); "
                     f"price ${result.price_per_gpu_hour:g}/GPU-hour; checkpoint: {result.checkpoint}; "
                     f"search {sum(v for k, v in t.items() if k.endswith('_s')):.2f} s. "
                     "'limited by' = largest non-compute share of the iteration\n" + gpu_line(c))
    console.print(table)
    faded = [r for r in result.top if r.get("correction_weight") is not None and r["correction_weight"] < 0.5]
    if faded:
        weights = sorted(r["correction_weight"] for r in faded)
        span = f"{weights[0]:.0%}" if weights[0] == weights[-1] else f"{weights[0]:.0%}-{weights[-1]:.0%}"
        console.print(f"outside the training data: {', '.join('#' + str(r['rank']) for r in faded)} (correction weight "
                      f"{span}): mostly the analytical model's answer; `vtrain predict` with a row's settings names "
                      "the inputs (correction_weight in --json/--csv)", highlight=False, soft_wrap=True)
    if sens:
        st = Table(title="sensitivity at #1 (d log time / d log degree, relaxed degrees, global batch fixed)")
        for col in ("knob", "value", "d ln time / d ln knob", "time if doubled", "d ln cost / d ln knob"):
            st.add_column(col, justify="left" if col in ("knob", "value") else "right")
        for s in sens:
            st.add_row(s["knob"], str(s["value"]), f"{s['time_elasticity']:+.3f}",
                       f"{s['time_change_if_doubled_pct']:+.1f}%", f"{s['cost_elasticity']:+.3f}")
        st.caption = ("local derivatives of the relaxed model: steps such as TP crossing a node are not seen; "
                      "'same GPUs' rows trade one degree for another at a fixed GPU count"
                      + ("; ep: an exact step to 2 ep (or from ep/2 where 2 ep is not valid)"
                         if any(s["knob"] == "ep" for s in sens) else ""))
        console.print(st)
    if result.top:
        b = result.top[0]["config"]
        console.print(f"reproduce #1: vtrain predict {source} --gpu {c.gpu} --num-gpus {b['num_gpus']} --tp {b['tp']} "
                      f"--pp {b['pp']} --micro-batch {b['micro_batch']} --global-batch {b['global_batch']} "
                      f"--schedule {b['schedule']} --vpp {b['vpp']} --recompute {b['recompute']} "
                      f"--zero-stage {b['zero_stage']} --{'' if b['sequence_parallel'] else 'no-'}sequence-parallel"
                      + (f" --ep {b['ep']}" if moe else "") + (f" --cp {b['cp']}" if b.get("cp", 1) > 1 else "")
                      + (" --async-tp" if b.get("async_tp") else "")
                      + (" --eager" if b.get("eager") else "") + f" --precision {c.precision}"
                      + "".join(f" --{k.replace('_', '-')} {getattr(m, k):g}" for k, default in ROUTING_DEFAULTS.items()
                                if moe and getattr(m, k) != default)
                      + (f" --etp {cfg.parallel.etp}" if cfg.parallel.etp else "")
                      + "".join(f" --{k.replace('_', '-')} {v:g}" for k, v in gpu_overrides(c).items()))


# In search the layout flags filter the strategies searched instead of setting one layout.
SEARCH_FILTER_HELP = dict(
    tp="Only strategies with this tensor-parallel degree (default: all).",
    pp="Only strategies with this pipeline-parallel degree (default: all).",
    dp="Only strategies with this data-parallel degree (default: all).",
    micro_batch="Only strategies with this micro-batch size (default: all up to --max-micro-batch).",
    vpp="Only strategies with this virtual-pipeline degree (default: all).",
    ep="Only strategies with this expert-parallel degree (MoE models; default: every divisor of num_experts "
       "that divides dp).",
    recompute="Only these recompute modes, comma-separated: none, selective, full (default: all).",
    zero_stage="Only this ZeRO stage 0-3 (default: all).",
    schedule="Only these schedules, comma-separated: 1f1b, interleaved, gpipe (default: 1f1b and interleaved).",
    sequence_parallel="Only strategies with (or without) Megatron SP (default: both).",
    num_gpus="Exactly this many GPUs (or --max-gpus for a range).",
)


@app.command()
@with_field_options(help=SEARCH_FILTER_HELP)
def search(
    config: Optional[Path] = typer.Argument(None, help="Config file for the model/cluster (its parallel layout "
                                                        "is ignored; its num_gpus is the default GPU count)."),
    model: Optional[str] = ModelOpt,
    gpu: Optional[str] = GpuOpt,
    checkpoint: str = CheckpointOpt,
    max_gpus: Optional[int] = typer.Option(None, "--max-gpus", help="Search every GPU count up to N "
                                                                     "(instead of exactly --num-gpus N)."),
    min_gpus: Optional[int] = typer.Option(None, "--min-gpus", help="With --max-gpus: smallest GPU count."),
    objective: str = typer.Option("time", "--objective", help="time (fastest iteration), time-p90 (lowest upper "
                                                               "bound of the 90 % prediction interval), cost "
                                                               "(cheapest per token) or tokens-per-dollar (same "
                                                               "order as cost)."),
    top: int = typer.Option(10, "--top", "-k", help="How many strategies to show."),
    max_tp: Optional[int] = typer.Option(None, "--max-tp", help="Largest tensor-parallel degree."),
    max_pp: Optional[int] = typer.Option(None, "--max-pp", help="Largest pipeline-parallel degree."),
    max_dp: Optional[int] = typer.Option(None, "--max-dp", help="Largest data-parallel degree."),
    max_micro_batch: int = typer.Option(32, "--max-micro-batch", help="Largest micro-batch size."),
    max_vpp: Optional[int] = typer.Option(None, "--max-vpp", help="Largest virtual-pipeline degree."),
    max_ep: Optional[int] = typer.Option(None, "--max-ep", help="Largest expert-parallel degree (MoE models)."),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Training tokens for cost/days (e.g. 300e9); "
                                                                   "default: cost per 1B tokens."),
    price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour",
                                                       help="$ per GPU-hour (default: rough on-demand price of "
                                                            "the GPU type, see docs/search.md)."),
    guided: bool = typer.Option(False, "--guided", help="Gradient-guided search: evaluate only the neighbourhoods "
                                                        "of relaxed optima instead of every strategy."),
    show_sensitivity: bool = typer.Option(True, "--sensitivity/--no-sensitivity",
                                          help="Which knob matters most at the best strategy (elasticities of the time)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    as_csv: bool = typer.Option(False, "--csv", help="Print the top strategies as CSV."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write --json/--csv here (atomically)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the time-versus-cost Pareto front (PNG/PDF/SVG)."),
    **fields,
):
    """Find the fastest or cheapest strategy (tp, pp, dp, ep for MoE, micro-batch, schedule/vpp, recompute, SP, ZeRO)
    that fits in memory; every valid strategy is evaluated in one batched, jitted call."""
    from vtrain.costmodel.errors import UserError

    if as_json and as_csv:
        raise UserError("search: give --json or --csv, not both")
    if output is not None and not (as_json or as_csv):
        raise UserError("--output: only with --json or --csv")
    positive_flag("--tokens", tokens, "300e9")
    price_flag("--price-per-gpu-hour", price_per_gpu_hour)
    cfg, space = build_search_inputs(config, model, gpu, fields, max_gpus, min_gpus, max_tp, max_pp, max_dp,
                                     max_micro_batch, max_vpp, max_ep)
    from vtrain.costmodel.predictor import Predictor

    predictor = Predictor.load(checkpoint)
    from vtrain.strategy import search as engine

    engine.enable_compilation_cache()
    run = engine.guided_search if guided else engine.search
    with parameters_as_flags():
        result = run(cfg, space, predictor, objective=objective, top=top, price_per_gpu_hour=price_per_gpu_hour,
                     tokens=tokens)
    sens = engine.sensitivity(predictor, cfg, result.top[0]) if show_sensitivity and result.top else []
    if plot is not None:
        plot_pareto(result, plot)
    if as_json:
        out = dict(objective=result.objective, method=result.method, cost_basis=result.cost_basis,
                   price_per_gpu_hour=result.price_per_gpu_hour, tokens=result.tokens, checkpoint=result.checkpoint,
                   num_enumerated=result.num_enumerated, num_fit=result.num_fit, num_evaluated=result.num_evaluated,
                   timings=result.timings, num_parameters=cfg.model.num_parameters,
                   model={k: v for k, v in cfg.flat().items() if k in ("arch", "num_layers", "hidden_size",
                          "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len",
                          *(MOE_MODEL_FIELDS if cfg.model.num_experts else ()))},
                   **(dict(active_parameters=cfg.model.active_parameters) if cfg.model.num_experts else {}),
                   gpu=cfg.cluster.gpu, global_batch=cfg.parallel.global_batch,
                   num_gpus=space.num_gpus, max_gpus=space.max_gpus, top=result.top, pareto=result.pareto,
                   sensitivity=sens)
        _emit(json.dumps(out, indent=2, default=float) + "\n", output)
        return
    if as_csv:
        import csv
        import io

        rows = [_flat_row(r) for r in result.top]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["rank"])
        writer.writeheader()
        writer.writerows(rows)
        _emit(buf.getvalue(), output)
        return
    source = f"--model {model}" if model else (str(config) if config else "(model flags)")
    _print_search(result, sens, space, source)


@app.command()
def plan(
    gpu: str = typer.Option("a100-80gb", "--gpu", help="GPU preset."),
    num_gpus: Optional[int] = typer.Option(None, "--num-gpus", "--max-gpus", "-n", help="GPU budget: at most this many GPUs."),
    days: Optional[float] = typer.Option(None, "--days", help="Wall-clock budget in days."),
    tokens_per_param: float = typer.Option(20.0, "--tokens-per-param", help="Training tokens per parameter "
                                                                            "(Chinchilla: 20)."),
    arch: str = typer.Option("gpt", "--arch", help="gpt or llama shapes."),
    seq_len: int = typer.Option(2048, "--seq-len", help="Sequence length."),
    vocab_size: int = typer.Option(51200, "--vocab-size", help="Vocabulary size."),
    global_batch: int = typer.Option(1024, "--global-batch", help="Sequences per iteration."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp16, bf16 or fp8."),
    max_tp: Optional[int] = typer.Option(None, "--max-tp", help="Largest tensor-parallel degree."),
    price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour", help="$ per GPU-hour."),
    checkpoint: str = CheckpointOpt,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
):
    """Compute-optimal planning: the largest model (and its token count, tokens-per-param x parameters)
    that trains within --days on --num-gpus GPUs, using predicted throughput rather than peak FLOP/s."""
    from vtrain.costmodel.errors import UserError

    if num_gpus is None or days is None:
        raise UserError("plan: give --num-gpus N and --days D (e.g. vtrain plan --gpu h100 --num-gpus 1024 --days 30)")
    positive_flag("--days", days, "30")
    positive_flag("--tokens-per-param", tokens_per_param, "20")
    price_flag("--price-per-gpu-hour", price_per_gpu_hour)
    from vtrain.strategy import search as engine
    from vtrain.strategy.planning import plan as make_plan
    from vtrain.costmodel.predictor import Predictor

    predictor = Predictor.load(checkpoint)
    engine.enable_compilation_cache()
    with parameters_as_flags():
        res = make_plan(gpu, num_gpus, days, predictor, tokens_per_param=tokens_per_param, arch=arch,
                        seq_len=seq_len, vocab_size=vocab_size, global_batch=global_batch, precision=precision,
                        price_per_gpu_hour=price_per_gpu_hour, max_tp=max_tp)
    if as_json:
        sys.stdout.write(json.dumps(dict(gpu=res.gpu, num_gpus=res.num_gpus, days=res.days,
                                         tokens_per_param=res.tokens_per_param,
                                         price_per_gpu_hour=res.price_per_gpu_hour, recommended=res.recommended,
                                         candidates=res.rows, continuous=res.continuous), indent=2, default=float)
                         + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title=f"{res.tokens_per_param:g} tokens/parameter within {res.days:g} days on <= {res.num_gpus} x "
                        f"{res.gpu}")
    for col in ("params", "layers x hidden", "tokens", "best strategy", "GPUs", "MFU", "days", "cost", "fits"):
        table.add_column(col, justify="left" if col in ("best strategy", "layers x hidden", "fits") else "right")
    for r in res.rows:
        s = r.get("strategy")
        strat = (f"tp={s['tp']} pp={s['pp']} dp={s['dp']} mb={s['micro_batch']} {s['recompute']}"
                 if s else r.get("reason", "")[:60])
        mark = "[green]yes[/green]" if r.get("fits_budget") else "[red]no[/red]"
        if r is res.recommended:
            mark = "[bold green]<= recommended[/bold green]"
        table.add_row(f"{r['num_parameters'] / 1e9:.2f}B", f"{r['num_layers']} x {r['hidden_size']}",
                      f"{r['tokens'] / 1e9:,.0f}B", strat, str(r.get("gpus_used", "-")),
                      f"{r['mfu'] * 100:.1f}%" if "mfu" in r else "-",
                      f"{r['train_days']:,.1f}" if "train_days" in r else "-",
                      _fmt_money(r["cost"]) if "cost" in r else "-", mark)
    console.print(table)
    cont = res.continuous
    console.print(f"continuous estimate at the predicted MFU ({cont['mfu'] * 100:.1f}%): "
                  f"{cont['predicted']['num_parameters'] / 1e9:.1f}B parameters on "
                  f"{cont['predicted']['tokens'] / 1e9:,.0f}B tokens; at peak FLOP/s it would be "
                  f"{cont['peak']['num_parameters'] / 1e9:.1f}B on {cont['peak']['tokens'] / 1e9:,.0f}B tokens")
