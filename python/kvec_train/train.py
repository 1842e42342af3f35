"""Training tool of kvec's bundled model.

    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train prepare --config python/kvec_train/configs/kvec-tiny.json --run train_runs/kvec-tiny
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train synth-data --run train_runs/kvec-tiny --kvec build/release/tools/kvec
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train train --config python/kvec_train/configs/kvec-tiny.json --run train_runs/kvec-tiny [--resume]
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train eval   --run train_runs/kvec-tiny
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train export --run train_runs/kvec-tiny --out models/kvec-tiny.gguf
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.train status --run train_runs/kvec-tiny

A run directory holds: config.json (the recipe, copied on the first start), tokenizer.json (the
trained BPE vocabulary as tokenizer.ggml.* values), ckpt.pt (latest checkpoint, written
atomically; ckpt-prev.pt the one before), log.jsonl (one line per log interval and per
evaluation) and status.md (where training stands).

Determinism: the batch of step s is a pure function of (seed, s), and the model initialisation
of the seed, so a run resumed from a checkpoint sees exactly the batches an uninterrupted run
would (floating-point results can still differ across machines and thread counts).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import data as kdata
from . import tasks as ktasks
from . import attn_sup
from .attn_sup import AttentionSupervision
from .bpe import BpeTokenizer

REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# Configuration


def load_config(path: Path) -> dict:
    cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    for key in ("seed", "model", "tokenizer", "stages", "optim"):
        if key not in cfg:
            raise ValueError(f"{path}: missing '{key}'")
    if not cfg["stages"]:
        raise ValueError(f"{path}: no stages")
    for st in cfg["stages"]:
        for key in ("name", "steps", "seq_len", "batch", "mix"):
            if key not in st:
                raise ValueError(f"{path}: stage {st.get('name', '?')} lacks '{key}'")
        for task in st["mix"]:
            if task not in ktasks.GENERATORS and task != "synth":
                raise ValueError(f"{path}: stage {st['name']}: unknown task '{task}'")
    return cfg


def model_config(cfg: dict, n_vocab: int, seq_len: int):
    from kvec_ref.model import ModelConfig
    m = dict(cfg["model"])
    return ModelConfig(arch="llama", n_vocab=n_vocab, n_embd=m["n_embd"], n_layer=m["n_layer"],
                       n_head=m["n_head"], n_head_kv=m["n_head_kv"], n_ff=m["n_ff"],
                       rope_theta=m.get("rope_theta", 10000.0), norm_eps=m.get("norm_eps", 1e-5),
                       context_length=m.get("context_length", 2048), tied_output=m.get("tied_output", True),
                       attn_chunk=min(seq_len, m.get("attn_chunk", 512)),
                       attn_checkpoint=seq_len > m.get("attn_checkpoint_above", 1024))


def total_steps(cfg: dict) -> int:
    return sum(int(st["steps"]) for st in cfg["stages"])


def stage_at(cfg: dict, step: int) -> dict:
    s = 0
    for st in cfg["stages"]:
        s += int(st["steps"])
        if step < s:
            return st
    return cfg["stages"][-1]


def stage_ends(cfg: dict) -> set:
    """Steps after which a stage ends (a checkpoint is written there)."""
    ends, s = set(), 0
    for st in cfg["stages"]:
        s += int(st["steps"])
        ends.add(s)
    return ends


def lr_at(cfg: dict, step: int) -> float:
    o = cfg["optim"]
    peak, warm, floor = o["lr"], o.get("warmup_steps", 200), o.get("min_lr_ratio", 0.1)
    total = total_steps(cfg)
    if step < warm:
        return peak * (step + 1) / warm
    t = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


# ---------------------------------------------------------------------------------------------
# Data preparation


@dataclass
class Prepared:
    tok: BpeTokenizer
    train_ctx: ktasks.TaskContext
    eval_ctx: ktasks.TaskContext
    heldout_tokens: np.ndarray  # [n] held-out text as one token stream
    synth: Optional[ktasks.SynthFile]


def prepare(cfg: dict, run: Path) -> Prepared:
    corpus_path = run / "corpus.jsonl"
    if corpus_path.exists():
        docs = kdata.load_corpus(corpus_path)
    else:
        docs = kdata.build_corpus()
        kdata.save_corpus(docs, corpus_path)
    limit = int(cfg.get("corpus_max_docs_per_source", 0))  # tests: a small corpus
    if limit:
        kept: Dict[str, int] = {}
        small = []
        for d in docs:
            key = f"{d.source}/{d.heldout}"
            if kept.get(key, 0) < limit:
                kept[key] = kept.get(key, 0) + 1
                small.append(d)
        docs = small
    digest = kdata.corpus_digest(docs)
    train_texts = [d.text for d in docs if not d.heldout]
    held_texts = [d.text for d in docs if d.heldout]
    tok_path = run / "tokenizer.json"
    if tok_path.exists():
        tok = BpeTokenizer.load(tok_path)
    else:
        log(f"training the tokenizer (vocab {cfg['tokenizer']['vocab_size']}) on {len(train_texts)} documents")
        tok = BpeTokenizer.train(train_texts, cfg["tokenizer"]["vocab_size"])
        tok.save(tok_path)
    cache = run / "tokens.npz"
    if cache.exists():
        z = np.load(cache)
        lm_tokens, held_tokens = z["train"], z["heldout"]
    else:
        log("tokenizing the corpus")
        sep = tok.encode("\n\n")
        enc = lambda texts: np.array([t for x in texts for t in tok.encode(x) + sep], dtype=np.int32)
        lm_tokens, held_tokens = enc(train_texts), enc(held_texts)
        tmp = run / "tokens.tmp.npz"
        np.savez(tmp, train=lm_tokens, heldout=held_tokens)
        os.replace(tmp, cache)
    tw = cfg.get("text_weight", 0.05)
    train_ctx = ktasks.TaskContext(tok, ktasks.TextPool(train_texts, tok),
                                   ktasks.Vocab(train_texts, "train"), lm_tokens, tw)
    eval_ctx = ktasks.TaskContext(tok, ktasks.TextPool(held_texts, tok),
                                  ktasks.Vocab(train_texts + held_texts, "eval"), held_tokens, tw)
    synth = None
    files = [REPO / p for p in cfg.get("synth_train_files", [])]
    present = [p for p in files if p.exists()]
    if present:
        synth = ktasks.SynthFile(present)
        log(f"kvec synth training instances: {len(synth.items)} from {len(present)} files")
    log(f"corpus sha256 {digest[:16]}: train {len(lm_tokens)} tokens, held out {len(held_tokens)} tokens")
    return Prepared(tok, train_ctx, eval_ctx, held_tokens, synth)


def make_batch(cfg: dict, prep: Prepared, step: int):
    """Batch of step `step`: tokens [B, T+1], weights [B, T], task names [B]."""
    ids, ws, kinds = make_batch_np(cfg, prep, step)
    return torch.from_numpy(ids).long(), torch.from_numpy(ws), kinds


def make_batch_np(cfg: dict, prep: Prepared, step: int):
    """make_batch as numpy arrays: tokens int32 [B, T+1], weights float32 [B, T], task names [B]."""
    st = stage_at(cfg, step)
    n = int(st["seq_len"]) + 1
    rng = np.random.default_rng([int(cfg["seed"]), step])
    names = sorted(st["mix"])
    probs = np.array([st["mix"][k] for k in names], dtype=np.float64)
    probs /= probs.sum()
    ids, ws, kinds = [], [], []
    for _ in range(int(st["batch"])):
        task = names[int(rng.choice(len(names), p=probs))]
        seq = prep.synth.gen(prep.train_ctx, rng, n) if task == "synth" and prep.synth else None
        if task == "synth" and seq is None:
            task = "niah"  # no `kvec synth` instance fits (or none generated): the Python mirror
        if seq is None and task in ("niah", "kv"):
            seq = ktasks.GENERATORS[task](prep.train_ctx, rng, n, int(st.get("max_keys", 16)))
        elif seq is None:
            seq = ktasks.GENERATORS[task](prep.train_ctx, rng, n)
        seq = ktasks.fit(seq, n, prep.tok.pad_id)
        ids.append(seq.ids)
        ws.append(seq.weights[1:])
        kinds.append(task)
    return np.array(ids, dtype=np.int32), np.array(ws, dtype=np.float32), kinds


def weighted_loss_sparse(model, hidden: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor):
    """weighted_loss, with logits computed only where the weight is non-zero (most positions of
    the task sequences): hidden [B, T, n_embd], targets [B, T], weights [B, T]."""
    mask = weights > 0  # [B, T]
    logits = F.linear(hidden[mask], model.output_weight())  # [n_weighted, n_vocab]
    ce = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)  # [B, T]
    ce = ce.masked_scatter(mask, F.cross_entropy(logits.float(), targets[mask], reduction="none"))
    wsum = weights.sum(dim=1)  # [B]
    per_seq = (ce * weights).sum(dim=1) / wsum.clamp_min(1e-6)  # [B]
    live = wsum > 0
    loss = per_seq[live].mean() if bool(live.any()) else hidden.sum() * 0.0
    return loss, per_seq.detach()


def weighted_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor):
    """Per-sequence weighted mean cross-entropy, averaged over sequences with any weight.
    logits [B, T, V], targets [B, T], weights [B, T] -> (loss, per-sequence losses [B])."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                         reduction="none").view(targets.shape)  # [B, T]
    wsum = weights.sum(dim=1)  # [B]
    per_seq = (ce * weights).sum(dim=1) / wsum.clamp_min(1e-6)  # [B]
    live = wsum > 0
    loss = per_seq[live].mean() if bool(live.any()) else per_seq.sum() * 0.0
    return loss, per_seq.detach()


