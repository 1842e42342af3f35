#!/usr/bin/env python3
"""The tables of docs/results.md from scripts/real-models-eval.sh's output.

    scripts/real-models-tables.py [build/real-models-eval] [--floor 50]
    scripts/real-models-tables.py [build/real-models-eval] --run policies/smollm2-query-aware \
        --section "Average score with 95 % interval" --section "Paired: kvec against each policy"

    scripts/real-models-tables.py [build/real-models-eval] --fidelity fidelity/smollm2
    scripts/real-models-tables.py [build/real-models-eval] --kvec-paired designs/smollm2-query-agnostic

The first form: one row per model and length (full/<model>-<length>/summary.csv): the full
cache's score per task, the average with its 95 % interval, and the tasks under the floor marked *
(the policy sweeps keep them out of that model's averages with --task-floor). The second: the
named sections of one run's summary.md, as `kvec eval` wrote them. The third: a fidelity run's
KL, top-1 agreement and NLL against the full cache as policy x budget tables, and K-VEC's paired
NLL difference against each policy (fidelity.csv, fidelity_paired.csv).
"""
import argparse
import csv
import pathlib
import re
import sys

LENGTHS = {"1k": 1, "2k": 2, "4k": 4, "8k": 8, "16k": 16, "32k": 32}
NAMES = {"smollm2": "SmolLM2-135M-Instruct (chat)", "gemma": "Gemma 3 270M (base, completion)",
         "qwen05": "Qwen2.5-Coder-0.5B-Instruct (chat)"}


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


def print_fidelity(run: pathlib.Path) -> int:
    """Policy x budget pivots of fidelity.csv, and kvec's paired NLL differences."""
    with open(run / "fidelity.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["policy"] != "full"]
    budgets = sorted({int(r["budget"]) for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["policy"], int(r["budget"])): r for r in rows}

    def pivot(title, fmt):
        print(f"**{title}**\n")
        print("| policy | " + " | ".join(f"B={b}" for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for p in policies:
            print(f"| {p} | " + " | ".join(fmt(cell[(p, b)]) if (p, b) in cell else "-" for b in budgets) + " |")
        print()

    pivot("Mean KL from the full cache (nats)", lambda r: f"{float(r['kl_mean']):.4f}")
    pivot("Top-1 agreement with the full cache", lambda r: f"{float(r['top1']):.3f}")
    pivot("Continuation NLL minus the full cache's (nats per token, 95 % interval over segments)",
          lambda r: f"{float(r['dnll_full']):+.4f} [{float(r['dnll_full_lo']):+.4f}, {float(r['dnll_full_hi']):+.4f}]")
    paired = []  # (other, budget, kvec - other, lo, hi)
    with open(run / "fidelity_paired.csv", newline="") as f:
        for r in csv.DictReader(f):
            d, lo, hi = float(r["dnll"]), float(r["lo"]), float(r["hi"])
            if r["policy_a"] == "kvec":
                paired.append((r["policy_b"], int(r["budget"]), d, lo, hi))
            elif r["policy_b"] == "kvec":  # stored as other - kvec: flip
                paired.append((r["policy_a"], int(r["budget"]), -d, -hi, -lo))
    if paired:
        print("**K-VEC's NLL minus each policy's (nats per token; ▲ lower, ▼ higher where the interval excludes 0)**\n")
        print("| other policy | " + " | ".join(f"B={b}" for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        pc = {(other, b): (d, lo, hi) for other, b, d, lo, hi in paired}
        for p in policies:
            if p == "kvec":
                continue
            cells = []
            for b in budgets:
                if (p, b) not in pc:
                    cells.append("-")
                    continue
                d, lo, hi = pc[(p, b)]
                mark = " ▲" if hi < 0 else " ▼" if lo > 0 else ""
                cells.append(f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]{mark}")
            print(f"| {p} | " + " | ".join(cells) + " |")
        print()
    return 0


def short(label: str) -> str:
    """A policy label without the importance file's folder (headkv:scores=.../smollm2.json)."""
    return re.sub(r"scores=[^,]*/", "scores=", label)


def print_kvec_paired(run: pathlib.Path) -> int:
    """Per K-VEC design (labels starting with kvec) and budget column: the policies that are
    significantly better (its paired interval below 0) and worse, from paired.csv."""
    with open(run / "paired.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{run}/paired.csv is empty", file=sys.stderr)
        return 1
    labels = list(dict.fromkeys([r["policy_a"] for r in rows] + [r["policy_b"] for r in rows]))
    budgets = list(dict.fromkeys(r["budget"] for r in rows))
    designs = [p for p in labels if p.startswith("kvec")]
    out = {}  # (design, budget) -> (worse than, better than)
    for r in rows:
        for design, other, sign in ((r["policy_a"], r["policy_b"], 1), (r["policy_b"], r["policy_a"], -1)):
            if design not in designs or other == "full":
                continue
            lo, hi = sign * float(r["lo"]), sign * float(r["hi"])
            lo, hi = min(lo, hi), max(lo, hi)
            cell = out.setdefault((design, r["budget"]), ([], []))
            if hi < 0:
                cell[0].append(f"{short(other)} ({sign * float(r['diff']):+.1f})")
            elif lo > 0:
                cell[1].append(f"{short(other)} ({sign * float(r['diff']):+.1f})")
    # Compression-ratio columns are stored as minus the ratio in thousandths (-750: c = 0.75).
    print("| K-VEC design | " + " | ".join(f"B={b}" if not b.startswith("-") else f"c={-int(b) / 1000:g}"
                                          for b in budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    for d in designs:
        cells = []
        for b in budgets:
            worse, better = out.get((d, b), ([], []))
            text = []
            if worse:
                text.append("▼ " + ", ".join(worse))
            if better:
                text.append("▲ " + ", ".join(better))
            cells.append("; ".join(text) or "ties all")
        print(f"| {short(d)} | " + " | ".join(cells) + " |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="build/real-models-eval")
    ap.add_argument("--floor", type=float, default=50.0)
    ap.add_argument("--run", help="one run under DIR: print --section(s) of its summary.md")
    ap.add_argument("--section", action="append", default=[], help="a '## ' heading of summary.md")
    ap.add_argument("--fidelity", help="one fidelity run under DIR: its tables")
    ap.add_argument("--kvec-paired", help="one run under DIR: per K-VEC design and budget, the policies "
                    "significantly better (▼) and worse (▲) than it (paired.csv)")
    args = ap.parse_args()
    if args.kvec_paired:
        return print_kvec_paired(pathlib.Path(args.dir, args.kvec_paired))
    if args.fidelity:
        return print_fidelity(pathlib.Path(args.dir, args.fidelity))
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
        print(f"| {NAMES.get(model, model)} | {length} | " + " | ".join(cells) + f" | {avg} | {r['samples']} |")
    print(f"\n\\* under {args.floor:g}: reported, kept out of that model's policy averages (--task-floor).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
