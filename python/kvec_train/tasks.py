"""Training sequences of the bundled model: curriculum tasks with per-token loss weights.

Every generator returns a `Seq`: token ids (BOS first) and one loss weight per token (the weight
of predicting that token from the ones before it). Answers carry weight 1; text that cannot be
predicted (random tokens, first occurrences) weight 0; haystack text a small LM weight.

Task families:
  induction   random token spans, each repeated later: induction heads form quickly here
  copy        a natural-text passage repeated later ("repeated passages to continue")
  niah        RULER-style needles ("One of the special magic numbers for silver-falcon is:
              482913.") in natural text, followed by many questions with their answers, in the
              exact prompt form of `kvec synth` (src/eval/synthetic.cpp); dense supervision
  vt          variable-tracking chains (VAR X = 12345. VAR Y = VAR X. ...), multi-hop questions
  lm          plain natural text
  synth       instances of `kvec synth --split train` (JSONL), loss on the target only

Held-out: keys, values and variable names are drawn only from the train half of
src/eval/synthetic_words.h's split (stable_hash(item) % 3 != 0), so no evaluation key or value
of the C++ suite ever occurs in training; haystacks come from training documents only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .bpe import BpeTokenizer, pre_tokenize

MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a."""
    h = 0xcbf29ce484222325
    for c in data:
        h ^= c
        h = (h * 0x100000001b3) & MASK64
    return h


