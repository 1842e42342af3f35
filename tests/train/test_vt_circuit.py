"""vt_circuit: the hand-built variable-tracking heads attend where they should on an untrained
model that has the four-token induction circuit (no trained weights: every other branch is zero,
so the heads' own arithmetic is what is tested)."""

import unittest

import numpy as np
import torch

from kvec_ref.model import ModelConfig, Transformer
from kvec_train import train
from kvec_train.vt_circuit import head_attention, init_vt_circuit

LETTERS = [chr(65 + i) for i in range(26)]


class Tok:
    """The tokens the circuit reads, letters, numbers and filler words; BOS last."""

    def __init__(self, with_are: bool = True):
        self.tokens = (["ĠV", "AR", "=", ".", ",", ":", "Ġthey", "Ġare" if with_are else "Ġwere", "Ġ"]
                       + ["Ġ" + x for x in LETTERS] + LETTERS + [str(i) for i in range(100)]
                       + [f"Ġw{i}" for i in range(300)] + ["<|bos|>"])
        self.bos_id = len(self.tokens) - 1
        self.id = {t: i for i, t in enumerate(self.tokens)}


def vt_prompt(tok: Tok, rng: np.random.Generator, filler=(8, 30), hops: int = 5, chains: int = 3):
    """Statements `VAR NAME = VALUE.` / `VAR NAME = VAR NAME.` in chain order between filler
    sentences, then "... VALUE, they are:" and the first chain's names separated by ','.
    Returns ids, the position of each statement's left-hand side and of the token after its '.'
    ({(chain, hop): (lhs, after)}), and the answer's ',' positions (after names 1..hops-1)."""
    I = tok.id
    names = [[I["Ġ" + LETTERS[int(rng.integers(26))]]] + [I[LETTERS[int(x)]] for x in rng.integers(0, 26, 4)]
             for _ in range(chains * hops)]
    stmts = []  # (chain, hop, tokens)
    for c in range(chains):
        value = [I[str(int(x))] for x in rng.integers(10, 100, 2)] + [I[str(int(rng.integers(10)))]]
        stmts.append((c, 0, [I["ĠV"], I["AR"]] + names[c * hops] + [I["Ġ"], I["="], I["Ġ"]] + value + [I["."]]))
        for h in range(1, hops):
            stmts.append((c, h, [I["ĠV"], I["AR"]] + names[c * hops + h] + [I["Ġ"], I["="], I["ĠV"], I["AR"]]
                          + names[c * hops + h - 1] + [I["."]]))
    order = sorted(range(len(stmts)), key=lambda s: (stmts[s][1], rng.random()))
    ids, where = [tok.bos_id], {}
    for s in order:
        ids += [I[f"Ġw{int(x)}"] for x in rng.integers(0, 300, int(rng.integers(*filler)))] + [I["."]]
        where[stmts[s][:2]] = (len(ids) + 2, len(ids) + len(stmts[s][2]))
        ids += stmts[s][2]
    ids += [I[f"Ġw{int(x)}"] for x in rng.integers(0, 300, 10)] + [I["."], I["Ġw1"]]
    ids += stmts[0][2][-4:-1] + [I[","], I["Ġthey"], I["Ġare"], I[":"]]
    commas = []
    for h in range(hops):
        ids += names[h] + [I[","]]
        commas.append(len(ids) - 1)
    return ids, where, commas[:-1]


