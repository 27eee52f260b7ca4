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
from vtrain.costmodel.correction import parameter_shapes, trainable_count
from vtrain.costmodel.errors import UserError
from vtrain.costmodel.intervals import check_calibration

FORMAT_VERSION = 4  # 2: the global term does not read dp; the trust weight's feature range; 3: the trust
# features include the GPUs per node and the execution flags (correction.CONFIG_FEATURE_NAMES); 4: and
# the PyTorch eager flag
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "checkpoints"
DEFAULT_NAME = "default"
# The analytical predictor's prediction-interval calibration (`vtrain calibrate DATASET -c none`)
ANALYTICAL_INTERVALS = "analytical.intervals.json"


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
    """(correction parameters, metadata) from a checkpoint; CheckpointError with the fix on failure.
    Checked: the .npz is an archive of arrays, its .json metadata is beside it with this format and
    the same parameter count, every expected array is there with its shape (from
    `correction.parameter_shapes`), none unexpected, all finite."""
    path = resolve_path(name_or_path)
    meta_path = path.with_suffix(".json")
    retrain = f"retrain with `vtrain fit DATASET_DIR -o {path}` or use --checkpoint none"
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' not found; train one with `vtrain fit DATASET_DIR -o {path}` "
                              "or use --checkpoint none for the analytical model")
    try:
        with np.load(path, allow_pickle=False) as data:
            flat = {key: np.asarray(data[key], dtype=np.float64) for key in data.files}
    except Exception:  # not a zip, truncated, pickled objects, non-numeric arrays, ...
        raise CheckpointError(f"checkpoint '{path}' is not a readable .npz of numeric arrays (damaged, or not "
                              f"written by `vtrain fit`); {retrain}") from None
    if not meta_path.is_file():
        raise CheckpointError(f"checkpoint '{path}' has no metadata file '{meta_path}' beside it; copy the .json "
                              f"written with it by `vtrain fit`, or {retrain}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint metadata '{meta_path}' is not valid JSON ({err}); copy the .json "
                              f"written with '{path}' by `vtrain fit`, or {retrain}") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        found = meta.get("format_version") if isinstance(meta, dict) else None
        raise CheckpointError(f"checkpoint '{path}' has format {found!r} in '{meta_path}', this vtrain reads "
                              f"format {FORMAT_VERSION}; {retrain}")
    check_arrays(flat, path)
    if isinstance(meta.get("parameters"), int) and meta["parameters"] != trainable_count(flat):
        raise CheckpointError(f"checkpoint '{path}' does not match its metadata '{meta_path}' "
                              f"({trainable_count(flat)} parameters in the .npz, {meta['parameters']} in the "
                              f".json): the two files come from different fits; copy them together or {retrain}")
    try:
        meta["intervals"] = check_calibration(meta.get("intervals"), str(meta_path))
    except ValueError as err:
        raise CheckpointError(f"checkpoint metadata {err}; recalibrate with `vtrain calibrate DATASET_DIR -c {path}` "
                              "or remove the 'intervals' entry (predictions then carry no interval)") from None
    return unflatten(flat), meta


def shipped_dir() -> Path:
    """The installed package's checkpoints/ folder."""
    try:
        from importlib.resources import files

        return Path(str(files("vtrain.checkpoints")))
    except ModuleNotFoundError:
        return CHECKPOINT_DIR


def load_analytical_intervals() -> dict | None:
    """The shipped calibration of the analytical predictor's intervals (None if not shipped)."""
    path = shipped_dir() / ANALYTICAL_INTERVALS
    if not path.is_file():
        return None
    try:
        return check_calibration(json.loads(path.read_text(encoding="utf-8")), str(path))
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: {err}; recalibrate with `vtrain calibrate DATASET_DIR -c none "
                              "--replace-shipped`") from None


def set_intervals(path: str | os.PathLike, calibration: dict) -> Path:
    """Store `calibration` as the "intervals" entry of checkpoint `path`'s .json metadata (atomically;
    the weights are not touched). Returns the .json path."""
    meta_path = resolve_path(path).with_suffix(".json")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["intervals"] = calibration
    atomic_write(meta_path, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n"))
    return meta_path


def write_json(path: str | os.PathLike, data: dict) -> Path:
    """`data` as indented JSON at `path`, atomically."""
    path = Path(path)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n"))
    return path


def check_arrays(flat: dict[str, np.ndarray], path: Path) -> None:
    """The expected arrays (correction.parameter_shapes) are all present with their shapes, no
    others, and finite; CheckpointError naming the first problem otherwise."""
    required, optional = parameter_shapes()
    retrain = "retrain with `vtrain fit` or use --checkpoint none"
    missing = [name for name in required if name not in flat]
    if len(missing) == len(required):
        raise CheckpointError(f"checkpoint '{path}' holds none of the expected correction arrays (e.g. "
                              f"'{missing[0]}'; it has {len(flat)} others); it is not a vtrain checkpoint: {retrain}")
    if missing:
        raise CheckpointError(f"checkpoint '{path}' lacks {len(missing)} of its {len(required)} expected arrays "
                              f"(e.g. '{missing[0]}'); it is incomplete or from another vtrain version: {retrain}")
    unexpected = sorted(set(flat) - set(required) - set(optional))
    if unexpected:
        raise CheckpointError(f"checkpoint '{path}' has {len(unexpected)} arrays this vtrain does not use (e.g. "
                              f"'{unexpected[0]}'); it is from another vtrain version: {retrain}")
    for name, array in flat.items():
        shape = {**required, **optional}[name]
        if array.shape != shape:
            raise CheckpointError(f"checkpoint '{path}' is incompatible with this vtrain: '{name}' has shape "
                                  f"{array.shape}, expected {shape}; {retrain}")
        if not np.all(np.isfinite(array)):
            raise CheckpointError(f"checkpoint '{path}' has non-finite values (NaN or inf) in '{name}'; the fit "
                                  f"diverged or the file is damaged: {retrain}")


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
