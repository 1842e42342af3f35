#!/usr/bin/env python3
"""A long conversation through `kvec serve`, with and without kv.reuse: per turn, the prompt
tokens, how many came from the slot's kept cache, the KV bytes at the end and the wall time.

    scripts/serve-multiturn.py --url http://127.0.0.1:8080 --text FILE [--policy kvec] [--budget 128]
                               [--turns 4] [--words 400] [--max-tokens 16]

Each turn appends the model's answer and the next WORDS words of FILE to the prompt
(/v1/completions, greedy). Prints a markdown table (docs/server.md, "Kept conversations")."""
import argparse
import json
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    with urllib.request.urlopen(req) as r:
        return json.load(r), time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--text", required=True)
    ap.add_argument("--policy", default="kvec")
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--words", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    words = open(a.text, encoding="utf-8").read().split()
    print("| reuse | turn | prompt tokens | cached | KV bytes at end | budget held | seconds |")
    print("|---|---|---|---|---|---|---|")
    for reuse in (False, True):
        prompt = ""
        for turn in range(a.turns):
            prompt += " ".join(words[turn * a.words:(turn + 1) * a.words]) + "\n"
            kv = {"policy": a.policy, "budget": a.budget, "reuse": reuse}
            r, seconds = post(a.url, {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "kv": kv})
            u, k = r["usage"], r["kv"]
            print(f"| {str(reuse).lower()} | {turn + 1} | {u['prompt_tokens']} | "
                  f"{u['prompt_tokens_details']['cached_tokens']} | {k['bytes_end']} | {k['budget_held']} | {seconds:.2f} |")
            prompt += r["choices"][0]["text"]


if __name__ == "__main__":
    main()
