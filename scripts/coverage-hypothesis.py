#!/usr/bin/python3
"""The coverage hypothesis put to the test on one `kvec eval` run (docs/results.md, "K-VEC's focus design").

    scripts/coverage-hypothesis.py RUN_DIR [--out DIR] [--budgets 64,128,256] [--plot-only REGEX]

RUN_DIR holds a finished sweep (predictions.jsonl, metrics.json). Over the budgeted policies
(full excluded), on the tasks the sweep's averages count (its --task-floor):

  1. Coverage against accuracy: each (policy, budget) cell's mean coverage and mean score; the
     correlation of the two *within budgets* (both centred on the budget's mean over policies, so
     that "more memory gives more coverage and more accuracy" does not count), pooled over the
     budgets, with a 95 % interval from a stratified bootstrap over items (tasks as strata, 2000
     resamples: the cells are recomputed from the resampled items). Per coverage measure: C_head
     (distinct prefix positions a layer's heads keep), C_layer (over every layer), C_head in
     token identities. Plot: coverage_vs_score.png.
  2. Where the kept entries lie: the share of the kept prefix entries in each tenth of the prompt
     (records' coverage.kept_tenths), per policy and budget: the recency question (SnapKV-style
     scores favour the prompt's end). Plot: kept_positions_B<budget>.png.

Needs numpy and matplotlib (Debian: python3-numpy, python3-matplotlib; scripts/install-deps.sh).
"""
import argparse
import json
import pathlib
import re
import sys

import numpy as np

MEASURES = [("c_head", "C_head (positions)"), ("c_layer", "C_layer (positions)"),
            ("c_head_tokens", "C_head (token identities)")]
RESAMPLES, SEED = 2000, 20261201


def column(b: int) -> str:
    """A budget column's name: B = 256, or c = 0.75 for a compression ratio (stored as -750)."""
    return f"B = {b}" if b > 0 else f"c = {-b / 1000:g}"


