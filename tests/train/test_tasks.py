"""Training-sequence generators of kvec_train: held-out split rule, weights on answers."""

import re
import unittest

import numpy as np

from kvec_train import bpe, tasks

TEXTS = [
    "The whale rose from the deep. Its back was white as snow. The crew fell silent at the sight. "
    "Ahab stood at the rail and said nothing. The wind carried the spray over the deck. " * 12,
    "Congress shall make the laws. The President shall see them executed. Our commerce grew this "
    "year. The army and the navy are in good order. The revenue exceeds the expenses. " * 12,
]


class TestSplitRule(unittest.TestCase):
    def test_fnv1a64_published_vectors(self):
        # Test vectors of the FNV reference (Fowler, Noll, Vo): FNV-1a 64-bit.
        self.assertEqual(tasks.fnv1a64(b""), 0xcbf29ce484222325)
        self.assertEqual(tasks.fnv1a64(b"a"), 0xaf63dc4c8601ec8c)
        self.assertEqual(tasks.fnv1a64(b"foobar"), 0x85944171f73967e8)

    def test_splitmix64_first_output(self):
        # splitmix64 seeded with 0 first returns 0xe220a8397b1dcdaf (Vigna's reference code).
        self.assertEqual(tasks.splitmix64_mix(0), 0xe220a8397b1dcdaf)

    def test_split_of_is_a_third_eval(self):
        items = [str(100000 + i) for i in range(3000)]
        frac = sum(tasks.split_of(x) == "eval" for x in items) / len(items)
        self.assertAlmostEqual(frac, 1 / 3, delta=0.04)


