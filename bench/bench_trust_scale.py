"""Choose the trust fade's scale (costmodel/correction.py TRUST_SCALE) by held-out error on the
dataset's runs, never on the public runs: grouped CV by model shape and leave-one-GPU-count-out
(multi-node), as `vtrain validate --no-kernels` splits them. Each fold is fitted once; its held-out
runs are then predicted with each candidate scale (inf = no fade, the correction everywhere).

Run: python bench/bench_trust_scale.py out/shared-dataset [--folds 5] [--scales 0.5,1,2,inf] [--seed 0]
     [--splits shape,gpus] [--save held-out.parquet]
(~9 fits: ~10 min idle on 2 cores, 25 min under load.) Prints MAPE, median and p90 |error| per
split, setting and scale, and the share of held-out runs each fold's range puts outside (trust < 1).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from vtrain.costmodel import correction as C
from vtrain.costmodel.simulator import simulate
from vtrain.training import evaluate as ev
from vtrain.training.data import load_dataset
from vtrain.training.fit import FitSettings
from vtrain.training.runs import encode_runs, setting_label, shape_key
from vtrain.training.train import train


def held_out_predictions(ds, settings, init, split: str, folds: int, scales: list[float]) -> pd.DataFrame:
    """One row per held-out run: its fold, setting, trust weight and predicted time per scale."""
    runs = ds.runs.reset_index(drop=True)
    fold_of = ev.run_folds(runs, split, folds)
    frames = []
    for fold in sorted(set(fold_of) - {-1}):
        t0 = time.perf_counter()
        test = fold_of == fold
        params, _ = train(ds, settings, runs=runs[~test], init=init)
        d = encode_runs(runs[test])
        frame = runs[test].assign(split=split, fold=fold, setting=np.asarray(setting_label(runs[test])),
                                  shape=np.asarray(shape_key(runs[test])))
        for s in scales:
            C.TRUST_SCALE = s
            frame[f"pred_{s:g}"] = np.asarray(simulate(d, params)["iteration_time_s"])
            if s == 1.0:
                frame["trust"] = np.asarray(C.trust_weight(params, d, np))
        frames.append(frame)
        print(f"  {split} fold {fold}: {int(test.sum())} runs held out, {time.perf_counter() - t0:.0f} s", flush=True)
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--scales", default="0.5,1,2,inf")
    parser.add_argument("--seed", type=int, default=0, help="fit seed (the shipped recipe uses 0)")
    parser.add_argument("--splits", default="shape,gpus", help="held-out splits: shape (grouped CV by model shape), "
                        "gpus (leave one multi-node GPU count out)")
    parser.add_argument("--ema", type=float, default=None, help="fit with this parameter EMA decay (default: the recipe's)")
    parser.add_argument("--save", default=None, help="write the held-out predictions to this .parquet")
    args = parser.parse_args()
    scales = [float(x) for x in args.scales.split(",")]
    splits = [x.strip() for x in args.splits.split(",") if x.strip()]
    if not set(splits) <= {"shape", "gpus"}:
        raise SystemExit(f"--splits: {args.splits!r}; use shape, gpus or shape,gpus")
    settings = FitSettings(progress=False, seed=args.seed)
    if args.ema is not None:
        settings = replace(settings, ema_decay=args.ema)
    ds = load_dataset(args.dataset, seed=settings.seed)
    default = C.TRUST_SCALE
    init = ev.pretrain(ds, settings)  # on the kernels and collectives, as validate --no-kernels does
    frames = [held_out_predictions(ds, settings, init, split, args.folds, scales) for split in splits]
    C.TRUST_SCALE = default
    table = pd.concat(frames, ignore_index=True)
    if args.save:
        table.to_parquet(args.save)
    print(f"\nheld-out |error| % by trust scale (doublings; inf = no fade); shipped scale {default:g}; seed {args.seed}")
    for (split, setting), group in table.groupby(["split", "setting"]):
        measured = group["iteration_time_s"].to_numpy()
        outside = float(np.mean(group["trust"] < 1.0) * 100) if "trust" in group else float("nan")
        cells = []
        for s in scales:
            err = np.abs(group[f"pred_{s:g}"].to_numpy() / measured - 1.0) * 100
            cells.append(f"s={s:g}: MAPE {err.mean():.2f} med {np.median(err):.2f} p90 {np.percentile(err, 90):.2f}")
        print(f"{split:6s} {setting:12s} n={len(group):4d} outside {outside:4.1f} % | " + " | ".join(cells))


if __name__ == "__main__":
    main()
