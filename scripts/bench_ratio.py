"""Table of kvec / llama.cpp speed ratios from scripts/bench-vs-llama-cpp.sh's JSON files.

    python3 scripts/bench_ratio.py DIR ROUNDS MODEL...

DIR holds kvec-ROUND-I.json (`kvec bench -o json`) and llama-ROUND-I.json (`llama-bench -o json`)
for round 1..ROUNDS and model index I. Prints one Markdown row per model and test: both engines'
t/s per round, the ratio per round, the ratios' mean and range, and for decode (tg) tests the share
of the streaming-read bandwidth that kvec's decode reached in each round (bytes of weights and KV
read per token x t/s / the bandwidth kvec bench measured around the test). Standard library only.
"""
import json
import os
import sys


def kvec_tests(path):
    with open(path) as f:
        doc = json.load(f)
    return {r["test"]: r["tps_mean"] for r in doc["results"]}


def kvec_shares(path):
    """Decode tests' bandwidth share (absent where kvec bench did not measure the bandwidth)."""
    with open(path) as f:
        doc = json.load(f)
    return {r["test"]: r["bandwidth_share"] for r in doc["results"] if r.get("bandwidth_share", -1) >= 0}


def llama_tests(path):
    with open(path) as f:
        rows = json.load(f)
    tests = {}
    for r in rows:
        name = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        if r.get("n_depth", 0):
            name += f"@d{r['n_depth']}"
        tests[name] = r["avg_ts"]
    return tests


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    out, rounds, models = argv[1], int(argv[2]), argv[3:]
    print("| model | test | " + " | ".join(f"round {r}: kvec / llama.cpp t/s (ratio)" for r in range(1, rounds + 1))
          + " | ratio mean (range) | kvec share of the streaming read |")
    print("|---|---|" + "---|" * rounds + "---|---|")
    for i, model in enumerate(models):
        per_round = []
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"kvec-{r}-{i}.json")
            k = kvec_tests(path)
            ll = llama_tests(os.path.join(out, f"llama-{r}-{i}.json"))
            missing = sorted(set(k) ^ set(ll))
            if missing:
                sys.exit(f"error: tests {missing} ran in only one engine ({model}, round {r})")
            per_round.append((k, ll, kvec_shares(path)))
        for test in per_round[0][0]:
            cells, ratios, shares = [], [], []
            for k, ll, share in per_round:
                ratios.append(k[test] / ll[test])
                cells.append(f"{k[test]:.2f} / {ll[test]:.2f} ({ratios[-1]:.2f}x)")
                if test in share:
                    shares.append(f"{100 * share[test]:.0f} %")
            mean = sum(ratios) / len(ratios)
            print(f"| {os.path.basename(model)} | {test} | " + " | ".join(cells)
                  + f" | **{mean:.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) | {', '.join(shares) or '-'} |")


if __name__ == "__main__":
    main(sys.argv)
