"""The learned correction: starts equal to the analytical model, learns a systematic error from
held-out-safe data, round-trips through checkpoints, and the profile -> fit -> predict path."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vtrain.costmodel import checkpoint as ckpt
from vtrain.costmodel.encode import encode
from vtrain.costmodel.simulator import BASE_EFFICIENCY, simulate
from vtrain.costmodel.spec import build_config
from vtrain.dataset import store
from vtrain.training.evaluate import cross_validate, cross_validate_runs, error_stats, summarize, summarize_measurements
from vtrain.training.fit import FitSettings
from vtrain.training.model import init_correction, to_numpy

REPO = Path(__file__).resolve().parent.parent

SLOWDOWN = 1.35  # the synthetic "measured" runs are 35% slower than the analytical model


def synthetic_runs(seed=0) -> pd.DataFrame:
    """Runs for 4 model shapes, 'measured' = analytical * SLOWDOWN * small noise. The shapes pair up
    (16 or 8 heads of the same layers x hidden), so whichever shape a 2-fold CV holds out, its layers
    and hidden size lie inside the range of the shapes it trains on, where the correction applies in
    full (outside, it fades to the analytical model: tests/test_trust.py)."""
    rng = np.random.default_rng(seed)
    rows = []
    for layers, hidden, heads in [(12, 1024, 16), (12, 1024, 8), (24, 2048, 16), (24, 2048, 8)]:
        for tp, pp, mb in [(1, 1, 1), (2, 1, 2), (2, 2, 4), (4, 2, 1), (1, 4, 2), (8, 1, 4)]:
            cfg = build_config(dict(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, seq_len=1024,
                                    num_gpus=8, tp=tp, pp=pp, micro_batch=mb, global_batch=64, recompute="full",
                                    precision="fp16"))
            rows.append(cfg.flat())
    frame = pd.DataFrame(rows)
    configs = [build_config(r) for r in rows]
    analytical = simulate(encode(configs))["iteration_time_s"]
    frame["iteration_time_s"] = analytical * SLOWDOWN * np.exp(rng.normal(0, 0.01, len(rows)))
    frame["interconnect"] = "nvlink"
    frame["source"] = "test:synthetic"
    return frame


def test_untrained_correction_equals_analytical():
    d = encode([build_config(dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_gpus=8, tp=2, pp=2,
                                  global_batch=32, attention="unfused"))])
    plain = simulate(d)["iteration_time_s"]
    corrected = simulate(d, to_numpy(init_correction(3)))["iteration_time_s"]
    assert np.allclose(plain, corrected, rtol=1e-5)


def test_grouped_cv_learns_a_systematic_error_on_held_out_shapes(tmp_path):
    runs = synthetic_runs()
    store.append(tmp_path, "runs", runs)
    from vtrain.training.data import load_dataset

    ds = load_dataset(tmp_path)
    before = error_stats(simulate(encode([build_config(r) for r in ds.runs.drop(
        columns=["iteration_time_s", "interconnect", "source"]).to_dict("records")]))["iteration_time_s"],
        ds.runs["iteration_time_s"])
    cv = cross_validate_runs(ds, FitSettings(steps=150, learning_rate=3e-2, progress=False), folds=2)
    assert len(cv) == len(runs) and cv["shape"].nunique() == 4
    after = summarize(cv).set_index("group").loc["overall"]
    assert before["mape"] > 20
    assert after["mape"] < before["mape"] / 3, (before, after)


GEMM_EFFICIENCY = 0.45  # the synthetic "measured" GEMMs reach 45% of peak (below the analytical prior)
# MAPE of the uncorrected model on them: every row is predicted too fast by the same factor
ANALYTICAL_GEMM_MAPE = 100 * (1 - GEMM_EFFICIENCY / BASE_EFFICIENCY["gemm"])


def synthetic_gemms() -> pd.DataFrame:
    """bf16 GEMM rows on an A100 for 6 weight shapes x 4 token counts, timed at GEMM_EFFICIENCY of peak."""
    from vtrain.costmodel.hardware import lookup_gpu
    from vtrain.dataset.rows import kernel_row

    a100 = lookup_gpu("a100-80gb")
    rows = []
    for n, k in [(1024, 1024), (2048, 1024), (4096, 1024), (1024, 4096), (2048, 2048), (3072, 1024)]:
        for m in (2048, 4096, 8192, 16384):
            row = kernel_row("test:gemm", a100.name, "bf16", "gemm", "linear", "fwd", 1.0, m=m, n=n, k=k)
            roofline = max(row["flops"] / a100.peak_flops["bf16"], row["bytes_moved"] / a100.hbm_bw)
            row["time_s"] = roofline / GEMM_EFFICIENCY
            rows.append(row)
    return pd.DataFrame(rows)


def test_joint_cv_holds_out_runs_and_kernels_together_and_learns_both(tmp_path):
    store.append(tmp_path, "runs", synthetic_runs())
    store.append(tmp_path, "kernels", synthetic_gemms())
    from vtrain.training.data import load_dataset

    ds = load_dataset(tmp_path)
    runs, measured = cross_validate(ds, FitSettings(steps=150, learning_rate=3e-2, progress=False), folds=2)
    assert len(runs) == len(ds.runs) and runs["shape"].nunique() == 4
    assert sorted(measured["stage"].unique()) == ["final", "pre-trained"]
    final = measured[measured["stage"] == "final"]
    assert len(final) == ds.kernels.rows  # every kernel row predicted once, by the fold that held it out
    held_out = summarize_measurements(final).set_index("group").loc["all kernels", "mape"]
    assert held_out < ANALYTICAL_GEMM_MAPE / 2, (held_out, ANALYTICAL_GEMM_MAPE)
    assert summarize(runs).set_index("group").loc["overall", "mape"] < 10


def test_validate_cli_on_kernels_only_scores_held_out_kernels(cli, tmp_path):
    """A dataset from `vtrain profile` on new hardware has kernels but no runs."""
    store.append(tmp_path / "ds", "kernels", synthetic_gemms())
    result = cli("validate", tmp_path / "ds", "--folds", "2", "--steps", "40", "--json", "-q")
    assert result.returncode == 0, result.stderr
    figures = {r["group"]: r for r in json.loads(result.stdout)["kernels_collectives_cv"]}
    assert figures["all kernels"]["rows"] == len(synthetic_gemms())
    assert figures["all kernels"]["mape"] < ANALYTICAL_GEMM_MAPE / 2


def _with_random_outputs(params, seed=1):
    """`params` with every network's output layer randomised (fresh ones start at zero, where some
    gradients vanish)."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten_with_path(params)
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_unflatten(tree, [
        rng.normal(0, 0.3, np.shape(leaf)).astype(np.float32) if "Dense_1" in jax.tree_util.keystr(path) else leaf
        for path, leaf in leaves])


