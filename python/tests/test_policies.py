"""kvec_ref.policies against straightforward computations: LagKV against per-entry loops, the
averaged rotation against RoPE applied at each position, KVzip's renormalised probabilities against
the restricted softmax computed from the queries and keys themselves, Expected Attention's
statistics against the query projection, and the command line."""

import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

from kvec_ref import policies
from kvec_ref.model import KVCache, ModelConfig, Transformer, apply_rope, rope_cos_sin


def tiny(arch="llama"):
    torch.manual_seed(3)
    m = Transformer(ModelConfig(arch=arch, n_vocab=60, n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=48))
    m.reset_parameters(0.3)
    return m.eval()


class LagKv(unittest.TestCase):
    def naive(self, k, v, sinks, lag, cross):
        H, T, d = k.shape
        out = np.zeros((H, T))
        full = (T - sinks) // lag
        for h in range(H):
            for p in range(full - 1):
                b = sinks + p * lag
                part = []
                for x in (k, v):
                    ref = x[h, b + lag:b + 2 * lag]
                    lo, hi = ref.min(axis=0), ref.max(axis=0)
                    stds = []
                    for i in range(lag):
                        y = [(x[h, b + i, c] - lo[c]) / (hi[c] - lo[c]) if hi[c] > lo[c] else 0.0 for c in range(d)]
                        stds.append(np.std(y, ddof=1))
                    e = np.exp(np.array(stds) - max(stds))
                    part.append(e / e.sum())
                sc = (part[0] + part[1]) / 2
                if not cross:
                    order = sorted(range(lag), key=lambda i: (-sc[i], i))
                    sc = np.zeros(lag)
                    for r, i in enumerate(order):
                        sc[i] = (lag - 1 - r) / lag
                out[h, b:b + lag] = sc
            out[h, :sinks] = math.inf
            for i in range(sinks + max(0, full - 1) * lag, T):
                out[h, i] = 2 + (i + 1) / T
        return out

    def test_matches_loops(self):
        rng = np.random.default_rng(1)
        k, v = rng.normal(size=(2, 23, 5)), rng.normal(size=(2, 23, 5))
        k[0, 9, :] = k[0, 10, :]  # an exact tie inside a partition
        v[0, 9, :] = v[0, 10, :]
        for cross in (False, True):
            got = policies.lagkv_from_states(torch.tensor(k), torch.tensor(v), 3, 4, cross)
            np.testing.assert_allclose(got, self.naive(k, v, 3, 4, cross), rtol=1e-12, atol=1e-12)


class Rotation(unittest.TestCase):
    def test_average_of_rope(self):
        for arch in ("llama", "qwen2"):
            m = tiny(arch)
            c = m.config
            x = torch.randn(c.head_dim, dtype=torch.float64)
            R = policies._averaged_rotation(m, 17, 9)
            want = torch.zeros(c.head_dim, dtype=torch.float64)
            for p in range(17, 26):
                cos, sin = rope_cos_sin(c, torch.tensor([[p]]), torch.float64)
                want += apply_rope(x.view(1, 1, 1, -1), cos, sin, c.rope_neox).view(-1) / 9
            np.testing.assert_allclose((R @ x).numpy(), want.numpy(), atol=1e-12)


class ExpectedAttention(unittest.TestCase):
    def test_one_query_no_covariance(self):
        # One recent query: the statistics are that query (covariance 0); z = Rbar q . k / sqrt(d).
        m = tiny()
        c = m.config
        toks = list(range(1, 21))
        got = policies.expected_attention_scores(m, toks, sinks=2, n_queries=1, n_future=5, vnorm=False)
        cache, queries = policies._prompt_pass(m, toks, capture_queries=True)
        R = policies._averaged_rotation(m, 20, 5)
        q = R @ queries[1][-1, 3]                         # layer 1, query head 3 (KV head 1)
        z = cache.k[1][0, 1, 2:].double() @ q / math.sqrt(c.head_dim)
        q2 = R @ queries[1][-1, 2]
        z2 = cache.k[1][0, 1, 2:].double() @ q2 / math.sqrt(c.head_dim)
        want = (torch.softmax(z, 0) + torch.softmax(z2, 0)) / 2
        np.testing.assert_allclose(got[1, 1, 2:], want.numpy(), rtol=1e-10)
        self.assertTrue(np.isinf(got[1, 1, :2]).all())

    def test_queries_are_the_projection_before_rope(self):
        m = tiny("qwen3")
        toks = [3, 4, 5]
        _, queries = policies._prompt_pass(m, toks, capture_queries=True)
        x = m.layers[0].attn_norm(m.tok_embd(torch.tensor([toks])))
        q = m.layers[0].attn.q_norm(m.layers[0].attn.wq(x).view(1, 3, 4, -1))[0]
        np.testing.assert_allclose(queries[0].numpy(), q.double().detach().numpy(), rtol=1e-6)