class TestVtCircuit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = Tok()
        cls.model = cls.circuit_model(cls.tok)
        before = {n: p.detach().clone() for n, p in cls.model.named_parameters()}
        init_vt_circuit(cls.model, cls.tok, vt_prompt(cls.tok, np.random.default_rng(0))[0])
        cls.changed = {n for n, p in cls.model.named_parameters() if not torch.equal(p, before[n])}
        cls.prompts = [vt_prompt(cls.tok, np.random.default_rng(100 + t), filler=(20, 80)) for t in range(4)]

    @staticmethod
    def circuit_model(tok):
        torch.manual_seed(0)
        mc = ModelConfig(arch="llama", n_vocab=len(tok.tokens), n_embd=256, n_layer=4, n_head=4, n_head_kv=2,
                         n_ff=768, tied_output=False, rope_theta=1e16, attn_chunk=512, attn_checkpoint=False)
        m = Transformer(mc)
        m.reset_parameters(0.02)
        train.init_induction_circuit(m, n_gram=4, match_pairs=7, out_scale=0.1)
        return m

    def test_gather_head_finds_each_statements_left_hand_side(self):
        hits = total = 0
        for ids, where, _ in self.prompts:
            P = head_attention(self.model, ids, 1, 2)  # [T, T]
            for lhs, after in where.values():
                hits += float(P[after, lhs]) > 0.9
                total += 1
        self.assertGreaterEqual(hits / total, 0.95)

    def test_hop_head_finds_the_statement_of_the_previous_name(self):
        hits = total = 0
        for ids, where, commas in self.prompts:
            P = head_attention(self.model, ids, 2, 2)
            for h, q in enumerate(commas, start=1):  # the ',' after name h - 1 -> "VAR name_h = VAR name_h-1."
                hits += float(P[q, where[(0, h)][1]]) > 0.5
                total += 1
        self.assertGreaterEqual(hits / total, 0.8)

    def test_value_mover_reads_the_value_before_they_are(self):
        for ids, _, commas in self.prompts:
            colon = commas[0] - 6  # ... VALUE , they are : NAME ,
            self.assertEqual(self.tok.tokens[ids[colon]], ":")
            P = head_attention(self.model, ids, 1, 3)
            self.assertGreater(float(P[colon, colon - 5:colon - 3].sum()), 0.9)  # the value's last two tokens
            self.assertGreater(float(P[colon - 5, 0]), 0.8)  # other queries: mostly BOS

    def test_first_name_query_finds_the_value_statement_better_than_chance(self):
        hits = sum(float(head_attention(self.model, ids, 2, 3)[commas[0] - 6, where[(0, 0)][1]]) > 0.5
                   for ids, where, commas in self.prompts)
        self.assertGreaterEqual(hits, 2)  # 3 value statements: a guess among them finds 1 in 3

    def test_other_queries_rest_on_bos(self):
        ids, _, commas = self.prompts[0]
        P = head_attention(self.model, ids, 2, 2)
        filler = [i for i in range(1, commas[0] - 20) if self.tok.tokens[ids[i]].startswith("Ġw")]
        self.assertGreater(float(P[filler, :2].sum(1).mean()), 0.9)

    def test_only_the_circuits_heads_change(self):
        self.assertEqual(self.changed, {f"layers.{i}.attn.{w}.weight" for i in (1, 2) for w in ("wq", "wk", "wv", "wo")})
        fresh = self.circuit_model(self.tok)
        hd = 64
        for i in (1, 2):  # KV head 0 and its query heads are the induction circuit's / untouched
            a, b = self.model.layers[i].attn, fresh.layers[i].attn
            self.assertTrue(torch.equal(a.wk.weight[:hd], b.wk.weight[:hd]))
            self.assertTrue(torch.equal(a.wq.weight[:2 * hd], b.wq.weight[:2 * hd]))
            self.assertTrue(torch.equal(a.wo.weight[:, :2 * hd], b.wo.weight[:, :2 * hd]))

    def test_refuses_what_it_cannot_wire(self):
        with self.assertRaises(ValueError):  # the tokenizer lacks "Ġare"
            init_vt_circuit(self.circuit_model(Tok(with_are=True)), Tok(with_are=False), [0])
        with self.assertRaises(ValueError):  # the calibration sequence must start with BOS
            init_vt_circuit(self.circuit_model(self.tok), self.tok, [0, 1, 2])


if __name__ == "__main__":
    unittest.main()
