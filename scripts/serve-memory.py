#!/usr/bin/env python3
"""How many conversations run at once under `kvec serve --kv-memory`, full cache against a
budgeted policy: N clients each send one long prompt at the same time; /metrics is polled for
the most slots busy at once, the most KV bytes held and reserved.

    scripts/serve-memory.py --url http://127.0.0.1:8080 --text FILE [--clients 16] [--words 700]
                            [--max-tokens 64] [--policy none --policy kvec:budget=128 ...]

With --restore (the server needs --slot-save-path and --parallel >= 2): per policy, one long
document is prefilled once on slot 0 (kept, `kv.reuse`), saved, and restored into every other
slot (a restore drops the least recently used kept conversation when --kv-memory has no room
for it); then the client of every slot that holds the document asks its own question about it
at the same time, naming its slot (`id_slot`), so each continues the document's cache, unless
admission dropped that slot's copy meanwhile (then it prefills the document again:
"re-prefilled"). Prints how many conversations the memory held at once, the most slots decoding
at once and the aggregate generation speed.

Prints a markdown table (docs/server.md, "Memory admission")."""
import argparse
import json
import threading
import time
import urllib.error
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
    ap.add_argument("--restore", action="store_true", help="one document restored into every slot (above)")
    a = ap.parse_args()
    if a.restore:
        restore_case(a)
        return
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
            try:
                status, r = post(a.url + "/v1/completions", body)
                if status == 200:
                    ok.append(i)
                else:
                    print(f"request {i}: {status} {r}")
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


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def restore_case(a):
    document = " ".join(open(a.text, encoding="utf-8").read().split()[:a.words])
    m = metrics(a.url)
    slots = int(m["kvec_slots"])
    print(f"--kv-memory {m['kvec_kv_memory_bytes']:.0f} bytes, {slots} slots; a document of {a.words} words "
          f"restored into each, then a question on every slot that holds it, all at once, "
          f"max_tokens {a.max_tokens}\n")
    print("| policy | document tokens | conversations held | KV bytes held | requests ok | most decoding at once "
          "| re-prefilled | generated tokens | seconds | generated t/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, spec in enumerate(a.policy or ["none", "kvec:budget=512"]):
        kv = {"policy": spec, "reuse": True}
        status, first = post(a.url + "/v1/completions", {"prompt": document, "max_tokens": 1, "temperature": 0,
                                                           "kv": kv, "id_slot": 0})
        if status != 200:
            print(f"| {spec} | prefill failed: {first} |")
            continue
        name = f"serve-memory-{n}.slot"
        status, saved = post(f"{a.url}/slots/0?action=save", {"filename": name})
        assert status == 200, saved
        for slot in range(1, slots):
            status, r = post(f"{a.url}/slots/{slot}?action=restore", {"filename": name})
            assert status == 200, r
        m = metrics(a.url)
        kept, held = m["kvec_slots_kept"], m["kvec_kv_cache_bytes"]
        holding = [slot for slot in range(slots) if m[f'kvec_slot_kv_cache_bytes{{slot="{slot}"}}'] > 0]
        results = {}

        def client(slot):
            body = {"prompt": f"{document} Question {slot}: what happened next?", "max_tokens": a.max_tokens,
                    "temperature": 0, "kv": kv, "id_slot": slot}
            results[slot] = post(a.url + "/v1/completions", body)

        threads = [threading.Thread(target=client, args=(slot,)) for slot in holding]
        busy = 0
        t0 = time.time()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            busy = max(busy, metrics(a.url)["kvec_slots_busy"])
            time.sleep(0.01)
        seconds = time.time() - t0
        ok = [r for status, r in results.values() if status == 200]
        generated = sum(r["usage"]["completion_tokens"] for r in ok)
        again = sum(1 for r in ok if r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0)
        print(f"| {spec} | {first['usage']['prompt_tokens']} | {kept:.0f} | {held:.0f} | {len(ok)} | {busy:.0f} | "
              f"{again} | {generated} | {seconds:.1f} | {generated / seconds:.2f} |")
        for slot in range(slots):
            post(f"{a.url}/slots/{slot}?action=erase", {})


if __name__ == "__main__":
    main()