# ---------------------------------------------------------------------------------------------
# Evaluation (PyTorch; the engine's own numbers come from `kvec eval`)


@torch.no_grad()
def greedy(model, ids: List[int], max_new: int, stop_ids: set) -> List[int]:
    from kvec_ref.model import KVCache
    cache = KVCache(model.config.n_layer)
    dev = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    out: List[int] = []
    for _ in range(max_new):
        lg = model(x, cache=cache)[0, -1]
        nxt = int(torch.argmax(lg))
        if nxt in stop_ids:
            break
        out.append(nxt)
        x = torch.tensor([[nxt]], dtype=torch.long, device=dev)
    return out


@torch.no_grad()
def copy_accuracy(model, prep: Prepared, length: int, samples: int = 8, span: int = 16, seed: int = 5) -> float:
    """In-context copying at a distance: a span of random tokens is placed at a random depth of
    held-out text and repeated at the end of a `length`-token window; the share of the repeat's
    tokens (after its first) that greedy prediction gets right. Chance is about 1 / n_vocab."""
    rng = np.random.default_rng([seed, length])
    dev = next(model.parameters()).device
    hits = []
    for _ in range(samples):
        a = rng.integers(0, prep.tok.bos_id, span)
        s = int(rng.integers(0, len(prep.heldout_tokens) - length))
        filler = np.asarray(prep.heldout_tokens[s:s + length - 2 * span - 1])
        cut = int(rng.integers(0, len(filler) + 1))
        seq = np.concatenate([[prep.tok.bos_id], filler[:cut], a, filler[cut:], a])  # [length]
        logits = model(torch.tensor(seq, dtype=torch.long, device=dev)[None])[0]  # [length, n_vocab]
        pred = logits[-span:-1].argmax(-1).cpu().numpy()
        hits.append(float((pred == seq[-span + 1:]).mean()))
    return float(np.mean(hits))


