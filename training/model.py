"""The learned correction's networks (flax) and their initialisation.

Each network is a small MLP whose last layer starts at zero, so the corrected simulator starts
out equal to the analytical one (see costmodel/correction.py for how outputs are bounded and
used). Parameters are a plain nested dict:

    {"ops": {op_class: mlp}, "collectives": mlp, "global": mlp,
     "in_situ": {"ops": {op_class: mlp}, "collectives": mlp}}

with each mlp in flax's layout {"Dense_0": {"kernel", "bias"}, "Dense_1": {...}}.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from vtrain.costmodel.correction import (N_COLLECTIVE_FEATURES, N_OP_FEATURES, N_RUN_FEATURES, OP_CLASSES,
                                         OVERHEAD_INIT_BIAS)

HIDDEN = 16


class CorrectionMLP(nn.Module):
    """features -> hidden (tanh) -> outputs, with a zero-initialised output layer."""

    outputs: int
    hidden: int = HIDDEN
    output_bias: tuple = ()

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(self.hidden, name="Dense_0")(x))
        bias = (lambda key, shape, dtype=jnp.float32: jnp.asarray(self.output_bias, dtype)) if self.output_bias \
            else nn.initializers.zeros
        return nn.Dense(self.outputs, kernel_init=nn.initializers.zeros, bias_init=bias, name="Dense_1")(x)


def init_correction(seed: int = 0) -> dict:
    """Fresh correction parameters (equal to the analytical model until trained)."""
    key = jax.random.PRNGKey(seed)
    keys = jax.random.split(key, 2 * len(OP_CLASSES) + 3)

    def op_and_collective_nets(keys):
        ops = {cls: CorrectionMLP(1).init(keys[i], jnp.zeros((1, N_OP_FEATURES)))["params"]
               for i, cls in enumerate(OP_CLASSES)}
        return ops, CorrectionMLP(2).init(keys[len(OP_CLASSES)], jnp.zeros((1, N_COLLECTIVE_FEATURES)))["params"]

    ops, collectives = op_and_collective_nets(keys[:len(OP_CLASSES) + 1])
    in_situ_ops, in_situ_collectives = op_and_collective_nets(keys[len(OP_CLASSES) + 1:-1])
    global_ = CorrectionMLP(2, output_bias=(0.0, OVERHEAD_INIT_BIAS)).init(
        keys[-1], jnp.zeros((1, N_RUN_FEATURES)))["params"]
    params = {"ops": ops, "collectives": collectives, "global": global_,
              "in_situ": {"ops": in_situ_ops, "collectives": in_situ_collectives}}
    return jax.tree_util.tree_map(jnp.asarray, params)


def to_numpy(params: dict) -> dict:
    """Parameters as float64 numpy arrays (for checkpoints and the numpy predictor)."""
    import numpy as np

    return jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=np.float64), params)


def param_count(params: dict) -> int:
    """Trainable parameters (the stored feature ranges are not counted)."""
    trainable = {k: v for k, v in params.items() if k != "feature_range"}
    return int(sum(x.size for x in jax.tree_util.tree_leaves(trainable)))