class Kvzip(unittest.TestCase):
    def test_layer0_against_the_restricted_softmax(self):
        # Layer 0's reconstruction queries and keys depend on the tokens only: compute them from
        # the weights, softmax over [sinks, chunk, own entries] directly, max over queries / group.
        m = tiny()
        c = m.config
        toks = list(range(5, 29))  # 24 tokens, chunks of 10: [0, 10), [10, 20), [20, 24)
        first, later, suffix = [50, 51], [52], [53, 54]
        got = policies.kvzip_scores(m, toks, first, later, suffix, overlap=3, chunk=10, sinks=2)
        a = m.layers[0].attn
        D, G = c.head_dim, c.n_rep

        def qk(ids, pos):
            x = m.layers[0].attn_norm(m.tok_embd(torch.tensor([ids])))
            cos, sin = rope_cos_sin(c, torch.tensor([pos]), torch.float32)
            q = apply_rope(a.wq(x).view(1, len(ids), c.n_head, D).transpose(1, 2), cos, sin, c.rope_neox)[0]
            k = apply_rope(a.wk(x).view(1, len(ids), c.n_head_kv, D).transpose(1, 2), cos, sin, c.rope_neox)[0]
            return q.double().detach(), k.double().detach()   # [H, n, D], [H_kv, n, D]

        _, kc = qk(toks, list(range(24)))
        want = np.zeros((c.n_head_kv, 24))
        for cs in range(0, 24, 10):
            ce = min(24, cs + 10)
            ids = (first if cs == 0 else later + toks[max(0, cs - 3):cs]) + suffix + toks[cs:ce]
            q, kr = qk(ids, list(range(24, 24 + len(ids))))
            s = min(2, cs)
            for h in range(c.n_head_kv):
                keys = torch.cat([kc[h, :s], kc[h, cs:ce], kr[h]])             # the restricted set
                for g in range(G):
                    logits = q[h * G + g] @ keys.T / math.sqrt(D)             # [n_in, s + chunk + n_in]
                    n_in = len(ids)
                    mask = torch.ones(n_in, keys.shape[0], dtype=torch.bool)
                    mask[:, s + ce - cs:] = torch.tril(torch.ones(n_in, n_in, dtype=torch.bool))
                    p = torch.softmax(logits.masked_fill(~mask, -math.inf), dim=-1)
                    best = p[:, s:s + ce - cs].amax(dim=0).numpy()
                    want[h, cs:ce] = np.maximum(want[h, cs:ce], best)
        want[:, :2] = math.inf
        np.testing.assert_allclose(got[0], want, rtol=1e-5)


class CommandLine(unittest.TestCase):
    def test_policy_scores(self):
        from kvec_ref.model import save_gguf
        with tempfile.TemporaryDirectory() as d:
            m = tiny()
            path = os.path.join(d, "m.gguf")
            save_gguf(m, m.config, path, {})
            out = os.path.join(d, "s.f32")
            r = subprocess.run([sys.executable, "-m", "kvec_ref.cli", "policy-scores", "--model", path, "--tokens",
                                "1,2,3,4,5,6,7,8,9,10", "--policy", "lagkv", "--lag", "2", "--sinks", "1", "--out", out],
                               capture_output=True, text=True, env=dict(os.environ))
            self.assertEqual(r.returncode, 0, r.stderr)
            s = np.fromfile(out, dtype="<f4").reshape(2, 2, 10)
            self.assertTrue(np.isinf(s[:, :, 0]).all())
            self.assertTrue(((s[:, :, 1:7] >= 0) & (s[:, :, 1:7] <= 0.5)).all())
            np.testing.assert_allclose(s[0, 0, 7:], [2.8, 2.9, 3.0], rtol=1e-6)


if __name__ == "__main__":
    unittest.main()
