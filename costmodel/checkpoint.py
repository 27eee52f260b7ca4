"""Read and write correction checkpoints: weights in .npz, metadata in a .json beside them.

Reading needs only numpy, so `vtrain predict` applies the learned correction without JAX.
Weights are the nested parameter dict flattened with '/'-joined keys
(e.g. 'ops/gemm/Dense_0/kernel').
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from vtrain.costmodel.atomic import atomic_write
from vtrain.costmodel.errors import UserError

FORMAT_VERSION = 1
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
DEFAULT_NAME = "default"


class CheckpointError(UserError):
    pass


def flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "/"))
        else:
            out[path] = np.asarray(value)
    return out


def unflatten(flat: dict) -> dict:
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def resolve_path(name_or_path: str | os.PathLike) -> Path:
    """'default' (or another name) -> the shipped checkpoints/<name>.npz; paths pass through."""
    text = str(name_or_path)
    path = Path(text)
    if path.is_file() and path.suffix != ".npz":
        raise CheckpointError(f"checkpoint '{path}' is not a .npz checkpoint; give the .npz written by `vtrain fit`")
    if path.suffix == ".npz" or path.exists() or os.sep in text:
        return path if path.suffix == ".npz" else path.with_suffix(".npz")
    try:  # installed package location
        from importlib.resources import files
        shipped = Path(str(files("vtrain.checkpoints"))) / f"{text}.npz"
        if shipped.exists():
            return shipped
    except ModuleNotFoundError:
        pass
    return CHECKPOINT_DIR / f"{text}.npz"


def load(name_or_path: str | os.PathLike = DEFAULT_NAME) -> tuple[dict, dict]:
    """(correction parameters, metadata) from a checkpoint; CheckpointError with the fix on failure."""
    path = resolve_path(name_or_path)
    meta_path = path.with_suffix(".json")
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' not found; train one with `vtrain fit DATASET_DIR -o {path}` "
                              "or use --checkpoint none for the analytical model")
    try:
        with np.load(path, allow_pickle=False) as data:
            flat = {key: np.asarray(data[key], dtype=np.float64) for key in data.files}
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    except Exception as err:  # corrupt zip, bad JSON, ...
        raise CheckpointError(f"checkpoint '{path}' is unreadable ({type(err).__name__}: {err}); "
                              "re-create it with `vtrain fit` or use --checkpoint none") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint '{path}' has format {meta.get('format_version')!r}, this vtrain reads "
                              f"format {FORMAT_VERSION}; retrain with `vtrain fit` or use --checkpoint none")
    params = unflatten(flat)
    _check_compatible(params, path)
    return params, meta


def _check_compatible(params: dict, path: Path) -> None:
    """Every network's input width must match the features this version computes."""
    from vtrain.costmodel.correction import N_COLLECTIVE_FEATURES, N_OP_FEATURES, N_RUN_FEATURES

    expected = {"global": (N_RUN_FEATURES, 2), "collectives": (N_COLLECTIVE_FEATURES, 2)}
    expected.update({f"ops/{cls}": (N_OP_FEATURES, 1) for cls in params.get("ops", {})})
    expected["in_situ/collectives"] = (N_COLLECTIVE_FEATURES, 2)
    expected.update({f"in_situ/ops/{cls}": (N_OP_FEATURES, 1) for cls in params.get("in_situ", {}).get("ops", {})})
    for name, (width, outputs) in expected.items():
        node = params
        for part in name.split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        kernel = node.get("Dense_0", {}).get("kernel") if isinstance(node, dict) else None
        if kernel is None:
            continue
        last = node[max((k for k in node if k.startswith("Dense_")), key=lambda k: int(k.split("_")[1]))]["kernel"]
        if kernel.ndim != 2 or kernel.shape[0] != width or last.ndim != 2 or last.shape[1] != outputs:
            raise CheckpointError(f"checkpoint '{path}' is incompatible with this vtrain ({name} expects {width} "
                                  f"inputs and {outputs} outputs, the file has {tuple(kernel.shape)} -> "
                                  f"{tuple(last.shape)}); retrain "
                                  "with `vtrain fit` or use --checkpoint none")


def save(path: str | os.PathLike, params: dict, metadata: dict) -> Path:
    """Write weights (.npz) and metadata (.json) atomically; returns the .npz path."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(".npz")
    flat = flatten(params)
    meta = dict(metadata, format_version=FORMAT_VERSION)

    def write_npz(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **flat)

    def write_json(tmp):
        Path(tmp).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    atomic_write(path, write_npz)
    atomic_write(path.with_suffix(".json"), write_json)
    return path
