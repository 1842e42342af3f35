#!/usr/bin/env python3
"""The tables of docs/results.md from scripts/real-models-eval.sh's output.

    scripts/real-models-tables.py [build/real-models-eval] [--floor 50]
    scripts/real-models-tables.py [build/real-models-eval] --run policies/smollm2-query-aware \
        --section "Average score with 95 % interval" --section "Paired: kvec against each policy"

The first form: one row per model and length (full/<model>-<length>/summary.csv): the full
cache's score per task, the average with its 95 % interval, and the tasks under the floor marked *
(the policy sweeps keep them out of that model's averages with --task-floor). The second: the
named sections of one run's summary.md, as `kvec eval` wrote them.
"""
import argparse
import csv
import pathlib
import re
import sys

LENGTHS = {"1k": 1, "2k": 2, "4k": 4, "8k": 8, "16k": 16, "32k": 32}


def print_sections(path: pathlib.Path, titles: list) -> int:
    """Prints each '## TITLE' section of PATH (heading excluded) up to the next heading."""
    sections, title = {}, None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            sections[title] = []
        elif title is not None:
            sections[title].append(line)
    for t in titles:
        if t not in sections:
            print(f"{path}: no section '## {t}' (has: {', '.join(sections)})", file=sys.stderr)
            return 1
        print(f"**{t}**\n\n" + "\n".join(sections[t]).strip() + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="build/real-models-eval")
    ap.add_argument("--floor", type=float, default=50.0)
    ap.add_argument("--run", help="one run under DIR: print --section(s) of its summary.md")
    ap.add_argument("--section", action="append", default=[], help="a '## ' heading of summary.md")
    args = ap.parse_args()
    if args.run:
        return print_sections(pathlib.Path(args.dir, args.run, "summary.md"), args.section)
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
