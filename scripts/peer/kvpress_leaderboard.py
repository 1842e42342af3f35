#!/usr/bin/env python3
"""The leaderboard view on the same items (issue 42): kvpress's presses in its pipeline against
kvec's policies, on the items of one `kvec eval ... --protocol P --compression ... --save-items`
run, scored by one scorer.

    kvpress_leaderboard.py --run DIR --model MODEL.gguf [--presses snapkv,tova,...]
                           [--ratios 0.25,0.5,0.75,0.875] [--kvec-policy kvec] [--threads 2] [--per-task K]

For each item of DIR/items.jsonl (kvec's token ids; `n_context` of them are the instruction and
context, the rest the question and the chat template's answer cue) and each press and ratio:
the same ids kvec ran (no re-tokenization) go through kvpress. The run's protocol (its
config.json) decides how: query-agnostic, kvpress's pipeline (KVPressTextGenerationPipeline.
_forward) compresses the first `n_context` ids with the press and answers the question ids that
follow greedily; query-aware, the whole prompt is prefilled under the press as the pipeline
prefills a context (each layer's attention computed before that layer is compressed, as in kvec),
the first answer token comes from the prompt's last position and the rest is greedy decoding from
the compressed cache as the pipeline's generate_answer does (answer_whole_prompt): the same ids
compressed and the same answer cue as `kvec eval --protocol query-aware`. (The pipeline itself
needs at least one question id to answer from; the first version of this script gave it the
prompt's last id, so TOVA and Expected Attention scored the prompt's last-but-one query.) FINCH
runs in the query-aware protocol only (its window is the question, which its delimiter token
marks). Predictions go to DIR/kvpress/predictions.jsonl (query-agnostic) or
DIR/kvpress/predictions-whole-prompt.jsonl (query-aware), resumable. Every prediction, kvec's
own (from DIR/predictions.jsonl) and kvpress's, is scored by this script's scorer, a port of
kvec's RULER string match (src/eval/synthetic.cpp); the script first checks that it reproduces
kvec's recorded score of every kvec prediction. Prints, per ratio, each engine's average of task
scores with a 95 % interval, and the paired difference of `--kvec-policy` against each press (a
stratified bootstrap over items, 2000 resamples).
"""
import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

import kvpress

PRESSES = {
    "streamingllm": lambda r: kvpress.StreamingLLMPress(compression_ratio=r),
    "snapkv": lambda r: kvpress.SnapKVPress(compression_ratio=r),
    "tova": lambda r: kvpress.TOVAPress(compression_ratio=r),
    "knorm": lambda r: kvpress.KnormPress(compression_ratio=r),
    "keydiff": lambda r: kvpress.KeyDiffPress(compression_ratio=r),
    "lagkv": lambda r: kvpress.LagKVPress(compression_ratio=r),
    "expected-attention": lambda r: kvpress.ExpectedAttentionPress(compression_ratio=r),
    "random": lambda r: kvpress.RandomPress(compression_ratio=r),
    "leverage": lambda r: kvpress.LeverageScorePress(compression_ratio=r),
    "adakv-snapkv": lambda r: kvpress.AdaKVPress(kvpress.SnapKVPress(compression_ratio=r)),
    "criticalkv-snapkv": lambda r: kvpress.CriticalKVPress(kvpress.SnapKVPress(compression_ratio=r)),
    "chunkkv-snapkv": lambda r: kvpress.ChunkKVPress(kvpress.SnapKVPress(compression_ratio=r)),
    "compactor": lambda r: kvpress.CompactorPress(compression_ratio=r),
    "cur": lambda r: kvpress.CURPress(compression_ratio=r),
    "cap": lambda r: kvpress.CapPress(compression_ratio=r),
    "kvzip": lambda r: kvpress.KVzipPress(compression_ratio=r),
    "finch": lambda r: kvpress.FinchPress(compression_ratio=r),  # query-aware only (see above)
}
# Not run, and why (docs/peer-kvpress.md): ThinK compresses key channels, not entries (no ratio of
# kept entries to match); SimLayerKV sets its compression by a laziness threshold, not a ratio;
# LU-KV, QFilter, KVzap, DuoAttention and FastKVzip download per-model curves, filters or gates
# (this machine reaches no model hub, and none exist for SmolLM2); DMS needs a retrained model;
# CAM and the decoding presses compress during decoding, which neither protocol here does.
# PyramidKV and KVCompose keep a different number of entries per layer, and kvpress 0.5.5 on
# transformers 5.2.0 then fails on a question of more than one token ("The size of tensor a (1868)
# must match the size of tensor b (1931)": one attention mask for every layer's cache length).


