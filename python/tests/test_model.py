"""The torch model against the naive reference, and its invariances."""

import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch

from kvec_ref.gguf import GGUFError, GGUFReader, GGUFWriter, ValueType
from kvec_ref.model import (KVCache, ModelConfig, Transformer, attention_stats, generate, load_gguf, logits,
                            save_gguf)
from naive import naive_forward

ROOT = Path(__file__).resolve().parents[2]
VOCABS = ROOT / "data" / "tokenizer-vectors"

torch.set_num_threads(1)


def make_model(seed=0, dtype=torch.float64, **kw) -> Transformer:
    base = dict(arch="llama", n_vocab=40, n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=48, attn_chunk=3)
    base.update(kw)
    config = ModelConfig(**base)
    torch.manual_seed(seed)
    m = Transformer(config)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(0.25 * torch.randn_like(p))  # large enough for peaked attention
    return m.to(dtype).eval()


def random_mask(config, T, rng) -> np.ndarray:
    """A valid eviction mask: key j stays visible to queries j .. vis-1, vis in (j, T]."""
    vis = np.empty((config.n_layer, config.n_head_kv, T), dtype=np.int32)
    for j in range(T):
        vis[:, :, j] = rng.integers(j + 1, T + 2, size=vis.shape[:2])
    return vis


TOKENS = [3, 17, 5, 5, 39, 0, 22, 8, 11]


class AgainstNaive(unittest.TestCase):
    cases = {
        "llama_gqa": dict(arch="llama"),
        "llama_mha_tied": dict(arch="llama", n_head_kv=4, tied_output=True),
        "llama_partial_rope_linear": dict(arch="llama", rope_dim=4, rope_scaling_type="linear", rope_scaling_factor=4.0),
        "llama3_freqs": dict(arch="llama", rope_theta=500.0, rope_freqs=[1.0, 1.5, 3.0, 8.0]),
        "qwen2_bias": dict(arch="qwen2", rope_theta=1e6),
        "qwen3_qknorm": dict(arch="qwen3", n_head_kv=1, head_dim=16),
        "qwen3moe": dict(arch="qwen3moe", head_dim=16, n_expert=6, n_expert_used=2, n_ff_exp=24),
        "qwen2moe_shared": dict(arch="qwen2moe", n_expert=5, n_expert_used=3, n_ff_exp=16, n_ff_shexp=40),
        "mixtral": dict(arch="llama", n_expert=4, n_expert_used=2),
    }

    def test_logits_and_probabilities(self):
        for name, kw in self.cases.items():
            with self.subTest(name):
                m = make_model(**kw)
                want, _ = naive_forward(m, TOKENS)
                got = m(torch.tensor([TOKENS]))[0]
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)

    def test_eviction_masks(self):
        rng = np.random.default_rng(5)
        for name in ("llama_gqa", "qwen3_qknorm"):
            m = make_model(**self.cases[name])
            for _ in range(2):
                vis = random_mask(m.config, len(TOKENS), rng)
                want, _ = naive_forward(m, TOKENS, kv_visible=vis)
                got = m(torch.tensor([TOKENS]), kv_visible=vis)[0]
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=name)

    def test_explicit_positions(self):
        m = make_model(arch="qwen2")
        pos = [5, 6, 7, 20, 21, 22, 23, 24, 30]
        want, _ = naive_forward(m, TOKENS, positions=pos)
        got = m(torch.tensor([TOKENS]), positions=torch.tensor(pos))[0]
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)

    def test_attention_stats(self):
        m = make_model(arch="llama")
        T, w = len(TOKENS), 3
        _, probs = naive_forward(m, TOKENS)
        st = attention_stats(m, TOKENS, window=w)
        for l in range(m.config.n_layer):
            np.testing.assert_allclose(st["h2o"][l], probs[l].sum(dim=1).numpy(), atol=1e-12)
            np.testing.assert_allclose(st["window"][l], probs[l][:, T - w:].mean(dim=1).numpy(), atol=1e-12)
            np.testing.assert_allclose(st["last"][l], probs[l][:, T - 1].numpy(), atol=1e-12)
        # every causal row sums to 1, so the column sums total T per head
        np.testing.assert_allclose(st["h2o"].sum(-1), T, rtol=1e-12)
        # window larger than the sequence: mean over all rows
        st2 = attention_stats(m, TOKENS, window=100)
        np.testing.assert_allclose(st2["window"] * T, st2["h2o"], rtol=1e-12)
        # with an eviction mask
        vis = random_mask(m.config, T, np.random.default_rng(1))
        _, probs = naive_forward(m, TOKENS, kv_visible=vis)
        st3 = attention_stats(m, TOKENS, window=w, kv_visible=vis)
        np.testing.assert_allclose(st3["h2o"][1], probs[1].sum(dim=1).numpy(), atol=1e-12)