def _runs_and_gemms_arrays(tmp_path) -> dict:
    """Device arrays of a dataset of the synthetic runs and GEMMs, as the fit's loss sees them."""
    from vtrain.training.data import fit_data, load_dataset
    from vtrain.training.fit import _device_data

    store.append(tmp_path, "runs", synthetic_runs())
    store.append(tmp_path, "kernels", synthetic_gemms())
    return _device_data(fit_data(load_dataset(tmp_path)))


def test_end_to_end_gradients_are_routed_runs_to_in_situ_and_kernels_to_op_networks(tmp_path):
    import jax

    from vtrain.training.fit import loss_terms

    arrays = _runs_and_gemms_arrays(tmp_path)
    params = _with_random_outputs(init_correction(0))

    def grads_of(term):
        return jax.grad(lambda p: loss_terms(p, arrays, ("kernels",), in_situ=True)[term])(params)

    def size(tree):
        return float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree_util.tree_leaves(tree)))

    from_runs, from_kernels = grads_of("runs"), grads_of("kernels")
    from_kernels_in_situ = grads_of("kernels_in_situ")
    assert size(from_runs["ops"]) == 0 and size(from_runs["collectives"]) == 0
    assert size(from_runs["in_situ"]["ops"]["gemm"]) > 0 and size(from_runs["global"]) > 0
    assert size(from_kernels["in_situ"]) == 0 and size(from_kernels["ops"]["gemm"]) > 0
    assert size(from_kernels_in_situ["ops"]) == 0 and size(from_kernels_in_situ["in_situ"]["ops"]["gemm"]) > 0


def test_standalone_kernels_ignore_the_in_situ_part_and_the_simulator_uses_it():
    from vtrain.costmodel.correction import standalone
    from vtrain.costmodel.simulator import kernel_time

    params = to_numpy(_with_random_outputs(init_correction(0)))
    without_in_situ = {k: v for k, v in params.items() if k != "in_situ"}
    op = dict(cls="gemm", flops=np.array([2e12]), bytes=np.array([3e7]), m=np.array([8192.0]), n=np.array([4096.0]),
              k=np.array([4096.0]), batch=np.array([1.0]), kernels=np.array([1.0]))
    alone = kernel_time(op, 312e12, 2.0e12, standalone(params), np)
    assert np.allclose(alone, kernel_time(op, 312e12, 2.0e12, without_in_situ, np))
    assert not np.allclose(alone, kernel_time(op, 312e12, 2.0e12, params, np))
    d = encode([build_config(dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_gpus=8, tp=2, pp=2,
                                  global_batch=32, attention="unfused"))])
    assert not np.allclose(simulate(d, params)["iteration_time_s"], simulate(d, without_in_situ)["iteration_time_s"])


