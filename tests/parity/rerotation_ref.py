"""Reference side of the StreamingLLM re-rotation parity test (tests/parity/test_parity.cpp).

Replays, with the independent PyTorch reference (python/kvec_ref), a schedule the C++ engine ran:
forward steps (prefill chunks, decode steps) at given positions through an incremental KV cache;
after a step that evicted, only the kept entries stay in the cache and each kept key moves from its
old position to its new one. The move is done the long way, with the reference's own RoPE: the
key is un-rotated (RoPE at -old) and rotated again at the new position, so it equals the key
RoPE gives at the new position (the C++ engine rotates by new - old in one step).

Usage: PYTHONPATH=python /usr/bin/python3 tests/parity/rerotation_ref.py JOBS.json
JOBS.json: [{"model": path, "out": path, "steps": [{"tokens": [...], "positions": [...],
             "keep_from": [old positions kept], "keep_to": [their new positions]}, ...]}, ...]
("keep_from" absent: the step evicted nothing.) Writes, per job, float32 logits of every token of
every step, [sum of step lengths, n_vocab], to "out".
"""

import json
import sys

import numpy as np
import torch

from kvec_ref.model import KVCache, apply_rope, load_gguf, rope_cos_sin


def move_keys(k: torch.Tensor, old: list, new: list, config) -> torch.Tensor:
    """k [B, H_kv, S, D] post-RoPE at positions old[S] -> post-RoPE at positions new[S]."""
    cos, sin = rope_cos_sin(config, -torch.tensor(old)[None], k.dtype)  # [1, 1, S, rd / 2]
    raw = apply_rope(k, cos, sin, config.rope_neox)                     # un-rotated keys
    cos, sin = rope_cos_sin(config, torch.tensor(new)[None], k.dtype)
    return apply_rope(raw, cos, sin, config.rope_neox)


def run_job(job: dict) -> None:
    model, config, _ = load_gguf(job["model"])
    model.eval()
    cache = KVCache(config.n_layer)
    cached = []  # position of every cache entry, in cache order (the same in every layer and head)
    rows = []
    with torch.no_grad():
        for step in job["steps"]:
            tokens = torch.tensor(step["tokens"], dtype=torch.long)[None]       # [1, T]
            positions = torch.tensor(step["positions"], dtype=torch.long)[None]  # [1, T]
            rows.append(model(tokens, positions=positions, cache=cache)[0].float().numpy())  # [T, V]
            cached += step["positions"]
            if "keep_from" not in step:
                continue
            index = [cached.index(p) for p in step["keep_from"]]
            for l in range(config.n_layer):
                k = cache.k[l][:, :, index]  # [1, H_kv, kept, D]
                cache.k[l] = move_keys(k, step["keep_from"], step["keep_to"], config)
                cache.v[l] = cache.v[l][:, :, index]
            cached = list(step["keep_to"])
    np.ascontiguousarray(np.concatenate(rows), dtype="<f4").tofile(job["out"])


def main() -> int:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        run_job(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
