"""Cold wall time of `vtrain predict` (process start to exit), shipped checkpoint and analytical.

Run: python bench/bench_predict.py [--repeats 10]
Prints the median and max over repeats. Target: < 1 s on a 2-core machine.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("vtrain") or str(Path(sys.executable).with_name("vtrain"))
    for label, extra in (("shipped checkpoint", []), ("analytical (--checkpoint none)", ["-c", "none"]),
                         ("json output", ["--json"])):
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run([exe, "predict", str(REPO / "examples" / "gpt3-175b.toml"), *extra], check=True,
                           capture_output=True)
            times.append(time.perf_counter() - start)
        print(f"vtrain predict cold wall time, {label}: median {statistics.median(times):.3f} s, "
              f"max {max(times):.3f} s over {args.repeats} runs")


if __name__ == "__main__":
    main()
