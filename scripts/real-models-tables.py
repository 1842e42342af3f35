#!/usr/bin/env python3
"""The full-cache table of docs/results.md from scripts/real-models-eval.sh's output.

    scripts/real-models-tables.py [build/real-models-eval] [--floor 50]

One row per model and length (full/<model>-<length>/summary.csv): the full cache's score per task,
the average with its 95 % interval, and the tasks under the floor marked * (the policy sweeps keep
them out of that model's averages with --task-floor).
"""
import argparse
import csv
import pathlib
import re
import sys

LENGTHS = {"1k": 1, "2k": 2, "4k": 4, "8k": 8, "16k": 16, "32k": 32}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="build/real-models-eval")
    ap.add_argument("--floor", type=float, default=50.0)
    args = ap.parse_args()
    rows, tasks = [], []
    for path in sorted(pathlib.Path(args.dir, "full").glob("*/summary.csv")):
        m = re.fullmatch(r"(.+)-(\d+k)", path.parent.name)
        if not m or m.group(2) not in LENGTHS:
            continue
        with open(path, newline="") as f:
            full = [r for r in csv.DictReader(f) if r["policy"] == "full"]
        if not full:
            continue
        r = full[0]
        row_tasks = [k for k in r if k not in ("policy", "budget") and k != "average"
                     and not k.startswith(("average_", "c_", "redundancy", "kv_", "samples"))]
        tasks += [t for t in row_tasks if t not in tasks]
        rows.append((m.group(1), LENGTHS[m.group(2)], m.group(2), r))
    if not rows:
        print(f"no full/<model>-<length>/summary.csv under {args.dir}", file=sys.stderr)
        return 1
    rows.sort(key=lambda x: (x[0], x[1]))
    print("| model | length | " + " | ".join(tasks) + " | average [95 %] | items |")
    print("|---|---:|" + "---:|" * len(tasks) + "---:|---:|")
    for model, _, length, r in rows:
        cells = []
        for t in tasks:
            v = r.get(t, "")
            if v == "":
                cells.append("-")
                continue
            cells.append(f"{float(v):.1f}" + ("*" if float(v) < args.floor else ""))
        avg = f"{float(r['average']):.1f} [{float(r['average_lo']):.1f}, {float(r['average_hi']):.1f}]"
        print(f"| {model} | {length} | " + " | ".join(cells) + f" | {avg} | {r['samples']} |")
    print(f"\n\\* under {args.floor:g}: reported, kept out of that model's policy averages (--task-floor).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