def splitmix64_mix(h: int) -> int:
    """splitmix64's output step (add the golden gamma, then the two xor-shift-multiply rounds)."""
    h = (h + 0x9e3779b97f4a7c15) & MASK64
    h = ((h ^ (h >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    h = ((h ^ (h >> 27)) * 0x94d049bb133111eb) & MASK64
    return h ^ (h >> 31)


def stable_hash(text: str) -> int:
    """src/eval/synthetic_words.cpp's stable_hash: FNV-1a, then the splitmix64 finaliser."""
    return splitmix64_mix(fnv1a64(text.encode("utf-8")))


def split_of(item: str) -> str:
    """"eval" or "train", as the C++ suite splits its keys, values and answers."""
    return "eval" if stable_hash(item) % 3 == 0 else "train"


@dataclass
class Seq:
    ids: List[int] = field(default_factory=list)        # [n] token ids
    weights: List[float] = field(default_factory=list)  # [n] loss weight of predicting ids[i]
    task: str = ""


class Builder:
    """Assembles text segments with weights and tokenizes the whole text at once, so the tokens
    are exactly those the engine produces for the same text; a token takes the weight of the
    segment its first byte is in."""

    def __init__(self, tok: BpeTokenizer):
        self.tok = tok
        self.parts: List[Tuple[str, float]] = []

    def add(self, text: str, weight: float) -> "Builder":
        if text:
            self.parts.append((text, weight))
        return self

    def text(self) -> str:
        return "".join(t for t, _ in self.parts)

    def build(self, task: str) -> Seq:
        text = self.text()
        # Byte offset where each segment starts.
        bounds = []  # [(start_byte, weight)]
        pos = 0
        for t, w in self.parts:
            bounds.append((pos, w))
            pos += len(t.encode("utf-8"))
        starts = np.array([b for b, _ in bounds], dtype=np.int64)
        ws = np.array([w for _, w in bounds], dtype=np.float32)
        ids = [self.tok.bos_id]
        tok_start = []
        byte = 0
        for piece in pre_tokenize(text):
            for t in self.tok._bpe(piece):
                ids.append(t)
                tok_start.append(byte)
                byte += len(self.tok.decode_bytes([t]))
        seg = np.searchsorted(starts, np.array(tok_start, dtype=np.int64), side="right") - 1
        weights = [0.0] + ws[seg].tolist()
        return Seq(ids, weights, task)


def fit(seq: Seq, n: int, pad_id: int) -> Seq:
    """Exactly n tokens: cut at the end or pad (padding has weight 0)."""
    if len(seq.ids) >= n:
        return Seq(seq.ids[:n], seq.weights[:n], seq.task)
    k = n - len(seq.ids)
    return Seq(seq.ids + [pad_id] * k, seq.weights + [0.0] * k, seq.task)


# ---------------------------------------------------------------------------------------------
# Text sources


_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+(?=[\"'(A-Z0-9])")


class TextPool:
    """Sentences of a set of documents (in order), with their token counts measured lazily."""

    def __init__(self, texts: Sequence[str], tok: BpeTokenizer):
        self.tok = tok
        self.sentences: List[str] = []
        for text in texts:
            flat = " ".join(text.split())
            self.sentences.extend(s for s in _SENTENCE_END.split(flat) if s)
        if not self.sentences:
            raise ValueError("text pool is empty")
        self._cost = np.full(len(self.sentences), -1, dtype=np.int32)
        self.texts = list(texts)

    def cost(self, i: int) -> int:
        c = self._cost[i]
        if c < 0:
            c = len(self.tok.encode(" " + self.sentences[i]))
            self._cost[i] = c
        return int(c)

    def take(self, rng: np.random.Generator, n_tokens: int) -> List[str]:
        """Consecutive sentences from a random start, about n_tokens in total."""
        start = int(rng.integers(0, len(self.sentences)))
        out, total, i = [], 0, start
        while total < n_tokens:
            c = self.cost(i)
            if total + c > n_tokens and out:
                break
            out.append(self.sentences[i])
            total += c
            i = (i + 1) % len(self.sentences)
        return out


# ---------------------------------------------------------------------------------------------
# Vocabularies of keys and values


class Vocab:
    """Key words, drawn from the corpus and restricted to one split of the C++ suite's rule."""

    def __init__(self, texts: Sequence[str], split: str = "train", min_count: int = 3):
        counts: Dict[str, int] = {}
        for t in texts:
            for w in re.findall(r"\b[a-z]{3,10}\b", t):
                counts[w] = counts.get(w, 0) + 1
        words = sorted(w for w, c in counts.items() if c >= min_count and split_of(w) == split)
        if len(words) < 100:
            raise ValueError(f"too few key words ({len(words)}) for split {split}")
        self.words = words
        self.split = split

    def key(self, rng: np.random.Generator) -> str:
        return f"{self.words[rng.integers(len(self.words))]}-{self.words[rng.integers(len(self.words))]}"

    def number(self, rng: np.random.Generator, digits: int) -> str:
        lo = 10 ** (digits - 1)
        while True:
            s = str(int(rng.integers(lo, lo * 10)))
            if split_of(s) == self.split:
                return s

    def var_name(self, rng: np.random.Generator) -> str:
        letters = "BCDFGHJKLMNPQRSTVWXZ"
        while True:
            s = "".join(letters[i] for i in rng.integers(0, len(letters), 5))
            if split_of(s) == self.split:
                return s


def _distinct(draw, n: int, used: set) -> List[str]:
    out = []
    while len(out) < n:
        x = draw()
        if x not in used:
            used.add(x)
            out.append(x)
    return out


def join_and(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + ", and " + items[-1]


# ---------------------------------------------------------------------------------------------
# Generators


@dataclass
class TaskContext:
    tok: BpeTokenizer
    pool: TextPool           # haystack sentences
    vocab: Vocab             # keys / values of this split
    lm_tokens: np.ndarray    # [n] training text as one token stream (documents joined)
    text_weight: float = 0.05  # LM weight of haystack text inside task sequences


def gen_induction(ctx: TaskContext, rng: np.random.Generator, n: int, lo: int = 0, hi: int = 0,
                  kind: str = "induction") -> Seq:
    """Random tokens (ids lo .. hi - 1; default: the whole vocabulary but the special tokens) in
    which spans of 4-48 tokens repeat at random offsets; weight 1 on the repeats only. Unlike a
    block repeated back to back, no fixed offset predicts a repeat, so only content matching (an
    induction head) lowers the loss."""
    vocab_hi = hi or ctx.tok.bos_id  # special tokens sit at the end of the vocabulary
    ids = [ctx.tok.bos_id]
    weights = [0.0]
    spans: List[List[int]] = []
    while len(ids) < n:
        if spans and rng.random() < 0.5:
            span = spans[int(rng.integers(len(spans)))]
            ids.extend(span)
            weights.extend([0.0] + [1.0] * (len(span) - 1))  # the first token is not predictable
        else:
            span = rng.integers(lo, vocab_hi, int(rng.integers(4, 49))).tolist()
            spans.append(span)
            ids.extend(span)
            weights.extend([0.0] * len(span))
    return Seq(ids[:n], weights[:n], kind)


def gen_induction_sub(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    """gen_induction on the sub-vocabulary of induction_small (ids 256-767, frequent tokens)."""
    return gen_induction(ctx, rng, n, 256, min(768, ctx.tok.bos_id), "induction_sub")


def gen_induction_small(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    """The classic induction-head task: a block of random tokens from a sub-vocabulary of 512 ids
    (the earliest merges, i.e. frequent tokens), repeated until the sequence is full; weight 1 on
    every repeated token but the first of each repeat. Measured here (2-layer, width 64, the
    4100-token vocabulary): the repeat loss falls from chance to 0.15 within 200 steps, while
    many short spans repeated at random offsets (the older form) stayed at chance for 300+."""
    lo, hi = 256, min(768, ctx.tok.bos_id)
    block = rng.integers(lo, hi, int(rng.integers(max(8, n // 8), max(9, n // 2) + 1))).tolist()
    ids = [ctx.tok.bos_id] + block
    weights = [0.0] * len(ids)
    while len(ids) < n:
        ids.extend(block)
        weights.extend([0.0] + [1.0] * (len(block) - 1))
    return Seq(ids[:n], weights[:n], "induction_small")


def gen_copy(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    """A passage, filler text, then the passage again; weight 1 on the repeat."""
    b = Builder(ctx.tok)
    plen = int(rng.integers(24, max(25, n // 4)))
    passage = " ".join(ctx.pool.take(rng, plen))
    filler = " ".join(ctx.pool.take(rng, max(8, n - 2 * plen - 16)))
    b.add(passage, ctx.text_weight).add(" " + filler, ctx.text_weight)
    b.add("\n\nRepeat the first passage:\n", 0.0).add(passage, 1.0)
    return fit(b.build("copy"), n, ctx.tok.pad_id)


def gen_lm(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    start = int(rng.integers(0, len(ctx.lm_tokens) - n))
    ids = [ctx.tok.bos_id] + ctx.lm_tokens[start:start + n - 1].tolist()
    return Seq(ids, [0.0] + [1.0] * (n - 1), "lm")


def gen_induction_text(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    """In-context copying inside natural text: a training-text window cut into slots of about 128
    tokens; in each slot a span of 8-32 tokens (half the time the text itself, half the time random
    tokens written over it) recurs later in the slot. Weight 1 on the repeat's tokens after its
    first, the text weight elsewhere, so copying is rewarded in the context where needles and
    values occur (the random-token `induction` task alone taught the model to copy only among
    random tokens)."""
    start = int(rng.integers(0, len(ctx.lm_tokens) - n))
    ids = [ctx.tok.bos_id] + ctx.lm_tokens[start:start + n - 1].tolist()
    weights = [0.0] + [ctx.text_weight] * (n - 1)
    n_slots = max(1, n // 128)
    edges = np.linspace(1, n, n_slots + 1).astype(int)
    for lo, hi in zip(edges[:-1], edges[1:]):
        length = int(rng.integers(8, 33))
        if hi - lo < 2 * length + 1:
            continue
        src = int(rng.integers(lo, hi - 2 * length + 1))
        dst = int(rng.integers(src + length, hi - length + 1))
        if rng.random() < 0.5:
            ids[src:src + length] = rng.integers(0, ctx.tok.bos_id, length).tolist()
        ids[dst:dst + length] = ids[src:src + length]
        weights[dst:dst + length] = [0.0] + [1.0] * (length - 1)
    return Seq(ids, weights, "induction_text")


NIAH_INSTR_1 = ("A special magic number is hidden within the following text. Make sure to memorize "
                "it. I will quiz you about the number afterwards.")
NIAH_INSTR_N = ("Some special magic numbers are hidden within the following text. Make sure to "
                "memorize them. I will quiz you about the numbers afterwards.")
VT_INSTR = "Memorize and track the chains of variable assignments hidden in the following text."


def _niah_question(keys: List[str], values: List[str]) -> Tuple[str, str, str]:
    q = join_and(keys)
    if len(values) == 1:
        return (f"What is the special magic number for {q} mentioned in the provided text?",
                f"The special magic number for {q} is:", values[0])
    return (f"What are all the special magic numbers for {q} mentioned in the provided text?",
            f"The special magic numbers for {q} are:", ", ".join(values))


def _place(ctx: TaskContext, rng: np.random.Generator, needles: List[str], room: int,
           in_order: bool = False) -> List[Tuple[str, bool]]:
    """Haystack sentences of about `room` tokens with the needles inserted at random sentence
    boundaries (in the given order if in_order). Returns (text, is_needle) pieces."""
    sents = ctx.pool.take(rng, max(room, 1)) if room > 0 else []
    slots = sorted(rng.integers(0, len(sents) + 1, len(needles)).tolist()) if in_order else \
        rng.integers(0, len(sents) + 1, len(needles)).tolist()
    by_slot: Dict[int, List[str]] = {}
    for nd, s in zip(needles, slots):
        by_slot.setdefault(int(s), []).append(nd)
    pieces: List[Tuple[str, bool]] = []
    for s in range(len(sents) + 1):
        for nd in by_slot.get(s, []):
            pieces.append((nd, True))
        if s < len(sents):
            pieces.append((sents[s], False))
    return pieces


def _render(b: Builder, pieces: List[Tuple[str, bool]], text_weight: float, needle_weight: float):
    first = True
    for text, is_needle in pieces:
        b.add(("" if first else " ") + text, needle_weight if is_needle else text_weight)
        first = False


def gen_niah(ctx: TaskContext, rng: np.random.Generator, n: int, max_keys: int = 16) -> Seq:
    """Many needles (some keys with several values) in natural text, then questions in the
    suite's completion form, each followed by its answer; weight 1 on the answers."""
    used: set = set()
    n_keys = int(rng.integers(1, max_keys + 1))
    keys = _distinct(lambda: ctx.vocab.key(rng), n_keys, used)
    values = []
    for _ in keys:
        n_vals = 1 if rng.random() < 0.75 else int(rng.integers(2, 5))
        values.append(_distinct(lambda: ctx.vocab.number(rng, 6), n_vals, used))
    needles = [f"One of the special magic numbers for {k} is: {v}." for k, vs in zip(keys, values)
               for v in vs]
    # Questions: single keys, sometimes several keys at once (multi-query).
    order = rng.permutation(n_keys).tolist()
    questions = []
    i = 0
    max_q = max(1, min(8, n // 100))  # questions take ~40 tokens each: at most ~40% of the window
    while i < len(order) and len(questions) < max_q:
        m = 1 if rng.random() < 0.7 else min(int(rng.integers(2, 5)), len(order) - i)
        ks = [keys[j] for j in order[i:i + m]]
        vs = [v for j in order[i:i + m] for v in values[j]]
        questions.append(_niah_question(ks, vs))
        i += m
    instr = NIAH_INSTR_1 if len(needles) == 1 else NIAH_INSTR_N
    qa_cost = sum(len(ctx.tok.encode(f"\n\n{q}\n{c} {a}.")) for q, c, a in questions)
    needle_cost = sum(len(ctx.tok.encode(" " + nd)) for nd in needles)
    room = n - 1 - len(ctx.tok.encode(instr + "\n\n")) - qa_cost - needle_cost - 2
    b = Builder(ctx.tok)
    b.add(instr + "\n\n", 0.0)
    _render(b, _place(ctx, rng, needles, room), ctx.text_weight, ctx.text_weight)
    for qi, (q, c, a) in enumerate(questions):
        b.add(("\n\n" if qi == 0 else "\n") + f"{q}\n{c}", 0.0).add(f" {a}.", 1.0)
    return fit(b.build("niah"), n, ctx.tok.pad_id)


def gen_kv(ctx: TaskContext, rng: np.random.Generator, n: int, max_keys: int = 16) -> Seq:
    """Dense associative recall in the suite's exact needle and answer forms, without haystack:
    needles back to back, then one completion line per key (in random order) with its value(s);
    weight 1 on the answers. Every answer needs the induction-style lookup that long-context
    retrieval needs, so the circuit gets many examples per token of compute."""
    used: set = set()
    keys, values, needles = [], [], []
    budget = n - 1 - len(ctx.tok.encode(NIAH_INSTR_N + "\n\n")) - 8
    while len(keys) < max_keys:
        k = _distinct(lambda: ctx.vocab.key(rng), 1, used)[0]
        n_vals = 1 if rng.random() < 0.8 else int(rng.integers(2, 4))
        vs = _distinct(lambda: ctx.vocab.number(rng, int(rng.integers(5, 8))), n_vals, used)
        nd = [f"One of the special magic numbers for {k} is: {v}." for v in vs]
        _, c, a = _niah_question([k], vs)
        cost = sum(len(ctx.tok.encode(" " + x)) for x in nd) + len(ctx.tok.encode(f"\n{c} {a}."))
        if cost > budget:
            break
        budget -= cost
        keys.append(k)
        values.append(vs)
        needles.extend(nd)
    order = rng.permutation(len(needles)).tolist()
    b = Builder(ctx.tok)
    b.add(NIAH_INSTR_N + "\n\n", 0.0)
    b.add(" ".join(needles[i] for i in order), 0.0)
    for qi, j in enumerate(rng.permutation(len(keys)).tolist()):
        _, c, a = _niah_question([keys[j]], values[j])
        b.add(("\n\n" if qi == 0 else "\n") + c, 0.0).add(f" {a}.", 1.0)
    return fit(b.build("kv"), n, ctx.tok.pad_id)


def _vt_chains(ctx: TaskContext, rng: np.random.Generator, n_chains: int, hops: int):
    """n_chains chains of hops + 1 distinct variables, each with its own value, and their
    statements interleaved at random with each chain in order: (chains [chain][hop] names,
    values [chain], statements in text order)."""
    used: set = set()
    chains, vals = [], []
    for _ in range(n_chains):
        vals.append(_distinct(lambda: ctx.vocab.number(rng, 5), 1, used)[0])
        chains.append(_distinct(lambda: ctx.vocab.var_name(rng), hops + 1, used))
    statements = [[f"VAR {chains[c][0]} = {vals[c]}."] +
                  [f"VAR {chains[c][h]} = VAR {chains[c][h - 1]}." for h in range(1, hops + 1)]
                  for c in range(n_chains)]
    flat = []
    idx = [0] * n_chains
    while any(idx[c] < len(statements[c]) for c in range(n_chains)):
        live = [c for c in range(n_chains) if idx[c] < len(statements[c])]
        c = live[int(rng.integers(len(live)))]
        flat.append(statements[c][idx[c]])
        idx[c] += 1
    return chains, vals, flat


def _vt_question(chain: List[str], value: str) -> Tuple[str, str, str]:
    """The suite's question, cue and answer for one chain."""
    return (f"Question: Find all variables that are assigned the value {value} in the text above.",
            f"Answer: According to the chains of variable assignments in the text above, "
            f"{len(chain)} variables are assigned the value {value}, they are:",
            ", ".join(chain))


def gen_vt(ctx: TaskContext, rng: np.random.Generator, n: int, dense: bool = False,
           filler: bool = True) -> Seq:
    """Chains of variable assignments in natural text; questions about every chain. dense: 2-4
    chains and at most a quarter of the haystack room filled, so that most of the sequence is
    statements and answers (the backward hop "which variable holds this value?" gets many
    examples per token). filler False: no text between the statements at all."""
    n_chains = int(rng.integers(2, 5)) if dense else int(rng.integers(1, 5))
    hops = int(rng.integers(1, 5))  # the suite uses 4 (5 variables a chain)
    chains, vals, flat = _vt_chains(ctx, rng, n_chains, hops)
    questions = [_vt_question(chains[c], vals[c]) for c in rng.permutation(n_chains).tolist()]
    qa_cost = sum(len(ctx.tok.encode(f"\n\n{q}\n{c} {a}.")) for q, c, a in questions)
    st_cost = sum(len(ctx.tok.encode(" " + s)) for s in flat)
    room = n - 1 - len(ctx.tok.encode(VT_INSTR + "\n\n")) - qa_cost - st_cost - 2
    if not filler:
        room = 0
    elif dense and room > 0:
        room = int(rng.integers(0, room // 4 + 1))
    b = Builder(ctx.tok)
    b.add(VT_INSTR + "\n\n", 0.0)
    _render(b, _place(ctx, rng, flat, room, in_order=True), ctx.text_weight, ctx.text_weight)
    for qi, (q, c, a) in enumerate(questions):
        b.add(("\n\n" if qi == 0 else "\n") + f"{q}\n{c}", 0.0).add(f" {a}.", 1.0)
    return fit(b.build("vt"), n, ctx.tok.pad_id)


def gen_vt_dense(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    return gen_vt(ctx, rng, n, dense=True)


def gen_vt_short(ctx: TaskContext, rng: np.random.Generator, n: int) -> Seq:
    """Dense chains with no text between the statements: the hop at the shortest distances."""
    return gen_vt(ctx, rng, n, dense=True, filler=False)


class SynthFile:
    """Instances of `kvec synth` (JSONL, completion format): prompt, then target (weight 1).

    An instance is drawn among those whose prompt (the `length` field, in the run's tokens when
    generated with its vocabulary) plus answer fits the sequence; none fitting: None."""

    def __init__(self, paths: Sequence[Path]):
        self.items: List[Tuple[str, str, int]] = []  # (prompt, target, prompt length)
        for p in paths:
            with open(p, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        d = json.loads(line)
                        if d.get("format", "completion") == "completion":
                            length = int(d.get("length", 0)) * (4 if d.get("length_unit") == "approx_tokens" else 1)
                            self.items.append((d["prompt"], d["target"], length))
        if not self.items:
            raise ValueError(f"no completion-format instances in {', '.join(map(str, paths))}")
        self.items.sort(key=lambda it: it[2])
        self._lengths = np.array([it[2] for it in self.items], dtype=np.int64)  # [n_items] sorted

    def gen(self, ctx: TaskContext, rng: np.random.Generator, n: int) -> Optional[Seq]:
        fitting = int(np.searchsorted(self._lengths, n - 48, side="right"))  # room for the answer
        if fitting == 0:
            return None
        prompt, target, _ = self.items[int(rng.integers(fitting))]
        b = Builder(ctx.tok).add(prompt, ctx.text_weight).add(target + "\n", 1.0)
        seq = b.build("synth")
        if len(seq.ids) > n:  # a longer prompt than its length said: keep the end (the question)
            seq = Seq([ctx.tok.bos_id] + seq.ids[len(seq.ids) - n + 1:],
                      [0.0] + seq.weights[len(seq.ids) - n + 1:], "synth")
        return fit(seq, n, ctx.tok.pad_id)


GENERATORS = {
    "induction": gen_induction,
    "induction_small": gen_induction_small,
    "induction_sub": gen_induction_sub,
    "induction_text": gen_induction_text,
    "kv": gen_kv,
    "copy": gen_copy,
    "lm": gen_lm,
    "niah": gen_niah,
    "vt": gen_vt,
    "vt_dense": gen_vt_dense,
    "vt_short": gen_vt_short,
}


# ---------------------------------------------------------------------------------------------
# Held-out evaluation instances (Python side; the engine's numbers come from `kvec eval`)


@dataclass
class EvalInstance:
    task: str
    prompt: str
    answers: List[str]
    max_new_tokens: int


def eval_niah_single(ctx: TaskContext, rng: np.random.Generator, n: int) -> EvalInstance:
    """One needle in held-out text at a random depth, in the suite's exact completion form."""
    key = ctx.vocab.key(rng)
    value = ctx.vocab.number(rng, 6)
    q, c, _ = _niah_question([key], [value])
    needle = f"One of the special magic numbers for {key} is: {value}."
    room = n - 16 - len(ctx.tok.encode(f"{NIAH_INSTR_1}\n\n\n\n{q}\n{c}")) - \
        len(ctx.tok.encode(" " + needle)) - 2
    sents = ctx.pool.take(rng, room)
    depth = int(rng.integers(0, 40)) * 100 / 39.0
    cum = np.cumsum([0] + [len(s) for s in sents])  # [len(sents) + 1] chars before each boundary
    slot = int(np.searchsorted(cum, cum[-1] * depth / 100.0))
    sents.insert(min(slot, len(sents)), needle)
    prompt = f"{NIAH_INSTR_1}\n\n{' '.join(sents)}\n\n{q}\n{c}"
    return EvalInstance("niah_single", prompt, [value], 16)


def eval_vt(ctx: TaskContext, rng: np.random.Generator, n: int) -> EvalInstance:
    """The suite's variable-tracking instance: 3 chains of 5 variables in held-out text, the first
    chain asked; the answer is its 5 names."""
    chains, vals, flat = _vt_chains(ctx, rng, 3, 4)
    q, c, _ = _vt_question(chains[0], vals[0])
    room = n - 32 - len(ctx.tok.encode(f"{VT_INSTR}\n\n\n\n{q}\n{c}")) - \
        sum(len(ctx.tok.encode(" " + s)) for s in flat) - 2
    body = " ".join(t for t, _ in _place(ctx, rng, flat, room, in_order=True))
    return EvalInstance("vt", f"{VT_INSTR}\n\n{body}\n\n{q}\n{c}", chains[0], 32)


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """RULER's metric: fraction of references contained (case-insensitive) in the prediction."""
    p = prediction.strip().lower()
    return sum(r.lower() in p for r in references) / max(1, len(references))
