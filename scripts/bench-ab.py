"""Two kvec binaries side by side: the same `kvec bench` alternately, after / before with intervals.

    python3 scripts/bench-ab.py BEFORE AFTER MODEL ROUNDS [kvec bench arguments...]

Each round runs `BINARY bench -m MODEL -t 2 -r 1 --no-bandwidth -o csv ARGS` once per binary,
the order swapped every round (so that a drift of the machine falls on both), and prints both
t/s and their ratio per test; at the end the mean ratio AFTER / BEFORE of each test with its 95 %
t-interval over the rounds (scripts/bench_ratio.py). Pass -t to override the 2 threads. How a
change to the engine is measured on a noisy host (docs/performance.md). Standard library only.
"""
import csv
import io
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ratio import interval  # noqa: E402


def run(binary, model, args):
    threads = [] if "-t" in args else ["-t", "2"]
    cmd = [binary, "bench", "-m", model, *threads, "-r", "1", "--no-bandwidth", "-o", "csv", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {row["test"]: float(row["tps_mean"]) for row in csv.DictReader(io.StringIO(out))}


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    before, after, model, rounds, args = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    ratios = {}
    for i in range(rounds):
        order = [before, after] if i % 2 == 0 else [after, before]
        res = {b: run(b, model, args) for b in order}
        for test, t_before in res[before].items():
            t_after = res[after][test]
            ratios.setdefault(test, []).append(t_after / t_before)
            print(f"round {i + 1} {test}: before {t_before:.2f} after {t_after:.2f} t/s, {t_after / t_before:.3f}x",
                  flush=True)
    for test, rs in ratios.items():
        mean, ci = interval(rs)
        ci_text = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        print(f"{test}: after / before {mean:.3f}x{ci_text} over {len(rs)} rounds")


if __name__ == "__main__":
    main()
