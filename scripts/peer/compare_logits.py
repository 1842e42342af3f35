"""Token sequences and logit comparisons for scripts/parity-vs-llama-cpp.sh (numpy only).

    compare_logits.py tokens MODEL.gguf N SEED OUT.txt
        N token ids drawn uniformly (numpy, SEED) from the model's ordinary tokens (not control,
        unknown or unused ones), the first replaced by BOS when the vocabulary adds one; written
        as text, one id a line (the input of `kvec logits` and llama-logits).

    compare_logits.py compare TOKENS.txt TESTED.f32 REFERENCE.f32 [--max-kl K] [--min-top1 F]
        Reads float32 [positions, vocab] of two runs (positions: the ids in TOKENS.txt; REFERENCE
        is llama.cpp's) and prints three cells of a markdown row:
          max |dlogit|/std  the largest |tested - reference| of a position divided by the
                            standard deviation of the reference's logits at that position, the
                            largest over the positions
          mean KL           KL(reference || tested) = sum_v p_ref(v) (log p_ref(v) - log p_tested(v))
                            per position (softmax in float64), averaged over the positions: the
                            divergence of the tested next-token distribution from the reference's
          top-1 agreement   share of positions where both argmax logits are the same token
        With --kl-only, one cell "KL, top-1 %" instead. A cell that misses its target, mean
        KL <= K (default 1e-4) or top-1 agreement >= F (default 0.99), is marked "(miss)", and
        the exit status is 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from kvec_ref.gguf import GGUFReader  # noqa: E402  (numpy only, no torch)

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type) that a random text never holds.
UNKNOWN, CONTROL, UNUSED = 2, 3, 5


def write_tokens(model: str, n: int, seed: int, out: str) -> None:
    meta = GGUFReader(model).metadata
    types = np.asarray(meta["tokenizer.ggml.token_type"])
    ordinary = np.flatnonzero(~np.isin(types, [UNKNOWN, CONTROL, UNUSED]))
    ids = np.random.default_rng(seed).choice(ordinary, size=n)
    # llama.cpp adds BOS to SentencePiece vocabularies unless the file says otherwise.
    add_bos = meta.get("tokenizer.ggml.add_bos_token", meta["tokenizer.ggml.model"] == "llama")
    if add_bos:
        ids[0] = meta["tokenizer.ggml.bos_token_id"]
    Path(out).write_text("".join(f"{i}\n" for i in ids))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def compare(args: argparse.Namespace) -> int:
    positions = len(Path(args.tokens).read_text().split())
    # Memory-mapped and taken a block of positions at a time: a 262k-token vocabulary makes a
    # 1024-position file 1 GiB.
    tested = np.memmap(args.tested, dtype=np.float32, mode="r")
    ref = np.memmap(args.reference, dtype=np.float32, mode="r")
    if tested.size != ref.size or ref.size % positions != 0:
        raise SystemExit(f"{args.tested}: {tested.size} logits, {args.reference}: {ref.size}, "
                         f"not both [{positions}, vocab]")
    tested, ref = tested.reshape(positions, -1), ref.reshape(positions, -1)
    rel, kl_sum, top1_sum = 0.0, 0.0, 0
    for b in range(0, positions, 64):
        t, r = tested[b:b + 64].astype(np.float64), ref[b:b + 64].astype(np.float64)
        rel = max(rel, float((np.abs(t - r).max(axis=1) / r.std(axis=1)).max()))
        lp_t, lp_r = log_softmax(t), log_softmax(r)
        kl_sum += float((np.exp(lp_r) * (lp_r - lp_t)).sum(axis=1).sum())
        top1_sum += int((t.argmax(axis=1) == r.argmax(axis=1)).sum())
    kl, top1 = kl_sum / positions, top1_sum / positions
    kl_miss, top1_miss = kl > args.max_kl, top1 < args.min_top1
    kl_cell = f"{kl:.2e}{' (miss)' if kl_miss else ''}"
    top1_cell = f"{100 * top1:.1f} %{' (miss)' if top1_miss else ''}"
    print(f"{kl_cell}, {top1_cell}" if args.kl_only else f"{rel:.2e} | {kl_cell} | {top1_cell}")
    return 1 if kl_miss or top1_miss else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("model")
    t.add_argument("n", type=int)
    t.add_argument("seed", type=int)
    t.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("tokens")
    c.add_argument("tested")
    c.add_argument("reference")
    c.add_argument("--max-kl", type=float, default=1e-4)
    c.add_argument("--min-top1", type=float, default=0.99)
    c.add_argument("--kl-only", action="store_true", help="one cell: mean KL, top-1 agreement")
    args = p.parse_args()
    if args.cmd == "tokens":
        write_tokens(args.model, args.n, args.seed, args.out)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