class Invariances(unittest.TestCase):
    def test_prefix_consistency_and_kv_cache(self):
        for arch in ("llama", "qwen2", "qwen3"):
            m = make_model(arch=arch, dtype=torch.float32)
            toks = torch.tensor([TOKENS])
            full = m(toks)[0]
            for t in (1, 4, 7):
                torch.testing.assert_close(m(toks[:, :t])[0], full[:t], rtol=1e-5, atol=1e-5)
            cache = KVCache(m.config.n_layer)
            parts = [m(toks[:, a:b], cache=cache)[0] for a, b in ((0, 4), (4, 5), (5, 9))]
            self.assertEqual(cache.length, 9)
            torch.testing.assert_close(torch.cat(parts), full, rtol=1e-5, atol=1e-5)

    def test_gemma2_and_phi3_prefixes_and_cache(self):
        """gemma2's soft-capped attention logits are masked after the cap (a future key would
        otherwise get cap * tanh(-inf) = -cap), its sliding window acts through the cache; phi3's
        LongRoPE attention factor and factors apply the same at every chunk."""
        kws = (dict(arch="gemma2", sliding_window=3, attn_softcap=0.7, final_logit_softcap=2.0, head_dim=16),
               dict(arch="phi3", rope_dim=4, rope_long=[1.0, 6.0], rope_short=[1.0, 1.5], n_ctx_orig=8,
                    rope_attn_factor=1.3))
        for kw in kws:
            m = make_model(dtype=torch.float32, **kw)
            toks = torch.tensor([TOKENS])
            full = m(toks)[0]
            for t in (1, 4, 7):
                torch.testing.assert_close(m(toks[:, :t])[0], full[:t], rtol=1e-5, atol=1e-5)
            cache = KVCache(m.config.n_layer)
            parts = [m(toks[:, a:b], cache=cache)[0] for a, b in ((0, 4), (4, 5), (5, 9))]
            torch.testing.assert_close(torch.cat(parts), full, rtol=1e-5, atol=1e-5)
        self.assertTrue(all(abs(x) <= 2.0 for x in make_model(dtype=torch.float32, **kws[0])(toks)[0].flatten()))
        c = ModelConfig(arch="phi3", n_embd=32, n_head=4, rope_dim=4, rope_long=[1.0, 6.0], rope_short=[1.0, 1.5],
                        n_ctx_orig=8, context_length=16)
        self.assertEqual(c.rope_factors, [1.0, 6.0])   # n_ctx 16 > 8: long
        c.n_ctx = 8
        self.assertEqual(c.rope_factors, [1.0, 1.5])   # not above the original context: short

    def test_gptoss_prefixes_cache_and_sinks(self):
        """gpt-oss: sinks, the sliding window, YaRN and the biased experts give the same logits for
        every prefix and through the cache; the sinks take part of each softmax row (raising them
        changes the logits); YaRN keeps the fastest pair's angle and scales the slowest by the
        factor."""
        kw = dict(arch="gpt-oss", sliding_window=3, head_dim=16, n_expert=4, n_expert_used=2, n_ff_exp=24,
                  rope_scaling_type="yarn", rope_scaling_factor=8.0, n_ctx_orig=16, rope_theta=1000.0)
        m = make_model(dtype=torch.float64, **kw)
        toks = torch.tensor([TOKENS])
        full = m(toks)[0]
        for t in (1, 4, 7):
            torch.testing.assert_close(m(toks[:, :t])[0], full[:t], rtol=1e-9, atol=1e-9)
        cache = KVCache(m.config.n_layer)
        parts = [m(toks[:, a:b], cache=cache)[0] for a, b in ((0, 4), (4, 5), (5, 9))]
        torch.testing.assert_close(torch.cat(parts), full, rtol=1e-9, atol=1e-9)
        with torch.no_grad():
            m.layers[1].attn.sinks.add_(3.0)
        self.assertGreater(float((m(toks)[0] - full).abs().max()), 1e-3)
        from kvec_ref.model import rope_inv_freq, rope_magnitude
        c = m.config
        inv = rope_inv_freq(c)
        plain = c.rope_theta ** (-2.0 * torch.arange(c.rope_dim // 2, dtype=torch.float64) / c.rope_dim)
        self.assertAlmostEqual(float(inv[0]), float(plain[0]), places=12)
        self.assertAlmostEqual(float(inv[-1]), float(plain[-1]) / 8.0, places=12)
        self.assertAlmostEqual(rope_magnitude(c), 1.0 + 0.1 * np.log(8.0), places=12)

    def test_chunk_size_does_not_matter(self):
        a = make_model(attn_chunk=1)
        b = make_model(attn_chunk=1000)
        toks = torch.tensor([TOKENS])
        torch.testing.assert_close(a(toks), b(toks), rtol=1e-12, atol=1e-12)

    def test_batch_equals_single_sequences(self):
        m = make_model(arch="qwen2")
        s1, s2 = TOKENS, list(reversed(TOKENS))
        both = m(torch.tensor([s1, s2]))
        torch.testing.assert_close(both[0], m(torch.tensor([s1]))[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(both[1], m(torch.tensor([s2]))[0], rtol=1e-12, atol=1e-12)

    def test_gqa_equals_mha_with_repeated_kv_heads(self):
        for arch in ("llama", "qwen2", "qwen3"):
            g = make_model(arch=arch, n_head=4, n_head_kv=2)
            mha = make_model(arch=arch, n_head=4, n_head_kv=4)
            sd = g.state_dict()
            D = g.config.head_dim
            for key, val in sd.items():
                if ".attn.wk." in key or ".attn.wv." in key:
                    heads = val.reshape(2, D, *val.shape[1:])
                    sd[key] = heads.repeat_interleave(2, dim=0).reshape(4 * D, *val.shape[1:])
            mha.load_state_dict(sd)
            toks = torch.tensor([TOKENS])
            torch.testing.assert_close(mha(toks), g(toks), rtol=1e-12, atol=1e-12)
            vis = random_mask(g.config, len(TOKENS), np.random.default_rng(2))
            torch.testing.assert_close(mha(toks, kv_visible=np.repeat(vis, 2, axis=1)), g(toks, kv_visible=vis),
                                       rtol=1e-12, atol=1e-12)

    def test_kv_visible_limits(self):
        m = make_model(arch="qwen3")
        toks = torch.tensor([TOKENS])
        T = len(TOKENS)
        full = m(toks)
        never = np.full((2, 2, T), T, dtype=np.int32)
        torch.testing.assert_close(m(toks, kv_visible=never), full, rtol=0, atol=0)
        torch.testing.assert_close(m(toks, kv_visible=never + 100), full, rtol=0, atol=0)
        # keys visible only to their own query: attention returns the value of the token itself
        diag = np.broadcast_to(np.arange(1, T + 1, dtype=np.int32), (2, 2, T))
        torch.testing.assert_close(m(toks, kv_visible=diag)[0], self.value_path(m, TOKENS), rtol=1e-10, atol=1e-10)
        # evicting key 2 from query 6 on leaves queries 0..5 unchanged and changes query 6
        vis = never.copy()
        vis[:, :, 2] = 6
        out = m(toks, kv_visible=vis)
        torch.testing.assert_close(out[0, :6], full[0, :6], rtol=0, atol=0)
        self.assertGreater(float((out[0, 6:] - full[0, 6:]).abs().max()), 1e-6)

    @staticmethod
    def value_path(m, tokens):
        """Each position attends only to itself: attention output = W_o (v of the token, per head)."""
        c = m.config
        sd = {k: v.double() for k, v in m.state_dict().items()}
        x = sd["tok_embd.weight"][torch.tensor(tokens)]

        def norm(v, w):
            return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + c.norm_eps) * w

        for l in range(c.n_layer):
            p = f"layers.{l}."
            n = norm(x, sd[p + "attn_norm.weight"])
            v = n @ sd[p + "attn.wv.weight"].T                      # [T, n_head_kv * D]
            if c.qkv_bias:
                v = v + sd[p + "attn.wv.bias"]
            v = v.view(len(tokens), c.n_head_kv, 1, c.head_dim).expand(-1, -1, c.n_rep, -1)
            h = x + v.reshape(len(tokens), -1) @ sd[p + "attn.wo.weight"].T
            n = norm(h, sd[p + "ffn_norm.weight"])
            gate = n @ sd[p + "ffn.gate.weight"].T
            x = h + (torch.nn.functional.silu(gate) * (n @ sd[p + "ffn.up.weight"].T)) @ sd[p + "ffn.down.weight"].T
        return norm(x, sd["output_norm.weight"]) @ sd["output.weight"].T

    def test_kv_visible_validation(self):
        m = make_model()
        toks = torch.tensor([TOKENS])
        with self.assertRaisesRegex(ValueError, "shape"):
            m(toks, kv_visible=np.full((2, 4, 9), 9))
        bad = np.full((2, 2, 9), 9)
        bad[1, 0, 4] = 4
        with self.assertRaisesRegex(ValueError, r"kv_visible\[1, 0, 4\] = 4"):
            m(toks, kv_visible=bad)
        with self.assertRaisesRegex(ValueError, "out of range"):
            m(torch.tensor([[1, 40]]))

    def test_generate_is_greedy(self):
        m = make_model(dtype=torch.float32)
        out = generate(m, TOKENS[:3], 6)
        seq = TOKENS[:3]
        for _ in range(6):
            seq = seq + [int(torch.argmax(m(torch.tensor([seq]))[0, -1]))]
        self.assertEqual(out, seq[3:])
        self.assertEqual(generate(m, TOKENS[:3], 6, eos_id=out[1]), out[:2])


class Training(unittest.TestCase):
    def test_checkpointed_attention_gives_the_same_gradients(self):
        grads = []
        for ckpt in (True, False):
            m = make_model(dtype=torch.float32, attn_checkpoint=ckpt).train()
            loss = m(torch.tensor([TOKENS])).logsumexp(-1).sum()
            loss.backward()
            grads.append({k: p.grad.clone() for k, p in m.named_parameters()})
        for k in grads[0]:
            torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-5, atol=1e-6, msg=k)

    def test_loss_goes_down(self):
        torch.manual_seed(0)
        m = Transformer(ModelConfig(n_vocab=16, n_embd=32, n_layer=1, n_head=2, n_ff=64)).train()
        data = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8] * 4])
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for _ in range(30):
            lg = m(data[:, :-1])
            loss = torch.nn.functional.cross_entropy(lg.reshape(-1, 16), data[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        self.assertLess(losses[-1], 0.2 * losses[0])

    def test_bfloat16_autocast(self):
        m = make_model(dtype=torch.float32).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lg = m(torch.tensor([TOKENS]))
        self.assertEqual(lg.dtype, torch.float32)
        ref = m(torch.tensor([TOKENS]))
        self.assertLess(float((lg - ref).abs().max()), 0.1 * float(ref.abs().max()))
        lg.sum().backward()


class GGUFExport(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def tok_md(self, n):
        return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [f"t{i}" for i in range(n)],
                "tokenizer.ggml.scores": [0.0] * n, "tokenizer.ggml.token_type": [1] * n,
                "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.add_bos_token": True}

    def test_round_trip_every_dtype(self):
        for kw in (dict(arch="llama", tied_output=True, rope_freqs=[1.0, 2.0, 4.0, 8.0]),
                   dict(arch="llama", rope_scaling_type="linear", rope_scaling_factor=2.0, rope_dim=4),
                   dict(arch="qwen2"), dict(arch="qwen3"),
                   dict(arch="qwen3moe", n_expert=4, n_expert_used=2, n_ff_exp=32),
                   dict(arch="qwen2moe", n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64),
                   dict(arch="llama", n_expert=4, n_expert_used=2, n_ff=32)):
            m = make_model(dtype=torch.float32, **kw)
            ref = logits(m, TOKENS)
            # f32: not bit-exact because GGUF stores norm_eps as float32 (1e-5 -> 9.99999975e-6)
            for dtype, tol in (("f32", 1e-5), ("f16", 1e-2), ("bf16", 5e-2), ("q8_0", 2e-1)):
                path = self.dir / f"m_{dtype}.gguf"
                save_gguf(m, m.config, path, self.tok_md(40), dtype=dtype)
                m2, c2, md = load_gguf(path)
                for f in ("arch", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff",
                          "rope_dim", "rope_scaling_type", "rope_scaling_factor", "qkv_bias", "qk_norm",
                          "tied_output", "n_expert", "n_expert_used", "n_ff_exp", "n_ff_shexp",
                          "expert_weights_norm"):
                    self.assertEqual(getattr(c2, f), getattr(m.config, f), (kw, dtype, f))
                self.assertAlmostEqual(c2.norm_eps, m.config.norm_eps, delta=1e-9)
                if m.config.rope_freqs is not None:
                    self.assertEqual(c2.rope_freqs, m.config.rope_freqs)
                got = logits(m2, TOKENS)
                np.testing.assert_allclose(got, ref, atol=tol * np.abs(ref).max() + 1e-6, err_msg=f"{kw} {dtype}")
                self.assertEqual(md["tokenizer.ggml.tokens"][5], "t5")

    def test_metadata_types_are_llama_cpp_types(self):
        m = make_model(dtype=torch.float32, arch="qwen2")
        save_gguf(m, m.config, self.dir / "m.gguf", self.tok_md(40), dtype="q8_0", name="tiny")
        r = GGUFReader(self.dir / "m.gguf")
        f = r.fields
        for k in ("qwen2.block_count", "qwen2.embedding_length", "qwen2.attention.head_count",
                  "qwen2.attention.head_count_kv", "qwen2.context_length", "qwen2.feed_forward_length",
                  "general.file_type", "general.quantization_version", "tokenizer.ggml.bos_token_id"):
            self.assertEqual(f[k].type, ValueType.UINT32, k)
        for k in ("qwen2.rope.freq_base", "qwen2.attention.layer_norm_rms_epsilon"):
            self.assertEqual(f[k].type, ValueType.FLOAT32, k)
        self.assertEqual(f["tokenizer.ggml.token_type"].elem_type, ValueType.INT32)
        self.assertEqual(f["tokenizer.ggml.scores"].elem_type, ValueType.FLOAT32)
        self.assertEqual(f["tokenizer.ggml.add_bos_token"].type, ValueType.BOOL)
        self.assertEqual((r.metadata["general.name"], r.metadata["general.file_type"]), ("tiny", 7))
        self.assertEqual(r.tensors["blk.0.attn_q.weight"].type_name, "Q8_0")
        self.assertEqual(r.tensors["blk.0.attn_q.bias"].type_name, "F32")
        self.assertEqual(r.tensors["blk.1.ffn_norm.weight"].type_name, "F32")

    def test_tokenizer_copied_from_a_llama_cpp_file(self):
        vocab = GGUFReader(VOCABS / "ggml-vocab-llama-spm.gguf")
        n = len(vocab.metadata["tokenizer.ggml.tokens"])
        m = Transformer(ModelConfig(n_vocab=n, n_embd=32, n_layer=1, n_head=2, n_ff=32))
        save_gguf(m, m.config, self.dir / "m.gguf", vocab.typed_metadata("tokenizer."), dtype="f16")
        r = GGUFReader(self.dir / "m.gguf")
        for k, v in vocab.typed_metadata("tokenizer.").items():
            self.assertEqual(r.fields[k].type, v.type, k)
            self.assertEqual(r.fields[k].elem_type, v.elem_type, k)
        self.assertEqual(r.metadata["tokenizer.ggml.tokens"], vocab.metadata["tokenizer.ggml.tokens"])

    def test_load_errors(self):
        with self.assertRaisesRegex(GGUFError, "unsupported architecture 'gpt2'"):
            load_gguf(VOCABS / "ggml-vocab-gpt-2.gguf")
        with self.assertRaisesRegex(GGUFError, "missing tensor token_embd.weight"):
            load_gguf(VOCABS / "ggml-vocab-llama-spm.gguf")
        m = make_model(dtype=torch.float32)
        path = self.dir / "m.gguf"
        save_gguf(m, m.config, path, {})
        r = GGUFReader(path)
        w = GGUFWriter(self.dir / "cut.gguf")
        for k, v in r.fields.items():
            w.add(k, v)
        for name in r.tensors:
            if name != "blk.1.ffn_up.weight":
                w.add_tensor(name, r.tensor_f32(name))
        w.add_tensor("blk.0.extra.weight", np.zeros(4, np.float32))
        w.write()
        with self.assertRaisesRegex(GGUFError, "missing tensors: blk.1.ffn_up.weight"):
            load_gguf(self.dir / "cut.gguf")
        with self.assertRaisesRegex(ValueError, "written by save_gguf"):
            save_gguf(m, m.config, path, {"general.architecture": "x"})


if __name__ == "__main__":
    unittest.main()