def load(run: pathlib.Path):
    metrics = json.loads((run / "metrics.json").read_text())
    excluded = set(metrics.get("task_floor", {}).get("excluded", []))
    records = []
    with open(run / "predictions.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["budget"] == 0 or r["policy"] == "full" or r["task"] in excluded:
                continue
            records.append(r)
    if not records:
        sys.exit(f"{run}: no budgeted records on the counted tasks")
    return records, excluded


def cell_arrays(records, budgets):
    """items [I] (id), tasks [I], cells [C] (policy, budget), and arrays [C, I] of score / measures."""
    items = sorted({r["id"] for r in records})
    item_at = {i: k for k, i in enumerate(items)}
    task_of = {}
    cells = sorted({(r["policy"], r["budget"]) for r in records if r["budget"] in budgets},
                   key=lambda c: (c[1], c[0]))
    cell_at = {c: k for k, c in enumerate(cells)}
    shape = (len(cells), len(items))
    score = np.full(shape, np.nan)
    cover = {m: np.full(shape, np.nan) for m, _ in MEASURES}
    tenths = np.full(shape + (10,), np.nan)
    for r in records:
        c = cell_at.get((r["policy"], r["budget"]))
        if c is None:
            continue
        i = item_at[r["id"]]
        task_of[r["id"]] = r["task"]
        score[c, i] = 100.0 * r["score"]
        for m, _ in MEASURES:
            cover[m][c, i] = r["coverage"][m]
        if "kept_tenths" in r["coverage"]:
            tenths[c, i] = r["coverage"]["kept_tenths"]
    tasks = [task_of[i] for i in items]
    return items, tasks, cells, score, cover, tenths


def cell_means(values, tasks, weights=None):
    """Mean over tasks of the task means (the sweep's average), per cell: values [C, I] -> [C]."""
    uniq = sorted(set(tasks))
    w = np.ones(values.shape[1]) if weights is None else weights
    per_task = []
    for t in uniq:
        cols = np.array([k for k, x in enumerate(tasks) if x == t])
        wt = w[cols]
        per_task.append(np.nansum(values[:, cols] * wt, axis=1) / np.sum(wt))
    return np.mean(per_task, axis=0)


def within_budget_r(cov, sc, cell_budgets):
    x, y = cov.copy(), sc.copy()
    for b in set(cell_budgets):
        sel = np.array([cb == b for cb in cell_budgets])
        x[sel] -= x[sel].mean()
        y[sel] -= y[sel].mean()
    if np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def bootstrap_weights(tasks, rng):
    """Item multiplicities of one stratified resample (tasks as strata)."""
    w = np.zeros(len(tasks))
    for t in sorted(set(tasks)):
        cols = np.array([k for k, x in enumerate(tasks) if x == t])
        picks = rng.integers(0, len(cols), len(cols))
        np.add.at(w, cols[picks], 1.0)
    return w


def correlation_table(tasks, cells, score, cover):
    budgets_of = [b for _, b in cells]
    rng = np.random.default_rng(SEED)
    weights = [bootstrap_weights(tasks, rng) for _ in range(RESAMPLES)]
    sc = cell_means(score, tasks)
    rows = []
    for m, label in MEASURES:
        cv = cell_means(cover[m], tasks)
        r = within_budget_r(cv, sc, budgets_of)
        boot = []
        for w in weights:
            boot.append(within_budget_r(cell_means(cover[m], tasks, w), cell_means(score, tasks, w), budgets_of))
        boot = np.array([b for b in boot if np.isfinite(b)])
        lo, hi = np.percentile(boot, [2.5, 97.5]) if len(boot) else (float("nan"), float("nan"))
        per_budget = {}
        for b in sorted(set(budgets_of)):
            sel = np.array([cb == b for cb in budgets_of])
            per_budget[b] = float(np.corrcoef(cv[sel], sc[sel])[0, 1]) if sel.sum() > 2 and np.std(cv[sel]) > 0 else float("nan")
        rows.append((label, r, lo, hi, per_budget, cv))
    return sc, rows


def plot_coverage(out, cells, sc, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    budgets = sorted({b for _, b in cells})
    fig, axes = plt.subplots(1, len(rows), figsize=(6 * len(rows), 5), squeeze=False)
    for ax, (label, r, lo, hi, _, cv) in zip(axes[0], rows):
        for b in budgets:
            sel = [k for k, c in enumerate(cells) if c[1] == b]
            ax.scatter(cv[sel], sc[sel], label=column(b))
        ax.set_xlabel(label)
        ax.set_ylabel("average score (0-100)")
        ax.set_title(f"within-budget r = {r:+.2f} [{lo:+.2f}, {hi:+.2f}]")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out / "coverage_vs_score.png", dpi=90)
    plt.close(fig)


def plot_tenths(out, cells, tasks, tenths, only):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for b in sorted({b for _, b in cells}):
        fig, ax = plt.subplots(figsize=(9, 5))
        for k, (p, cb) in enumerate(cells):
            if cb != b or np.all(np.isnan(tenths[k])) or (only and not re.search(only, p)):
                continue
            ax.plot(range(1, 11), np.nanmean(tenths[k], axis=0), marker="o", label=re.sub(r"scores=[^,]*/", "scores=", p))
        ax.axhline(0.1, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("tenth of the prompt (1 = start, 10 = end, window excluded)")
        ax.set_ylabel("share of the kept prefix entries")
        ax.set_title(f"Where kept entries lie, {column(b)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(out / f"kept_positions_B{b}.png", dpi=90)
        plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, help="where the plots go (default: RUN_DIR)")
    ap.add_argument("--budgets", help="only these budget columns, comma-separated (default: all)")
    ap.add_argument("--plot-only", help="kept-position plots: only the policies whose label matches this regex")
    args = ap.parse_args()
    records, excluded = load(args.run)
    all_budgets = sorted({r["budget"] for r in records})
    budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else all_budgets
    items, tasks, cells, score, cover, tenths = cell_arrays(records, budgets)
    out = args.out or args.run
    out.mkdir(parents=True, exist_ok=True)

    sc, rows = correlation_table(tasks, cells, score, cover)
    print(f"Run {args.run}: {len(items)} items, {len(cells)} cells (policy x budget), tasks kept out: "
          f"{', '.join(sorted(excluded)) or 'none'}.\n")
    print("| coverage measure | within-budget r | 95 % interval | " +
          " | ".join(f"r at {column(b)}" for b in budgets) + " |")
    print("|---|---:|---|" + "---:|" * len(budgets))
    for label, r, lo, hi, per_budget, _ in rows:
        print(f"| {label} | {r:+.2f} | [{lo:+.2f}, {hi:+.2f}] | " +
              " | ".join(f"{per_budget.get(b, float('nan')):+.2f}" for b in budgets) + " |")
    plot_coverage(out, cells, sc, rows)

    if not np.all(np.isnan(tenths)):
        print("\nShare of the kept prefix entries in the first and the last tenth of the prompt "
              "(uniform: 0.10 each), mean over items:\n")
        print("| policy | " + " | ".join(f"{column(b)} first / last" for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for p in sorted({c[0] for c in cells}):
            line = f"| {re.sub(r'scores=[^,]*/', 'scores=', p)} |"
            for b in budgets:
                k = cells.index((p, b)) if (p, b) in cells else None
                if k is None or np.all(np.isnan(tenths[k])):
                    line += " - |"
                    continue
                m = np.nanmean(tenths[k], axis=0)
                line += f" {m[0]:.2f} / {m[9]:.2f} |"
            print(line)
        plot_tenths(out, cells, tasks, tenths, args.plot_only)
    print(f"\nPlots: {out}/coverage_vs_score.png" + (f", {out}/kept_positions_B*.png" if not np.all(np.isnan(tenths)) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
