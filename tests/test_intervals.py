"""Prediction intervals: split-conformal bounds, the widening outside the training data, the blend with
the analytical interval as the correction fades, calibration
and held-out coverage on synthetic residuals, and the intervals predict, the API and the
checkpoint carry."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from vtrain.costmodel import checkpoint as ckpt
from vtrain.costmodel import intervals
from vtrain.costmodel.encode import encode
from vtrain.costmodel.predictor import Predictor
from vtrain.costmodel.spec import build_config
from vtrain.training import intervals as iv
from vtrain.training.model import init_correction, to_numpy

CALIBRATED = ("none", "default")  # shipped predictors with a stored interval calibration


def test_conformal_bounds_take_the_finite_sample_rank_about_the_median():
    scores = np.arange(-49, 50, dtype=float) + 7.0  # 99 scores, median 7, |score - 7| 0, 1, 1, 2, 2, ..., 49, 49
    rng = np.random.default_rng(0)
    lo, hi = intervals.conformal_bounds(rng.permutation(scores), 0.9)
    # rank ceil(100 * 0.9) = 90 of the sorted distances from the median: 45
    assert (lo, hi) == (7.0 - 45.0, 7.0 + 45.0)
    skewed = np.array([0.0, 1, 2, 3, 4, 5, 6, 7, 100])  # median 4; rank 9 of 9 is the largest distance, 96
    assert intervals.conformal_bounds(skewed, 0.9) == (4.0 - 96.0, 4.0 + 96.0)
    assert intervals.conformal_bounds(skewed[:8], 0.9) == (-math.inf, math.inf)  # too few for 90 %


def test_conformal_bounds_cover_new_draws_at_the_level():
    rng = np.random.default_rng(1)
    for mean in (0.0, 0.1, -0.15):  # a biased model's scores too: the bounds follow their median
        lo, hi = intervals.conformal_bounds(rng.normal(mean, 0.2, 400), 0.9)
        new = rng.normal(mean, 0.2, 20000)
        assert 0.86 < np.mean((new >= lo) & (new <= hi)) < 0.95, mean


def test_conformal_bounds_cover_a_held_out_group_biased_against_the_calibration_tail():
    """The multi-node case: calibration shapes whose misses are slow runs (a long upper tail), a held-out
    shape that runs faster than predicted. The bounds about the median reach as far down as up."""
    rng = np.random.default_rng(2)
    calibration = np.concatenate([rng.normal(0.0, 0.04, 60), rng.uniform(0.1, 0.45, 15)])
    lo, hi = intervals.conformal_bounds(calibration, 0.9)
    faster = rng.normal(-0.15, 0.05, 2000)
    assert np.mean((faster >= lo) & (faster <= hi)) > 0.8
    assert hi > 0.2 and lo < -0.2


def _configs(**change):
    base = dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_gpus=8, tp=2, pp=2, global_batch=32)
    return encode([build_config(dict(base, **change))])


def test_domain_distance_counts_doublings_beyond_the_training_range():
    d = _configs()
    from vtrain.costmodel.correction import run_features

    f = np.asarray(run_features(d, np))
    inside = dict(min=f.min(axis=0), max=f.max(axis=0))
    pp1 = _configs(pp=1, tp=4)  # the range of two layouts (pp 1-2, layers/stage 12-24, tp 2-4)
    f = np.concatenate([f, np.asarray(run_features(pp1, np))])
    inside = dict(min=f.min(axis=0), max=f.max(axis=0))
    assert intervals.domain_distance(inside, d)[0] == 0.0
    assert intervals.domain_distance(None, d)[0] == 0.0
    # hidden 2048 -> 8192 is two doublings beyond a range that ends at 2048
    far = _configs(hidden_size=8192, num_attention_heads=64)
    assert intervals.domain_distance(inside, far)[0] == pytest.approx(2.0)
    # with the trust range, other hardware and execution flags count too (in doublings; a flag 1)
    from vtrain.costmodel.correction import trust_features

    t = np.concatenate([np.asarray(trust_features(d, np)), np.asarray(trust_features(pp1, np))])
    trusted = dict(min=t.min(axis=0), max=t.max(axis=0))
    assert intervals.domain_distance(inside, d, np, trusted)[0] == 0.0
    fsdp = _configs(zero_stage=3, pp=1, tp=4)  # two flags: ZeRO >= 1 and ZeRO-3 (layers/stage 24 is in range)
    assert intervals.domain_distance(inside, fsdp)[0] == 0.0
    assert intervals.domain_distance(inside, fsdp, np, trusted)[0] == pytest.approx(math.sqrt(2.0))
    faster = _configs(peak_tflops=4 * 312.0)  # the 16-bit peak two doublings beyond the A100's
    assert intervals.domain_distance(inside, faster, np, trusted)[0] == pytest.approx(2.0)


def test_fold_distances_measure_each_fold_as_a_prediction_would():
    # a held-out fold whose runs used FSDP (ZeRO-3) when the other folds' runs did not lies sqrt(2)
    # doublings outside (two flags), as `predict` would place it; layouts seen in training, 0
    from vtrain.costmodel.encode import encode

    cfgs = [dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_gpus=8, tp=tp, pp=1, global_batch=32,
                 zero_stage=z) for tp, z in ((2, 0), (4, 0), (2, 3), (4, 3))]
    d = encode([build_config(c) for c in cfgs])
    fold = np.array([0, 0, 1, 1])
    u = iv.fold_distances(d, fold)
    assert u[2] == pytest.approx(math.sqrt(2.0)) and u[3] == pytest.approx(math.sqrt(2.0))
    both = iv.fold_distances(d, np.array([0, 1, 1, 0]))  # each fold sees the other tp and ZeRO stage
    np.testing.assert_array_equal(both, 0.0)


def test_bounds_use_the_setting_and_widen_with_distance():
    cal = dict(level=0.9, widening=0.5, log_ratio={"single-node": [-0.1, 0.2], "multi-node": [-0.3, 0.4]})
    low, high = intervals.bounds(cal, np.array([10.0, 10.0, 10.0]), np.array([8, 64, 8]), np.array([8, 8, 8]),
                                 np.array([0.0, 0.0, 2.0]))
    assert low[0] == pytest.approx(10 * math.exp(-0.1)) and high[0] == pytest.approx(10 * math.exp(0.2))
    assert low[1] == pytest.approx(10 * math.exp(-0.3)) and high[1] == pytest.approx(10 * math.exp(0.4))
    assert low[2] == pytest.approx(10 * math.exp(-0.2)) and high[2] == pytest.approx(10 * math.exp(0.4))  # x(1+0.5*2)
    far = dict(cal, widening=0.0, far_widening=1.0, calibrated_distance=1.5)
    _, high = intervals.bounds(far, np.array([10.0, 10.0]), np.array([64, 64]), np.array([8, 8]), np.array([1.0, 3.5]))
    assert high[0] == pytest.approx(10 * math.exp(0.4)) and high[1] == pytest.approx(10 * math.exp(0.4 * 3.0))
    nan_low, _ = intervals.bounds(None, np.array([1.0]), np.array([8]), np.array([8]), np.array([0.0]))
    assert np.isnan(nan_low[0])


def test_blended_bounds_follow_the_correction_weight():
    """A prediction whose correction applies at weight c gets c x the checkpoint's log bounds plus
    (1 - c) x the analytical ones, each widened by its own distance."""
    cal = dict(level=0.9, widening=0.0, log_ratio={"single-node": [-0.1, 0.1], "multi-node": [-0.2, 0.2]})
    analytical = dict(level=0.9, widening=0.0, far_widening=1.0, calibrated_distance=0.0,
                      log_ratio={"single-node": [-0.3, 0.6], "multi-node": [-0.4, 0.8]})
    gpus, per_node = np.array([64, 64, 64, 64]), np.array([8, 8, 8, 8])
    weight = np.array([1.0, 0.0, 0.5, 0.0])
    a_distance = np.array([0.0, 0.0, 0.0, 1.0])  # the last one lies a doubling beyond the analytical runs
    lo, hi = intervals.blended_log_bounds(cal, np.zeros(4), analytical, a_distance, weight, gpus, per_node)
    assert lo.tolist() == pytest.approx([-0.2, -0.4, -0.3, -0.8]) and hi.tolist() == pytest.approx([0.2, 0.8, 0.5, 1.6])
    # no analytical calibration (or no weight): the checkpoint's bounds alone
    lo, hi = intervals.blended_log_bounds(cal, np.zeros(4), None, a_distance, weight, gpus, per_node)
    assert lo.tolist() == pytest.approx([-0.2] * 4)


def test_far_outside_the_data_the_interval_is_the_analytical_one():
    """Where the correction has faded (16x the largest GPU count of the runs) the combined predictor's
    interval, relative to its answer, is within a few points of the analytical predictor's; inside
    the runs it is its own, narrower one."""
    import vtrain

    cfg = dict(model="gpt3-175b", gpu="a100-80gb", tp=8, pp=8, micro_batch=1, global_batch=6144,
               schedule="interleaved", vpp=6, recompute="selective", sequence_parallel=True, num_gpus=8192)
    combined = vtrain.predict(vtrain.load_config(**cfg))
    analytical = vtrain.predict(vtrain.load_config(**cfg), checkpoint="none")
    assert combined.correction_weight < 0.1
    for attr in ("iteration_time_s_low", "iteration_time_s_high"):
        rel_c = math.log(getattr(combined, attr) / combined.iteration_time_s)
        rel_a = math.log(getattr(analytical, attr) / analytical.iteration_time_s)
        assert rel_c == pytest.approx(rel_a, rel=0.1), attr
    inside = dict(model="gpt3-1.3b", gpu="a100-80gb", num_gpus=8, tp=1, global_batch=64, recompute="full")
    c = vtrain.predict(vtrain.load_config(**inside))
    a = vtrain.predict(vtrain.load_config(**inside), checkpoint="none")
    assert c.correction_weight == 1.0
    assert math.log(c.iteration_time_s_high / c.iteration_time_s_low) < math.log(a.iteration_time_s_high / a.iteration_time_s_low)


def test_the_analytical_interval_widens_beyond_the_runs_it_was_calibrated_on():
    """The analytical calibration stores the feature range of its runs (vTrain's and the public ones):
    a data-parallel degree beyond all of them widens the interval, one inside does not."""
    import vtrain

    stored = ckpt.load_analytical_intervals()
    assert set(stored["feature_range"]) == {"global", "trust"}
    cfg = dict(model="gpt3-175b", gpu="a100-80gb", tp=8, pp=8, micro_batch=1, recompute="selective",
               sequence_parallel=True)
    seen_dp = round(2 ** (4 * stored["feature_range"]["global"]["max"][2]))  # run_features column 2: log2 dp / 4
    near = vtrain.predict(vtrain.load_config(**cfg, num_gpus=64 * 8, global_batch=16 * 8), checkpoint="none")
    far = vtrain.predict(vtrain.load_config(**cfg, num_gpus=64 * 4 * seen_dp, global_batch=16 * 4 * seen_dp),
                         checkpoint="none")  # 4x the largest dp, 16 micro-batches as near
    assert near.interval_widening == 1.0 and far.interval_widening > 1.5


def test_a_malformed_feature_range_in_a_calibration_is_refused():
    cal = dict(level=0.9, log_ratio={"single-node": [-0.1, 0.1]}, feature_range={"global": {"min": [0.0]}})
    with pytest.raises(ValueError, match="feature_range.global"):
        intervals.check_calibration(cal, "x.json")


def _synthetic_residuals(seed=0, n=600):
    """Held-out log ratios: noise sd 0.05 single-node, 0.15 multi-node, and 3x the noise per unit of
    distance for the rows outside their training range (a model that extrapolates worse)."""
    rng = np.random.default_rng(seed)
    setting = np.where(rng.random(n) < 0.7, "single-node", "multi-node")
    u = np.where(rng.random(n) < 0.3, rng.uniform(0.5, 2.0, n), 0.0)
    sd = np.where(setting == "single-node", 0.05, 0.15) * (1 + 3 * u)
    groups = rng.integers(0, 12, n).astype(str)
    return rng.normal(0, sd), setting, u, groups


def test_calibration_widens_outside_the_data_and_holds_its_level_on_held_out_groups():
    r, setting, u, groups = _synthetic_residuals()
    cal = iv.calibrate(r, setting, u)
    assert cal["widening"] > 0 and cal["rows_outside"] == int((u > 0).sum())
    lo_s, hi_s = cal["log_ratio"]["single-node"]
    lo_m, hi_m = cal["log_ratio"]["multi-node"]
    assert hi_m - lo_m > 2 * (hi_s - lo_s)  # multi-node residuals are 3x as wide
    covered = iv.grouped_coverage(r, setting, u, groups)
    for name in intervals.SETTINGS:
        assert 0.84 < covered[setting == name].mean() < 0.96, name
    assert covered[u > 0].mean() > 0.85  # the widening keeps the extrapolated rows covered
    # Without widening (g = 0), the rows outside are under-covered: the choice of g matters.
    table = {s: intervals.conformal_bounds(r[setting == s], 0.9) for s in intervals.SETTINGS}
    plain = iv.coverage(r, setting, u, dict(widening=0.0, log_ratio={k: list(v) for k, v in table.items()}))
    assert plain[u > 0].mean() < 0.8


def test_a_setting_with_too_few_rows_gets_no_interval():
    r, setting, u, _ = _synthetic_residuals(n=200)
    setting = np.where(np.arange(200) < 195, "single-node", "multi-node")  # 5 multi-node rows: fewer than 9
    cal = iv.calibrate(r, setting, u)
    assert cal["log_ratio"]["multi-node"] is None and cal["log_ratio"]["single-node"] is not None
    assert not iv.coverage(r[-5:], setting[-5:], u[-5:], cal).any()


def test_predictions_carry_the_stored_interval_through_the_checkpoint(tmp_path, cli):
    cal = dict(level=0.9, widening=1.0, log_ratio={"single-node": [-0.1, 0.2], "multi-node": [-0.2, 0.3]})
    params = to_numpy(init_correction(0))
    path = ckpt.save(tmp_path / "c.npz", params, dict(note="test"))
    ckpt.set_intervals(path, cal)
    predictor = Predictor.load(str(path))
    cfg = build_config(dict(num_layers=24, hidden_size=2048, num_attention_heads=16, num_gpus=8, tp=2, pp=2,
                            global_batch=32))
    p = predictor.predict(cfg)
    assert p.iteration_time_s_low == pytest.approx(p.iteration_time_s * math.exp(-0.1))
    assert p.iteration_time_s_high == pytest.approx(p.iteration_time_s * math.exp(0.2))
    result = cli("predict", "--num-layers", 24, "--hidden-size", 2048, "--heads", 16, "--num-gpus", 8, "--tp", 2,
                 "--pp", 2, "--global-batch", 32, "--checkpoint", path, "--json")
    out = json.loads(result.stdout)
    assert out["iteration_time_s_low"] == pytest.approx(p.iteration_time_s_low)
    assert out["iteration_time_s_high"] == pytest.approx(p.iteration_time_s_high)
    table = cli("predict", "--num-layers", 24, "--hidden-size", 2048, "--heads", 16, "--num-gpus", 8, "--tp", 2,
                "--pp", 2, "--global-batch", 32, "--checkpoint", path)
    assert p.iteration_time_s_high < 1.0  # shown in ms
    assert f"{p.iteration_time_s_low * 1e3:.3g}-{p.iteration_time_s_high * 1e3:.3g} ms, 90 %)" in table.stdout
    # A broken calibration is refused in one line naming the file.
    meta = json.loads(path.with_suffix(".json").read_text())
    meta["intervals"]["log_ratio"]["single-node"] = [0.1]
    path.with_suffix(".json").write_text(json.dumps(meta))
    bad = cli("predict", "--model", "gpt3-1.3b", "--checkpoint", path)
    assert bad.returncode == 2 and "intervals.log_ratio.single-node" in bad.stderr and "Traceback" not in bad.stderr


def test_shipped_predictors_carry_intervals():
    cfg = dict(model="gpt3-175b", gpu="a100-80gb", tp=8, pp=8, micro_batch=1, global_batch=6144,
               schedule="interleaved", vpp=6, recompute="selective", sequence_parallel=True)
    import vtrain

    for checkpoint in CALIBRATED:
        near = vtrain.predict(vtrain.load_config(**dict(cfg, num_gpus=3072)), checkpoint=checkpoint)
        assert near.iteration_time_s_low < near.iteration_time_s < near.iteration_time_s_high, checkpoint
    # Beyond the runs behind the calibrations, the interval widens (and predict says so); a config
    # inside vTrain's runs (full recompute, as all of them) keeps its own narrow interval.
    far = vtrain.predict(vtrain.load_config(**dict(cfg, num_gpus=12288)))
    small = vtrain.predict(vtrain.load_config(model="gpt3-1.3b", num_gpus=8, tp=1, global_batch=64, recompute="full"))
    assert far.interval_widening > 1.0 and small.interval_widening == 1.0
    assert math.log(far.iteration_time_s_high / far.iteration_time_s) > \
        math.log(small.iteration_time_s_high / small.iteration_time_s)


def test_forecast_rows_carry_the_same_interval_as_predict():
    import pandas as pd

    import vtrain

    jobs = pd.DataFrame(dict(model=["gpt3-1.3b", "gpt3-175b", "gpt3-1.3b"], gpu="a100-80gb",
                             num_gpus=[8, 3072, 8], tp=[1, 8, 3], pp=[1, 8, 1], global_batch=[64, 1536, 64]))
    for checkpoint in CALIBRATED:
        out = vtrain.forecast(jobs, checkpoint=checkpoint)
        for i in (0, 1):
            p = vtrain.predict(vtrain.load_config(**jobs.iloc[i].to_dict()), checkpoint=checkpoint)
            assert out["iteration_time_s_low"][i] == pytest.approx(p.iteration_time_s_low, rel=1e-9), checkpoint
            assert out["iteration_time_s_high"][i] == pytest.approx(p.iteration_time_s_high, rel=1e-9), checkpoint
            if checkpoint == "none":  # the analytical model has no learned correction to weigh
                assert p.correction_weight is None and pd.isna(out["correction_weight"][i])
            else:
                assert out["correction_weight"][i] == pytest.approx(p.correction_weight, rel=1e-12)
        assert pd.isna(out["iteration_time_s_low"][2]) and out["error"][2]  # tp=3 does not divide: no interval
        assert pd.isna(out["correction_weight"][2])
    # inside vTrain's runs (8 A100s, 1F1B, no ZeRO, full recompute) the whole correction; GPT-3 175B on
    # 3,072 GPUs less (its hidden size is beyond the runs)
    out = vtrain.forecast(jobs.assign(recompute="full"), checkpoint="default")
    assert out["correction_weight"][0] == 1.0 and out["correction_weight"][1] < 0.9  # hidden 12288 > 8192


def test_search_rows_carry_the_correction_weight_predict_reports():
    import vtrain

    cfg = vtrain.load_config(model="gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=64)
    result = vtrain.search(cfg, checkpoint="default", max_gpus=16, min_gpus=8, top=6, max_micro_batch=2)
    assert len(result.top) == 6
    for r in result.top:
        p = vtrain.predict(vtrain.load_config(**r["config"]), checkpoint="default")
        assert r["correction_weight"] == pytest.approx(p.correction_weight, rel=1e-12)
    assert all(r["correction_weight"] is None for r in
               vtrain.search(cfg, checkpoint="none", max_gpus=16, min_gpus=8, top=3, max_micro_batch=2).top)


def test_search_ranks_by_the_upper_bound_with_time_p90():
    import vtrain

    cfg = vtrain.load_config(model="gpt3-1.3b", gpu="a100-80gb", num_gpus=16, global_batch=64)
    by_time = vtrain.search(cfg, checkpoint="none", max_gpus=16, min_gpus=8, top=30, max_micro_batch=2)
    by_p90 = vtrain.search(cfg, checkpoint="none", max_gpus=16, min_gpus=8, top=30, max_micro_batch=2,
                           objective="time-p90")
    for result in (by_time, by_p90):
        for r in result.top:
            assert r["iteration_time_s_low"] < r["iteration_time_s"] < r["iteration_time_s_high"]
    highs = [r["iteration_time_s_high"] for r in by_p90.top]
    assert highs == sorted(highs)
    times = [r["iteration_time_s"] for r in by_time.top]
    assert times == sorted(times)
    # The analytical interval of a single-node config is wider above than a multi-node one's, so the
    # two objectives need not agree; the upper-bound winner has the lowest upper bound of both lists.
    assert by_p90.top[0]["iteration_time_s_high"] <= min(r["iteration_time_s_high"] for r in by_time.top)


def _synthetic_dataset(path):
    """48 single-node runs of 4 model shapes, 'measured' = analytical x 1.3 x 5 % noise."""
    from vtrain.costmodel.simulator import simulate
    from vtrain.dataset import store

    rng = np.random.default_rng(0)
    rows = [build_config(dict(num_layers=layers, hidden_size=hidden, num_attention_heads=16, seq_len=1024, num_gpus=8,
                              tp=tp, pp=pp, micro_batch=1, global_batch=batch, precision="fp16")).flat()
            for layers, hidden in [(12, 1024), (16, 1024), (12, 2048), (24, 2048)]
            for tp, pp in [(1, 1), (2, 1), (2, 2), (4, 2), (1, 4), (8, 1)] for batch in (64, 128)]
    runs = pd.DataFrame(rows)
    measured = simulate(encode([build_config(r) for r in rows]))["iteration_time_s"] * 1.3
    runs["iteration_time_s"] = measured * np.exp(rng.normal(0, 0.05, len(rows)))
    runs["interconnect"], runs["source"] = "nvlink", "test:synthetic"
    store.append(path, "runs", runs)


def test_calibrate_stores_held_out_intervals_and_refuses_bad_targets(cli, tmp_path, monkeypatch):
    """The command's plumbing (held-out predictions -> calibration -> the checkpoint's .json ->
    predict). The grouped CV is stubbed with the analytical predictions (the CV itself is tested in
    test_fit_validate.py), so no fit runs here."""
    from vtrain.cli import calibrate_cmd
    from vtrain.training import evaluate as ev

    _synthetic_dataset(tmp_path / "ds")
    calls = []

    def fake_cv(ds, settings, folds, init=None):
        calls.append((settings.steps, settings.seed, folds))
        runs = ds.runs.reset_index(drop=True)
        return runs.assign(predicted_s=ev.predict_runs(runs, None), setting=ev.setting_label(runs),
                           shape=ev.shape_key(runs), fold=ev.shape_folds(runs, folds))

    monkeypatch.setattr(ev, "cross_validate_runs", fake_cv)
    monkeypatch.setattr(ev, "pretrain", lambda ds, settings: None)
    path = ckpt.save(tmp_path / "c.npz", to_numpy(init_correction(0)), dict(settings=dict(steps=20, seed=3)))
    calibrate_cmd.calibrate(tmp_path / "ds", str(path), published=None, folds=2, replace_shipped=False, quiet=True)
    assert calls == [(20, 3, 2)]  # the checkpoint's own recipe settings
    cal = json.loads(path.with_suffix(".json").read_text())["intervals"]
    assert cal["rows"] == {"single-node": 48, "multi-node": 0}
    assert cal["log_ratio"]["multi-node"] is None and len(cal["log_ratio"]["single-node"]) == 2
    lo, hi = cal["log_ratio"]["single-node"]
    assert lo < math.log(1.3) < hi and hi - lo < 0.3  # around the 30 % slowdown, about +-2 sd of the noise
    assert set(cal["coverage_leave_one_group_out"]) == {"single-node"}
    out = json.loads(cli("predict", "--model", "gpt3-1.3b", "--num-gpus", 8, "-c", path, "--json").stdout)
    # The stubbed predictions are the analytical ones, 30 % too fast: the interval lies above them.
    assert out["iteration_time_s_low"] == pytest.approx(out["iteration_time_s"] * math.exp(lo))
    assert out["iteration_time_s_high"] == pytest.approx(out["iteration_time_s"] * math.exp(hi))
    multi = json.loads(cli("predict", "--model", "gpt3-1.3b", "--num-gpus", 16, "-c", path, "--json").stdout)
    assert multi["iteration_time_s_low"] is None and "no calibration" in multi["interval_note"]
    # Refused in one line: the shipped folder without --replace-shipped, a dataset without runs.
    shipped = cli("calibrate", tmp_path / "ds", "-c", "none")
    assert shipped.returncode == 2 and "--replace-shipped" in shipped.stderr and shipped.stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    empty = cli("calibrate", tmp_path / "empty", "-c", path)
    assert empty.returncode == 2 and "Traceback" not in empty.stderr and empty.stderr.count("\n") == 1
