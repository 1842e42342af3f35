"""Decode at depth as a share of decode at depth 0, for one kvec binary, with an interval.

    python3 scripts/bench-depth-share.py BINARY MODEL DEPTH INVOCATIONS [kvec bench arguments...]

Each invocation runs `BINARY bench -m MODEL -t 2 -p 0 -n 128 -d 0,DEPTH -r 3 --no-bandwidth -o
csv ARGS` (ARGS may override -t, -p, -n and -r, and add e.g. `--policy kvec --budget 512`), with the
order of the two depths swapped every other invocation (`-d DEPTH,0`), so that a drift of the
machine, or a first test that runs slower than the second, falls on both. An invocation's share is
its mean t/s at DEPTH over its mean t/s at depth 0; at the end the mean share with its 95 %
t-interval over the invocations (scripts/bench_ratio.py). The issue-43 goal "K-VEC at depth keeps
at least 90 % of its own depth-0 decode" is measured this way (docs/performance.md).

Each invocation also gives the share that the bytes allow: the bytes one decode step reads at
depth 0 (weights and the live KV entries, `bytes_per_token` of `kvec bench`) over those at DEPTH.
A decode that streams its bytes as fast at DEPTH as at depth 0 keeps exactly that share; the
share over this bound (its own interval at the end) is how much of it the engine keeps, and a
value near 1 says that the KV bytes themselves, not the kernels, set the gap. Standard library
only.
"""
import csv
import io
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ratio import interval  # noqa: E402


def defaults(args):
    """The fixed arguments, less those ARGS gives itself."""
    fixed = {"-t": "2", "-p": "0", "-n": "128", "-r": "3"}
    out = []
    for flag, value in fixed.items():
        if flag not in args:
            out += [flag, value]
    return out


def run(binary, model, depths, args):
    cmd = [binary, "bench", "-m", model, "-d", depths, "--no-bandwidth", "-o", "csv", *defaults(args), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.strip()}")
    out = proc.stdout
    rows = [row for row in csv.DictReader(io.StringIO(out)) if row["kind"] == "tg"]
    if len(rows) != 2:
        sys.exit(f"expected one generation test per depth, got {len(rows)}: check ARGS (one -n, one --policy)")
    return {int(row["depth"]): (float(row["tps_mean"]), float(row["bytes_per_token"])) for row in rows}


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    binary, model, depth, count, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
    if depth <= 0 or count < 1:
        sys.exit("DEPTH must be above 0 and INVOCATIONS at least 1")
    shares, bounds, of_bound = [], [], []
    for i in range(count):
        depths = f"0,{depth}" if i % 2 == 0 else f"{depth},0"
        result = run(binary, model, depths, args)
        (tps0, bytes0), (tps, nbytes) = result[0], result[depth]
        shares.append(tps / tps0)
        bounds.append(bytes0 / nbytes)
        of_bound.append(shares[-1] / bounds[-1])
        print(f"invocation {i + 1} (-d {depths}): depth 0 {tps0:.2f}, depth {depth} {tps:.2f} t/s, "
              f"share {shares[-1]:.3f}; bytes per token {bytes0 / 2**20:.2f} and {nbytes / 2**20:.2f} MiB, "
              f"bound {bounds[-1]:.3f}, share of the bound {of_bound[-1]:.3f}", flush=True)

    def text(name, values):
        mean, ci = interval(values)
        ci_text = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        return f"{name}: {mean:.3f}{ci_text}"

    print(f"{text(f'share of depth 0 at depth {depth}', shares)} over {len(shares)} invocations; "
          f"{text('bound the bytes set', bounds)}; {text('share of that bound', of_bound)}")


if __name__ == "__main__":
    main()
