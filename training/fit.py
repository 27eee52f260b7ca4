"""Training the correction: on kernels and collectives directly, and end to end through the
differentiable simulator on measured iteration times.

Loss: mean squared log error (relative error) per table, or a Huber loss of the log ratio for the
tables in `FitSettings.robust_tables`, weighted and summed, plus a small L2 penalty on the weights.
Adam (optax), full batch, deterministic for a seed; early stopping on a held-out slice of the
training rows; a rich progress bar shows the current loss.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vtrain.costmodel.collectives import collective_time
from vtrain.costmodel.correction import run_features, standalone, trust_features
from vtrain.costmodel.encode import SimInput
from vtrain.costmodel.simulator import kernel_time, simulate
from vtrain.training.measurements import CollectiveSet, KernelSet, take_collectives, take_kernels
from vtrain.training.metrics import error_stats
from vtrain.training.model import init_correction, to_numpy


@dataclass
class FitData:
    """Everything one fit sees. `runs` is the simulator's input (a SimInput, or None), `run_times` seconds."""

    runs: SimInput | None
    run_times: np.ndarray | None
    kernels: KernelSet | None
    collectives: CollectiveSet | None
    run_weights: np.ndarray | None = None  # relative weight per run row (default: equal)

    def split(self, fraction: float, seed: int) -> tuple["FitData", "FitData"]:
        """(train, validation): a random `fraction` of each table's rows held out. (Holding out whole
        shape groups instead was tried: it starves the collective network, whose tables have few
        groups, and did not help the kernels.)"""
        rng = np.random.default_rng(seed)

        def row_masks(n):
            hold = rng.random(n) < fraction
            return ~hold, hold

        runs_train = runs_val = None
        times_train = times_val = w_train = w_val = None
        if self.runs is not None:
            keep, hold = row_masks(len(self.run_times))
            runs_train, runs_val = self.runs.take(keep), self.runs.take(hold)
            times_train, times_val = self.run_times[keep], self.run_times[hold]
            weights = self.run_weights if self.run_weights is not None else np.ones(len(self.run_times))
            w_train, w_val = weights[keep], weights[hold]
        k_train = k_val = c_train = c_val = None
        if self.kernels is not None:
            m = {c: row_masks(len(v["time"])) for c, v in self.kernels.by_class.items()}
            k_train = take_kernels(self.kernels, {c: a for c, (a, _) in m.items()})
            k_val = take_kernels(self.kernels, {c: b for c, (_, b) in m.items()})
        if self.collectives is not None:
            m = {o: row_masks(len(v["time"])) for o, v in self.collectives.by_op.items()}
            c_train = take_collectives(self.collectives, {o: a for o, (a, _) in m.items()})
            c_val = take_collectives(self.collectives, {o: b for o, (_, b) in m.items()})
        return (FitData(runs_train, times_train, k_train, c_train, w_train),
                FitData(runs_val, times_val, k_val, c_val, w_val))


MEASUREMENT_NETWORKS = {"kernels": "ops", "collectives": "collectives"}  # table -> the network it trains
HUBER_DELTA = 0.1  # log-ratio where the robust loss turns linear (~10 % error)


@dataclass
class FitSettings:
    steps: int = 6000
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    run_weight: float = 1.0
    kernel_weight: float = 0.3
    collective_weight: float = 0.3
    validation_fraction: float = 0.1
    eval_every: int = 50
    patience: int = 8
    seed: int = 0
    # Tables ("kernels", "collectives") whose networks are fitted with a Huber loss instead of the
    # squared log error (the whole recipe uses it for both; see train.py). Iteration times, and the
    # in-situ terms of the end-to-end stage, always use the squared error.
    robust_tables: tuple = ()
    # Top-level parameter groups the fit updates ("ops", "collectives", "global", "in_situ"); the
    # others stay as initialised. None: all of them.
    trainable: tuple | None = None
    # Route gradients as the end-to-end stage does (see loss_terms): measurement networks learn from
    # measurements only, the in-situ and global terms from iteration times.
    in_situ: bool = False
    progress: bool = True
    label: str = "fit"
    # Exponential moving average of the parameters (0 = off): early stopping watches, and the fit
    # returns, the averaged parameters (bias-corrected like Adam's moments, so the starting point
    # does not linger in short fits), which vary less with the seed and the stopping step. 0.99
    # (a ~100-step window) was chosen by grouped CV over seeds 0-2 (docs/accuracy.md).
    ema_decay: float = 0.99


@dataclass
class FitResult:
    params: dict
    history: list = field(default_factory=list)  # (step, train loss, validation loss)
    best_step: int = 0
    validation: dict = field(default_factory=dict)  # error stats on the held-out runs (never trained on)