@torch.no_grad()
def evaluate(model, cfg: dict, prep: Prepared, sup: Optional[AttentionSupervision] = None) -> Dict[str, float]:
    ev = cfg.get("eval", {})
    model.eval()
    res: Dict[str, float] = {}
    tok = prep.tok
    newline_ids = {i for i, t in enumerate(tok.tokens) if "Ċ" in t} | {tok.eos_id}
    # Held-out LM loss on fixed windows.
    T = int(ev.get("lm_len", 512))
    rng = np.random.default_rng([int(cfg["seed"]), 999_999])
    losses = []
    for _ in range(int(ev.get("lm_windows", 8))):
        s = int(rng.integers(0, len(prep.heldout_tokens) - T - 1))
        w = torch.tensor(prep.heldout_tokens[s:s + T + 1], dtype=torch.long,
                         device=next(model.parameters()).device)[None]
        lg = model(w[:, :-1])
        losses.append(float(F.cross_entropy(lg[0], w[0, 1:])))
    res["heldout_lm_loss"] = float(np.mean(losses))
    for length in ev.get("copy_lengths", []):
        res[f"copy_{length}"] = copy_accuracy(model, prep, int(length))
    # Needle retrieval on held-out instances (eval-split keys and values, held-out haystack).
    for length in ev.get("niah_lengths", [1024, 2048]):
        rng = np.random.default_rng([int(cfg["seed"]), 777, int(length)])
        hits = 0.0
        n = int(ev.get("niah_samples", 10))
        for _ in range(n):
            inst = ktasks.eval_niah_single(prep.eval_ctx, rng, int(length))
            ids = tok.encode(inst.prompt, add_bos=True)
            out = greedy(model, ids, inst.max_new_tokens, newline_ids)
            hits += ktasks.string_match_all(tok.decode(out), inst.answers)
        res[f"niah_single_{length}"] = hits / max(1, n)
    # Variable tracking on held-out instances: string_match_all, and the share of answers whose
    # first name is the chain's first variable (the first backward hop); with attention
    # supervision, also each supervised head's hit rate on the prompt with its answer.
    for length in ev.get("vt_lengths", []):
        rng = np.random.default_rng([int(cfg["seed"]), 555, int(length)])
        n = int(ev.get("vt_samples", 10))
        score, first = 0.0, 0
        hits: Dict[str, List[int]] = {}
        for _ in range(n):
            inst = ktasks.eval_vt(prep.eval_ctx, rng, int(length))
            pred = tok.decode(greedy(model, tok.encode(inst.prompt, add_bos=True), inst.max_new_tokens,
                                     newline_ids))
            score += ktasks.string_match_all(pred, inst.answers)
            first += pred.strip().startswith(inst.answers[0])
            if sup is not None:
                ids = torch.tensor([tok.encode(inst.prompt + " " + ", ".join(inst.answers) + ".", add_bos=True)],
                                   device=next(model.parameters()).device)
                model.hidden(ids)
                for role, (h, m) in sup.hit_rates(sup.targets(ids)).items():
                    hits.setdefault(role, [0, 0])
                    hits[role][0] += h
                    hits[role][1] += m
        res[f"vt_{length}"] = score / max(1, n)
        res[f"vt_first_{length}"] = first / max(1, n)
        for role, (h, m) in hits.items():
            res[f"attn_{role}_{length}"] = h / max(1, m)
    model.train()
    return res


# ---------------------------------------------------------------------------------------------
# Checkpoints


def save_checkpoint(run: Path, state: dict) -> None:
    path = run / "ckpt.pt"
    tmp = run / "ckpt.tmp.pt"
    torch.save(state, tmp)
    if path.exists():
        os.replace(path, run / "ckpt-prev.pt")
    os.replace(tmp, path)


def load_checkpoint(run: Path) -> Optional[dict]:
    for name in ("ckpt.pt", "ckpt-prev.pt"):
        p = run / name
        if p.exists():
            try:
                return torch.load(p, map_location="cpu", weights_only=False)  # our own files
            except Exception as e:  # a checkpoint cut short by a stopped process
                log(f"cannot read {p}: {e}; trying the previous one")
    return None


