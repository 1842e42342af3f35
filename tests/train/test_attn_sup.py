"""attn_sup: the variable-tracking attention targets found in a token stream, the auxiliary loss's
attention probabilities, and that minimising it moves a head onto its targets."""

import unittest

import torch

from kvec_ref.model import ModelConfig, Transformer
from kvec_train.attn_sup import ROLES, AttentionSupervision, vt_targets
from kvec_train.vt_circuit import head_attention


def statement(lhs, rhs_var=None, value=None):
    """Token texts of `VAR LHS = VAR RHS.` or `VAR LHS = VALUE.` as the bundled tokenizer splits
    them: names letter by letter after a leading-space letter, the value in digit groups."""
    out = [" V", "AR"] + name(lhs) + [" ", "="]
    out += ([" V", "AR"] + name(rhs_var)) if rhs_var else [" "] + value
    return out + ["."]


def name(s):
    return ([" ", s[0]] if s[0] == "X" else [" " + s[0]]) + list(s[1:])


FILLER = [" the", " whale", " rose", "."]


def sequence(with_answer=True):
    """Two chains: QPRSJ <- 12345, BDKLM <- QPRSJ, XZWHT <- BDKLM; GHJKL <- 678, then the cue for
    12345 and (optionally) its answer. Returns the token texts and the expected pairs."""
    p = ["<|bos|>"] + FILLER
    pos = {}

    def add(toks, key):
        start = len(p)
        p.extend(toks)
        pos[key] = (start + 2, len(p) - 1)  # (left-hand side, ".")

    add(statement("QPRSJ", value=["12", "3", "45"]), "Q")
    p.extend(FILLER)
    add(statement("GHJKL", value=["678"]), "G")
    add(statement("BDKLM", rhs_var="QPRSJ"), "B")
    p.extend(FILLER)
    add(statement("XZWHT", rhs_var="BDKLM"), "X")
    p.extend(["\n\n", "Question", ":", " value", " ", "12", "3", "45", ",", " they", " are", ":"])
    colon = len(p) - 1
    want = {"gather": [(pos[k][1], pos[k][0]) for k in "QGBX"],
            "mover": [(colon, colon - 3)], "first": [(colon, pos["Q"][1])], "hop": [], "copy": []}
    if with_answer:
        for n, after in (("QPRSJ", "B"), ("BDKLM", "X"), ("XZWHT", None)):
            start = len(p)
            p.extend(name(n) + ["," if after else "."])
            # copy: each token of the name but its last -> the next token of its left-hand side
            want["copy"] += [(start + t, pos[n[0]][0] + t + 1) for t in range(len(name(n)) - 1)]
            if after:
                want["hop"].append((len(p) - 1, pos[after][1]))
    return p, want


class TestTargets(unittest.TestCase):
    def test_every_role_in_a_training_sequence(self):
        pieces, want = sequence()
        self.assertEqual(vt_targets(pieces), want)

    def test_a_prompt_without_its_answer_has_no_hops(self):
        pieces, want = sequence(with_answer=False)
        got = vt_targets(pieces)
        self.assertEqual(got, want)
        self.assertEqual((got["hop"], got["copy"]), ([], []))

    def test_the_right_hand_side_is_never_a_left_hand_side(self):
        # "= VAR QPRSJ." is not a statement of its own: only two gathers, at each ".".
        pieces = ["<|bos|>"] + statement("QPRSJ", value=["1"]) + statement("BDKLM", rhs_var="QPRSJ")
        self.assertEqual([t for _, t in vt_targets(pieces)["gather"]], [3, 15])

    def test_a_cue_whose_value_no_statement_assigns_is_skipped(self):
        pieces = ["<|bos|>"] + statement("QPRSJ", value=["1"]) + [" value", " ", "2", ",", " they", " are", ":"]
        got = vt_targets(pieces)
        self.assertEqual((got["mover"], got["first"]), ([], []))

    def test_plain_text_has_no_targets(self):
        self.assertEqual(vt_targets(["<|bos|>"] + FILLER * 5), {r: [] for r in ROLES})


