"""The command line, run in-process (and once as a real subprocess)."""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch

from kvec_ref import cli
from kvec_ref.model import ModelConfig, Transformer, attention_stats, generate, load_gguf, logits, save_gguf

PYTHON_DIR = Path(__file__).resolve().parents[1]


class CommandLine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls._tmp.name)
        torch.manual_seed(3)
        m = Transformer(ModelConfig(arch="qwen2", n_vocab=50, n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=48))
        cls.model_path = str(cls.dir / "m.gguf")
        save_gguf(m, m.config, cls.model_path, {"tokenizer.ggml.model": "gpt2"})
        cls.model, cls.config, _ = load_gguf(cls.model_path)
        cls.tokens = [4, 8, 15, 16, 23, 42]

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def run_cli(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_logits(self):
        out = self.dir / "l.f32"
        rc, _, err = self.run_cli("logits", "--model", self.model_path, "--tokens", "4,8,15,16,23,42", "--out", str(out))
        self.assertEqual((rc, err), (0, ""))
        got = np.fromfile(out, dtype="<f4").reshape(len(self.tokens), 50)
        np.testing.assert_array_equal(got, logits(self.model, self.tokens))

    def test_logits_with_mask_and_f64(self):
        T = len(self.tokens)
        vis = np.full((2, 2, T), T, dtype="<i4")
        vis[:, 1, 0] = 2
        mask = self.dir / "mask.i32"
        vis.tofile(mask)
        out = self.dir / "lm.f32"
        rc, _, err = self.run_cli("logits", "--model", self.model_path, "--tokens", "4,8,15,16,23,42",
                                  "--kv-visible", str(mask), "--out", str(out), "--precision", "f64")
        self.assertEqual((rc, err), (0, ""))
        got = np.fromfile(out, dtype="<f4").reshape(T, 50)
        np.testing.assert_allclose(got, logits(self.model, self.tokens, kv_visible=vis), atol=1e-5)
        self.assertGreater(np.abs(got - logits(self.model, self.tokens)).max(), 1e-6)

    def test_generate(self):
        rc, out, _ = self.run_cli("generate", "--model", self.model_path, "--tokens", "4 8 15", "-n", "5")
        self.assertEqual(rc, 0)
        self.assertEqual(out.split(), [str(t) for t in generate(self.model, [4, 8, 15], 5)])

    def test_attn_stats_layout(self):
        out = self.dir / "s.f32"
        rc, _, err = self.run_cli("attn-stats", "--model", self.model_path, "--tokens", "4,8,15,16,23,42",
                                  "--window", "2", "--out", str(out))
        self.assertEqual((rc, err), (0, ""))
        T = len(self.tokens)
        got = np.fromfile(out, dtype="<f4").reshape(2, 4, 3, T)  # [n_layer, n_head, 3, T]
        st = attention_stats(self.model, self.tokens, 2)
        for i, k in enumerate(("h2o", "window", "last")):
            np.testing.assert_allclose(got[:, :, i], st[k], rtol=1e-6)

    def test_info(self):
        rc, out, _ = self.run_cli("info", "--model", self.model_path)
        self.assertEqual(rc, 0)
        self.assertIn("qwen2", out)
        self.assertIn("NEOX", out)
        self.assertIn("blk.1.attn_v.bias", out)
        rc, out, _ = self.run_cli("info", "--model", self.model_path, "--json")
        self.assertIn('"n_head_kv": 2', out)

    def test_batch(self):
        cmds = self.dir / "cmds.txt"
        out = self.dir / "b.f32"
        cmds.write_text(f"# two commands, one model load\n"
                        f"logits --model {self.model_path} --tokens 1,2,3 --out {out}\n"
                        f"generate --model {self.model_path} --tokens 1,2,3 -n 2\n")
        rc, stdout, err = self.run_cli("batch", "--file", str(cmds))
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(stdout.split(), [str(t) for t in generate(self.model, [1, 2, 3], 2)])
        self.assertEqual(np.fromfile(out, dtype="<f4").size, 3 * 50)

    def test_errors(self):
        cases = [
            (("logits", "--model", self.model_path, "--tokens", "1,x", "--out", "o"), "integers"),
            (("logits", "--model", self.model_path, "--tokens", "1,50", "--out", "o"), "out of range"),
            (("logits", "--model", str(self.dir / "missing.gguf"), "--tokens", "1", "--out", "o"), "no such file"),
            (("logits", "--model", self.model_path, "--tokens", "1,2", "--kv-visible", self.model_path, "--out", "o"),
             "kv-visible mask"),
            (("generate", "--model", self.model_path, "--tokens", "1", "-n", "-1"), ">= 0"),
            (("attn-stats", "--model", self.model_path, "--tokens", "1", "--window", "0", "--out", "o"), "positive"),
        ]
        for args, pattern in cases:
            rc, _, err = self.run_cli(*args)
            self.assertEqual(rc, 1, args)
            self.assertRegex(err, "^error: .*" + pattern, args)
        rc, _, err = self.run_cli("nonsense")
        self.assertEqual(rc, 1)
        self.assertIn("error:", err)

    def test_module_entry_point(self):
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
        r = subprocess.run([sys.executable, "-m", "kvec_ref.cli", "generate", "--model", self.model_path,
                            "--tokens", "4,8,15", "-n", "3"], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(t) for t in generate(self.model, [4, 8, 15], 3)])
        r = subprocess.run([sys.executable, "-m", "kvec_ref.cli", "info", "--model", str(self.dir / "none.gguf")],
                           capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 1)
        self.assertIn("error:", r.stderr)


if __name__ == "__main__":
    unittest.main()