@torch.no_grad()
def init_induction_circuit(model, n_gram: int = 3, d_tok: Optional[int] = None, prev_logit: float = 40.0,
                           n_prev_pairs: int = 4, match_logit: float = 10.0, match_pairs: int = 8,
                           copy_gain: float = 4.0, emb_std: float = 1.0, out_scale: float = 1.0,
                           seed: int = 99) -> None:
    """Structured initialisation: layer 0 starts as previous-token heads and layer 1's first KV
    head as an n-gram induction head, so that in-context copying works from step 0 and training
    refines it instead of waiting out the induction plateau (measured here: from-scratch runs of
    every shape tried stayed near chance on random-offset repeats for 1,000+ steps;
    docs/training-log.md). Every weight stays trainable. Layout of the residual stream [n_embd]:

        dims 0 .. d_tok-1            token identity: random directions, norm emb_std sqrt(d_tok)
        dim  d_tok                   u, the same value in every embedding row (position-free)
        block o = 1 .. n_gram        the identity of the token o positions back, written by
          (d_tok dims each)          layer 0

    Layer 0: each query head serves one (offset o, chunk of head_dim token dims) pair: q and k
    read u into the n_prev_pairs fastest RoPE pairs, the query turned back by o positions' angle,
    so after RoPE q_m . k_n peaks at n = m - o (prev_logit at the peak); its KV head's v copies
    the chunk, and the output projection writes it into block o. Spare heads repeat a pair (outputs
    shared).
    Layer 1, KV head 0 (its query heads): query block j reads the current token (j = 0) or block
    j, key block j reads block j + 1, each pair of blocks through its own random orthonormal map
    into match_pairs of the slowest RoPE pairs (nearly position-free with a large rope_theta).
    A position s whose n_gram previous tokens equal the current token and the n_gram - 1 before
    it scores about n_gram x match_logit; v / o copy the token at s back into the token space with
    copy_gain, raising its logit through the output matrix. The output projections of every other
    residual branch (FFNs, layer 1's other heads, later layers) start at zero, so nothing drowns
    the circuit at step 0; everything else keeps the random initialisation. With an untied output
    matrix it starts as out_scale x the embedding: the same predictions (argmax), with logits small
    enough that the language-model loss does not start far above chance."""
    from kvec_ref.model import rope_inv_freq
    c = model.config
    D, hd = c.n_embd, c.head_dim
    group = c.n_head // c.n_head_kv
    d_tok = d_tok if d_tok is not None else (D - 1) // (n_gram + 1)
    prev0 = d_tok + 1
    n_chunks = -(-d_tok // hd)
    if (c.n_layer < 2 or n_gram < 1 or prev0 + n_gram * d_tok > D
            or 2 * n_prev_pairs + 2 * n_gram * match_pairs > hd or n_chunks * n_gram > c.n_head):
        raise ValueError("init_induction_circuit needs 2+ layers and room for the blocks and heads")
    gen = torch.Generator().manual_seed(seed)
    theta = rope_inv_freq(c).float()  # [head_dim / 2]
    emb = model.tok_embd.weight  # [n_vocab, n_embd]
    emb.zero_()
    ident = torch.randn(emb.shape[0], d_tok, generator=gen)  # [n_vocab, d_tok]
    emb[:, :d_tok] = ident / ident.norm(dim=1, keepdim=True) * (emb_std * math.sqrt(d_tok))  # equal norms
    emb[:, d_tok] = emb_std * math.sqrt(d_tok) / 2
    rms0 = math.sqrt((d_tok + d_tok / 4) / D)  # residual RMS / emb_std at layer 0's input
    u_hat = (math.sqrt(d_tok) / 2) / rms0  # u after RMSNorm
    if model.output is not None:
        model.output.weight.copy_(emb * out_scale)

    # Layer 0: (offset, chunk) per query head; KV head h copies chunk h % n_chunks.
    a0 = model.layers[0].attn
    for w in (a0.wq.weight, a0.wk.weight, a0.wv.weight, a0.wo.weight):
        w.zero_()
    mag = math.sqrt(prev_logit * math.sqrt(hd) / n_prev_pairs) / u_hat
    todo = [(o, ch) for o in range(1, n_gram + 1) for ch in range(n_chunks)]
    serve = []  # [n_head] (offset, chunk)
    for h in range(c.n_head):
        ch = (h // group) % n_chunks
        mine = [p for p in todo if p[1] == ch]
        pick = mine[0] if mine else next(p for p in serve if p[1] == ch)
        if mine:
            todo.remove(pick)
        serve.append(pick)
    if todo:
        raise ValueError(f"init_induction_circuit: no query head left for offsets/chunks {todo}")
    for hk in range(c.n_head_kv):
        ch = hk % n_chunks
        for i in range(n_prev_pairs):  # NORM layout: pair i = dims (2i, 2i + 1)
            a0.wk.weight[hk * hd + 2 * i, d_tok] = mag
        for j in range(min(hd, d_tok - ch * hd)):
            a0.wv.weight[hk * hd + j, ch * hd + j] = 1.0
    for h, (o, ch) in enumerate(serve):
        share = serve.count((o, ch))
        for i in range(n_prev_pairs):
            a0.wq.weight[h * hd + 2 * i, d_tok] = mag * math.cos(-o * float(theta[i]))
            a0.wq.weight[h * hd + 2 * i + 1, d_tok] = mag * math.sin(-o * float(theta[i]))
        for j in range(min(hd, d_tok - ch * hd)):
            # v holds the token dims after layer 0's RMSNorm (emb_std / rms0); rescale to emb_std
            a0.wo.weight[prev0 + (o - 1) * d_tok + ch * hd + j, h * hd + j] = emb_std * rms0 / share
    model.layers[0].ffn.down.weight.zero_()

    # Layer 1, KV head 0: n-gram match on the slowest RoPE pairs, copy of the attended token.
    a1 = model.layers[1].attn
    rms1 = math.sqrt((d_tok * (n_gram + 1) + d_tok / 4) / D)  # residual RMS / emb_std at layer 1
    # |A x|^2 of a block after RMSNorm: (2 match_pairs / d_tok) * d_tok / rms1^2
    scale = math.sqrt(match_logit * math.sqrt(hd) * rms1 ** 2 / (2 * match_pairs))
    a1.wk.weight[:hd].zero_()
    a1.wv.weight[:hd].zero_()
    q_heads = range(0, group)  # KV head 0
    for hq in q_heads:
        a1.wq.weight[hq * hd:(hq + 1) * hd].zero_()
        a1.wo.weight[:, hq * hd:(hq + 1) * hd].zero_()
    for j in range(n_gram):
        A = torch.linalg.qr(torch.randn(d_tok, 2 * match_pairs, generator=gen))[0].T  # [2 mp, d_tok]
        q_src = 0 if j == 0 else prev0 + (j - 1) * d_tok
        k_src = prev0 + j * d_tok
        dims = range(hd - 2 * match_pairs * (j + 1), hd - 2 * match_pairs * j)  # slowest pairs first
        for r, d in enumerate(dims):
            a1.wk.weight[d, k_src:k_src + d_tok] = A[r] * scale
            for hq in q_heads:
                a1.wq.weight[hq * hd + d, q_src:q_src + d_tok] = A[r] * scale
    B = torch.linalg.qr(torch.randn(d_tok, hd, generator=gen))[0]  # [d_tok, min(d_tok, hd)]
    a1.wv.weight[:B.shape[1], :d_tok] = B.T
    for hq in q_heads:
        a1.wo.weight[:d_tok, hq * hd:hq * hd + B.shape[1]] = B * (copy_gain * emb_std / group)
    a1.wo.weight[:, group * hd:].zero_()  # the other heads of layer 1 start silent
    model.layers[1].ffn.down.weight.zero_()
    for layer in model.layers[2:]:  # later blocks start as identities (their inputs stay random)
        layer.attn.wo.weight.zero_()
        layer.ffn.down.weight.zero_()


def add_vt_circuit(model, cfg: dict, prep: Prepared) -> None:
    """`init.vt_circuit` (options of `vt_circuit.init_vt_circuit`, and `calib_len`, the tokens of
    the calibration sequence, default 1024): writes the variable-tracking heads into the model,
    calibrated on a training-split variable-tracking instance with its answer."""
    import inspect
    from kvec_train.vt_circuit import init_vt_circuit
    opts = dict(cfg["init"]["vt_circuit"])
    known = set(inspect.signature(init_vt_circuit).parameters) - {"model", "tok", "calib_ids"}
    unknown = sorted(set(opts) - known - {"calib_len"})
    if unknown:
        raise SystemExit(f"error: init.vt_circuit: unknown option(s) {', '.join(unknown)}")
    rng = np.random.default_rng([int(cfg["seed"]), 4321])
    inst = ktasks.eval_vt(prep.train_ctx, rng, int(opts.pop("calib_len", 1024)))
    ids = prep.tok.encode(inst.prompt + " " + ", ".join(inst.answers) + ".", add_bos=True)
    try:
        scales = init_vt_circuit(model, prep.tok, ids, **opts)
    except ValueError as e:  # a model or tokenizer it cannot wire
        raise SystemExit(f"error: init.vt_circuit: {e}") from None
    log("variable-tracking circuit added; input scales " + json.dumps(scales))


def build_model(cfg: dict, n_vocab: int, seq_len: int):
    from kvec_ref.model import Transformer
    torch.manual_seed(int(cfg["seed"]))
    mc = model_config(cfg, n_vocab, seq_len)
    model = Transformer(mc)
    model.reset_parameters(float(cfg.get("init", {}).get("std", 0.02)))
    circuit = cfg.get("init", {}).get("induction_circuit")
    if circuit is not None:
        init_induction_circuit(model, **circuit)
    return model, mc


def make_optimizer(cfg: dict, model) -> torch.optim.Optimizer:
    """AdamW; matrices decay, vectors do not. `optim.lr_scale` maps parameter-name prefixes to a
    learning-rate factor (e.g. {"layers.0.attn": 0.1}: the initialised circuit moves slowly)."""
    o = cfg["optim"]
    scales = o.get("lr_scale", {})

    def scale_of(name: str) -> float:
        return next((float(f) for prefix, f in scales.items() if name.startswith(prefix)), 1.0)

    groups: Dict[tuple, list] = {}
    for n, p in model.named_parameters():
        groups.setdefault((p.dim() >= 2, scale_of(n)), []).append(p)
    return torch.optim.AdamW([{"params": ps, "weight_decay": o.get("weight_decay", 0.1) if decay else 0.0,
                               "lr_scale": sc} for (decay, sc), ps in groups.items()],
                             lr=o["lr"], betas=tuple(o.get("betas", (0.9, 0.95))), eps=1e-8)


class FrozenHeads:
    """`optim.freeze_kv_heads` ({"layer": [KV heads]}): those KV heads and their query heads (q, k,
    v rows and output-projection columns) keep their values while the rest of the layer's attention
    trains: restore() after each optimiser step undoes the step (and the weight decay) on them.
    Used to keep the initialised induction head while the layer's other heads learn."""

    def __init__(self, cfg: dict, model):
        c = model.config
        hd, group = c.head_dim, c.n_head // c.n_head_kv
        self.saved = []  # [(parameter, mask [same shape], values at start)]
        for layer, heads in cfg["optim"].get("freeze_kv_heads", {}).items():
            if not 0 <= int(layer) < c.n_layer:
                raise SystemExit(f"error: freeze_kv_heads: the model has no layer {layer}")
            a = model.layers[int(layer)].attn
            masks = {w: torch.zeros_like(w, dtype=torch.bool) for w in (a.wq.weight, a.wk.weight,
                                                                        a.wv.weight, a.wo.weight)}
            for h in heads:
                if not 0 <= int(h) < c.n_head_kv:
                    raise SystemExit(f"error: freeze_kv_heads: layer {layer} has no KV head {h}")
                q = slice(int(h) * group * hd, (int(h) + 1) * group * hd)  # its query heads
                kv = slice(int(h) * hd, (int(h) + 1) * hd)
                masks[a.wq.weight][q] = True
                masks[a.wk.weight][kv] = True
                masks[a.wv.weight][kv] = True
                masks[a.wo.weight][:, q] = True
            self.saved += [(w, m, w.detach()[m].clone()) for w, m in masks.items() if bool(m.any())]

    @torch.no_grad()
    def restore(self) -> None:
        for w, m, v in self.saved:
            w[m] = v


def set_seq_len(model, cfg: dict, seq_len: int) -> None:
    """Attention blocking for this stage's length (execution settings, not weights)."""
    m = cfg["model"]
    model.config.attn_chunk = min(seq_len, m.get("attn_chunk", 512))
    model.config.attn_checkpoint = seq_len > m.get("attn_checkpoint_above", 1024)


# ---------------------------------------------------------------------------------------------
# Execution: device, batch prefetching, time budget


@functools.lru_cache(maxsize=None)  # autocast() asks at every step; the CPU does not change
def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX). There, torch's
    bfloat16 matmul is several times faster than float32 (645 against 82 GFLOP/s for a 2048 x 256
    by 256 x 768 product on 2 Zen 5 cores); without it, bfloat16 is emulated and far slower (0.35
    against 10.5 GFLOP/s on 2 Zen 3 cores)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


AUTOCAST = {"mode": "auto"}  # train --autocast: auto, bf16 or off


def autocast_on(device: torch.device) -> bool:
    """bfloat16 autocast on a GPU and on a CPU with bfloat16 hardware (cpu_has_bf16), unless
    `train --autocast` says otherwise."""
    mode = AUTOCAST["mode"]
    return mode == "bf16" or (mode == "auto" and (device.type == "cuda" or cpu_has_bf16()))


def autocast(device: torch.device):
    """The training step's precision: bfloat16 autocast where autocast_on (RMSNorm, RoPE and
    softmax stay float32 in the model), float32 otherwise."""
    if not autocast_on(device):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


_WORKER: dict = {}  # the batch workers' Prepared data, inherited through fork


def _worker_init() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a trainer's handler must not keep workers alive


def _worker_batch(cfg: dict, step: int):
    return make_batch_np(cfg, _WORKER["prep"], step)


class BatchStream:
    """Batches of consecutive steps, made by `workers` forked processes up to `ahead` steps ahead
    of the trainer (0 workers: made inline). A batch is a function of (seed, step) alone, so the
    result does not depend on the number of workers. Create it before the GPU is initialised (the
    workers are forked); `cfg` may be replaced before the first `get`."""

    def __init__(self, cfg: dict, prep: Prepared, workers: int, ahead: int = 0):
        self.cfg, self.prep, self.pool = cfg, prep, None
        self.ahead = ahead or 4 * max(1, workers)
        self.pending: Dict[int, object] = {}
        if workers > 0:
            import multiprocessing
            _WORKER.update(prep=prep)
            self.pool = multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init)

    def get(self, step: int, end: int):
        """Batch of `step` as (tokens [B, T+1], weights [B, T], task names); `end`: first step
        not to prefetch."""
        if self.pool is None:
            return make_batch(self.cfg, self.prep, step)
        for s in range(step, min(end, step + self.ahead)):
            if s not in self.pending:
                self.pending[s] = self.pool.apply_async(_worker_batch, (self.cfg, s))
        job = self.pending.pop(step, None) or self.pool.apply_async(_worker_batch, (self.cfg, step))
        ids, ws, kinds = job.get()
        return torch.from_numpy(ids).long(), torch.from_numpy(ws), kinds

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool = None