# ---- one scorer (kvec's RULER string match, src/eval/synthetic.cpp) -----------------------------

def ruler_postprocess(p):
    ws = " \t\n\r\f\v"
    p = p.strip(ws)
    p = "".join("\n" if ord(c) < 0x20 else c for c in p)
    return p.strip(ws)


def lower_ascii(s):
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in s)


def score(metric, prediction, references):
    p = lower_ascii(ruler_postprocess(prediction))
    hit = [lower_ascii(r) in p for r in references]
    if metric == "string_match_all":
        return sum(hit) / len(references) if references else 0.0
    if metric == "string_match_part":
        return 1.0 if any(hit) else 0.0
    sys.exit(f"this scorer knows the synthetic suite's metrics only, not '{metric}'")


def average_of_tasks(items, scores):
    by_task = {}
    for it, s in zip(items, scores):
        by_task.setdefault(it["task"], []).append(s)
    return 100 * statistics.mean(statistics.mean(v) for v in by_task.values())


def bootstrap(items, values, n=2000, seed=20261201):
    """95 % interval of average_of_tasks over resamples of items within each task (kvec eval's
    stratified bootstrap). A task with a single item has no spread to resample: then the items are
    resampled as one pool and the statistic is their plain mean (it says nothing per task)."""
    rng = random.Random(seed)
    by_task = {}
    for i, it in enumerate(items):
        by_task.setdefault(it["task"], []).append(i)
    strata = list(by_task.values())
    if min(len(idx) for idx in strata) < 2:
        strata = [list(range(len(items)))]
    out = []
    for _ in range(n):
        means = [statistics.mean(values[rng.choice(idx)] for _ in idx) for idx in strata]
        out.append(100 * statistics.mean(means))
    out.sort()
    return out[int(0.025 * n)], out[int(0.975 * n) - 1]


def code(ratio):
    """kvec's budget code of a compression ratio (eval::compression_code: -round(ratio x 1000))."""
    return -round(ratio * 1000)


def load_pipeline(model_path):
    """kvpress's pipeline over the GGUF file read by transformers (float32), and its tokenizer
    (also KVzipPress's)."""
    p = Path(model_path).resolve()
    model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    pipe = kvpress.KVPressTextGenerationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    use_file_tokenizer_in_kvzip(tokenizer)
    return pipe, tokenizer


def use_file_tokenizer_in_kvzip(tokenizer):
    """KVzipPress loads its tokenizer by the model's hub name (nothing is downloaded here): hand it
    the one read from the GGUF file."""
    import kvpress.presses.kvzip_press as kvzip_module

    class _FileTokenizer:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            return tokenizer

    kvzip_module.AutoTokenizer = _FileTokenizer