def test_fit_updates_only_the_trainable_networks(tmp_path):
    from vtrain.training.data import fit_data, load_dataset
    from vtrain.training.fit import fit

    store.append(tmp_path, "runs", synthetic_runs())
    init = init_correction(0)
    result = fit(fit_data(load_dataset(tmp_path)), FitSettings(steps=20, learning_rate=3e-2, trainable=("global",),
                                                               progress=False), init=init)
    before, after = ckpt.flatten(to_numpy(init)), ckpt.flatten(to_numpy(result.params))
    changed = {k.split("/")[0] for k in before if not np.array_equal(before[k], after[k])}
    assert changed == {"global"}


def test_robust_measurement_loss_is_squared_when_small_and_linear_when_large():
    from vtrain.training.fit import HUBER_DELTA, _huber_log_err, _sq_log_err

    meas = np.ones(4)
    pred = np.exp(np.array([0.02, -0.05, 1.0, 3.0]))
    huber, squared = np.asarray(_huber_log_err(pred, meas)), np.asarray(_sq_log_err(pred, meas))
    assert np.allclose(huber[:2], squared[:2], rtol=1e-5)
    assert huber[3] - huber[2] == pytest.approx(2 * HUBER_DELTA * 2.0, rel=1e-5)  # slope 2*delta per unit log error
    assert huber[3] < squared[3] / 10


def test_checkpoint_roundtrip_and_corrupt_files(tmp_path):
    params = to_numpy(init_correction(0))
    path = ckpt.save(tmp_path / "c.npz", params, dict(note="x"))
    loaded, meta = ckpt.load(path)
    assert meta["note"] == "x" and meta["format_version"] == ckpt.FORMAT_VERSION
    flat_a, flat_b = ckpt.flatten(params), ckpt.flatten(loaded)
    assert flat_a.keys() == flat_b.keys() and all(np.array_equal(flat_a[k], flat_b[k]) for k in flat_a)
    (tmp_path / "c.json").write_text(json.dumps(dict(format_version=99)))
    with pytest.raises(ckpt.CheckpointError, match="format"):
        ckpt.load(path)
    with pytest.raises(ckpt.CheckpointError, match="not found"):
        ckpt.load(tmp_path / "missing.npz")