def fit_time_budget(cfg: dict, prep: Prepared, model, device: torch.device, minutes: float,
                    workers: int = 0) -> dict:
    """The recipe with every stage's step count (and the evaluation interval) scaled by one factor,
    so that training takes about `minutes` on this machine. A stage's step time is the larger of
    its first batch's forward and backward (gradients discarded) and the time to make that batch
    divided among the batch workers. The stages keep their ratio. The timing is of this process
    alone: processes that share the device slow each other, and the estimate is then optimistic
    (the training loop stops at 1.1 x the budget regardless)."""
    out = json.loads(json.dumps(cfg))
    first, secs = 0, []
    for st in cfg["stages"]:
        set_seq_len(model, cfg, int(st["seq_len"]))
        t0 = time.time()
        x, w, _ = make_batch(cfg, prep, first)
        t_data = (time.time() - t0) / max(1, workers)
        x, w = x.to(device), w.to(device)
        times = []
        for _ in range(5):
            t0 = time.time()
            with autocast(device):
                loss, _ = weighted_loss_sparse(model, model.hidden(x[:, :-1]), x[:, 1:], w)
            loss.backward()
            float(loss)  # waits for the device
            times.append(time.time() - t0)
        model.zero_grad(set_to_none=True)
        secs.append(max(float(np.median(times[2:])), t_data))
        first += int(st["steps"])
    planned = sum(int(st["steps"]) * t for st, t in zip(cfg["stages"], secs))
    factor = minutes * 60 / max(planned, 1e-9)
    for st, t in zip(out["stages"], secs):
        st["steps"] = max(1, int(round(int(st["steps"]) * factor)))
        log(f"time budget: stage {st['name']} {t * 1000:.0f} ms/step -> {st['steps']} steps")
    if out.get("eval", {}).get("every"):
        out["eval"]["every"] = max(1, int(round(out["eval"]["every"] * factor)))
    return out


