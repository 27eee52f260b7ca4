"""Accuracy on published, measured training runs (`../shared/data/published/runs.csv`), by source.

For each source group (the source id without its row suffix): rows predicted, rows refused (with
the reasons the simulator cannot express them), and the median / p90 of |error| and the mean signed
error (bias, + = over-predicted) in percent, for each checkpoint given (default: the shipped one
and `none`, the analytical simulator).

Run: python bench/bench_published.py [--runs PATH] [--checkpoint default --checkpoint none] [--reasons]
"""
import argparse
from collections import Counter

from vtrain.costmodel.predictor import Predictor
from vtrain.training.published import default_path, load_published, summarize_by_source
from vtrain.training.runs import encode_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=None, help="published runs.csv (default: $VTRAIN_DATA/published/runs.csv)")
    parser.add_argument("--checkpoint", action="append", default=None,
                        help="checkpoint name or .npz (repeatable; default: default and none)")
    parser.add_argument("--reasons", action="store_true", help="list every refused row with its reasons")
    args = parser.parse_args()
    path = args.runs or default_path()
    if path is None:
        raise SystemExit("no published runs found: pass --runs PATH or set VTRAIN_DATA")
    runs, refused = load_published(path)
    d = encode_runs(runs)
    names = args.checkpoint or ["default", "none"]
    predictions = {name: Predictor.load(name).simulate(d)["iteration_time_s"] for name in names}
    table = summarize_by_source(runs, predictions, refused)
    print(f"{path}: {len(runs)} rows predicted, {len(refused)} refused")
    head = f"{'group':28s} {'n':>3s} {'ref':>3s}" + "".join(
        f" | {name[:10]:>10s} med   p90  bias" for name in names)
    print(head)
    for row in table.to_dict("records"):
        cells = "".join(f" | {row[f'{n}_median']:15.1f} {row[f'{n}_p90']:5.1f} {row[f'{n}_bias']:+5.1f}"
                        if row["rows"] else f" | {'-':>15s} {'-':>5s} {'-':>5s}" for n in names)
        print(f"{row['group']:28s} {row['rows']:3d} {row['refused']:3d}{cells}")
    print("\nrefused, by reason (a row may have several):")
    if args.reasons:
        for sid, reasons in refused:
            print(f"  {sid}: {'; '.join(reasons)}")
    else:
        for reason, n in Counter(r for _, rs in refused for r in rs).most_common():
            print(f"  {n:3d}  {reason}")


if __name__ == "__main__":
    main()
