#!/usr/bin/env python3
"""Method identity, kvec against NVIDIA kvpress (issue 42): for one long prompt, the prompt entries
each (layer, KV head) keeps after the prompt's compression, in both engines, per press and
compression ratio, and their Jaccard overlap.

    kvpress_identity.py --kvec KVEC --model MODEL.gguf --text FILE [--words 1400]
                        [--ratios 0.5,0.75] [--only snapkv,...] [--out OUT.json]

kvpress: the press (compression_ratio = r) over the model loaded by transformers from the same
GGUF in float32, eager attention; kept sets from the press's own scores and its own top-k
(ScorerPress.compress's rule, recomputed on the scores its `score` returned), or for the presses
that mask keys per head (Ada-KV, KVzip) from the masks they leave (sdpa attention). kvec: `kvec serve`
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
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

import kvpress
from kvpress.presses.scorer_press import ScorerPress
from kvpress.utils import compute_n_kept

from kvpress_leaderboard import use_file_tokenizer_in_kvzip

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
    "h2o-sum": (lambda r: ObservedAttentionSum(compression_ratio=r), "h2o:window=0",
                "none expected (kvpress's attention received, summed as H2O)"),
    # Presses that mask keys per head instead of cutting every head to n_kept (kept sets read from
    # the masks they leave on each attention module, kvpress_masked_kept).
    "adakv-snapkv": (lambda r: kvpress.AdaKVPress(kvpress.SnapKVPress(compression_ratio=r, window_size=64,
                                                                       kernel_size=5)),
                     "ada-snapkv:window=64,kernel=5,pooling=avg,gqa=mean",
                     "the head budgets: kvpress forces each head's top alpha n_kept (window included) and "
                     "takes the layer's top H n_kept; kvec allocates Ada-KV's q_h over B - w, then adds the window"),
    "adakv-kvec-rule": (lambda r: AdaKVRuleOfKvec(compression_ratio=r, window_size=64, kernel_size=5),
                        "ada-snapkv:window=64,kernel=5,pooling=avg,gqa=mean",
                        "none expected (kvpress's SnapKV scores, kvec's head budgets)"),
    "kvzip": (lambda r: kvpress.KVzipPress(compression_ratio=r), "kvzip",
              "kvpress does not reconstruct the first P context tokens, P the chat template's prefix length (its "
              "system prompt and user header), even without a template: scored 0 past the 4 sinks; kvec reconstructs "
              "the whole context"),
    "kvzip-whole": (lambda r: KVzipWholeContext(compression_ratio=r), "kvzip",
                    "none expected (kvpress reconstructing the whole context, as kvec)"),
}
MASKING = ("adakv-snapkv", "kvzip", "kvzip-whole")


class ObservedAttentionSum(kvpress.ObservedAttentionPress):
    """ObservedAttentionPress's score times the number of queries that see each key (kvpress divides
    the attention a key receives by it): H2O's sum."""

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        s = super().score(module, hidden_states, keys, values, attentions, kwargs)
        n = keys.shape[2]
        return s * torch.arange(n, 0, -1, dtype=s.dtype)


class KVzipWholeContext(kvpress.KVzipPress):
    """KVzipPress reconstructing every context token: kvpress skips the chat template's prefix
    length of the context (the template's system and user header), kvec reconstructs them too."""

    def prepare(self, model, tokenizer, prev_postfix_size=8):
        self.prefix_length = 0
        return super().prepare(model, tokenizer, prev_postfix_size)


class AdaKVRuleOfKvec(kvpress.SnapKVPress):
    """kvpress's SnapKV scores kept by kvec's Ada-KV rule (docs/policies.md, ada-snapkv): the window
    always; of the other N - w entries, the layer's top H (B - w) pairs give each head n_h, its
    budget floor(n_h (1 - alpha) + floor(alpha (B - w))), the pairs still missing handed out by
    largest remainder; each head its top budget. kept_sets: [head] -> kept positions."""
    alpha = 0.2

    def kept_sets(self, scores):
        h_kv, n = scores.shape
        w = self.window_size
        n_kept = compute_n_kept(n, self.compression_ratio)
        b, cand = n_kept - w, scores[:, :n - w]
        top = cand.reshape(-1).topk(h_kv * b).indices // (n - w)
        n_h = torch.bincount(top, minlength=h_kv).double()
        q = n_h * (1 - self.alpha) + int(self.alpha * b + 1e-9)
        budget = q.floor().clamp(max=n - w).long()
        order = sorted(range(h_kv), key=lambda h: (-(q[h] - q[h].floor()).item(), h))
        while int(budget.sum()) < h_kv * b:
            for h in order:
                if int(budget.sum()) < h_kv * b and budget[h] < n - w:
                    budget[h] += 1
        window = set(range(n - w, n))
        return [set(cand[h].topk(int(budget[h])).indices.tolist()) | window for h in range(h_kv)]


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
        if isinstance(press, AdaKVRuleOfKvec):
            kept[module.layer_idx] = press.kept_sets(s[0])
        else:
            idx = s.topk(n_kept, dim=-1).indices[0]  # [heads, n_kept]
            kept[module.layer_idx] = [set(row.tolist()) for row in idx]
        return s

    press.score = recording
    with torch.no_grad(), press(model):
        model.model(input_ids=ids, past_key_values=DynamicCache())
    return [kept[i] for i in sorted(kept)]


def kvpress_masked_kept(model, ids, press):
    """[layer][head] -> set of kept positions of a press that masks keys per head (Ada-KV, KVzip):
    everything but the indices it leaves in each attention module's masked_key_indices after the
    prefill (kvpress's fake compression; such presses refuse eager attention, so sdpa meanwhile)."""
    n, h_kv = ids.shape[1], model.config.num_key_value_heads
    model.set_attn_implementation("sdpa")
    try:
        with torch.no_grad(), press(model):
            model.model(input_ids=ids, past_key_values=DynamicCache())
        kept = []
        for layer in model.model.layers:
            sets = [set(range(n)) for _ in range(h_kv)]
            _, heads, positions = layer.self_attn.masked_key_indices
            for h, j in zip(heads.tolist(), positions.tolist()):
                sets[h].discard(j)
            layer.self_attn.masked_key_indices = None
            kept.append(sets)
        return kept
    finally:
        model.set_attn_implementation("eager")


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
    use_file_tokenizer_in_kvzip(AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name))
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
                kp = (kvpress_masked_kept if name in MASKING else kvpress_kept)(model, ids_t, press)
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
