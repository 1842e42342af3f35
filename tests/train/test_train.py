"""Training tool of kvec_train: a short run reduces the loss, resume is exact, export loads."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch

from kvec_train import data, train

WORDS = ("ship whale captain river mountain city people law nation army navy sea wind storm "
         "harbor island forest market bridge tower garden castle letter journey winter summer "
         "morning evening silver golden ancient quiet brave distant bright hollow gentle").split()


def make_corpus(path: Path) -> None:
    """A small generated corpus (train and held-out documents); no packages needed."""
    rng = np.random.default_rng(0)
    syll = ["ka", "to", "mi", "re", "sa", "lo", "ne", "vi", "du", "pe", "go", "ra"]
    extra = ["".join(rng.choice(syll, 3)) for _ in range(400)]
    vocab = WORDS + extra
    docs = []
    for i in range(6):
        sents = []
        for _ in range(150):
            words = rng.choice(vocab, int(rng.integers(5, 12))).tolist()
            sents.append(" ".join(words).capitalize() + ".")
        docs.append(data.Document("gen", f"gen/{i}", " ".join(sents) + "\n", i >= 4, "generated"))
    data.save_corpus(docs, path)


CONFIG = {
    "name": "smoke", "seed": 3, "tokenizer": {"vocab_size": 400},
    "model": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 64,
              "context_length": 128, "tied_output": True},
    "optim": {"lr": 0.01, "warmup_steps": 2, "min_lr_ratio": 0.5},
    "stages": [
        {"name": "a", "steps": 12, "seq_len": 64, "batch": 4, "max_keys": 2,
         "mix": {"induction": 0.3, "niah": 0.3, "lm": 0.3, "copy": 0.1}},
        {"name": "b", "steps": 8, "seq_len": 128, "batch": 2, "max_keys": 3,
         "mix": {"niah": 0.4, "vt": 0.2, "lm": 0.4}}],
    "log_every": 5, "checkpoint_minutes": 100,
    "eval": {"every": 20, "lm_len": 32, "lm_windows": 2, "niah_lengths": [128], "niah_samples": 1},
}


def run_cli(*argv):
    with contextlib.redirect_stdout(io.StringIO()):
        return train.main(list(argv))


class TestTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = Path(cls.tmp.name)
        cls.cfg_path = root / "config.json"
        cls.cfg_path.write_text(json.dumps(CONFIG))
        cls.runs = {}
        for name in ("full", "split"):
            run = root / name
            run.mkdir()
            make_corpus(run / "corpus.jsonl")
            cls.runs[name] = run
        torch.manual_seed(0)
        run_cli("train", "--config", str(cls.cfg_path), "--run", str(cls.runs["full"]), "--threads", "1")
        run_cli("train", "--config", str(cls.cfg_path), "--run", str(cls.runs["split"]), "--threads", "1",
                "--max-steps", "13")
        run_cli("train", "--run", str(cls.runs["split"]), "--resume", "--threads", "1")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_training_reduces_the_loss(self):
        run = self.runs["full"]
        cfg = json.loads((run / "config.json").read_text())
        prep = train.prepare(cfg, run)
        start, _ = train.build_model(cfg, prep.tok.n_vocab, 64)
        end, _, _, _, ckpt = train.load_trained(run)
        self.assertEqual(ckpt["step"], 20)
        with torch.no_grad():
            for step in (0, 5, 15):
                x, w, _ = train.make_batch(cfg, prep, step)
                before = float(train.weighted_loss(start(x[:, :-1]), x[:, 1:], w)[0])
                after = float(train.weighted_loss(end(x[:, :-1]), x[:, 1:], w)[0])
                self.assertLess(after, before - 0.3, f"batch of step {step}")
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        self.assertEqual([e["step"] for e in log if e["kind"] == "train"], [5, 10, 15, 20])
        evals = [e for e in log if e["kind"] == "eval"]
        self.assertEqual(len(evals), 1)
        self.assertIn("niah_single_128", evals[0])
        self.assertIn("step 20", (run / "status.md").read_text())

    def test_batches_are_a_function_of_seed_and_step(self):
        run = self.runs["full"]
        cfg = json.loads((run / "config.json").read_text())
        prep = train.prepare(cfg, run)
        a = train.make_batch(cfg, prep, 7)
        b = train.make_batch(cfg, prep, 7)
        c = train.make_batch(cfg, prep, 8)
        self.assertTrue(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))
        self.assertFalse(torch.equal(a[0], c[0]))

    def test_resume_continues_exactly(self):
        full = torch.load(self.runs["full"] / "ckpt.pt")
        split = torch.load(self.runs["split"] / "ckpt.pt")
        self.assertEqual(full["step"], split["step"])
        self.assertEqual(full["tokens_seen"], split["tokens_seen"])
        for k, v in full["model"].items():
            torch.testing.assert_close(split["model"][k], v, rtol=1e-5, atol=1e-6, msg=k)

    def test_autocast_follows_the_option(self):
        saved = dict(train.AUTOCAST)
        try:
            cpu, gpu = torch.device("cpu"), torch.device("cuda")
            train.AUTOCAST["mode"] = "off"
            self.assertFalse(train.autocast_on(cpu) or train.autocast_on(gpu))
            self.assertIsInstance(train.autocast(cpu), contextlib.nullcontext)
            train.AUTOCAST["mode"] = "bf16"
            self.assertTrue(train.autocast_on(cpu))
            with train.autocast(cpu):
                y = torch.nn.functional.linear(torch.ones(2, 4), torch.ones(3, 4))
            self.assertEqual(y.dtype, torch.bfloat16)
            train.AUTOCAST["mode"] = "auto"
            self.assertTrue(train.autocast_on(gpu))
            self.assertEqual(train.autocast_on(cpu), train.cpu_has_bf16())
        finally:
            train.AUTOCAST.update(saved)

    def test_existing_run_needs_resume(self):
        with self.assertRaises(SystemExit):
            run_cli("train", "--config", str(self.cfg_path), "--run", str(self.runs["full"]))

    def test_export_loads_in_the_reference(self):
        from kvec_ref.model import load_gguf
        run = self.runs["full"]
        model, mc, cfg, tok, _ = train.load_trained(run)
        x = torch.tensor([tok.encode("Ship whale captain. The river", add_bos=True)])
        with torch.no_grad():
            want = model(x)
        for dtype, tol in (("f32", 1e-5), ("f16", 5e-2)):
            out = Path(self.tmp.name) / f"m-{dtype}.gguf"
            run_cli("export", "--run", str(run), "--out", str(out), "--dtype", dtype)
            loaded, config, meta = load_gguf(out)
            self.assertEqual(config.n_layer, 2)
            self.assertEqual(config.n_head_kv, 2)
            with torch.no_grad():
                got = loaded(x)
            torch.testing.assert_close(got, want, rtol=0, atol=tol)

            def val(k):
                v = meta[k]
                return getattr(v, "value", v)
            self.assertEqual(val("tokenizer.ggml.model"), "gpt2")
            self.assertEqual(val("tokenizer.ggml.pre"), "llama-bpe")
            self.assertEqual(list(val("tokenizer.ggml.tokens")), tok.tokens)
            self.assertEqual(int(val("tokenizer.ggml.bos_token_id")), tok.bos_id)

    def test_batch_workers_make_the_same_batches(self):
        run = self.runs["full"]
        cfg = json.loads((run / "config.json").read_text())
        prep = train.prepare(cfg, run)
        stream = train.BatchStream(cfg, prep, workers=2)
        try:
            for step in (0, 5, 13, 19):
                got, want = stream.get(step, 20), train.make_batch(cfg, prep, step)
                self.assertTrue(torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), step)
                self.assertEqual(got[2], want[2])
        finally:
            stream.close()

    def test_time_budget_scales_every_stage_alike(self):
        run = self.runs["full"]
        cfg = json.loads((run / "config.json").read_text())
        prep = train.prepare(cfg, run)
        model, _ = train.build_model(cfg, prep.tok.n_vocab, 64)
        small = train.fit_time_budget(cfg, prep, model, torch.device("cpu"), 0.01)
        large = train.fit_time_budget(cfg, prep, model, torch.device("cpu"), 1.0)
        s_small = [st["steps"] for st in small["stages"]]
        s_large = [st["steps"] for st in large["stages"]]
        self.assertGreater(s_large[0], s_small[0])  # (an absolute count would depend on the machine's load)
        # the stages keep their ratio (12 : 8 in the recipe), up to the measured step times' noise
        self.assertAlmostEqual(s_large[0] / s_large[1], 12 / 8, delta=0.05 * 12 / 8)
        self.assertEqual([st["steps"] for st in cfg["stages"]], [12, 8])  # the input is not changed

    def refused(self, cfg: dict, name: str, *extra) -> str:
        """Trains recipe cfg in run directory `name` (made with the smoke corpus on first use),
        expecting a refusal; returns its message."""
        run = Path(self.tmp.name) / name
        if not run.exists():
            run.mkdir()
            make_corpus(run / "corpus.jsonl")
        (run / "recipe.json").write_text(json.dumps(cfg))
        with self.assertRaises(SystemExit) as cm:
            run_cli("train", "--config", str(run / "recipe.json"), "--run", str(run), "--threads", "1", *extra)
        return str(cm.exception)

    def test_vt_circuit_on_a_model_without_room_is_refused(self):
        cfg = json.loads(json.dumps(CONFIG))
        cfg["init"] = {"vt_circuit": {}}  # the smoke model has 2 layers of width 32
        self.assertIn("init.vt_circuit", self.refused(cfg, "vt"))
        cfg["init"] = {"vt_circuit": {"gain": 2}}  # not an option
        self.assertIn("unknown option(s) gain", self.refused(cfg, "vt", "--resume"))

    def test_attention_supervision_refuses_a_tokenizer_it_cannot_read(self):
        # The smoke corpus's 400-token vocabulary splits "VAR" into bytes: no targets, so an error
        # rather than a run that silently supervises nothing.
        cfg = dict(CONFIG, attn_supervision={"weight": 0.5, "heads": {
            "gather": [0, 2], "mover": [0, 3], "first": [1, 3], "hop": [1, 2], "copy": [1, 0]}})
        self.assertIn("attn_supervision: this tokenizer", self.refused(cfg, "sup"))

    def test_init_from_gguf_starts_from_its_weights(self):
        src = Path(self.tmp.name) / "init-src.gguf"
        run_cli("export", "--run", str(self.runs["full"]), "--out", str(src), "--dtype", "f32")
        run = Path(self.tmp.name) / "init"
        run.mkdir()
        for name in ("corpus.jsonl", "tokenizer.json"):
            (run / name).write_bytes((self.runs["full"] / name).read_bytes())
        run_cli("train", "--config", str(self.cfg_path), "--run", str(run), "--threads", "1",
                "--init-from", str(src), "--max-steps", "0")
        got = torch.load(run / "ckpt.pt")["model"]
        want = torch.load(self.runs["full"] / "ckpt.pt")["model"]
        for k, v in want.items():
            torch.testing.assert_close(got[k], v, rtol=0, atol=1e-6, msg=k)
        # another shape is refused with a message
        other = json.loads(json.dumps(CONFIG))
        other["model"]["n_ff"] = 96
        cfg2 = Path(self.tmp.name) / "other.json"
        cfg2.write_text(json.dumps(other))
        bad = Path(self.tmp.name) / "init-bad"
        bad.mkdir()
        for name in ("corpus.jsonl", "tokenizer.json"):
            (bad / name).write_bytes((self.runs["full"] / name).read_bytes())
        with self.assertRaises(SystemExit) as cm:
            run_cli("train", "--config", str(cfg2), "--run", str(bad), "--init-from", str(src), "--max-steps", "0")
        self.assertIn("shape", str(cm.exception))


class TestFusedAttention(unittest.TestCase):
    @unittest.skipUnless(hasattr(torch.nn.functional, "scaled_dot_product_attention"),
                         "this torch has no fused attention (it came in torch 2.0)")
    def test_matches_the_blocked_attention(self):
        from kvec_ref.model import attention_core, causal_sdpa
        torch.manual_seed(0)
        q = torch.randn(2, 2, 3, 37, 16)  # [B, H_kv, G, T, D]
        k = torch.randn(2, 2, 37, 16)     # [B, H_kv, T, D]
        v = torch.randn(2, 2, 37, 16)
        want = attention_core(q, k, v, 0, None, chunk=8, checkpoint=False)
        torch.testing.assert_close(causal_sdpa(q, k, v), want, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    unittest.main()


class TestInductionCircuit(unittest.TestCase):
    """init_induction_circuit: the untrained model already copies a repeated span, and
    optim.lr_scale puts the circuit's attention in slower parameter groups."""

    def model(self, n_layer=2, n_embd=256):
        from kvec_ref.model import ModelConfig, Transformer
        torch.manual_seed(0)
        mc = ModelConfig(arch="llama", n_vocab=1000, n_embd=n_embd, n_layer=n_layer, n_head=4, n_head_kv=2,
                         n_ff=3 * n_embd, tied_output=True, rope_theta=1e16, attn_chunk=256, attn_checkpoint=False)
        m = Transformer(mc)
        m.reset_parameters(0.02)
        return m

    def copied_share(self, m, filler: int = 60) -> float:
        rng = np.random.default_rng(1)
        span = rng.integers(0, 1000, 16)
        seq = np.concatenate([[0], span, rng.integers(0, 1000, filler), span])  # [33 + filler]
        with torch.no_grad():
            pred = m(torch.tensor(seq, dtype=torch.long)[None])[0].argmax(-1).numpy()  # [93]
        return float((pred[-16:-1] == seq[-15:]).mean())

    def test_copies_at_initialisation(self):
        m = self.model()
        self.assertLess(self.copied_share(m), 0.2)  # a random initialisation does not copy
        train.init_induction_circuit(m)  # trigram match (the recipe's)
        self.assertGreater(self.copied_share(m), 0.9)
        self.assertGreater(self.copied_share(m, filler=1500), 0.9)  # far back: the match is position-free

    def test_unigram_match_in_a_narrow_model(self):
        m = self.model(n_embd=128)
        train.init_induction_circuit(m, n_gram=1, match_pairs=7, match_logit=20.0)
        self.assertGreater(self.copied_share(m), 0.6)

    def test_rejects_a_model_without_room(self):
        with self.assertRaises(ValueError):
            train.init_induction_circuit(self.model(n_layer=1))
        with self.assertRaises(ValueError):  # head_dim 32 has no room for three blocks of 8 pairs
            train.init_induction_circuit(self.model(n_embd=128))

    def test_lr_scale_groups(self):
        m = self.model()
        cfg = {"optim": {"lr": 1e-3, "weight_decay": 0.01, "lr_scale": {"layers.0.attn": 0.1}}}
        opt = train.make_optimizer(cfg, m)
        slow = {id(p) for g in opt.param_groups if g["lr_scale"] == 0.1 for p in g["params"]}
        names = {n for n, p in m.named_parameters() if id(p) in slow}
        self.assertEqual(names, {n for n, _ in m.named_parameters() if n.startswith("layers.0.attn")})
        self.assertEqual(sum(len(g["params"]) for g in opt.param_groups), len(list(m.parameters())))

    def test_frozen_kv_head_keeps_its_weights_while_the_others_train(self):
        m = self.model()
        train.init_induction_circuit(m)
        cfg = {"optim": {"lr": 1e-2, "weight_decay": 0.1, "freeze_kv_heads": {"1": [0]}}}
        a = m.layers[1].attn
        before = {n: w.detach().clone() for n, w in (("q", a.wq.weight), ("k", a.wk.weight),
                                                     ("v", a.wv.weight), ("o", a.wo.weight))}
        opt, frozen = train.make_optimizer(cfg, m), train.FrozenHeads(cfg, m)
        x = torch.randint(0, 1000, (2, 40))
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(m(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            frozen.restore()
        hd, group = m.config.head_dim, m.config.n_head // m.config.n_head_kv
        after = {"q": a.wq.weight, "k": a.wk.weight, "v": a.wv.weight, "o": a.wo.weight}
        kept = {"q": (slice(0, group * hd), slice(None)), "k": (slice(0, hd), slice(None)),
                "v": (slice(0, hd), slice(None)), "o": (slice(None), slice(0, group * hd))}
        moved = {"q": (slice(group * hd, None), slice(None)), "k": (slice(hd, None), slice(None)),
                 "v": (slice(hd, None), slice(None)), "o": (slice(None), slice(group * hd, None))}
        for n in before:
            self.assertTrue(torch.equal(after[n][kept[n]], before[n][kept[n]]), n)
            self.assertFalse(torch.equal(after[n][moved[n]], before[n][moved[n]]), n)
        with self.assertRaises(SystemExit):
            train.FrozenHeads({"optim": {"freeze_kv_heads": {"1": [2]}}}, m)
        with self.assertRaises(SystemExit):
            train.FrozenHeads({"optim": {"freeze_kv_heads": {"2": [0]}}}, m)
