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

from vtrain.costmodel.correction import HIDDEN, OVERHEAD_INIT_BIAS, network_shapes


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
    """Fresh correction parameters (equal to the analytical model until trained), one network per
    entry of `correction.network_shapes()`."""
    nets = network_shapes()
    keys = jax.random.split(jax.random.PRNGKey(seed), len(nets))
    params: dict = {}
    for key, (path, (inputs, outputs)) in zip(keys, nets.items()):
        bias = (0.0, OVERHEAD_INIT_BIAS) if path == "global" else ()
        net = CorrectionMLP(outputs, output_bias=bias).init(key, jnp.zeros((1, inputs)))["params"]
        node = params
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = net
    return jax.tree_util.tree_map(jnp.asarray, params)


def to_numpy(params: dict) -> dict:
    """Parameters as float64 numpy arrays (for checkpoints and the numpy predictor)."""
    import numpy as np

    return jax.tree_util.tree_map(lambda a: np.asarray(a, dtype=np.float64), params)


def param_count(params: dict) -> int:
    """Trainable parameters (the stored feature ranges are not counted)."""
    trainable = {k: v for k, v in params.items() if k != "feature_range"}
    return int(sum(x.size for x in jax.tree_util.tree_leaves(trainable)))
