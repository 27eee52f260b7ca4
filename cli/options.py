"""Shared command-line options: every canonical config field as a flag (flags override files)."""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Optional

import typer

from vtrain.costmodel.spec import FIELD_KINDS

ModelOpt = typer.Option(None, "--model", "-m", help="Model preset, e.g. gpt3-175b, llama2-70b, mt-nlg-530b.")
GpuOpt = typer.Option(None, "--gpu", help="GPU preset: v100, a100-40gb, a100-80gb, h100-sxm, h200, b200, mi300x.")
CheckpointOpt = typer.Option("default", "--checkpoint", "-c",
                             help="Correction checkpoint: 'default' (shipped), a .npz path, or 'none' (analytical).")


ZERO_ALLOWED = ("zero_stage", "num_experts", "experts_per_token", "moe_ffn_hidden_size", "shared_experts",
                "first_dense_layers", "capacity_factor")


def config_overrides(**flags) -> dict:
    """Canonical-field overrides from flag values (None = not given). Numeric flags must be positive
    (0 means 'derive it' only inside config files and tables)."""
    from vtrain.costmodel.errors import UserError

    for name, value in flags.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in ZERO_ALLOWED \
                and value <= 0:
            raise UserError(f"--{name.replace('_', '-')}: {value} must be a positive number")
    return {k: v for k, v in flags.items() if v is not None}


@contextmanager
def parameters_as_flags(flags: dict[str, str] | None = None):
    """Inside the block, a library ParameterError (which names a function parameter) becomes a
    UserError naming the command's flag or argument instead: `flags[parameter]` where the command
    spells it differently (e.g. {"output_path": "--output"}), else --parameter-name."""
    from vtrain.costmodel.errors import ParameterError, UserError

    try:
        yield
    except ParameterError as err:
        raise UserError(err.flag_message(flags)) from None


def positive_flag(flag: str, value: float | None, example: str = "") -> None:
    """Refuse a flag value that is NaN, infinite or <= 0 (None = not given) in one line naming it."""
    from vtrain.costmodel.errors import UserError

    hint = f", e.g. {example}" if example else ""
    if value is not None and not math.isfinite(value):
        raise UserError(f"{flag}: {value:g} is not a finite number; give a positive number{hint}")
    if value is not None and value <= 0:
        raise UserError(f"{flag}: {value:g} must be positive{hint}")


def price_flag(flag: str, value: float | None) -> None:
    """Refuse a price that is NaN, infinite or negative (0 = free; None = not given)."""
    from vtrain.costmodel.errors import UserError

    if value is not None and not math.isfinite(value):
        raise UserError(f"{flag}: {value:g} is not a finite number; give a price >= 0, e.g. 2.5")
    if value is not None and value < 0:
        raise UserError(f"{flag}: {value:g} must be >= 0")