def _device_data(data: FitData) -> dict:
    """The arrays of `data` as a pytree of float32 jax arrays (strings dropped)."""
    out = {}
    if data.runs is not None and len(data.run_times):
        out["runs"] = data.runs.map(lambda v: jnp.asarray(v, jnp.float32))
        out["run_times"] = jnp.asarray(data.run_times, jnp.float32)
        weights = data.run_weights if data.run_weights is not None else np.ones(len(data.run_times))
        out["run_weights"] = jnp.asarray(weights / weights.mean(), jnp.float32)
    if data.kernels is not None:
        out["kernels"] = {c: dict(op={k: jnp.asarray(a, jnp.float32) for k, a in v["op"].items() if k != "cls"},
                                  peak=jnp.asarray(v["peak"], jnp.float32), hbm_bw=jnp.asarray(v["hbm_bw"], jnp.float32),
                                  time=jnp.asarray(v["time"], jnp.float32))
                          for c, v in data.kernels.by_class.items() if len(v["time"])}
    if data.collectives is not None:
        out["collectives"] = {o: {k: jnp.asarray(a, jnp.float32) for k, a in v.items() if k != "group_key"}
                              for o, v in data.collectives.by_op.items() if len(v["time"])}
    return out


def _sq_log_err(pred, meas):
    return jnp.square(jnp.log(pred) - jnp.log(meas))


def _huber_log_err(pred, meas, delta=HUBER_DELTA):
    """Huber loss of the log ratio: equal to the squared error below `delta`, linear above (robust to
    noisy rows)."""
    r = jnp.abs(jnp.log(pred) - jnp.log(meas))
    return jnp.where(r < delta, r * r, delta * (2.0 * r - delta))


def _measurement_terms(params: dict, arrays: dict, robust_tables: tuple) -> dict:
    """Mean log error of the kernel and collective tables present in `arrays`: squared, or Huber for
    the tables named in `robust_tables`."""
    def err(table, pred, measured):
        return (_huber_log_err if table in robust_tables else _sq_log_err)(pred, measured)

    terms = {}
    if "kernels" in arrays:
        terms["kernels"] = jnp.mean(jnp.concatenate([
            err("kernels", kernel_time(dict(v["op"], cls=cls), v["peak"], v["hbm_bw"], params, jnp), v["time"])
            for cls, v in arrays["kernels"].items()]))
    if "collectives" in arrays:
        errs = []
        for op, v in arrays["collectives"].items():
            net = dict(intra_bw=v["intra_bw"], inter_bw=v["inter_bw"])
            pred = collective_time(op, v["size"], v["group"], v["ranks_per_node"], net, params, jnp)
            errs.append(err("collectives", pred, v["time"]))
        terms["collectives"] = jnp.mean(jnp.concatenate(errs))
    return terms


def _measurement_nets_fixed(params: dict) -> dict:
    """`params` with the op and collective networks behind a stop-gradient."""
    fixed = set(MEASUREMENT_NETWORKS.values())
    return {k: jax.lax.stop_gradient(v) if k in fixed else v for k, v in params.items()}


def loss_terms(params: dict, arrays: dict, robust_tables: tuple = (), in_situ: bool = False,
               frozen_tables: tuple = ()) -> dict:
    """Mean log error per table (missing tables contribute 0).

    The kernel and collective tables are scored on the standalone correction (no in-situ part),
    except those in `frozen_tables`, whose network the fit does not update (a constant, skipped).
    With `in_situ` (the end-to-end stage), gradients are routed: the op and collective networks learn
    from those tables only, while the iteration times reach only the in-situ and global terms; two
    more terms, "kernels_in_situ" and "collectives_in_situ" (squared error of the in-situ-corrected
    model on the same tables), keep the in-situ part from departing from the micro-benchmarks
    without cause."""
    run_view = _measurement_nets_fixed(params) if in_situ else params
    terms = {}
    if "runs" in arrays:
        pred = simulate(arrays["runs"], run_view, xp=jnp)["iteration_time_s"]
        terms["runs"] = jnp.mean(arrays["run_weights"] * _sq_log_err(pred, arrays["run_times"]))
    scored = {k: v for k, v in arrays.items() if k not in frozen_tables}
    terms.update(_measurement_terms(standalone(params), scored, robust_tables))
    if in_situ:
        terms.update({f"{k}_in_situ": v for k, v in _measurement_terms(run_view, arrays, ()).items()})
    return terms


def _total(terms: dict, settings: FitSettings) -> jnp.ndarray:
    weights = dict(runs=settings.run_weight, kernels=settings.kernel_weight, collectives=settings.collective_weight)
    return sum(weights[k.removesuffix("_in_situ")] * v for k, v in terms.items())


