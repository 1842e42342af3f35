"""How fast does a model shape learn in-context copying? A short training probe on a repeat task
(default `induction_small`; `induction_sub` repeats spans at random offsets, so no positional
shortcut works), optionally mixed with plain text, printing the repeat loss every 50 steps, then
the copy accuracy at a distance (`train.copy_accuracy`) at a few lengths. `--circuit` starts from
`train.init_induction_circuit`; `--steps 0` measures the initialisation alone. Used to choose the
bundled model's recipe (docs/training-log.md records the commands and results).

    PYTHONPATH=python /usr/bin/python3 -m kvec_train.probe_induction --run train_runs/kvec-tiny-r4 \
        --width 128 --layers 4 --init-std 0.088 --task induction_sub --seq 128 --batch 16 --steps 600
    PYTHONPATH=python /usr/bin/python3 -m kvec_train.probe_induction --run train_runs/kvec-tiny-r4 \
        --width 256 --layers 4 --init-std 0.02 --circuit '{}' --rope-theta 1e16 --steps 0
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from kvec_ref.model import ModelConfig, Transformer

from . import tasks as ktasks
from . import train as ktrain


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a run directory with corpus, tokenizer and tokens")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--task", default="induction_small", help="the repeat task (a tasks.GENERATORS name)")
    p.add_argument("--ids", default="", help="lo:hi: the induction task on token ids lo .. hi - 1 (overrides --task)")
    p.add_argument("--lm", type=float, default=0.0, help="share of plain-text sequences in a batch")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--circuit", default="", help="start from init_induction_circuit with these JSON keyword arguments ('{}': defaults)")
    p.add_argument("--untied", action="store_true", help="a separate output matrix")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--copy-lengths", default="128,512,2048", help="copy accuracy at these lengths after training")
    p.add_argument("--init-std", type=float, default=0.02, help="std of the normal initialisation")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    run = Path(a.run)
    cfg = ktrain.load_config(run / "config.json")
    prep = ktrain.prepare(cfg, run)
    mc = ModelConfig(arch="llama", n_vocab=prep.tok.n_vocab, n_embd=a.width, n_layer=a.layers,
                     n_head=a.heads, n_head_kv=a.kv_heads, n_ff=3 * a.width, tied_output=not a.untied,
                     attn_chunk=a.seq, attn_checkpoint=False, rope_theta=a.rope_theta)
    model = Transformer(mc)
    model.reset_parameters(a.init_std)
    if a.circuit:
        ktrain.init_induction_circuit(model, **json.loads(a.circuit))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay, betas=(0.9, 0.95))
    rng = np.random.default_rng(0)
    if a.ids:
        lo, hi = (int(v) for v in a.ids.split(":"))
        ktasks.GENERATORS[a.task] = lambda ctx, r, n: ktasks.gen_induction(ctx, r, n, lo, hi, a.task)
    t0, window = time.time(), []
    for step in range(1, a.steps + 1):
        seqs = [ktasks.GENERATORS["lm" if rng.random() < a.lm else a.task](prep.train_ctx, rng, a.seq + 1)
                for _ in range(a.batch)]
        x = torch.tensor([s.ids for s in seqs])  # [B, seq + 1]
        w = torch.tensor([s.weights[1:] for s in seqs])  # [B, seq]
        loss, per_seq = ktrain.weighted_loss_sparse(model, model.hidden(x[:, :-1]), x[:, 1:], w)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window += [l for s, l in zip(seqs, per_seq.tolist()) if s.task == a.task]
        if step % 50 == 0:
            print(f"step {step}: induction loss {np.mean(window):.3f} ({time.time() - t0:.0f} s)", flush=True)
            window = []
    model.eval()
    with torch.no_grad():
        model.config.attn_chunk = 512
        w = torch.tensor(prep.heldout_tokens[:513], dtype=torch.long)[None]  # [1, 513]
        lm = float(torch.nn.functional.cross_entropy(model(w[:, :-1])[0], w[0, 1:]))
    print(f"held-out LM loss (first 512 tokens): {lm:.2f}", flush=True)
    for length in (int(v) for v in a.copy_lengths.split(",") if v):
        model.config.attn_chunk = min(length, 512)
        print(f"copy accuracy at {length} tokens: {ktrain.copy_accuracy(model, prep, length):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