# The flag definitions for every canonical field, reused by commands that take a config.
FIELD_OPTIONS = dict(
    num_layers=typer.Option(None, "--num-layers", help="Transformer layers."),
    hidden_size=typer.Option(None, "--hidden-size", help="Hidden size."),
    num_attention_heads=typer.Option(None, "--num-attention-heads", "--heads", help="Attention heads."),
    num_kv_heads=typer.Option(None, "--num-kv-heads", help="Key/value heads (GQA; default = heads)."),
    ffn_hidden_size=typer.Option(None, "--ffn-hidden-size", help="MLP hidden size (default 4*hidden for gpt)."),
    vocab_size=typer.Option(None, "--vocab-size", help="Vocabulary size (default 51200)."),
    seq_len=typer.Option(None, "--seq-len", help="Sequence length in tokens."),
    arch=typer.Option(None, "--arch", help="gpt (LayerNorm, GeLU) or llama (RMSNorm, SwiGLU, RoPE, GQA)."),
    attention=typer.Option(None, "--attention", help="flash (fused FlashAttention, default) or unfused "
                           "(Megatron's QK^T-softmax-PV with s^2 scores, as vTrain's runs)."),
    num_experts=typer.Option(None, "--num-experts", help="Routed experts per MoE layer (0 = dense)."),
    experts_per_token=typer.Option(None, "--experts-per-token", help="Routed experts per token (top-k)."),
    moe_ffn_hidden_size=typer.Option(None, "--moe-ffn-hidden-size", help="FFN size of one expert "
                                     "(default ffn_hidden_size)."),
    shared_experts=typer.Option(None, "--shared-experts", help="Shared experts (each of moe_ffn_hidden_size)."),
    first_dense_layers=typer.Option(None, "--first-dense-layers", help="Leading dense layers before the MoE ones."),
    moe_layer_freq=typer.Option(None, "--moe-layer-freq", help="After the dense layers every k-th layer is MoE "
                                "(default 1: all)."),
    capacity_factor=typer.Option(None, "--capacity-factor", help="Expert capacity factor (>= 1; tokens beyond it "
                                 "are dropped; default 0: dropless)."),
    moe_imbalance=typer.Option(None, "--moe-imbalance", help="Routed tokens of the most loaded expert-parallel rank "
                               "/ the balanced share (default 1: balanced)."),
    num_gpus=typer.Option(None, "--num-gpus", "-n", help="Total GPUs (= tp*pp*dp)."),
    tp=typer.Option(None, "--tp", help="Tensor-parallel degree."),
    pp=typer.Option(None, "--pp", help="Pipeline-parallel degree."),
    dp=typer.Option(None, "--dp", help="Data-parallel degree (default num_gpus/(tp*pp))."),
    micro_batch=typer.Option(None, "--micro-batch", help="Micro-batch size in sequences."),
    global_batch=typer.Option(None, "--global-batch", help="Global batch size in sequences."),
    sequence_parallel=typer.Option(None, "--sequence-parallel/--no-sequence-parallel", help="Megatron SP."),
    recompute=typer.Option(None, "--recompute", help="Activation recomputation: none, selective, full, "
                           "selective-op (torchtitan's op-level AC), selective-layer (every second layer full)."),
    zero_stage=typer.Option(None, "--zero-stage", help="ZeRO stage 0-3 (1 = distributed optimizer)."),
    schedule=typer.Option(None, "--schedule", help="Pipeline schedule: 1f1b, interleaved, gpipe."),
    vpp=typer.Option(None, "--vpp", help="Virtual pipeline stages per GPU (interleaved)."),
    overlap_grad_reduce=typer.Option(None, "--overlap-grad-reduce/--no-overlap-grad-reduce",
                                     help="Overlap DP gradient reduction with the backward pass."),
    async_tp=typer.Option(None, "--async-tp/--no-async-tp", help="Async TP: overlap the sequence-parallel "
                          "all-gathers / reduce-scatters with the GEMMs (needs --sequence-parallel)."),
    eager=typer.Option(None, "--eager/--no-eager", help="PyTorch eager mode (no torch.compile): norms, RoPE and "
                       "activations run as unfused composite kernels (default: fused, as Megatron or torch.compile)."),
    first_stage_layers=typer.Option(None, "--first-stage-layers", help="Layers of the first pipeline stage "
                                    "(uneven stages; default: spread evenly)."),
    last_stage_layers=typer.Option(None, "--last-stage-layers", help="Layers of the last pipeline stage "
                                   "(uneven stages; default: spread evenly)."),
    cp=typer.Option(None, "--cp", help="Context-parallel degree: each sequence split over cp GPUs (ring attention; "
                    "dp = num_gpus/(tp*pp*cp))."),
    ep=typer.Option(None, "--ep", help="Expert-parallel degree (inside the data-parallel group)."),
    etp=typer.Option(None, "--etp", help="Expert tensor-parallel degree dividing tp (default tp); with etp < tp the "
                     "expert-parallel group also spans tp ranks."),
    gpus_per_node=typer.Option(None, "--gpus-per-node", help="GPUs per node (default from the GPU preset)."),
    intra_node_bw_GBps=typer.Option(None, "--intra-node-bw-GBps", help="NVLink GB/s per GPU per direction."),
    inter_node_bw_Gbps=typer.Option(None, "--inter-node-bw-Gbps", help="NIC Gb/s per GPU."),
    precision=typer.Option(None, "--precision", help="fp16, bf16 or fp8."),
    peak_tflops=typer.Option(None, "--peak-tflops", help="Dense bf16/fp16 peak TFLOP/s (default from the GPU preset; "
                             "the fp8 peak scales with it), e.g. for a power-capped part."),
    hbm_bandwidth_GBps=typer.Option(None, "--hbm-bandwidth-GBps", help="HBM GB/s (default from the GPU preset)."),
    gpu_memory_GiB=typer.Option(None, "--gpu-memory-GiB", help="GPU memory in GiB (default from the GPU preset)."),
    attention_efficiency=typer.Option(None, "--attention-efficiency", help="Fraction of the 16-bit peak the fused "
                                      "FlashAttention kernel reaches (default from the GPU preset: 0.45, 0.25 for "
                                      "FlashAttention-2 on H100/H200; e.g. 0.6 for FlashAttention-3)."),
)
# Flag value types follow the spec's field types (every flag is optional).
FIELD_TYPES = {name: Optional[{"int": int, "float": float, "bool": bool, "str": str}[FIELD_KINDS[name]]]
               for name in FIELD_OPTIONS}


def with_field_options(func=None, *, help: dict | None = None):
    """Decorator: add every canonical field as a keyword-only flag to a typer command.
    The command receives them in `**fields` (values None when not given). `help` replaces the help
    text of some fields (e.g. search, where --tp filters rather than sets):
    `@with_field_options(help=dict(tp="..."))`."""
    import copy
    import inspect

    if func is None:
        return lambda f: with_field_options(f, help=help)
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    for name, option in FIELD_OPTIONS.items():
        if help and name in help:
            option = copy.copy(option)
            option.help = help[name]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                        annotation=FIELD_TYPES[name]))

    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper
