"""Table of kvec / llama.cpp speed ratios from scripts/bench-vs-llama-cpp.sh's JSON files.

    python3 scripts/bench_ratio.py DIR ROUNDS MODEL...

DIR holds kvec-ROUND-I.json (`kvec bench -o json`) and llama-ROUND-I.json (`llama-bench -o json`)
for round 1..ROUNDS and model index I. Prints one Markdown row per model, kvec policy and test
(each kvec policy against llama.cpp's full cache): both engines' t/s per round, the ratio per round, the ratios' mean and its 95 % t-interval over the rounds, and for decode (tg) tests the share
of the streaming-read bandwidth that kvec's decode reached in each round (bytes of weights and KV
read per token x t/s / the bandwidth kvec bench measured around the test). Standard library only.
"""
import json
import os
import statistics
import sys

# Two-sided 95 % quantiles of Student's t for 1..10 degrees of freedom.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def interval(ratios):
    """Mean and 95 % t-interval of the per-round ratios (the rounds are the pairs); None for one round."""
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, None
    t = T95[min(len(ratios) - 1, len(T95)) - 1]
    half = t * statistics.stdev(ratios) / len(ratios) ** 0.5
    return mean, (mean - half, mean + half)


def test_name(name):
    """kvec's "tg128 @ d4096" as llama-bench's "tg128@d4096"."""
    return name.replace(" ", "")


def kvec_tests(path):
    """(policy, test) -> t/s; policy "full" for the full cache."""
    with open(path) as f:
        doc = json.load(f)
    return {(r.get("policy", "full"), test_name(r["test"])): r["tps_mean"] for r in doc["results"]}


def kvec_shares(path):
    """Decode tests' bandwidth share (absent where kvec bench did not measure the bandwidth)."""
    with open(path) as f:
        doc = json.load(f)
    return {(r.get("policy", "full"), test_name(r["test"])): r["bandwidth_share"]
            for r in doc["results"] if r.get("bandwidth_share", -1) >= 0}


def llama_tests(path):
    """test -> t/s; where llama-bench ran a test under several settings (-fa 0,1), its fastest."""
    with open(path) as f:
        rows = json.load(f)
    tests = {}
    for r in rows:
        name = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        if r.get("n_depth", 0):
            name += f"@d{r['n_depth']}"
        tests[name] = max(tests.get(name, 0.0), r["avg_ts"])
    return tests


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    out, rounds, models = argv[1], int(argv[2]), argv[3:]
    print("| model | kvec policy | test | " + " | ".join(f"round {r}: kvec / llama.cpp t/s (ratio)" for r in range(1, rounds + 1))
          + " | ratio mean [95 % interval over rounds] | kvec share of the streaming read |")
    print("|---|---|---|" + "---|" * rounds + "---|---|")
    for i, model in enumerate(models):
        per_round = []
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"kvec-{r}-{i}.json")
            k = kvec_tests(path)
            ll = llama_tests(os.path.join(out, f"llama-{r}-{i}.json"))
            missing = sorted({t for _, t in k} ^ set(ll))
            if missing:
                sys.exit(f"error: tests {missing} ran in only one engine ({model}, round {r})")
            per_round.append((k, ll, kvec_shares(path)))
        for key in per_round[0][0]:
            policy, test = key
            cells, ratios, shares = [], [], []
            for k, ll, share in per_round:
                ratios.append(k[key] / ll[test])
                cells.append(f"{k[key]:.2f} / {ll[test]:.2f} ({ratios[-1]:.2f}x)")
                if key in share:
                    shares.append(f"{100 * share[key]:.0f} %")
            mean, ci = interval(ratios)
            ci_text = f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "(one round)"
            print(f"| {os.path.basename(model)} | {policy} | {test} | " + " | ".join(cells)
                  + f" | **{mean:.2f}x** {ci_text} | {', '.join(shares) or '-'} |")


if __name__ == "__main__":
    main(sys.argv)