def test_profile_fit_predict_on_real_cpu_measurements(cli, tmp_path):
    ds = tmp_path / "ds"
    result = cli("profile", "--device", "cpu", "-o", ds, "--shapes", "tiny", "--repeats", "3")
    assert result.returncode == 0, result.stderr
    assert len(store.load(ds, "kernels")) > 0
    out = tmp_path / "cpu.npz"
    result = cli("fit", ds, "-o", out, "--steps", "100", "--quiet")
    assert result.returncode == 0, result.stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["rows"]["kernels"] > 0 and len(meta["data_hash"]) == 64
    result = cli("predict", "--model", "gpt3-1.3b", "--gpu", "a100-80gb", "--checkpoint", out, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["iteration_time_s"] > 0


def test_fit_on_missing_dataset_is_one_line(cli, tmp_path):
    result = cli("fit", tmp_path / "nope", "-o", tmp_path / "x.npz")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "DATASET_DIR" in result.stderr
    assert not (tmp_path / "x.npz").exists()


def test_a_frozen_networks_table_is_left_out_of_the_loss_but_its_in_situ_penalty_stays(tmp_path):
    from vtrain.training.fit import loss_terms

    arrays = _runs_and_gemms_arrays(tmp_path)
    params = _with_random_outputs(init_correction(0))
    full = loss_terms(params, arrays, ("kernels",), in_situ=True)
    skipped = loss_terms(params, arrays, ("kernels",), in_situ=True, frozen_tables=("kernels",))
    assert "kernels" in full and "kernels" not in skipped
    assert float(skipped["kernels_in_situ"]) == pytest.approx(float(full["kernels_in_situ"]))
    assert float(skipped["runs"]) == pytest.approx(float(full["runs"]))


def _file_digest(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fit_without_output_writes_in_the_working_dir_and_says_what_it_cannot_learn(cli, tmp_path):
    """Issue 19: `vtrain fit DIR` in the repository root overwrote the shipped checkpoint, even from
    a dataset without runs."""
    shipped = REPO / "checkpoints" / "default.npz"
    before = _file_digest(shipped)
    store.append(tmp_path / "ds", "kernels", synthetic_gemms())
    work = tmp_path / "work"
    work.mkdir()
    result = cli("fit", tmp_path / "ds", "--steps", "20", "--quiet", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "vtrain-checkpoint.npz").exists() and (work / "vtrain-checkpoint.json").exists()
    assert "no runs" in result.stderr and "stays analytical" in result.stderr and "gemm" in result.stderr
    assert "no collectives" in result.stderr
    # Into the package's checkpoints folder only on purpose; the shipped file is untouched.
    result = cli("fit", tmp_path / "ds", "-o", "checkpoints/default.npz", "--steps", "20", "--quiet", cwd=REPO)
    assert result.returncode == 2 and "--replace-shipped" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert _file_digest(shipped) == before


def _saved_checkpoint(tmp_path, name="c", change=None):
    """A checkpoint written by ckpt.save with `change(flat)` applied to its arrays first."""
    flat = ckpt.flatten(to_numpy(init_correction(0)))
    if change:
        change(flat)
    return ckpt.save(tmp_path / f"{name}.npz", ckpt.unflatten(flat), dict(note="test"))


@pytest.mark.parametrize("case, message", [
    ("random bytes", "not a readable .npz"),
    ("no json", "no metadata file"),
    ("nan weights", "non-finite values"),
    ("no expected arrays", "none of the expected"),
    ("one missing", "lacks 1 of its"),
    ("extra array", "does not use"),
    ("wrong shape", "has shape"),
    ("metadata of another fit", "does not match its metadata"),
])
def test_corrupt_checkpoints_are_refused_in_one_line_naming_the_file(cli, tmp_path, case, message):
    """Issue 19: NaN weights printed 'nan ms' with exit 0; an .npz with none of the expected arrays gave
    the analytical answer under the file's name; no .json or random bytes gave misleading advice."""
    def set_nan(flat):
        flat["ops/gemm/Dense_1/kernel"] = flat["ops/gemm/Dense_1/kernel"] + np.nan

    changes = {
        "nan weights": set_nan,
        "no expected arrays": lambda flat: [flat.pop(k) for k in list(flat)] and flat.update(weights=np.ones(3)),
        "one missing": lambda flat: flat.pop("global/Dense_1/bias"),
        "extra array": lambda flat: flat.update({"ops/moe/Dense_0/kernel": np.ones((9, 16))}),
        "wrong shape": lambda flat: flat.update({"global/Dense_0/kernel": np.ones((12, 16))}),
    }
    path = _saved_checkpoint(tmp_path, change=changes.get(case))
    if case == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    if case == "no json":
        path.with_suffix(".json").unlink()
    if case == "metadata of another fit":
        meta = json.loads(path.with_suffix(".json").read_text())
        path.with_suffix(".json").write_text(json.dumps(dict(meta, parameters=1234)))
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.load(path)
    result = cli("predict", "--model", "gpt3-1.3b", "--checkpoint", path)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr and message in result.stderr
    assert "allow_pickle" not in result.stderr and "None" not in result.stderr


def test_the_shipped_checkpoint_passes_every_check():
    params, meta = ckpt.load("default")
    assert meta["parameters"] == ckpt.trainable_count(ckpt.flatten(params))


def test_parameter_average_is_bias_corrected_and_lags_the_iterates(tmp_path):
    """After one step the bias-corrected EMA is that step's parameters (not 1 % of them plus 99 % of
    zero); after more steps it trails the last iterate (it averages the path, unlike decay 0)."""
    from vtrain.training.data import fit_data, load_dataset
    from vtrain.training.fit import fit

    store.append(tmp_path, "runs", synthetic_runs())
    data, init = fit_data(load_dataset(tmp_path)), init_correction(0)

    def fitted(steps, decay):
        settings = FitSettings(steps=steps, learning_rate=3e-2, eval_every=1, patience=10**6, trainable=("global",),
                               validation_fraction=0.0, ema_decay=decay, progress=False)
        return ckpt.flatten(to_numpy(fit(data, settings, init=init).params))

    one_plain, one_avg = fitted(1, 0.0), fitted(1, 0.99)
    assert all(np.allclose(one_plain[k], one_avg[k], rtol=1e-5, atol=1e-7) for k in one_plain if k.startswith("global"))
    last, averaged = fitted(30, 0.0), fitted(30, 0.99)
    start = ckpt.flatten(to_numpy(init))
    keys = [k for k in last if k.startswith("global") and not np.array_equal(last[k], start[k])]
    assert keys and any(not np.allclose(last[k], averaged[k]) for k in keys)
