"""Values that change a prediction and that the user did not give: the defaults build_config filled.

`assumed_defaults(given, cfg)` lists them as {"field", "value", "reason"} dicts, in a fixed order;
`predict` prints them in its footer and in --json as `assumed`. Fields derived from what was given
(dp from num_gpus/tp/pp, GPU link figures from the preset) are not assumptions and are not listed.
"""
from __future__ import annotations

from vtrain.costmodel.hardware import DEFAULT_ATTENTION_EFFICIENCY, lookup_gpu
from vtrain.costmodel.spec import TrainConfig


def _reason(name: str, cfg: TrainConfig) -> str:
    p = cfg.parallel
    return {
        "gpu": "default; --gpu",
        "precision": f"{cfg.cluster.gpu}'s default; --precision",
        "seq_len": "default; --seq-len",
        "vocab_size": "default, GPT-2's padded; --vocab-size",
        "micro_batch": "default; --micro-batch",
        "global_batch": f"dp x micro_batch = {p.dp} x {p.micro_batch}; --global-batch",
        "recompute": "default: no recomputation; --recompute",
        "zero_stage": "default: no ZeRO; --zero-stage",
        "sequence_parallel": "default; --sequence-parallel",
        "attention": "default: fused FlashAttention; --attention",
        "eager": "default: fused norm and activation kernels, as Megatron or torch.compile; --eager",
    }[name]


ASSUMED_FIELDS = ("gpu", "precision", "seq_len", "vocab_size", "attention", "micro_batch", "global_batch",
                  "recompute", "zero_stage", "sequence_parallel", "eager")


def assumed_defaults(given: set, cfg: TrainConfig) -> list[dict]:
    """Defaults (not in `given`, the canonical fields a file, preset or flag set) that change the answer."""
    flat = cfg.flat()
    out = [dict(field=name, value=flat[name], reason=_reason(name, cfg)) for name in ASSUMED_FIELDS
           if name not in given]
    # a GPU-specific fused-attention prior (Hopper: FlashAttention-2's) is a choice of kernel the
    # user may not share: say so where it applies
    preset = lookup_gpu(cfg.cluster.gpu)
    if cfg.model.attention == "flash" and "attention_efficiency" not in given and \
            preset.attention_efficiency != DEFAULT_ATTENTION_EFFICIENCY:
        out.append(dict(field="attention_efficiency", value=flat["attention_efficiency"],
                        reason=f"{preset.name}'s FlashAttention-2 prior; FlashAttention-3 reaches more; "
                               "--attention-efficiency"))
    return out


def assumed_line(assumed: list[dict]) -> str:
    """One 'assumed: field=value (reason); ...' line ('' when nothing was assumed)."""
    if not assumed:
        return ""
    return "assumed: " + "; ".join(f"{a['field']}={_text(a['value'])} ({a['reason']})" for a in assumed)


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
