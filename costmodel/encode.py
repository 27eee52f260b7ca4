"""Turn validated configs into the simulator's input: a dict of float arrays, one entry per config.

Enums become numbers (recompute: none 0 / selective 1 / full 2; schedule: 1f1b 0 / interleaved 1 /
gpipe 2; arch: llama 1 / gpt 0; attention: flash 1 / unfused 0) and the GPU preset becomes its figures in FLOP/s, bytes and
bytes/s, so the simulator never looks anything up.
"""
from __future__ import annotations

import numpy as np

from vtrain.costmodel.hardware import lookup_gpu
from vtrain.costmodel.spec import RECOMPUTE_MODES, SCHEDULES, TrainConfig

GRAD_BYTES = {"fp16": 2.0, "bf16": 4.0, "fp8": 4.0}  # Megatron keeps fp32 main grads for bf16


def config_row(config: TrainConfig) -> dict[str, float]:
    """The simulator's numeric fields for one config."""
    mdl, par, clu = config.model, config.parallel, config.cluster
    gpu = lookup_gpu(clu.gpu)
    return dict(
        layers=mdl.num_layers, hidden=mdl.hidden_size, heads=mdl.num_attention_heads, kv_heads=mdl.num_kv_heads,
        ffn=mdl.ffn_hidden_size, vocab=mdl.vocab_size, seq=mdl.seq_len, llama=float(mdl.arch == "llama"),
        flash=float(mdl.attention == "flash"),
        tp=par.tp, pp=par.pp, dp=par.dp, num_gpus=par.num_gpus, micro_batch=par.micro_batch,
        global_batch=par.global_batch, num_micro_batches=par.num_micro_batches, sp=float(par.sequence_parallel),
        recompute=RECOMPUTE_MODES.index(par.recompute), zero_stage=par.zero_stage,
        schedule=SCHEDULES.index(par.schedule), vpp=par.vpp, overlap=float(par.overlap_grad_reduce),
        peak_flops=gpu.flops(clu.precision), peak_flops_16=gpu.peak_flops.get("bf16", gpu.peak_flops["fp16"]),
        hbm_bw=gpu.hbm_bw, hbm_bytes=gpu.hbm_bytes, intra_bw=clu.intra_node_bw_GBps * 1e9,
        inter_bw=clu.inter_node_bw_Gbps * 1e9 / 8.0, gpus_per_node=clu.gpus_per_node,
        grad_bytes=GRAD_BYTES[clu.precision],
    )




def encode(configs: list[TrainConfig]) -> dict[str, np.ndarray]:
    """Stack configs into arrays of shape [N] (float64)."""
    rows = [config_row(c) for c in configs]
    return {key: np.array([r[key] for r in rows], dtype=np.float64) for key in rows[0]}

