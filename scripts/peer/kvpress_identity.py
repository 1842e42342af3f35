#!/usr/bin/env python3
"""Method identity, kvec against NVIDIA kvpress (issue 42): for one long prompt, the prompt entries
each (layer, KV head) keeps after the prompt's compression, in both engines, per press and
compression ratio, and their Jaccard overlap.

    kvpress_identity.py --kvec KVEC --model MODEL.gguf --text FILE [--words 1400]
                        [--ratios 0.5,0.75] [--only snapkv,...] [--out OUT.json]

kvpress: the press (compression_ratio = r) over the model loaded by transformers from the same
GGUF in float32, eager attention; kept sets from the press's own scores and its own top-k
(ScorerPress.compress's rule, recomputed on the scores its `score` returned). kvec: `kvec serve`
with KVEC_MATMUL=exact (float activations), the matching policy at budget B = kvpress's n_kept
(compute_n_kept), a request of max_tokens 1 with "kv": {"map": true}: the kept prompt positions
per layer and KV head. Both engines see the same token ids (the text is tokenized by kvec once;
the server tokenizes the same text again, and the script checks the counts agree).

Prints a markdown table (docs/peer-kvpress.md) and writes the per-layer numbers to --out.
Run it with the peer virtual environment's Python (scripts/peer/kvpress.sh identity does).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

import kvpress
from kvpress.presses.scorer_press import ScorerPress
from kvpress.utils import compute_n_kept

# press name -> (kvpress press factory, kvec policy spec with kvpress's parameters, what differs)
PAIRS = {
    "streamingllm": (lambda r: kvpress.StreamingLLMPress(compression_ratio=r, n_sink=4), "streaming:sinks=4",
                     "none expected"),
    "snapkv": (lambda r: kvpress.SnapKVPress(compression_ratio=r, window_size=64, kernel_size=5),
               "snapkv:window=64,kernel=5,pooling=avg,gqa=mean", "none expected (kvpress's window and kernel)"),
    "pyramidkv": (lambda r: kvpress.PyramidKVPress(compression_ratio=r, window_size=64, kernel_size=5),
                  "pyramidkv:window=64,kernel=5,pooling=avg,gqa=mean",
                  "kvpress falls back to SnapKV when its smallest layer budget B/beta is below the window"),
    "pyramidkv-vs-snapkv": (lambda r: kvpress.PyramidKVPress(compression_ratio=r, window_size=64, kernel_size=5),
                            "snapkv:window=64,kernel=5,pooling=avg,gqa=mean",
                            "none expected where kvpress's PyramidKV falls back to SnapKV"),
    "tova": (lambda r: kvpress.TOVAPress(compression_ratio=r), "tova:scope=layer",
             "none expected (scope=layer: one set per layer, as the paper)"),
    # Named tova-default until `tova` meant scope=layer (2026-12-06): that is the "tova" pair now.
    "tova-head": (lambda r: kvpress.TOVAPress(compression_ratio=r), "tova:scope=head",
                  "scope=head ranks each KV head on its own group's row; kvpress averages over the layer"),
    "knorm": (lambda r: kvpress.KnormPress(compression_ratio=r), "knorm:window=0", "none expected (window 0)"),
    "keydiff": (lambda r: kvpress.KeyDiffPress(compression_ratio=r), "keydiff:window=0,anchor=unit",
                "none expected (anchor=unit: kvpress's mean of unit keys; window 0)"),
    "keydiff-default": (lambda r: kvpress.KeyDiffPress(compression_ratio=r), "keydiff:window=0",
                        "kvec's default anchor is the mean key, kvpress's the mean of unit keys"),
    "lagkv": (lambda r: kvpress.LagKVPress(compression_ratio=r), "lagkv", "none expected"),
    "expected-attention": (lambda r: kvpress.ExpectedAttentionPress(compression_ratio=r), "expected-attention",
                           "kvec's query statistics come from the last 128 queries, kvpress's from every prompt "
                           "query after the sinks"),
    "expected-attention-all": (lambda r: kvpress.ExpectedAttentionPress(compression_ratio=r),
                               "expected-attention:queries={queries}",
                               "none expected (queries = every prompt query after the 4 sinks)"),
    "h2o": (lambda r: kvpress.ObservedAttentionPress(compression_ratio=r), "h2o:window=0",
            "kvpress averages the attention received over the queries that see the key; H2O sums"),
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def kvec_kept(port, text, spec, budget):
    """[layer][head] -> set of kept prompt positions, and the prompt's token count."""
    r = post(port, {"prompt": text, "max_tokens": 1, "temperature": 0,
                    "kv": {"policy": f"{spec},budget={budget}" if ":" in spec else f"{spec}:budget={budget}",
                           "map": True}})
    kv = r["kv"]
    runs = kv["map"]["runs"]
    kept = []
    for layer in runs:
        heads = []
        for pairs in layer:
            s = set()
            for i in range(0, len(pairs), 2):
                s.update(range(pairs[i], pairs[i] + pairs[i + 1]))
            heads.append(s)
        kept.append(heads)
    return kept, r["usage"]["prompt_tokens"]