def fit(data: FitData, settings: FitSettings = FitSettings(), init: dict | None = None) -> FitResult:
    """Train correction parameters on `data`; returns the parameters with the best validation loss."""
    train, val = data.split(settings.validation_fraction, settings.seed)
    train_arrays, val_arrays = _device_data(train), _device_data(val)
    params = init if init is not None else init_correction(settings.seed)
    params = {k: v for k, v in params.items() if k != "feature_range"}  # not trainable; recomputed below
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), params)
    trainable = set(params) if settings.trainable is None else set(settings.trainable) & set(params)
    frozen = {k: v for k, v in params.items() if k not in trainable}
    params = {k: v for k, v in params.items() if k in trainable}
    # A measurement table whose network stays fixed adds only a constant to the loss: not computed.
    frozen_tables = tuple(table for table, net in MEASUREMENT_NETWORKS.items() if net in frozen)
    optimizer = optax.adamw(settings.learning_rate, weight_decay=settings.weight_decay)
    opt_state = optimizer.init(params)

    def objective(p, arrays):
        return _total(loss_terms({**frozen, **p}, arrays, settings.robust_tables, settings.in_situ, frozen_tables),
                      settings)

    decay = float(settings.ema_decay)

    @jax.jit
    def step(p, state, avg, arrays):
        """One Adam step; avg is the EMA's running sum (its average after t steps: avg / (1 - decay^t))."""
        loss, grads = jax.value_and_grad(objective)(p, arrays)
        updates, state = optimizer.update(grads, state, p)
        p = optax.apply_updates(p, updates)
        avg = jax.tree_util.tree_map(lambda a, x: decay * a + (1.0 - decay) * x, avg, p)
        return p, state, avg, loss

    def averaged_params(avg, t):
        return jax.tree_util.tree_map(lambda a: a / (1.0 - decay ** t), avg) if decay > 0 else avg

    val_terms = jax.jit(lambda p, arrays: loss_terms({**frozen, **p}, arrays, settings.robust_tables, settings.in_situ,
                                                     frozen_tables))
    # What early stopping watches, and which parameters each watched loss selects: with runs, the
    # total loss picks the whole parameter set (every network affects the iteration time); without
    # runs, the kernel loss picks the op networks and the collective loss the collective network,
    # each at its own best step.
    watched = {table: net for table, net in MEASUREMENT_NETWORKS.items() if table in val_arrays and net in params}
    if "runs" in train_arrays or not watched:
        watched = {"total": None}
    best = {name: (float("inf"), params, 0) for name in watched}
    ema_sum = jax.tree_util.tree_map(jnp.zeros_like, params)
    averaged = params  # the average at the latest evaluation (the last step is always evaluated)
    history, stale = [], 0
    progress = _progress(settings)
    with progress:
        task = progress.add_task(settings.label, total=settings.steps, loss=float("nan"))
        for i in range(1, settings.steps + 1):
            params, opt_state, ema_sum, loss = step(params, opt_state, ema_sum, train_arrays)
            if i % settings.eval_every == 0 or i == settings.steps:
                averaged = averaged_params(ema_sum, i)  # params itself when ema_decay is 0
                terms = {k: float(v) for k, v in val_terms(averaged, val_arrays).items()} if val_arrays else {}
                terms["total"] = _total(terms, settings) if terms else float(loss)
                history.append((i, float(loss), terms["total"]))
                progress.update(task, completed=i, loss=terms["total"])
                improved = False
                for name in watched:
                    if terms[name] < best[name][0] - 1e-6:
                        best[name], improved = (terms[name], averaged, i), True
                stale = 0 if improved else stale + 1
                if stale >= settings.patience:
                    break
        progress.update(task, completed=settings.steps)
    if "total" in watched:
        best_params, best_step = best["total"][1], best["total"][2]
    else:
        best_params = dict(averaged)
        for name, key in watched.items():
            best_params[key] = best[name][1][key]
        best_step = max(b[2] for b in best.values())
    params = {**frozen, **best_params}
    if data.runs is not None and len(data.run_times):
        # The global term only ever sees features inside the range of the runs it was trained on, and
        # the whole correction fades outside it (correction.with_trust).
        features = np.asarray(run_features(data.runs, np))
        trusted = np.asarray(trust_features(data.runs, np))
        params["feature_range"] = {"global": {"min": features.min(axis=0), "max": features.max(axis=0)},
                                   "trust": {"min": trusted.min(axis=0), "max": trusted.max(axis=0)}}
    validation = {}
    if val.runs is not None and len(val.run_times):
        pred = simulate(val.runs, to_numpy(params))["iteration_time_s"]
        validation["runs_holdout"] = error_stats(pred, val.run_times)
    return FitResult(params=params, history=history, best_step=best_step, validation=validation)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass


def _progress(settings: FitSettings):
    if not settings.progress:
        return _NoProgress()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # on stderr, so that `vtrain validate --json > figures.json` gets the JSON only
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("val loss {task.fields[loss]:.4f}"), TimeElapsedColumn(), transient=False,
                    console=Console(stderr=True))
