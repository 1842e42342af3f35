"""Byte-level BPE tokenizer of the bundled model: training, encoding, GGUF metadata.

The format is GPT-2's byte-level BPE as GGUF stores it (tokenizer.ggml.model = "gpt2"): every
byte maps to one printable character (bytes_to_unicode), text is split by a pre-tokenizer regex,
and each piece is merged by merge rank (lowest rank first, leftmost on ties), unless the whole piece
is a token (llama-bpe's ignore_merges, as in Llama 3 and llama.cpp). The pre-tokenizer
is Llama 3's regex (tokenizer.ggml.pre = "llama-bpe": letters, digits in groups of 1-3,
punctuation runs, newlines, spaces), which the C++ tokenizer of src/tokenizer implements too.

Vocabulary layout: ids 0..255 the byte tokens (in byte order), then one token per merge, then
the special tokens <|bos|>, <|eos|>, <|pad|> (type CONTROL).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import regex

# Llama 3's pre-tokenizer (tokenizer.json of Meta-Llama-3), as llama.cpp's "llama-bpe".
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_NAME = "llama-bpe"

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
SPECIALS = (BOS, EOS, PAD)

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_PATTERN = regex.compile(LLAMA3_PATTERN)


def pre_tokenize(text: str) -> List[str]:
    """Pieces of `text` (as strings) that BPE merges independently."""
    return _PATTERN.findall(text)


def _to_symbols(piece: str) -> Tuple[str, ...]:
    return tuple(BYTE_TO_CHAR[b] for b in piece.encode("utf-8"))


def train_bpe(texts: Iterable[str], vocab_size: int) -> List[Tuple[str, str]]:
    """Learns merges until 256 byte tokens + distinct merge results + specials = vocab_size.

    Deterministic: the most frequent adjacent pair wins; ties go to the lexicographically
    smallest pair. Counts are updated incrementally, only for the words a merge touches.
    """
    target = vocab_size - 256 - len(SPECIALS)
    if target <= 0:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges")
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(pre_tokenize(text))
    # Sorted for determinism independent of the order texts were counted in.
    items = sorted(counts.items())
    words: List[List[str]] = [list(_to_symbols(w)) for w, _ in items]
    freqs: List[int] = [c for _, c in items]

    pair_counts: Dict[Tuple[str, str], int] = collections.defaultdict(int)
    pair_where: Dict[Tuple[str, str], set] = collections.defaultdict(set)
    for i, (word, f) in enumerate(zip(words, freqs)):
        for a, b in zip(word, word[1:]):
            pair_counts[(a, b)] += f
            pair_where[(a, b)].add(i)

    merges: List[Tuple[str, str]] = []
    produced = set()
    while len(produced) < target and pair_counts:
        best_count = max(pair_counts.values())
        if best_count < 2:
            break
        best = min(p for p, c in pair_counts.items() if c == best_count)
        merges.append(best)
        merged = best[0] + best[1]
        produced.add(merged)
        for i in sorted(pair_where.pop(best, ())):
            word, f = words[i], freqs[i]
            for a, b in zip(word, word[1:]):
                pair_counts[(a, b)] -= f
                if pair_counts[(a, b)] <= 0:
                    del pair_counts[(a, b)]
            out = []
            j = 0
            while j < len(word):
                if j + 1 < len(word) and word[j] == best[0] and word[j + 1] == best[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(word[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pair_counts[(a, b)] += f
                pair_where[(a, b)].add(i)
        pair_counts.pop(best, None)
    return merges


class BpeTokenizer:
    """Encoder/decoder for a byte-level BPE vocabulary (tokens, merges, special ids)."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[Tuple[str, str]],
                 token_types: Optional[Sequence[int]] = None, bos_id: int = -1, eos_id: int = -1,
                 pad_id: int = -1, pre: str = PRE_NAME):
        if pre != PRE_NAME:
            raise ValueError(f"unsupported pre-tokenizer {pre!r} (only {PRE_NAME!r})")
        self.tokens = list(tokens)
        self.merges = [tuple(m) for m in merges]
        self.token_types = list(token_types) if token_types is not None else \
            [TOKEN_TYPE_NORMAL] * len(self.tokens)
        if len(self.token_types) != len(self.tokens):
            raise ValueError("token_types and tokens differ in length")
        self.token_to_id = {}
        for i, t in enumerate(self.tokens):
            if t in self.token_to_id:
                raise ValueError(f"duplicate token {t!r} at ids {self.token_to_id[t]} and {i}")
            self.token_to_id[t] = i
        for ch in BYTE_TO_CHAR.values():
            if ch not in self.token_to_id:
                raise ValueError(f"byte token {ch!r} missing from the vocabulary")
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        for a, b in self.merges:
            if a + b not in self.token_to_id:
                raise ValueError(f"merge {a!r} {b!r} yields a token not in the vocabulary")
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.pre = pre
        self._cache: Dict[str, List[int]] = {}

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "BpeTokenizer":
        merges = train_bpe(texts, vocab_size)
        tokens = [BYTE_TO_CHAR[b] for b in range(256)]
        seen = set(tokens)
        for a, b in merges:
            if a + b not in seen:
                seen.add(a + b)
                tokens.append(a + b)
        types = [TOKEN_TYPE_NORMAL] * len(tokens)
        ids = {}
        for s in SPECIALS:
            ids[s] = len(tokens)
            tokens.append(s)
            types.append(TOKEN_TYPE_CONTROL)
        return cls(tokens, merges, types, ids[BOS], ids[EOS], ids[PAD])

    def gguf_metadata(self) -> Dict[str, object]:
        """The tokenizer.ggml.* keys (values as Python str/int/bool/lists)."""
        return {
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": self.pre,
            "tokenizer.ggml.tokens": list(self.tokens),
            "tokenizer.ggml.token_type": list(self.token_types),
            "tokenizer.ggml.merges": [f"{a} {b}" for a, b in self.merges],
            "tokenizer.ggml.bos_token_id": self.bos_id,
            "tokenizer.ggml.eos_token_id": self.eos_id,
            "tokenizer.ggml.padding_token_id": self.pad_id,
            "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False,
        }

    @classmethod
    def from_gguf_metadata(cls, meta: Dict[str, object]) -> "BpeTokenizer":
        if meta.get("tokenizer.ggml.model") != "gpt2":
            raise ValueError(f"not a byte-level BPE vocabulary: {meta.get('tokenizer.ggml.model')!r}")
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
        return cls(meta["tokenizer.ggml.tokens"], merges, meta.get("tokenizer.ggml.token_type"),
                   int(meta.get("tokenizer.ggml.bos_token_id", -1)),
                   int(meta.get("tokenizer.ggml.eos_token_id", -1)),
                   int(meta.get("tokenizer.ggml.padding_token_id", -1)),
                   str(meta.get("tokenizer.ggml.pre", PRE_NAME)))

    def save(self, path: Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.gguf_metadata(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "BpeTokenizer":
        return cls.from_gguf_metadata(json.loads(Path(path).read_text(encoding="utf-8")))

    # --- encoding -----------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def _bpe(self, piece: str) -> List[int]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        symbols = list(_to_symbols(piece))
        whole = "".join(symbols)
        if len(symbols) > 1 and whole in self.token_to_id:
            # llama-bpe sets ignore_merges (as Llama 3's tokenizer.json and llama.cpp do): a piece
            # that is itself a token is emitted whole, whatever the merges would make of it.
            symbols = [whole]
        while len(symbols) > 1:
            best_rank, best_i = None, -1
            for i in range(len(symbols) - 1):
                r = self.ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best_i = r, i
            if best_rank is None:
                break
            symbols[best_i:best_i + 2] = [symbols[best_i] + symbols[best_i + 1]]
        ids = [self.token_to_id[s] for s in symbols]
        if len(self._cache) < 500_000:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str, add_bos: bool = False) -> List[int]:
        """Token ids of `text`; special-token text is tokenized as plain characters."""
        ids = [self.bos_id] if add_bos else []
        for piece in pre_tokenize(text):
            ids.extend(self._bpe(piece))
        return ids

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = True) -> bytes:
        out = bytearray()
        for i in ids:
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"token id {i} out of range [0, {len(self.tokens)})")
            if self.token_types[i] == TOKEN_TYPE_CONTROL:
                if not skip_special:
                    out.extend(self.tokens[i].encode("utf-8"))
                continue
            out.extend(CHAR_TO_BYTE[c] for c in self.tokens[i])
        return bytes(out)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")