def kvpress_kept(model, ids, press):
    """[layer][head] -> set of kept positions, from the press's scores and its compress's top-k."""
    kept = {}
    score = press.score

    def recording(module, hidden_states, keys, values, attentions, kwargs):
        s = score(module, hidden_states, keys, values, attentions, kwargs)
        k_len = keys.shape[2]
        # PyramidKV's compress keeps its layer's own budget; every other ScorerPress n_kept.
        n_kept = (press.get_layer_budget(module, k_len) if hasattr(press, "get_layer_budget")
                  else compute_n_kept(k_len, press.compression_ratio))
        idx = s.topk(n_kept, dim=-1).indices[0]  # [heads, n_kept]
        kept[module.layer_idx] = [set(row.tolist()) for row in idx]
        return s

    press.score = recording
    with torch.no_grad(), press(model):
        model.model(input_ids=ids, past_key_values=DynamicCache())
    return [kept[i] for i in sorted(kept)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--words", type=int, default=1400)
    ap.add_argument("--ratios", default="0.5,0.75")
    ap.add_argument("--only", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    text = " ".join(Path(a.text).read_text(encoding="utf-8").split()[:a.words])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    ids = [int(t) for t in subprocess.check_output([a.kvec, "tokenize", "-m", a.model, "-f", f.name]).split()]
    os.unlink(f.name)
    n = len(ids)
    p = Path(a.model).resolve()
    model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    port = free_port()
    env = dict(os.environ, KVEC_MATMUL="exact")
    server = subprocess.Popen([a.kvec, "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
                               "-c", str(n + 64)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        ids_t = torch.tensor([ids])
        rows, detail = [], {}
        names = [x for x in PAIRS if not a.only or x in a.only.split(",")]
        print(f"{n} prompt tokens (the first {a.words} words of {Path(a.text).name}), "
              f"{model.config.num_hidden_layers} layers x {model.config.num_key_value_heads} KV heads\n")
        print("| press | kvec policy | ratio | B | mean Jaccard | min layer | max layer | identical heads | what differs |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for name in names:
            make, spec, why = PAIRS[name]
            spec = spec.replace("{queries}", str(n - 4))
            for r in [float(x) for x in a.ratios.split(",")]:
                press = make(r)
                kp = kvpress_kept(model, ids_t, press)
                b = compute_n_kept(n, r)
                kv, n_server = kvec_kept(port, text, spec, b)
                if n_server != n:
                    sys.exit(f"the server tokenized the text into {n_server} tokens, kvec tokenize into {n}")
                per_layer = []
                same = 0
                for l, (x, y) in enumerate(zip(kp, kv)):
                    js = [len(hx & hy) / max(1, len(hx | hy)) for hx, hy in zip(x, y)]
                    same += sum(1 for hx, hy in zip(x, y) if hx == hy)
                    per_layer.append(statistics.mean(js))
                mean = statistics.mean(per_layer)
                heads = sum(len(x) for x in kp)
                rows.append((name, r, mean))
                detail[f"{name}@{r}"] = {"budget": b, "per_layer": per_layer, "identical_heads": same, "heads": heads}
                print(f"| {name} | `{spec}` | {r} | {b} | {mean:.3f} | {min(per_layer):.3f} | {max(per_layer):.3f} "
                      f"| {same}/{heads} | {why} |", flush=True)
        if a.out:
            Path(a.out).write_text(json.dumps({"tokens": n, "pairs": detail}, indent=1))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