def answer_whole_prompt(pipe, ids, press, max_new_tokens):
    """kvec's query-aware protocol in kvpress: every prompt id prefilled under the press (the
    pipeline's prefill call), the first answer token from the last prompt position's hidden state,
    then greedy decoding from the compressed cache at positions after the prompt (after the kept
    entries for a press that re-rotates them, as the pipeline), stopping at the end-of-sequence ids
    (the pipeline's generate_answer; kvec stops there too, at any token)."""
    model = pipe.model
    cache = DynamicCache()
    with press(model):
        hidden = model.model(input_ids=torch.tensor([ids]), past_key_values=cache).last_hidden_state
    stop = model.generation_config.eos_token_id
    stop = set(stop if isinstance(stop, list) else [stop])
    out = [int(model.lm_head(hidden[:, -1:])[0, -1].argmax())]
    # The pipeline's rule: a press that re-rotates the kept keys to consecutive positions (FINCH,
    # KeyRerotationPress) continues from the compressed length, every other press from the prompt's.
    rerotated = isinstance(press, kvpress.KeyRerotationPress) or (
        isinstance(press, kvpress.FinchPress) and press.rerotate_keys)
    pos = cache.get_seq_length() if rerotated else len(ids)
    while out[-1] not in stop and len(out) < max_new_tokens:
        logits = model(input_ids=torch.tensor([[out[-1]]]), past_key_values=cache,
                       position_ids=torch.tensor([[pos]])).logits
        out.append(int(logits[0, -1].argmax()))
        pos += 1
    return str(pipe.tokenizer.decode(out, skip_special_tokens=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--presses", default="streamingllm,snapkv,tova,knorm,keydiff,lagkv,expected-attention")
    ap.add_argument("--ratios", default="0.25,0.5,0.75,0.875")
    ap.add_argument("--kvec-policy", default="kvec")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-task", type=int, default=0, help="only the first K items of each task (0: all)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    run = Path(a.run)
    items = [json.loads(line) for line in (run / "items.jsonl").read_text().splitlines() if line]
    if a.per_task > 0:  # the first K items of each task (a smaller run; a larger one resumes it)
        seen = {}
        items = [it for it in items if seen.setdefault(it["task"], []).append(it) or len(seen[it["task"]]) <= a.per_task]
    by_id = {it["id"]: it for it in items}
    ratios = [float(x) for x in a.ratios.split(",")]
    # config.json names the protocol only when it is not the default (query-aware).
    protocol = json.loads((run / "config.json").read_text())["run"].get("protocol", "query-aware")
    aware = protocol == "query-aware"

    # kvec's predictions, and the scorer checked against kvec's own scores.
    kvec = {}
    full = {}  # id -> the full cache's score (one record per item, at no budget)
    mismatched = 0
    for line in (run / "predictions.jsonl").read_text().splitlines():
        r = json.loads(line)
        it = by_id.get(r["id"])
        if it is None:
            continue
        s = score(it["metric"], r["prediction"], it["references"])
        if abs(s - r["score"]) > 1e-9:
            mismatched += 1
        kvec[(r["id"], r["policy"], r["budget"])] = s
        if r["policy"] == "full":
            full[r["id"]] = s
    if mismatched:
        sys.exit(f"the scorer disagrees with kvec's recorded score on {mismatched} predictions")
    print(f"scorer: reproduces kvec's score of all {len(kvec)} kvec predictions", file=sys.stderr)

    # kvpress's predictions (resumable).
    out_dir = run / "kvpress"
    out_dir.mkdir(exist_ok=True)
    pred_path = out_dir / ("predictions-whole-prompt.jsonl" if aware else "predictions.jsonl")
    done = {}
    if pred_path.exists():
        for line in pred_path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            done[(r["id"], r["press"], r["ratio"])] = r
    pipe, tokenizer = load_pipeline(a.model)
    model = pipe.model
    presses = a.presses.split(",")
    unknown = [name for name in presses if name not in PRESSES]
    if unknown:
        sys.exit(f"unknown press(es) {', '.join(unknown)}; known: {', '.join(PRESSES)}")
    finch_token = None
    if "finch" in presses:
        if not aware:
            sys.exit("finch compresses with the question as its window: run it on a query-aware run")
        if len(presses) > 1:
            sys.exit("finch adds a token to the model's vocabulary: run it alone (--presses finch)")
        finch = kvpress.FinchPress()
        finch.update_model_and_tokenizer(model, tokenizer)  # adds the delimiter token (one row)
        finch_token = finch.delimiter_token_id

    def make_press(name, r):
        press = PRESSES[name](r)
        if name == "finch":
            press.delimiter_token, press.delimiter_token_id = finch.delimiter_token, finch_token
        return press
    with pred_path.open("a") as f:
        for it in items:
            ids, n = it["prompt"], it["n_context"]
            for name in presses:
                for r in ratios:
                    if (it["id"], name, r) in done:
                        continue
                    t0 = time.perf_counter()
                    with torch.no_grad():
                        if aware:
                            prompt = ids[:n] + [finch_token] + ids[n:] if name == "finch" else ids
                            answer = answer_whole_prompt(pipe, prompt, make_press(name, r), it["max_new_tokens"])
                        else:
                            inputs = {"context_ids": torch.tensor([ids[:n]]), "questions_ids": [torch.tensor([ids[n:]])]}
                            answer = pipe._forward(inputs, max_new_tokens=it["max_new_tokens"], press=make_press(name, r))[0]
                    rec = {"id": it["id"], "task": it["task"], "press": name, "ratio": r, "prediction": answer,
                           "score": score(it["metric"], answer, it["references"]),
                           "seconds": round(time.perf_counter() - t0, 3)}
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    done[(it["id"], name, r)] = rec
                    print(f"{it['id']} {name} {r}: {rec['score']:.2f} ({rec['seconds']} s)", file=sys.stderr)

    # The tables: every press with a prediction for every item and ratio, from this call or earlier ones.
    presses = [name for name in PRESSES if all((it["id"], name, r) in done for it in items for r in ratios)]
    kvec_labels = sorted({k[1] for k in kvec})
    print(f"{len(items)} items ({', '.join(sorted({it['task'] for it in items}))}), {protocol}; "
          f"kvec policies {', '.join(kvec_labels)}\n")
    print("| engine | policy / press | " + " | ".join(f"c={r}" for r in ratios) + " |")
    print("|---|---|" + "---:|" * len(ratios))
    rows = []
    for label in kvec_labels:
        cells = []
        for r in ratios:
            vals = [full.get(it["id"]) if label == "full" else kvec.get((it["id"], label, code(r))) for it in items]
            if any(v is None for v in vals):
                cells.append("-")
                continue
            lo, hi = bootstrap(items, vals)
            cells.append(f"{average_of_tasks(items, vals):.2f} [{lo:.2f}, {hi:.2f}]")
        rows.append(("kvec", label, cells))
    for name in presses:
        cells = []
        for r in ratios:
            vals = [done[(it["id"], name, r)]["score"] for it in items]
            lo, hi = bootstrap(items, vals)
            cells.append(f"{average_of_tasks(items, vals):.2f} [{lo:.2f}, {hi:.2f}]")
        rows.append(("kvpress", name, cells))
    for engine, label, cells in rows:
        print(f"| {engine} | {label} | " + " | ".join(cells) + " |")

    print(f"\nPaired: kvec `{a.kvec_policy}` minus each kvpress press, points [95 % interval]; "
          "**bold** where the interval excludes 0\n")
    print("| kvpress press | " + " | ".join(f"c={r}" for r in ratios) + " |")
    print("|---|" + "---:|" * len(ratios))
    for name in presses:
        cells = []
        for r in ratios:
            k = [kvec.get((it["id"], a.kvec_policy, code(r))) for it in items]
            if any(v is None for v in k):
                cells.append("-")
                continue
            d = [x - done[(it["id"], name, r)]["score"] for x, it in zip(k, items)]
            lo, hi = bootstrap(items, d)
            mean = average_of_tasks(items, d)
            text = f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            cells.append(f"**{text}**" if lo > 0 or hi < 0 else text)
        print(f"| {name} | " + " | ".join(cells) + " |")
    secs = [r["seconds"] for r in done.values()]
    print(f"\nkvpress: {statistics.mean(secs):.2f} s per item and press (prefill, compression, answer) as the "
          "runs recorded them (not a cost figure unless they ran alone on the machine)")


if __name__ == "__main__":
    main()