class Tok:
    def __init__(self, pieces):
        self.vocab = sorted(set(pieces))
        self.n_vocab = len(self.vocab)
        self.id = {t: i for i, t in enumerate(self.vocab)}

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


class TestSupervision(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.pieces, _ = sequence()
        self.tok = Tok(self.pieces)
        cfg = ModelConfig(arch="llama", n_vocab=self.tok.n_vocab, n_embd=64, n_layer=4, n_head=4, n_head_kv=2,
                          n_ff=128, tied_output=False, attn_chunk=64, attn_checkpoint=False)
        self.model = Transformer(cfg)
        self.ids = torch.tensor([[self.tok.id[p] for p in self.pieces]])
        self.sup = AttentionSupervision(self.model, self.tok, {"weight": 1.0, "content_weight": 1.0})

    def tearDown(self):
        self.sup.close()

    def test_log_probs_are_the_heads_attention(self):
        self.model.hidden(self.ids)
        targets = self.sup.targets(self.ids)
        for role in ROLES:
            layer, head = self.sup.heads[role]
            att = head_attention(self.model, self.ids[0].tolist(), layer, head)  # [T, T]
            items = [(0, q, t) for q, t in targets[0][role]]
            got = self.sup._heads(role, items)[0].exp()
            want = torch.tensor([float(att[q, t]) for _, q, t in items])
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)

    def test_minimising_the_loss_puts_the_heads_on_their_targets(self):
        targets = self.sup.targets(self.ids)
        self.model.hidden(self.ids)
        before = self.sup.hit_rates(targets)
        self.assertLess(sum(h for h, _ in before.values()), sum(n for _, n in before.values()))
        _, start = self.sup.loss(targets, self.ids)
        self.assertEqual(set(start), set(ROLES) | {f"{r}_content" for r in ("gather", "first", "hop", "copy")})
        opt = torch.optim.Adam(self.model.parameters(), lr=3e-3)
        for _ in range(300):
            self.model.hidden(self.ids)
            loss, parts = self.sup.loss(targets, self.ids)
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.model.hidden(self.ids)
        after = self.sup.hit_rates(targets)
        self.assertEqual(set(after), set(ROLES))
        for role, (h, n) in after.items():
            self.assertEqual(h, n, role)
        # Each content role's own share of the logits now points at its token (the gathered
        # left-hand side, the answer's next name): from about ln(vocabulary) to a fraction of it.
        for role in ("gather", "first", "hop", "copy"):
            self.assertLess(parts[f"{role}_content"], 0.5 * start[f"{role}_content"], role)

    def test_content_reads_the_head_output_through_the_output_matrix(self):
        # Without content_weight, or without tokens, the loss is attention only.
        self.model.hidden(self.ids)
        targets = self.sup.targets(self.ids)
        both, parts = self.sup.loss(targets, self.ids)
        attention_only, parts0 = self.sup.loss(targets)
        self.assertEqual(set(parts0), set(ROLES))
        extra = sum(parts[f"{r}_content"] for r in ("gather", "first", "hop", "copy"))
        self.assertAlmostEqual(float(both) - float(attention_only), extra, places=4)

    def test_a_head_outside_the_model_is_an_error(self):
        with self.assertRaises(SystemExit):
            AttentionSupervision(self.model, self.tok, {"heads": {"hop": [4, 0]}})
        with self.assertRaises(SystemExit):
            AttentionSupervision(self.model, self.tok, {"roles": ["gather", "hops"]})

    def test_only_the_chosen_roles_are_supervised(self):
        some = AttentionSupervision(self.model, self.tok, {"content_weight": 1.0, "roles": ["gather", "hop"]})
        try:
            self.model.hidden(self.ids)
            _, parts = some.loss(some.targets(self.ids), self.ids)
            self.assertEqual(set(parts), {"gather", "hop", "gather_content", "hop_content"})
        finally:
            some.close()


if __name__ == "__main__":
    unittest.main()
