#!/usr/bin/env python3
"""How many conversations run at once under `kvec serve --kv-memory`, full cache against a
budgeted policy: N clients each send one long prompt at the same time; /metrics is polled for
the most slots busy at once, the most KV bytes held and reserved.

    scripts/serve-memory.py --url http://127.0.0.1:8080 --text FILE [--clients 16] [--words 700]
                            [--max-tokens 64] [--policy none --policy kvec:budget=128 ...]

Prints a markdown table (docs/server.md, "Memory admission")."""
import argparse
import json
import threading
import time
import urllib.request


def metrics(url):
    with urllib.request.urlopen(url + "/metrics") as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--text", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--words", type=int, default=700)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--policy", action="append", default=None)
    a = ap.parse_args()
    words = open(a.text, encoding="utf-8").read().split()
    bound = metrics(a.url)["kvec_kv_memory_bytes"]
    print(f"--kv-memory {bound:.0f} bytes, {a.clients} clients at once, prompts of {a.words} words, "
          f"max_tokens {a.max_tokens}\n")
    print("| policy | requests ok | most busy at once | most KV bytes held | most reserved | seconds |")
    print("|---|---|---|---|---|---|")
    for spec in a.policy or ["none", "kvec:budget=128"]:
        kv = {"policy": spec}
        ok = []
        def client(i):
            start = (i * 97) % max(1, len(words) - a.words)
            body = {"prompt": " ".join(words[start:start + a.words]), "max_tokens": a.max_tokens,
                    "temperature": 0, "kv": kv}
            req = urllib.request.Request(a.url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req) as r:
                    json.load(r)
                    ok.append(i)
            except Exception as e:  # noqa: BLE001
                print(f"request {i}: {e}")
        busy = held = reserved = 0
        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            m = metrics(a.url)
            busy = max(busy, m["kvec_slots_busy"])
            held = max(held, m["kvec_kv_cache_bytes"])
            reserved = max(reserved, m["kvec_kv_reserved_bytes"])
            time.sleep(0.005)
        seconds = time.time() - t0
        print(f"| {spec} | {len(ok)} | {busy:.0f} | {held:.0f} | {reserved:.0f} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
