#!/usr/bin/env python3
"""Cost per item of each engine for the same work (issue 42): kvec against kvpress on CPU, same
threads, alternating rounds, paired by round.

    kvpress_cost.py --kvec KVEC --model MODEL.gguf [--threads 2] [--rounds 3] [--ratio 0.75]
                    [--pairs "snapkv:window=64,kernel=5,pooling=avg=snapkv;tova:scope=layer=tova;streaming=streamingllm"]

Each round runs kvec first, then kvpress, on the same items: `kvec eval` (synthetic-2k test split,
one item per task, query-agnostic, `--no-share-prefill`: every policy prefills its own context as
kvpress's pipeline does) with the pairs' kvec policies at compression `--ratio`, its seconds per
item and policy taken from its metrics.json (the sweep's wall time over its generations: prefill,
compression and answer; model loading excluded); then kvpress's pipeline on the same token ids
with the pairs' presses (the model loaded once, before the first round; each call timed). Prints
each round's seconds per item and method for both engines, their ratio, and the ratios' mean with
a 95 % t-interval over the rounds. Run it on an otherwise idle machine.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_ratio import interval  # noqa: E402  (the rounds' mean and 95 % t-interval)
from kvpress_leaderboard import PRESSES, load_pipeline  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ratio", type=float, default=0.75)
    ap.add_argument("--pairs", default="snapkv:window=64,kernel=5,pooling=avg=snapkv;tova:scope=layer=tova;streaming=streamingllm")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    pairs = [p.rsplit("=", 1) for p in a.pairs.split(";")]
    for _, press in pairs:
        if press not in PRESSES:
            sys.exit(f"unknown press '{press}'; known: {', '.join(PRESSES)}")
    pipe, _ = load_pipeline(a.model)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, a.rounds + 1):
            out = Path(tmp) / f"kvec-{r}"
            subprocess.run([a.kvec, "eval", "-m", a.model, "-t", str(a.threads), "--suite", "synthetic-2k", "--split", "test",
                            "--samples", "1", "--tasks", "niah_single,niah_multikey,niah_multivalue,niah_multiquery,fwe,qa",
                            "--protocol", "query-agnostic", "--compression", str(a.ratio), "--no-share-prefill",
                            "--save-items", "--out", str(out), "--policies", ",".join(k for k, _ in pairs)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            metrics = json.loads((out / "metrics.json").read_text())
            gens = metrics["mode"]["generations"]
            kvec_s = metrics["timing"]["wall_seconds"] / gens
            items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines() if line]
            secs = []
            for it in items:
                ctx = torch.tensor([it["prompt"][: it["n_context"]]])
                question = torch.tensor([it["prompt"][it["n_context"]:]])
                for _, press in pairs:
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        pipe._forward({"context_ids": ctx, "questions_ids": [question]},
                                      max_new_tokens=it["max_new_tokens"], press=PRESSES[press](a.ratio))
                    secs.append(time.perf_counter() - t0)
            kvpress_s = statistics.mean(secs)
            rows.append((kvec_s, kvpress_s))
            print(f"round {r}: kvec {kvec_s:.3f} s, kvpress {kvpress_s:.3f} s per item and method "
                  f"({gens} and {len(secs)} calls), kvec / kvpress {kvec_s / kvpress_s:.3f}", flush=True)
    ratios = [k / p for k, p in rows]
    mean, ci = interval(ratios)
    ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}] (95 % t-interval over {len(ratios)} rounds)" if ci else "(one round)"
    print(f"\nkvec / kvpress seconds per item and method: {mean:.3f} {ci_text}, {a.threads} threads, "
          f"compression {a.ratio}")


if __name__ == "__main__":
    main()
