"""The trust-aware correction (costmodel/correction.py `with_trust`): unchanged inside the training
runs, the analytical answer far outside them, and more data parallelism never faster."""
import itertools
import math

import numpy as np
import pytest

from vtrain.costmodel.checkpoint import load
from vtrain.costmodel.correction import TRUST_FEATURE_NAMES, trust_features, trust_weight
from vtrain.costmodel.encode import encode
from vtrain.costmodel.presets import lookup_model
from vtrain.costmodel.simulator import simulate
from vtrain.costmodel.spec import build_config
from vtrain.dataset.import_vtrain import import_ground_truth
from vtrain.dataset.paths import data_root


def _cfg(model="gpt3-13b", gpu="a100-80gb", **parallel):
    return build_config(dict(lookup_model(model), gpu=gpu, **parallel))


def _time(cfgs, correction):
    return np.asarray(simulate(encode(cfgs), correction)["iteration_time_s"])


@pytest.fixture(scope="module")
def shipped():
    return load("default")[0]


def test_trust_weight_is_one_inside_the_range_and_exp_minus_u_squared_outside():
    inside = encode([_cfg(num_gpus=8, tp=2, pp=2, global_batch=16)])
    f = np.asarray(trust_features(inside, np))[0]
    correction = {"feature_range": {"trust": {"min": f - 0.1, "max": f + 0.1}}}
    assert trust_weight(correction, inside, np)[0] == 1.0
    hidden = TRUST_FEATURE_NAMES.index("hidden")
    for doublings in (1, 2):  # hidden 5120 -> 4x: 2 doublings beyond a range that ends 0.1 above 5120
        wider = dict(lookup_model("gpt3-13b"), num_attention_heads=40 * 2 ** doublings)
        far = encode([build_config(dict(wider, hidden_size=5120 * 2 ** doublings, gpu="a100-80gb", num_gpus=8,
                                        tp=2, pp=2, global_batch=16))])
        excess = np.asarray(trust_features(far, np))[0][hidden] - (f[hidden] + 0.1)
        assert excess == pytest.approx(doublings - 0.1)
        assert trust_weight(correction, far, np)[0] == pytest.approx(math.exp(-excess ** 2))
    assert trust_weight({}, inside, np)[0] == 1.0  # no stored range (an older fit): full weight


def test_an_execution_flag_the_runs_never_had_counts_one_doubling_outside():
    """ZeRO-3 / FSDP sets two flags (ZeRO >= 1, ZeRO-3): exp(-2) of the weight of the same config
    without it; overlapping the gradient reduction is one more; a range that includes the flags keeps
    the full weight."""
    plain = encode([_cfg(num_gpus=8, tp=4, pp=1, global_batch=16)])
    f = np.asarray(trust_features(plain, np))[0]
    correction = {"feature_range": {"trust": {"min": f, "max": f}}}
    assert trust_weight(correction, plain, np)[0] == 1.0
    fsdp = encode([_cfg(num_gpus=8, tp=4, pp=1, global_batch=16, zero_stage=3)])
    assert trust_weight(correction, fsdp, np)[0] == pytest.approx(math.exp(-2.0))
    both = encode([_cfg(num_gpus=8, tp=4, pp=1, global_batch=16, zero_stage=3, overlap_grad_reduce=True)])
    assert trust_weight(correction, both, np)[0] == pytest.approx(math.exp(-3.0))
    seen = np.asarray(trust_features(fsdp, np))[0]
    covering = {"feature_range": {"trust": {"min": np.minimum(f, seen), "max": np.maximum(f, seen)}}}
    assert trust_weight(covering, fsdp, np)[0] == 1.0
    names = [TRUST_FEATURE_NAMES[i] for i in np.flatnonzero(seen != f)]
    assert names == ["ZeRO stage >= 1", "ZeRO-3 / FSDP"]


@pytest.mark.skipif(data_root() is None, reason="needs the shared data (../shared/data or $VTRAIN_DATA)")
def test_training_runs_are_inside_the_shipped_range_so_their_predictions_are_unchanged(shipped):
    root = data_root() / "vtrain"
    runs = [import_ground_truth(root / name).tables["runs"] for name in ("ground_truth_single.csv",
                                                                         "ground_truth_multi.csv")]
    from vtrain.training.runs import encode_runs

    d = encode_runs(runs[0].iloc[::7].reset_index(drop=True))
    d_multi = encode_runs(runs[1])
    for batch in (d, d_multi):
        assert np.all(np.asarray(trust_weight(shipped, batch, np)) == 1.0)
        untrusted = {**shipped, "feature_range": {"global": shipped["feature_range"]["global"]}}
        assert np.array_equal(simulate(batch, shipped)["iteration_time_s"], simulate(batch, untrusted)["iteration_time_s"])


def test_a_config_far_outside_the_training_runs_gets_the_analytical_answer(shipped):
    """16x the largest trained GPU count (512), dp 16x the largest trained (64), on another GPU."""
    far = _cfg("gpt3-175b", gpu="h100-sxm", num_gpus=8192, tp=8, pp=1, micro_batch=1, global_batch=8192,
               recompute="selective", sequence_parallel=True)
    assert far.parallel.dp == 1024
    assert trust_weight(shipped, encode([far]), np)[0] < 0.01
    combined, analytical = _time([far], shipped)[0], _time([far], None)[0]
    assert combined == pytest.approx(analytical, rel=0.03)


def test_more_data_parallelism_at_the_same_per_gpu_work_is_never_faster(shipped):
    """dp from 1 to 1024 (16x the trained dp) at a fixed number of micro-batches per GPU."""
    sweeps = 0
    for model, tp, pp, mb, rec, gpu in itertools.product(("gpt3-1.3b", "gpt3-13b", "llama2-70b"), (1, 2, 8), (1, 4),
                                                          (1, 4), ("none", "full"), ("a100-80gb", "h100-sxm")):
        cfgs = [_cfg(model, gpu=gpu, num_gpus=tp * pp * dp, tp=tp, pp=pp, micro_batch=mb, global_batch=dp * mb * 8,
                     recompute=rec) for dp in (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)]
        t = _time(cfgs, shipped)
        assert np.all(np.diff(t) >= -1e-12 * t[:-1]), (model, tp, pp, mb, rec, gpu, t)
        sweeps += 1
    assert sweeps == 144


def test_dp_beyond_the_runs_keeps_the_per_gpu_terms_and_scales_through_the_collectives(shipped):
    """A trained layout at 20x its dp: same trust, same compute; only the DP collectives grow."""
    base, wide = (_cfg("gpt3-13b", num_gpus=8 * dp, tp=2, pp=4, micro_batch=1, global_batch=dp * 8) for dp in (8, 160))
    d = encode([base, wide])
    w = np.asarray(trust_weight(shipped, d, np))
    assert w[0] == w[1]
    out = simulate(d, shipped)["breakdown"]
    assert out["compute"][0] == out["compute"][1] and out["tp_comm"][0] == out["tp_comm"][1]
    assert out["dp_comm"][1] > out["dp_comm"][0]
