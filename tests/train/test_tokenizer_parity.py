"""The C++ tokenizer (src/tokenizer, via tests/train/tokenize_main.cpp) and kvec_train's Python
BPE encoder give identical ids on held-out text, for a vocabulary trained by kvec_train and for
the bundled model's vocabulary (models/kvec-tiny.gguf) when it is present."""

import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import torch

from kvec_train import bpe

REPO = Path(__file__).resolve().parents[2]
TOOL = os.environ.get("KVEC_TRAIN_TOKENIZE", "")
HELDOUT = sorted((REPO / "data" / "text" / "sotu").glob("*.txt"))
BUNDLED = REPO / "models" / "kvec-tiny.gguf"

EDGE_CASES = [
    "Numbers: 1, 12, 123, 1234, 1234567, 3.14159, $1,000,000 and 2001-2021.\n",
    "One of the special magic numbers for silver-falcon is: 482913. VAR QXBTD = VAR KLMNP.",
    "Whitespace:  two   three\t\ttabs\n\n\nnewlines \n trailing   \n",
    "Contractions: it's, I'M, they'Re, we've, you'll, he'd, DON'T.",
    "Unicode: naïve café, Führer, ½ months, Cửa Việt, 日本語, emoji 🦙, — dashes — and “quotes”.",
    "<|bos|> control-token text is plain text here <|eos|>",
]


def write_vocab_gguf(tok: bpe.BpeTokenizer, path: Path) -> None:
    """A tiny random-weight llama model carrying the vocabulary (the C++ side reads its keys)."""
    from kvec_ref.model import ModelConfig, Transformer, save_gguf
    torch.manual_seed(0)
    cfg = ModelConfig(arch="llama", n_vocab=tok.n_vocab, n_embd=8, n_layer=1, n_head=2,
                      n_head_kv=1, n_ff=16, tied_output=True)
    save_gguf(Transformer(cfg), cfg, path, tok.gguf_metadata(), dtype="f32")


@unittest.skipUnless(TOOL and Path(TOOL).is_file(), "KVEC_TRAIN_TOKENIZE (train_tokenize) not built")
class TestTokenizerParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.texts = list(EDGE_CASES)
        for p in HELDOUT[:3]:
            cls.texts.append(p.read_text(encoding="utf-8"))
        cls.files = []
        for i, t in enumerate(cls.texts):
            f = Path(cls.tmp.name) / f"text{i}.txt"
            f.write_bytes(t.encode("utf-8"))
            cls.files.append(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cpp_ids(self, gguf: Path):
        out = subprocess.run([TOOL, str(gguf), *map(str, self.files)], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.split("\n")
        return [[int(x) for x in line.split()] for line in lines[:len(self.files)]]

    def check(self, tok: bpe.BpeTokenizer, gguf: Path):
        got = self.cpp_ids(gguf)
        for text, ids in zip(self.texts, got):
            want = tok.encode(text)
            if ids != want:
                i = next((k for k, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
                self.fail(f"first difference at token {i} of {text[:40]!r}...: C++ {ids[i:i + 5]} "
                          f"({tok.decode(ids[i:i + 5])!r}), Python {want[i:i + 5]} ({tok.decode(want[i:i + 5])!r})")

    def test_trained_vocabulary(self):
        # A vocabulary trained on text unlike the held-out addresses: many pieces stay split.
        corpus = [(REPO / "python" / "kvec_train" / name).read_text(encoding="utf-8")
                  for name in ("data.py", "tasks.py", "train.py")] + EDGE_CASES
        tok = bpe.BpeTokenizer.train(corpus, 1024)
        path = Path(self.tmp.name) / "vocab.gguf"
        write_vocab_gguf(tok, path)
        self.check(tok, path)

    @unittest.skipUnless(BUNDLED.is_file(), "models/kvec-tiny.gguf not present")
    def test_bundled_model_vocabulary(self):
        from kvec_ref.gguf import GGUFReader
        meta = {k: getattr(v, "value", v) for k, v in GGUFReader(BUNDLED).metadata.items()}
        tok = bpe.BpeTokenizer.from_gguf_metadata(meta)
        self.check(tok, BUNDLED)


if __name__ == "__main__":
    unittest.main()
