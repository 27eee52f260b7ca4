"""The combined predictor: the analytical simulator plus an optional learned correction.

    predictor = Predictor.load("default")          # shipped checkpoint ("none": analytical)
    result = predictor.predict(config)             # -> Prediction
    arrays = predictor.simulate(encode(configs))   # batched, numpy

Times in seconds, memory in GiB (2**30 bytes) in `Prediction`, bytes in raw simulator output.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from vtrain.costmodel import checkpoint as ckpt
from vtrain.costmodel import intervals
from vtrain.costmodel import cost
from vtrain.costmodel.cost import TrainingCost
from vtrain.costmodel.encode import encode
from vtrain.costmodel.simulator import BREAKDOWN_KEYS, simulate
from vtrain.costmodel.spec import TrainConfig
from vtrain.costmodel.units import GiB


@dataclass(frozen=True)
class Prediction:
    """One configuration's predicted iteration. Seconds, tokens/s, GiB per GPU."""

    config: TrainConfig
    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    memory_gib_per_gpu: float
    fits_memory: bool
    breakdown: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    model_flops: float
    checkpoint: str = "none"
    gpu_memory_gib: float = 0.0
    # The prediction interval (seconds) at `interval_level` (NaN: the checkpoint has no calibration);
    # `interval_widening` > 1 where the config lies outside the training data (see costmodel/intervals.py).
    iteration_time_s_low: float = float("nan")
    iteration_time_s_high: float = float("nan")
    interval_level: float = intervals.LEVEL
    interval_widening: float = 1.0
    # The share of the learned correction applied (1 inside the training runs, towards 0 outside;
    # None for the analytical model).
    correction_weight: float | None = None

    def training_cost(self, tokens: float, price_per_gpu_hour: float = 0.0) -> TrainingCost:
        return cost.training_cost(self.iteration_time_s, self.config.parallel.num_gpus,
                                  self.config.tokens_per_iteration, tokens, price_per_gpu_hour)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["config"] = self.config.flat()
        return out


@dataclass
class Predictor:
    """Simulator + correction parameters (None = purely analytical)."""

    correction: dict | None = None
    metadata: dict = field(default_factory=dict)
    name: str = "none"
    allreduce_table: dict | None = None
    # The prediction-interval calibration (costmodel/intervals.py); None: predictions carry no interval.
    calibration: dict | None = None
    # The analytical predictor's calibration, which a checkpoint's intervals blend in where its
    # correction fades (costmodel/intervals.py); None for the analytical predictor itself.
    analytical_calibration: dict | None = None

    @classmethod
    def load(cls, checkpoint: str | None = ckpt.DEFAULT_NAME, allreduce_table: dict | None = None) -> "Predictor":
        """'none'/None: analytical; a name or a .npz path: that checkpoint."""
        if checkpoint is None or str(checkpoint).lower() in ("none", "analytical", ""):
            return cls(None, {}, "none", allreduce_table, ckpt.load_analytical_intervals())
        params, meta = ckpt.load(checkpoint)
        return cls(params, meta, str(checkpoint), allreduce_table, meta.get("intervals"),
                   ckpt.load_analytical_intervals())

    @property
    def feature_range(self) -> dict | None:
        """The global term's training feature range (None for the analytical model)."""
        return ((self.correction or {}).get("feature_range") or {}).get("global")

    @property
    def trust_range(self) -> dict | None:
        """The trust weight's training feature range (None for the analytical model)."""
        return ((self.correction or {}).get("feature_range") or {}).get("trust")

    def interval(self, d, time_s, xp=np) -> dict:
        """{"low", "high", "distance", "widening"} arrays (seconds) for encoded configs `d` predicted
        at `time_s` (see costmodel/intervals.py); NaN bounds without a calibration. The analytical
        predictor widens beyond the runs its calibration saw; a checkpoint beyond its training runs,
        and blends in the analytical interval as its correction fades."""
        if self.correction is None:
            seen, seen_trust = intervals.calibration_ranges(self.calibration)
            return intervals.interval_arrays(self.calibration, seen, d, time_s, xp, seen_trust)
        return intervals.interval_arrays(self.calibration, self.feature_range, d, time_s, xp, self.trust_range,
                                         analytical=self.analytical_calibration, weight=self.correction_weight(d))

    def correction_weight(self, d) -> np.ndarray | None:
        """Per encoded config (float64, one per row), the share of the learned correction applied (1
        inside the training runs, towards 0 outside them; correction.trust_weight); None for the
        analytical model."""
        if self.correction is None:
            return None
        from vtrain.costmodel.correction import trust_weight

        return np.asarray(trust_weight(self.correction, d, np), dtype=np.float64)

    def simulate(self, d: dict, xp=np) -> dict:
        """Raw simulator output for an encoded batch (see simulator.simulate)."""
        return simulate(d, self.correction, xp=xp, allreduce_table=self.allreduce_table)

    def predict_many(self, configs: list[TrainConfig]) -> list[Prediction]:
        if not configs:
            return []
        d = encode(configs)
        out = self.simulate(d)
        band = self.interval(d, out["iteration_time_s"])
        weight = self.correction_weight(d)
        results = []
        for i, config in enumerate(configs):
            results.append(Prediction(
                config=config,
                iteration_time_s=float(out["iteration_time_s"][i]),
                tokens_per_s=float(out["tokens_per_s"][i]),
                mfu=float(out["mfu"][i]),
                memory_gib_per_gpu=float(out["memory"]["total"][i]) / GiB,
                fits_memory=bool(out["fits_memory"][i]),
                breakdown={k: float(np.broadcast_to(out["breakdown"][k], d.tp.shape)[i]) for k in BREAKDOWN_KEYS},
                memory_breakdown_gib={k: float(np.broadcast_to(v, d.tp.shape)[i]) / GiB
                                      for k, v in out["memory"].items() if k != "total"},
                model_flops=float(out["model_flops"][i]),
                checkpoint=self.name,
                gpu_memory_gib=float(d.hbm_bytes[i]) / GiB,
                iteration_time_s_low=float(band["low"][i]),
                iteration_time_s_high=float(band["high"][i]),
                interval_level=float((self.calibration or {}).get("level", intervals.LEVEL)),
                interval_widening=float(np.broadcast_to(band["widening"], d.tp.shape)[i]),
                correction_weight=None if weight is None else float(weight[i]),
            ))
        return results

    def predict(self, config: TrainConfig) -> Prediction:
        return self.predict_many([config])[0]