def init_from_gguf(model, path: Path, tok: BpeTokenizer) -> None:
    """Starts a run from the weights of a GGUF file (fine-tuning): same shape and tokenizer."""
    from kvec_ref.model import load_gguf
    src, src_cfg, meta = load_gguf(path)
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in src.state_dict().items()}
    if have != got:
        diff = sorted(k for k in set(have) | set(got) if have.get(k) != got.get(k))
        raise SystemExit(f"error: {path} does not have the recipe's model shape (differs in {', '.join(diff[:4])})")
    for key in ("rope_theta", "norm_eps", "tied_output"):  # GGUF stores float32: compare to 1e-6
        if not math.isclose(float(getattr(src_cfg, key)), float(getattr(model.config, key)), rel_tol=1e-6):
            raise SystemExit(f"error: {path} has {key} {getattr(src_cfg, key)}, the recipe "
                             f"{getattr(model.config, key)}")
    if list(meta.get("tokenizer.ggml.tokens", [])) != list(tok.gguf_metadata()["tokenizer.ggml.tokens"]):
        raise SystemExit(f"error: {path} has another tokenizer than the run")
    model.load_state_dict(src.state_dict())
    log(f"initialised from {path}")


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_train(args) -> int:
    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    cfg_path = run / "config.json"
    if args.config:
        cfg = load_config(Path(args.config))
        if cfg_path.exists() and args.resume:
            old = json.loads(cfg_path.read_text())
            if old.get("model") != cfg.get("model") or old.get("seed") != cfg.get("seed"):
                raise SystemExit(f"error: {args.config} changes the model or seed of run {run}")
        cfg_path.write_text(json.dumps(cfg, indent=2))
    elif cfg_path.exists():
        cfg = load_config(cfg_path)
    else:
        raise SystemExit("error: --config is required for a new run")
    torch.set_num_threads(int(args.threads))
    device = torch.device(args.device)
    AUTOCAST["mode"] = args.autocast
    log(f"bfloat16 autocast {'on' if autocast_on(device) else 'off'} (--autocast {args.autocast})")
    prep = prepare(cfg, run)
    model, mc = build_model(cfg, prep.tok.n_vocab, int(cfg["stages"][0]["seq_len"]))
    step, tokens_seen, elapsed = 0, 0, 0.0
    ckpt = load_checkpoint(run) if args.resume else None
    if args.resume and ckpt is None:
        log("no checkpoint found: starting from scratch")
    if ckpt is None and not args.resume and (run / "log.jsonl").exists():
        raise SystemExit(f"error: {run} already has a run; pass --resume or use a new --run")
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
    elif args.init_from or cfg.get("init_from"):
        init_from_gguf(model, REPO / (args.init_from or cfg["init_from"]), prep.tok)
    if ckpt is None and cfg.get("init", {}).get("vt_circuit") is not None:
        add_vt_circuit(model, cfg, prep)
    stream = BatchStream(cfg, prep, int(args.workers))
    model.to(device)
    if ckpt is None and args.time_budget:
        cfg = fit_time_budget(cfg, prep, model, device, float(args.time_budget), int(args.workers))
        cfg_path.write_text(json.dumps(cfg, indent=2))
        stream.cfg = cfg
    opt = make_optimizer(cfg, model)
    frozen = FrozenHeads(cfg, model)
    sup = attn_sup.from_config(cfg, model, prep.tok)
    if ckpt is not None:
        opt.load_state_dict(ckpt["optim"])
        step, tokens_seen, elapsed = ckpt["step"], ckpt["tokens_seen"], ckpt["elapsed"]
        log(f"resumed at step {step} ({tokens_seen} tokens, {elapsed / 3600:.2f} h)")
    log(f"model: {model.num_parameters() / 1e6:.2f}M parameters, {mc.n_layer} layers, width {mc.n_embd}, "
        f"{mc.n_head} heads / {mc.n_head_kv} KV heads")
    n_total = total_steps(cfg)
    if args.max_steps is not None:
        n_total = min(n_total, step + int(args.max_steps))
    log_every = int(cfg.get("log_every", 10))
    eval_every = int(cfg.get("eval", {}).get("every", 500))
    ckpt_secs = float(cfg.get("checkpoint_minutes", 10)) * 60
    last_ckpt = time.time()
    acc: Dict[str, List[float]] = {}
    tok_window, t_window = 0, time.time()
    t_start = time.time()
    stop_after = float(args.time_budget) * 60 * 1.1 if args.time_budget else math.inf
    stop = {"signal": None}  # SIGTERM (e.g. `timeout`): finish the step, checkpoint, stop
    old_handler = signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(signal=signum))
    model.train()

    def checkpoint():
        save_checkpoint(run, {"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
                              "tokens_seen": tokens_seen, "elapsed": elapsed, "config": cfg})

    def write_log(entry: dict):
        with open(run / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    try:
        while step < n_total:
            st = stage_at(cfg, step)
            set_seq_len(model, cfg, int(st["seq_len"]))
            t0 = time.time()
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, step) * g.get("lr_scale", 1.0)
            x, w, kinds = stream.get(step, n_total)
            x, w = x.to(device, non_blocking=True), w.to(device, non_blocking=True)
            with autocast(device):
                loss, per_seq = weighted_loss_sparse(model, model.hidden(x[:, :-1]), x[:, 1:], w)
                if sup is not None:
                    aux, parts = sup.loss(sup.targets(x[:, :-1]), x)
                    if aux is not None:
                        loss = loss + aux
                    for role, v in parts.items():
                        acc.setdefault(f"attn_{role}", []).append(v)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["optim"].get("grad_clip", 1.0)))
            opt.step()
            frozen.restore()
            step += 1
            tokens_seen += int(x[:, :-1].numel())
            tok_window += int(x[:, :-1].numel())
            elapsed += time.time() - t0
            for k, l in zip(kinds, per_seq.tolist()):
                acc.setdefault(k, []).append(l)
            if not math.isfinite(float(loss)):
                raise SystemExit(f"error: loss is {float(loss)} at step {step}; resume from the last checkpoint "
                                 "with a lower learning rate")
            if step % log_every == 0:
                dt = time.time() - t_window
                entry = {"kind": "train", "step": step, "stage": st["name"], "tokens": tokens_seen,
                         "elapsed_h": round(elapsed / 3600, 4), "lr": lr_at(cfg, step - 1), "gnorm": round(gnorm, 3),
                         "tok_per_s": round(tok_window / max(dt, 1e-9), 1),
                         "loss": {k: round(float(np.mean(v)), 4) for k, v in sorted(acc.items())}}
                write_log(entry)
                log(f"step {step}/{n_total} [{st['name']}] " +
                    " ".join(f"{k}={v:.3f}" for k, v in entry["loss"].items()) +
                    f" lr={entry['lr']:.2e} {entry['tok_per_s']:.0f} tok/s")
                acc, tok_window, t_window = {}, 0, time.time()
            if eval_every and step % eval_every == 0:
                t_eval = time.time()
                res = evaluate(model, cfg, prep, sup)
                write_log({"kind": "eval", "step": step, "tokens": tokens_seen,
                           "elapsed_h": round(elapsed / 3600, 4), **res, "eval_s": round(time.time() - t_eval, 1)})
                log("eval " + " ".join(f"{k}={v:.3f}" for k, v in res.items()))
                t_window = time.time()
            if time.time() - last_ckpt > ckpt_secs or step in stage_ends(cfg):
                checkpoint()
                write_status(run)
                last_ckpt = time.time()
            if time.time() - t_start > stop_after:
                log(f"stopping at step {step}: over the time budget of {args.time_budget} minutes")
                break
            if stop["signal"] is not None:
                log(f"stopping at step {step}: terminated")
                break
    finally:
        stream.close()
        signal.signal(signal.SIGTERM, old_handler)
    checkpoint()
    write_status(run)
    log(f"done: step {step}, {tokens_seen} tokens, {elapsed / 3600:.2f} h")
    return 0