class TestGenerators(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = bpe.BpeTokenizer.train(TEXTS, 600)
        words = " ".join(f"{w}" for w in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot",
                                           "golf", "hotel", "india", "juliet", "kilo", "lima"])
        vocab_text = [t.lower() + " " + words for t in TEXTS]
        # A vocabulary of at least 100 words of each split, from a generated word list.
        rng = np.random.default_rng(0)
        extra = " ".join("".join(chr(97 + c) for c in rng.integers(0, 26, 6)) for _ in range(2000))
        vocab_text.append((extra + " ") * 3)
        pool = tasks.TextPool(TEXTS, cls.tok)
        lm = np.array(cls.tok.encode(" ".join(TEXTS)), dtype=np.int32)
        cls.ctx = tasks.TaskContext(cls.tok, pool, tasks.Vocab(vocab_text, "train"), lm)
        cls.eval_ctx = tasks.TaskContext(cls.tok, pool, tasks.Vocab(vocab_text, "eval"), lm)

    def test_vocab_respects_the_split(self):
        rng = np.random.default_rng(1)
        for _ in range(50):
            a, b = self.ctx.vocab.key(rng).split("-")
            self.assertEqual(tasks.split_of(a), "train")
            self.assertEqual(tasks.split_of(b), "train")
            self.assertEqual(tasks.split_of(self.ctx.vocab.number(rng, 6)), "train")
            self.assertEqual(tasks.split_of(self.eval_ctx.vocab.number(rng, 6)), "eval")
            self.assertEqual(tasks.split_of(self.ctx.vocab.var_name(rng)), "train")

    def test_niah_weights_cover_exactly_the_answers(self):
        for seed in range(5):
            seq = tasks.gen_niah(self.ctx, np.random.default_rng(seed), 700, 6)
            self.assertEqual(len(seq.ids), 700)
            self.assertEqual(len(seq.weights), 700)
            text = self.tok.decode(seq.ids)
            answered = self.tok.decode([t for t, w in zip(seq.ids, seq.weights) if w == 1.0])
            # Every answer is " v1, v2." and each value was planted as a needle before.
            for ans in answered.split(".")[:-1]:
                for value in ans.strip().split(", "):
                    self.assertRegex(value, r"^\d{6}$")
                    needle = f"is: {value}."
                    first = text.find(needle)
                    self.assertGreaterEqual(first, 0)
                    self.assertLess(first, text.find("What is" if "What is" in text else "What are"))
            self.assertTrue(all(round(w, 6) in (0.0, 1.0, round(self.ctx.text_weight, 6)) for w in seq.weights))

    def test_vt_answers_are_the_chain(self):
        seq = tasks.gen_vt(self.ctx, np.random.default_rng(3), 800)
        text = self.tok.decode(seq.ids)
        answered = self.tok.decode([t for t, w in zip(seq.ids, seq.weights) if w == 1.0])
        first_chain = answered.split(".")[0].strip().split(", ")
        self.assertIn(f"VAR {first_chain[1]} = VAR {first_chain[0]}.", text) if len(first_chain) > 1 else None
        for name in first_chain:
            self.assertRegex(name, r"^[BCDFGHJKLMNPQRSTVWXZ]{5}$")

    def test_dense_vt_is_mostly_chains_and_answers(self):
        for seed in range(4):
            seq = tasks.gen_vt_dense(self.ctx, np.random.default_rng(seed), 2048)
            text = self.tok.decode(seq.ids)
            body = text.split("\n\n")[1]
            statement = re.compile(r"VAR [A-Z]{5} = (?:VAR [A-Z]{5}|\d{5})\.")
            statements = statement.findall(body)
            questions = text.count("Question: ")
            self.assertGreaterEqual(questions, 2)
            self.assertLessEqual(questions, 4)
            self.assertGreaterEqual(len(statements), 2 * questions)
            # Haystack: a quarter of the room left at most, so under a quarter of the sequence.
            haystack = statement.sub("", body).strip()
            self.assertLessEqual(len(self.tok.encode(haystack)), 2048 // 4)

    def test_short_vt_has_nothing_between_the_statements(self):
        for seed in range(4):
            seq = tasks.gen_vt_short(self.ctx, np.random.default_rng(seed), 2048)
            body = self.tok.decode(seq.ids).split("\n\n")[1]
            statement = re.compile(r"VAR [A-Z]{5} = (?:VAR [A-Z]{5}|\d{5})\.")
            self.assertGreaterEqual(len(statement.findall(body)), 2)
            self.assertEqual(statement.sub("", body).strip(), "")

    def test_eval_vt_is_the_suite_instance(self):
        inst = tasks.eval_vt(self.eval_ctx, np.random.default_rng(2), 1024)
        n = len(self.tok.encode(inst.prompt, add_bos=True))
        self.assertLessEqual(n + inst.max_new_tokens, 1024)
        self.assertEqual(len(inst.answers), 5)
        value = re.search(r"value (\d{5}) in", inst.prompt).group(1)
        self.assertTrue(inst.prompt.endswith(f"5 variables are assigned the value {value}, they are:"))
        at = inst.prompt.index(f"VAR {inst.answers[0]} = {value}.")
        for prev, name in zip(inst.answers, inst.answers[1:]):  # each hop after the one before
            nxt = inst.prompt.index(f"VAR {name} = VAR {prev}.")
            self.assertGreater(nxt, at)
            at = nxt
        self.assertEqual(len(re.findall(r"VAR [A-Z]{5} = ", inst.prompt)), 15)  # 3 chains of 5
        for name in inst.answers:
            self.assertEqual(tasks.split_of(name), "eval")

    def test_induction_weights_only_on_repeats(self):
        seq = tasks.gen_induction(self.ctx, np.random.default_rng(0), 300)
        ids, ws = seq.ids, seq.weights
        for i, w in enumerate(ws):
            if w == 1.0:
                # a weighted token continues a span seen earlier: (ids[i-1], ids[i]) occurred before
                prev = [(ids[j - 1], ids[j]) for j in range(1, i)]
                self.assertIn((ids[i - 1], ids[i]), prev)

    def test_induction_text_weights_only_on_repeats(self):
        seq = tasks.gen_induction_text(self.ctx, np.random.default_rng(3), 512)
        ids, ws = seq.ids, seq.weights
        self.assertEqual(len(ids), 512)
        self.assertGreater(sum(w == 1.0 for w in ws), 4 * 7)  # 4 slots, spans of 8+ tokens
        for i, w in enumerate(ws):
            if w == 1.0:
                prev = [(ids[j - 1], ids[j]) for j in range(1, i)]
                self.assertIn((ids[i - 1], ids[i]), prev)
            else:
                self.assertLess(w, 1.0)

    def test_generators_are_deterministic(self):
        for name, gen in tasks.GENERATORS.items():
            a = gen(self.ctx, np.random.default_rng(42), 400)
            b = gen(self.ctx, np.random.default_rng(42), 400)
            self.assertEqual(a.ids, b.ids, name)
            self.assertEqual(a.weights, b.weights, name)

    def test_eval_instance_fits_and_contains_its_needle(self):
        inst = tasks.eval_niah_single(self.eval_ctx, np.random.default_rng(5), 512)
        n = len(self.tok.encode(inst.prompt, add_bos=True))
        self.assertLessEqual(n + inst.max_new_tokens, 512)
        self.assertIn(f"is: {inst.answers[0]}.", inst.prompt)
        self.assertTrue(inst.prompt.endswith("is:"))

    def test_synth_file_picks_fitting_instances(self):
        import json
        import tempfile
        from pathlib import Path
        short = {"prompt": "The ship Belford was built in Orwick.\nAnswer: The ship Belford was built in",
                 "target": " Orwick.", "format": "completion"}
        long_ = {"prompt": "word " * 400 + "\nAnswer:", "target": " 123456.", "format": "completion"}
        short["length"] = len(self.tok.encode(short["prompt"], add_bos=True))
        long_["length"] = len(self.tok.encode(long_["prompt"], add_bos=True))
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "s.jsonl"
            p.write_text(json.dumps(long_) + "\n" + json.dumps(short) + "\n")
            sf = tasks.SynthFile([p])
            rng = np.random.default_rng(0)
            for _ in range(5):
                seq = sf.gen(self.ctx, rng, 128)
                self.assertEqual(len(seq.ids), 128)
                self.assertEqual(self.tok.decode([t for t, w in zip(seq.ids, seq.weights) if w == 1.0]),
                                 " Orwick.\n")
            self.assertIsNone(sf.gen(self.ctx, rng, short["length"]))  # no room for the answer

    def test_string_match_all(self):
        self.assertEqual(tasks.string_match_all(" 123456.", ["123456"]), 1.0)
        self.assertEqual(tasks.string_match_all("ABC, def", ["abc", "DEF", "x"]), 2 / 3)
        self.assertEqual(tasks.string_match_all("", ["1"]), 0.0)


if __name__ == "__main__":
    unittest.main()
