"""RoPE conventions on hand-computed cases.

llama.cpp: `llama` uses NORM RoPE (pairs of consecutive values), `qwen2`/`qwen3` use NEOX (pairs
offset by n_rot/2); angle of pair i at position p = p * freq_scale * base^(-2i/n_rot) / ff[i].
"""

import math
import unittest

import numpy as np
import torch

from kvec_ref.model import ModelConfig, Transformer, apply_rope, llama3_rope_freqs, rope_cos_sin

X = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)


def rot(config, x, pos):
    """x [head_dim] at one position -> rotated [head_dim]."""
    cos, sin = rope_cos_sin(config, torch.tensor([[pos]]), torch.float64)
    return apply_rope(x.view(1, 1, 1, -1), cos, sin, config.rope_neox).view(-1)


def cfg(arch="llama", **kw):
    return ModelConfig(arch=arch, n_embd=8, n_head=2, n_vocab=8, **kw)  # head_dim 4


class HandComputed(unittest.TestCase):
    def assertVec(self, got, want):
        np.testing.assert_allclose(got.numpy(), np.array(want), rtol=0, atol=1e-12)

    def test_norm_mode_rotates_adjacent_pairs(self):
        # head_dim 4, base 10000: pair 0 = (x0, x1) at angle p, pair 1 = (x2, x3) at angle p/100
        c, c1, s1, c2, s2 = cfg("llama"), math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
        self.assertVec(rot(c, X, 1), [1 * c1 - 2 * s1, 1 * s1 + 2 * c1, 3 * c2 - 4 * s2, 3 * s2 + 4 * c2])
        self.assertVec(rot(c, X, 0), [1, 2, 3, 4])

    def test_neox_mode_rotates_halves(self):
        # pair 0 = (x0, x2) at angle p, pair 1 = (x1, x3) at angle p/100
        for arch in ("qwen2", "qwen3"):
            c = cfg(arch)
            p = 2
            c1, s1, c2, s2 = math.cos(2), math.sin(2), math.cos(0.02), math.sin(0.02)
            self.assertVec(rot(c, X, p), [1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 1 * s1 + 3 * c1, 2 * s2 + 4 * c2])

    def test_linear_scaling_divides_the_position(self):
        c = cfg("llama", rope_scaling_type="linear", rope_scaling_factor=4.0)
        self.assertVec(rot(c, X, 8), rot(cfg("llama"), X, 2))
        self.assertVec(rot(c, X, 2), [1 * math.cos(0.5) - 2 * math.sin(0.5), 1 * math.sin(0.5) + 2 * math.cos(0.5),
                                      3 * math.cos(0.005) - 4 * math.sin(0.005), 3 * math.sin(0.005) + 4 * math.cos(0.005)])

    def test_llama3_rope_freqs_divide_each_angle(self):
        c = cfg("llama", rope_freqs=[1.0, 4.0])
        a = 3 * 0.01 / 4  # pair 1 at position 3: 3 * base^(-2/4) / 4
        self.assertVec(rot(c, X, 3), [1 * math.cos(3) - 2 * math.sin(3), 1 * math.sin(3) + 2 * math.cos(3),
                                      3 * math.cos(a) - 4 * math.sin(a), 3 * math.sin(a) + 4 * math.cos(a)])

    def test_partial_rotation_leaves_the_tail(self):
        c = ModelConfig(arch="qwen2", n_embd=16, n_head=2, n_vocab=8, rope_dim=4)  # head_dim 8
        x = torch.arange(1.0, 9.0, dtype=torch.float64)
        y = rot(c, x, 5)
        self.assertVec(y[4:], [5, 6, 7, 8])
        self.assertVec(y[:4], rot(cfg("qwen2"), x[:4], 5))

    def test_llama3_factors_match_the_hf_frequency_formula(self):
        # HF / Meta "llama3" scaling, written on inverse frequencies:
        #   wavelen < old/high: keep; wavelen > old/low: inv/factor; else (1-s)*inv/factor + s*inv
        d, base, factor, low, high, old = 64, 500000.0, 8.0, 1.0, 4.0, 8192
        inv = [base ** (-2 * i / d) for i in range(d // 2)]
        want = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < old / high:
                want.append(f)
            elif wl > old / low:
                want.append(f / factor)
            else:
                s = (old / wl - low) / (high - low)
                want.append((1 - s) * f / factor + s * f)
        ff = llama3_rope_freqs(d, base, factor, low, high, old)
        np.testing.assert_allclose([f / q for f, q in zip(inv, ff)], want, rtol=1e-12)
        self.assertEqual(ff[0], 1.0)
        self.assertEqual(ff[-1], factor)

    def test_scores_depend_on_relative_position_only(self):
        g = torch.Generator().manual_seed(0)
        q = torch.randn(4, generator=g, dtype=torch.float64)
        k = torch.randn(4, generator=g, dtype=torch.float64)
        for arch in ("llama", "qwen2"):
            c = cfg(arch)
            s1 = float(rot(c, q, 7) @ rot(c, k, 3))
            s2 = float(rot(c, q, 104) @ rot(c, k, 100))
            self.assertAlmostEqual(s1, s2, places=10)


class ConverterPermutation(unittest.TestCase):
    def test_norm_on_permuted_weights_equals_neox_on_original(self):
        """GGUF's llama tensor_data_layout permutes the rows of attn_q / attn_k:
        w.reshape(n_head, 2, d/2, n_in).swapaxes(1, 2).reshape(w.shape). With that permutation,
        NORM RoPE (llama) gives exactly what NEOX RoPE (HF rotate_half) gives on the original."""

        def permute(w, n_head):
            return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)

        torch.manual_seed(1)
        hf = Transformer(ModelConfig(arch="qwen3", n_vocab=20, n_embd=32, n_layer=2, n_head=4, n_head_kv=2,
                                     n_ff=40, qk_norm=False)).double().eval()
        ll = Transformer(ModelConfig(arch="llama", n_vocab=20, n_embd=32, n_layer=2, n_head=4, n_head_kv=2,
                                     n_ff=40)).double().eval()
        with torch.no_grad():
            for p in hf.parameters():
                p.copy_(0.3 * torch.randn_like(p))
        sd = hf.state_dict()
        for k in list(sd):
            if k.endswith("attn.wq.weight"):
                sd[k] = permute(sd[k], 4)
            elif k.endswith("attn.wk.weight"):
                sd[k] = permute(sd[k], 2)
        ll.load_state_dict(sd)
        toks = torch.tensor([[1, 5, 9, 2, 19, 7]])
        torch.testing.assert_close(ll(toks), hf(toks), rtol=1e-10, atol=1e-10)
        # and without the permutation the two differ
        ll.load_state_dict(hf.state_dict())
        self.assertGreater(float((ll(toks) - hf(toks)).abs().max()), 1e-3)


if __name__ == "__main__":
    unittest.main()