def write_status(run: Path) -> str:
    entries = []
    if (run / "log.jsonl").exists():
        with open(run / "log.jsonl", encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
    trains = [e for e in entries if e["kind"] == "train"]
    evals = [e for e in entries if e["kind"] == "eval"]
    lines = [f"# Training status of {run.name}", ""]
    if trains:
        t = trains[-1]
        lines += [f"- step {t['step']}, stage {t['stage']}, {t['tokens']:,} tokens seen, "
                  f"{t['elapsed_h']:.2f} h of training, last {t['tok_per_s']:.0f} tokens/s",
                  "- losses (last interval): " + ", ".join(f"{k} {v:.3f}" for k, v in t["loss"].items())]
    if evals:
        lines += ["", "| step | tokens | held-out LM loss | " +
                  " | ".join(k for k in evals[-1] if k.startswith("niah")) + " |",
                  "|---|---|---|" + "---|" * len([k for k in evals[-1] if k.startswith("niah")])]
        for e in evals:
            lines.append(f"| {e['step']} | {e['tokens']:,} | {e['heldout_lm_loss']:.3f} | " +
                         " | ".join(f"{e[k]:.2f}" for k in e if k.startswith("niah")) + " |")
    text = "\n".join(lines) + "\n"
    (run / "status.md").write_text(text, encoding="utf-8")
    return text


def load_trained(run: Path):
    ckpt = load_checkpoint(run)
    if ckpt is None:
        raise SystemExit(f"error: no checkpoint in {run}")
    cfg = ckpt["config"]
    tok = BpeTokenizer.load(run / "tokenizer.json")
    model, mc = build_model(cfg, tok.n_vocab, int(cfg["stages"][-1]["seq_len"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, mc, cfg, tok, ckpt


def cmd_prepare(args) -> int:
    """Corpus, tokenizer and token cache of a new run (what `synth-data` needs), no training."""
    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    cfg = load_config(Path(args.config))
    cfg_path = run / "config.json"
    if cfg_path.exists() and json.loads(cfg_path.read_text()) != cfg:
        raise SystemExit(f"error: {run} was prepared with another config")
    cfg_path.write_text(json.dumps(cfg, indent=2))
    prepare(cfg, run)
    return 0


def cmd_eval(args) -> int:
    torch.set_num_threads(int(args.threads))
    run = Path(args.run)
    model, mc, cfg, tok, ckpt = load_trained(run)
    prep = prepare(cfg, run)
    res = evaluate(model, cfg, prep, attn_sup.from_config(cfg, model, tok))
    print(json.dumps({"step": ckpt["step"], "tokens": ckpt["tokens_seen"], **res}, indent=2))
    return 0


def cmd_export(args) -> int:
    from kvec_ref.model import save_gguf
    run = Path(args.run)
    model, mc, cfg, tok, ckpt = load_trained(run)
    mc.context_length = int(cfg["model"].get("context_length", 2048))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    save_gguf(model, mc, tmp, tok.gguf_metadata(), dtype=args.dtype, name=cfg.get("name", "kvec-tiny"))
    os.replace(tmp, out)
    log(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, step {ckpt['step']}, {ckpt['tokens_seen']} tokens)")
    return 0


SYNTH_TASKS = ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe",
               "fwe", "qa"]


def cmd_synth_data(args) -> int:
    """Training instances of every suite task from `kvec synth --split train`, on the training
    documents as haystack, lengths measured in the run's own tokens; one JSONL file per length
    (the files `synth_train_files` of the recipe name)."""
    import subprocess
    from kvec_ref.model import ModelConfig, Transformer, save_gguf
    run = Path(args.run)
    cfg = load_config(run / "config.json")
    tok = BpeTokenizer.load(run / "tokenizer.json")
    out_dir = Path(args.out_dir)
    hay_dir = out_dir / "haystack"
    hay_dir.mkdir(parents=True, exist_ok=True)
    docs = kdata.load_corpus(run / "corpus.jsonl")
    hay_files = []
    for d in docs:
        if d.heldout:
            continue
        p = hay_dir / (d.name.replace("/", "__") + ".txt")
        p.write_text(d.text, encoding="utf-8")
        hay_files.append(str(p))
    # A vocabulary-only model file (tiny random weights) so that lengths are exact in our tokens.
    vocab = out_dir / "vocab.gguf"
    torch.manual_seed(0)
    mc = ModelConfig(arch="llama", n_vocab=tok.n_vocab, n_embd=8, n_layer=1, n_head=2, n_head_kv=1,
                     n_ff=16, tied_output=True)
    save_gguf(Transformer(mc), mc, vocab, tok.gguf_metadata(), dtype="f32")
    for length in args.lengths:
        target = out_dir / f"train-{length // 1024}k.jsonl"
        tmp = target.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            for i, task in enumerate(SYNTH_TASKS):
                part = out_dir / f"part-{task}-{length}.jsonl"
                cmd = [args.kvec, "synth", "--task", task, "--n", str(args.n), "--length", str(length),
                       "--split", "train", "--seed", str(int(cfg["seed"]) * 100 + i), "--tokenizer",
                       str(vocab), "-o", str(part), "--haystack", *hay_files]
                log(f"kvec synth --task {task} --n {args.n} --length {length}")
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"error: kvec synth failed for {task}: {r.stderr.strip()}")
                out.write(part.read_text(encoding="utf-8"))
                part.unlink()
        os.replace(tmp, target)
        log(f"wrote {target}")
    return 0


def cmd_status(args) -> int:
    print(write_status(Path(args.run)), end="")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kvec_train.train", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train", help="train (or resume) a run")
    p.add_argument("--config", help="recipe JSON (required for a new run)")
    p.add_argument("--run", required=True, help="run directory (checkpoints, logs)")
    p.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    p.add_argument("--threads", default=2, type=int)
    p.add_argument("--max-steps", type=int, help="stop after this many more steps")
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda")
    p.add_argument("--autocast", default="auto", choices=["auto", "bf16", "off"],
                   help="bfloat16 autocast; auto: on a GPU and on CPUs with bfloat16 hardware")
    p.add_argument("--workers", type=int, default=0,
                   help="processes that make batches ahead of the trainer (0: inline)")
    p.add_argument("--time-budget", type=float, default=0,
                   help="minutes: scale every stage's steps to fit, after timing one step of each (new runs)")
    p.add_argument("--init-from", help="GGUF file whose weights start a new run (same shape and "
                   "tokenizer; default: the recipe's init_from, relative to the repository)")
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("prepare", help="build the corpus, tokenizer and token cache of a run")
    p.add_argument("--config", required=True)
    p.add_argument("--run", required=True)
    p.set_defaults(fn=cmd_prepare)
    p = sub.add_parser("eval", help="evaluate the run's last checkpoint (PyTorch)")
    p.add_argument("--run", required=True)
    p.add_argument("--threads", default=2, type=int)
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("export", help="write the run's last checkpoint as GGUF")
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default="f16", choices=["f32", "f16", "bf16", "q8_0"])
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("synth-data", help="generate `kvec synth --split train` instances for the run")
    p.add_argument("--run", required=True)
    p.add_argument("--kvec", required=True, help="path of the kvec binary")
    p.add_argument("--out-dir", default=str(REPO / "train_runs" / "synth"))
    p.add_argument("--n", type=int, default=400, help="instances per task and length")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    p.set_defaults(fn=cmd_synth_data)
    p = sub.add_parser("status", help="print (and write) the run's status.md")
    p.add_argument("--run", required=True)
    p.set_defaults(fn=cmd_status)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
