"""How fast does a model shape form an induction head? A short training probe on the
`induction_small` task (a random block of frequent tokens, repeated), optionally mixed with plain
text, printing the repeat loss every 50 steps. ln(512) = 6.24 is chance; a fall well below it
means the induction circuit has formed. Used to choose the bundled model's recipe
(docs/training-log.md records the commands and results).

    PYTHONPATH=python /usr/bin/python3 -m kvec_train.probe_induction --run train_runs/kvec-tiny-r4 \
        --width 64 --layers 2 --lm 0.0
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--lm", type=float, default=0.0, help="share of plain-text sequences in a batch")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    run = Path(a.run)
    cfg = ktrain.load_config(run / "config.json")
    prep = ktrain.prepare(cfg, run)
    mc = ModelConfig(arch="llama", n_vocab=prep.tok.n_vocab, n_embd=a.width, n_layer=a.layers,
                     n_head=a.heads, n_head_kv=a.kv_heads, n_ff=3 * a.width, tied_output=True,
                     attn_chunk=a.seq, attn_checkpoint=False)
    model = Transformer(mc)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay, betas=(0.9, 0.95))
    rng = np.random.default_rng(0)
    t0, window = time.time(), []
    for step in range(1, a.steps + 1):
        seqs = [ktasks.GENERATORS["lm" if rng.random() < a.lm else "induction_small"](prep.train_ctx, rng, a.seq + 1)
                for _ in range(a.batch)]
        x = torch.tensor([s.ids for s in seqs])  # [B, seq + 1]
        w = torch.tensor([s.weights[1:] for s in seqs])  # [B, seq]
        loss, per_seq = ktrain.weighted_loss_sparse(model, model.hidden(x[:, :-1]), x[:, 1:], w)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window += [l for s, l in zip(seqs, per_seq.tolist()) if s.task == "induction_small"]
        if step % 50 == 0:
            print(f"step {step}: induction loss {np.mean(window):.3f} ({time.time() - t0:.0f} s)", flush=True)
            window = []
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
