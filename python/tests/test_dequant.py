"""Known-answer tests of the block formats, on hand-built blocks.

Expected values come from the layouts in ggml-common.h, decoded here element by element with
plain loops (a formulation independent of the vectorised index tables of kvec_ref.dequant), and
a few values are spelled out by hand in the comments.
"""

import struct
import unittest

import numpy as np

from kvec_ref.dequant import dequantize, quantize
from kvec_ref.ggml_types import GGMLType, TYPE_TRAITS


def h(x: float) -> bytes:
    """IEEE half, little-endian."""
    return struct.pack("<e", x)


def deq(block: bytes, t: GGMLType) -> np.ndarray:
    n = len(block) // TYPE_TRAITS[t].block_bytes * TYPE_TRAITS[t].block_elems
    return dequantize(block, t, n)


class BlockSizes(unittest.TestCase):
    def test_sizes_match_the_struct_layouts(self):
        expect = {GGMLType.Q4_0: 18, GGMLType.Q4_1: 20, GGMLType.Q5_0: 22, GGMLType.Q5_1: 24,
                  GGMLType.Q8_0: 34, GGMLType.Q2_K: 84, GGMLType.Q3_K: 110, GGMLType.Q4_K: 144,
                  GGMLType.Q5_K: 176, GGMLType.Q6_K: 210, GGMLType.BF16: 2, GGMLType.F16: 2,
                  GGMLType.IQ4_NL: 18, GGMLType.IQ4_XS: 136, GGMLType.MXFP4: 17}
        for t, n in expect.items():
            self.assertEqual(TYPE_TRAITS[t].block_bytes, n, t.name)


class ScalarFormats(unittest.TestCase):
    def test_f32_f16_bf16(self):
        vals = [0.0, 1.0, -2.5, 65504.0, 2.0 ** -24]
        self.assertEqual(list(deq(struct.pack("<5f", *vals), GGMLType.F32)), vals)
        self.assertEqual(list(deq(b"".join(h(v) for v in vals), GGMLType.F16)), vals)
        # bf16 = top 16 bits of the f32: 0x3F80 = 1.0, 0xC020 = -2.5, 0x4049 = 3.140625
        bf = struct.pack("<3H", 0x3F80, 0xC020, 0x4049)
        self.assertEqual(list(deq(bf, GGMLType.BF16)), [1.0, -2.5, 3.140625])

    def test_bf16_encoding_rounds_to_nearest_even(self):
        x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -3.0], dtype=np.float32)
        bits = quantize(x, GGMLType.BF16).view("<u2")
        # 1+2^-8 is a tie between 0x3F80 and 0x3F81 -> even 0x3F80; 1+3*2^-8 -> 0x3F82
        self.assertEqual(list(bits), [0x3F80, 0x3F80, 0x3F82, 0xC040])


class SmallBlocks(unittest.TestCase):
    qs = bytes(j | ((15 - j) << 4) for j in range(16))  # low nibbles 0..15, high nibbles 15..0

    def test_q4_0(self):
        y = deq(h(0.5) + self.qs, GGMLType.Q4_0)
        # value j < 16: (low nibble of qs[j] - 8) * d; value 16 + j: (high nibble of qs[j] - 8) * d
        exp = [(j - 8) * 0.5 for j in range(16)] + [((15 - j) - 8) * 0.5 for j in range(16)]
        self.assertEqual(list(y), exp)
        self.assertEqual((y[0], y[15], y[16], y[31]), (-4.0, 3.5, 3.5, -4.0))

    def test_q4_1(self):
        y = deq(h(0.25) + h(-1.0) + self.qs, GGMLType.Q4_1)
        exp = [j * 0.25 - 1.0 for j in range(16)] + [(15 - j) * 0.25 - 1.0 for j in range(16)]
        self.assertEqual(list(y), exp)
        self.assertEqual((y[0], y[31]), (-1.0, -1.0))
        self.assertEqual(y[15], 2.75)

    def test_q5_0(self):
        qh = 0xA5A50F0F
        y = deq(h(1.0) + struct.pack("<I", qh) + self.qs, GGMLType.Q5_0)
        exp = []
        for j in range(32):
            nib = (self.qs[j] & 15) if j < 16 else (self.qs[j - 16] >> 4)
            exp.append(float((nib | (((qh >> j) & 1) << 4)) - 16))
        self.assertEqual(list(y), exp)
        # value 0: nibble 0, bit 0 of 0x...0F = 1 -> 16 - 16 = 0; value 4: nibble 4, bit 4 = 0 -> -12
        self.assertEqual((y[0], y[4]), (0.0, -12.0))
        # value 16: nibble 15, bit 16 of qh (0xA5A5 low bit = 1) -> 31 - 16 = 15
        self.assertEqual(y[16], 15.0)

    def test_q5_1(self):
        qh = 0x0000FFFF
        y = deq(h(0.5) + h(2.0) + struct.pack("<I", qh) + self.qs, GGMLType.Q5_1)
        exp = [(j + 16) * 0.5 + 2.0 for j in range(16)] + [(15 - j) * 0.5 + 2.0 for j in range(16)]
        self.assertEqual(list(y), exp)

    def test_q8_0(self):
        q = np.arange(-16, 16, dtype=np.int8)
        y = deq(h(0.125) + q.tobytes(), GGMLType.Q8_0)
        self.assertEqual(list(y), [v * 0.125 for v in range(-16, 16)])

    def test_multiple_blocks_keep_their_order(self):
        b0 = h(1.0) + bytes(range(32))
        b1 = h(-2.0) + bytes(32)
        y = deq(b0 + b1, GGMLType.Q8_0)
        self.assertEqual(list(y[:32]), [float(i) for i in range(32)])
        self.assertTrue((y[32:] == 0).all())


def pack_k4_scales(sc, mn) -> bytes:
    """Q4_K/Q5_K scale bytes for eight 6-bit scales and mins (layout of block_q4_K.scales)."""
    b = [0] * 12
    for j in range(8):
        if j < 4:
            b[j] = sc[j]
            b[j + 4] = mn[j]
        else:
            b[j + 4] = (sc[j] & 15) | ((mn[j] & 15) << 4)
            b[j - 4] |= (sc[j] >> 4) << 6
            b[j] |= (mn[j] >> 4) << 6
    return bytes(b)


def pack_q3_scales(s) -> bytes:
    """Q3_K scale bytes for sixteen 6-bit (unsigned, offset 32) scales."""
    b = [0] * 12
    for j in range(16):
        lo, hi = s[j] & 15, s[j] >> 4
        if j < 8:
            b[j] |= lo
        else:
            b[j - 8] |= lo << 4
        b[8 + j % 4] |= hi << (2 * (j // 4))
    return bytes(b)


class KQuants(unittest.TestCase):
    rng = np.random.default_rng(1234)

    def rand_bytes(self, n):
        return bytes(self.rng.integers(0, 256, n, dtype=np.uint8))

    # ---- Q2_K: scales[16] | qs[64] | d | dmin; 2-bit quants, x = d*sc*q - dmin*m
    def q2k_expected(self, scales, qs, d, dmin):
        y = []
        for half in range(2):
            for pas in range(4):          # bits 2*pas of bytes half*32 .. half*32+31
                for grp in range(2):      # 16 values per scale
                    s = scales[half * 8 + pas * 2 + grp]
                    for i in range(16):
                        q = (qs[half * 32 + grp * 16 + i] >> (2 * pas)) & 3
                        y.append(d * (s & 15) * q - dmin * (s >> 4))
        return y

    def test_q2_k_literal(self):
        # every byte 0b11100100: pass j reads the value j; scales: sc = 2, min = 1
        scales = bytes([2 | (1 << 4)] * 16)
        y = deq(scales + bytes([0xE4] * 64) + h(0.5) + h(0.25), GGMLType.Q2_K)
        # value e: q = (e % 128) // 32 -> 0.5*2*q - 0.25*1
        for e in (0, 31, 32, 100, 127, 128, 255):
            self.assertEqual(y[e], 1.0 * ((e % 128) // 32) - 0.25, e)

    def test_q2_k_random(self):
        for _ in range(3):
            scales, qs = self.rand_bytes(16), self.rand_bytes(64)
            y = deq(scales + qs + h(0.375) + h(0.125), GGMLType.Q2_K)
            np.testing.assert_allclose(y, self.q2k_expected(scales, qs, 0.375, 0.125), rtol=1e-6, atol=1e-6)

    # ---- Q3_K: hmask[32] | qs[64] | scales[12] | d; x = d*(s-32)*(q - (hbit ? 0 : 4))
    def q3k_expected(self, hmask, qs, s6, d):
        y = []
        e = 0
        for half in range(2):
            for pas in range(4):
                for grp in range(2):
                    scale = s6[half * 8 + pas * 2 + grp] - 32
                    for i in range(16):
                        q = (qs[half * 32 + grp * 16 + i] >> (2 * pas)) & 3
                        hbit = (hmask[grp * 16 + i] >> (half * 4 + pas)) & 1
                        y.append(d * scale * (q - (0 if hbit else 4)))
                        e += 1
        return y

    def test_q3_k_literal(self):
        scales = pack_q3_scales([33] * 16)  # 33 - 32 = +1
        self.assertEqual(scales, bytes([0x11] * 8 + [0xAA] * 4))  # low 4 bits 1, high 2 bits 0b10
        qs = bytes([0xE4] * 64)
        y = deq(bytes([0xFF] * 32) + qs + scales + h(1.0), GGMLType.Q3_K)
        self.assertEqual(list(y), [float((e % 128) // 32) for e in range(256)])
        y = deq(bytes(32) + qs + scales + h(1.0), GGMLType.Q3_K)  # high bits clear: minus 4
        self.assertEqual(list(y), [float((e % 128) // 32 - 4) for e in range(256)])

    def test_q3_k_scale_unpacking(self):
        s6 = list(range(0, 64, 4))  # sixteen distinct 6-bit values
        qs = bytes([0x01] * 64)     # pass 0 reads 1, other passes 0
        y = deq(bytes([0xFF] * 32) + qs + pack_q3_scales(s6) + h(1.0), GGMLType.Q3_K)
        for sidx in range(16):      # group sidx = values 16*sidx ..; pass = (sidx % 8) // 2
            q = 1 if (sidx % 8) // 2 == 0 else 0
            self.assertEqual(y[16 * sidx], (s6[sidx] - 32) * q, sidx)

    def test_q3_k_random(self):
        for _ in range(3):
            hmask, qs = self.rand_bytes(32), self.rand_bytes(64)
            s6 = list(self.rng.integers(0, 64, 16))
            y = deq(hmask + qs + pack_q3_scales(s6) + h(0.25), GGMLType.Q3_K)
            np.testing.assert_allclose(y, self.q3k_expected(hmask, qs, s6, 0.25), rtol=1e-6, atol=1e-6)

    # ---- Q4_K / Q5_K: d | dmin | scales[12] | (qh[32]) | qs[128]; x = d*sc*q - dmin*m
    def k4_expected(self, d, dmin, sc, mn, qs, qh=None):
        y = []
        for chunk in range(4):
            for half in range(2):           # low nibbles, then high nibbles of 32 bytes
                sub = chunk * 2 + half
                for i in range(32):
                    q = (qs[chunk * 32 + i] >> (4 * half)) & 15
                    if qh is not None:
                        q += 16 * ((qh[i] >> sub) & 1)
                    y.append(d * sc[sub] * q - dmin * mn[sub])
        return y

    def test_q4_k_scale_packing_literal(self):
        sc = [1, 2, 3, 4, 63, 33, 17, 48]
        mn = [5, 6, 7, 8, 40, 0, 63, 16]
        packed = pack_k4_scales(sc, mn)
        # sub-block 4: scale 63 = low 15 in byte 8 low nibble, top bits 3 in byte 0 bits 6..7
        self.assertEqual(packed[8] & 15, 15)
        self.assertEqual(packed[0] >> 6, 3)
        qs = bytes([0x21] * 128)  # low nibble 1, high nibble 2
        y = deq(h(1.0) + h(0.5) + packed + qs, GGMLType.Q4_K)
        self.assertEqual(y[0], 1 * 1 - 0.5 * 5)          # sub 0, q = 1
        self.assertEqual(y[32], 2 * 2 - 0.5 * 6)         # sub 1, q = 2
        self.assertEqual(y[128], 63 * 1 - 0.5 * 40)      # sub 4
        self.assertEqual(y[255], 48 * 2 - 0.5 * 16)      # sub 7

    def test_q4_k_random(self):
        for _ in range(3):
            sc, mn = list(self.rng.integers(0, 64, 8)), list(self.rng.integers(0, 64, 8))
            qs = self.rand_bytes(128)
            y = deq(h(0.0625) + h(0.03125) + pack_k4_scales(sc, mn) + qs, GGMLType.Q4_K)
            np.testing.assert_allclose(y, self.k4_expected(0.0625, 0.03125, sc, mn, qs), rtol=1e-6, atol=1e-6)

    def test_q5_k(self):
        sc, mn = [1] * 8, [0] * 8
        qh = bytes([0b00000101] * 32)  # high bit set for sub-blocks 0 and 2
        y = deq(h(1.0) + h(1.0) + pack_k4_scales(sc, mn) + qh + bytes(128), GGMLType.Q5_K)
        self.assertEqual(list(y), [16.0 if e // 32 in (0, 2) else 0.0 for e in range(256)])
        for _ in range(3):
            sc, mn = list(self.rng.integers(0, 64, 8)), list(self.rng.integers(0, 64, 8))
            qh, qs = self.rand_bytes(32), self.rand_bytes(128)
            y = deq(h(0.125) + h(0.25) + pack_k4_scales(sc, mn) + qh + qs, GGMLType.Q5_K)
            np.testing.assert_allclose(y, self.k4_expected(0.125, 0.25, sc, mn, qs, qh), rtol=1e-6, atol=1e-6)

    # ---- Q6_K: ql[128] | qh[64] | scales[16] (int8) | d; x = d*sc*(q - 32)
    def q6k_expected(self, ql, qh, sc, d):
        y = [0.0] * 256
        for half in range(2):
            for l in range(32):
                for g in range(4):    # value half*128 + 32*g + l
                    lo = ql[half * 64 + l + 32 * (g % 2)]
                    lo = (lo & 15) if g < 2 else (lo >> 4)
                    hi = (qh[half * 32 + l] >> (2 * g)) & 3
                    q = (lo | (hi << 4)) - 32
                    y[half * 128 + 32 * g + l] = d * sc[half * 8 + g * 2 + l // 16] * q
        return y

    def test_q6_k_literal(self):
        # ql 0x00, qh 0xAA: every value's top bits = 2 -> q = 32 - 32 = 0
        y = deq(bytes(128) + bytes([0xAA] * 64) + bytes([1] * 16) + h(1.0), GGMLType.Q6_K)
        self.assertTrue((y == 0).all())
        # ql 0xFF, qh 0xFF: q = 63 - 32 = 31; scales -1 -> -31 * d
        y = deq(bytes([0xFF] * 128) + bytes([0xFF] * 64) + bytes([0xFF] * 16) + h(0.5), GGMLType.Q6_K)
        self.assertTrue((y == -15.5).all())

    def test_q6_k_random(self):
        for _ in range(3):
            ql, qh = self.rand_bytes(128), self.rand_bytes(64)
            sc = list(self.rng.integers(-128, 128, 16))
            sc_bytes = np.array(sc, dtype=np.int8).tobytes()
            y = deq(ql + qh + sc_bytes + h(0.0078125), GGMLType.Q6_K)
            np.testing.assert_allclose(y, self.q6k_expected(ql, qh, sc, 0.0078125), rtol=1e-6, atol=1e-6)

    def test_two_superblocks(self):
        a = bytes([2 | (1 << 4)] * 16) + bytes([0xE4] * 64) + h(0.5) + h(0.25)
        b = bytes(16) + bytes(64) + h(0.0) + h(0.0)
        y = deq(a + b, GGMLType.Q2_K)
        self.assertEqual(y.size, 512)
        self.assertTrue((y[256:] == 0).all())
        self.assertEqual(y[255], 3 - 0.25)


class Quantize(unittest.TestCase):
    def test_q8_0_known_answer(self):
        x = np.arange(-16, 16, dtype=np.float32)  # amax 16 -> d = 16/127
        raw = quantize(x, GGMLType.Q8_0)
        self.assertEqual(raw.size, 34)
        d = np.float32(16) / np.float32(127)
        self.assertEqual(raw[:2].tobytes(), np.float16(d).tobytes())
        q = raw[2:].view(np.int8)
        self.assertEqual(list(q), [int(np.sign(v) * np.floor(abs(v) * 127 / 16 + 0.5)) for v in x])
        self.assertEqual((q[0], q[-1]), (-127, 119))  # 15 * 127/16 = 119.06

    def test_round_trip_error_bounds(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal(32 * 64).astype(np.float32)
        for t, levels in ((GGMLType.Q8_0, 127), (GGMLType.Q5_0, 16), (GGMLType.Q5_1, 31),
                          (GGMLType.Q4_0, 8), (GGMLType.Q4_1, 15)):
            y = dequantize(quantize(x, t), t, x.size)
            blocks = x.reshape(-1, 32)
            span = np.abs(blocks).max(1) if levels in (127, 16, 8) else blocks.max(1) - blocks.min(1)
            step = span / levels
            err = np.abs(y - x).reshape(-1, 32).max(1)
            # Q4_0 / Q5_0 map the largest magnitude to -8 / -16 and clip the other side at +7 / +15,
            # so values of the opposite sign can be off by a whole step; the others by half a step
            # (plus the f16 rounding of the scale).
            bound = step if t in (GGMLType.Q4_0, GGMLType.Q5_0) else step * 0.5
            self.assertTrue((err <= bound + 2e-3 * span + 1e-6).all(), t.name)

    def test_f16_round_trip_is_exact_for_halves(self):
        x = np.array([0.5, -1.25, 1024.0, 0.0], dtype=np.float32)
        self.assertEqual(list(dequantize(quantize(x, GGMLType.F16), GGMLType.F16, 4)), list(x))

    def test_zero_block(self):
        y = dequantize(quantize(np.zeros(32, np.float32), GGMLType.Q4_0), GGMLType.Q4_0, 32)
        self.assertTrue((y == 0).all())


IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]  # kvalues_iq4nl
MXFP4 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]               # kvalues_mxfp4


class NonUniformGrids(unittest.TestCase):
    """IQ4_NL, IQ4_XS, MXFP4: element j < 16 is the low nibble of qs[j], j >= 16 the high one."""

    def test_iq4_nl(self):
        qs = bytes((j | ((15 - j) << 4)) for j in range(16))
        y = deq(h(0.5) + qs, GGMLType.IQ4_NL)
        for j in range(16):
            self.assertEqual(y[j], 0.5 * IQ4NL[j])
            self.assertEqual(y[16 + j], 0.5 * IQ4NL[15 - j])
        self.assertEqual(y[0], -63.5)

    def test_iq4_xs(self):
        rng = np.random.default_rng(5)
        qs = bytes(rng.integers(0, 256, 128, dtype=np.uint8))
        scales_h, scales_l = 0xE4B1, bytes([0x2F, 0x90, 0x51, 0xC7])
        y = deq(h(0.25) + struct.pack("<H", scales_h) + scales_l + qs, GGMLType.IQ4_XS)
        for e in range(256):
            j = e // 32
            ls = ((scales_l[j // 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4)
            byte = qs[16 * j + e % 16]
            q = byte & 15 if e % 32 < 16 else byte >> 4
            self.assertEqual(y[e], np.float32(0.25) * np.float32(ls - 32) * IQ4NL[q], e)
        # sub-block 0: ls = 15 | 1 << 4 = 31 -> scale -0.25
        self.assertEqual(y[0], -0.25 * IQ4NL[qs[0] & 15])

    def test_mxfp4(self):
        qs = bytes((j | ((15 - j) << 4)) for j in range(16))
        y = deq(bytes([127]) + qs, GGMLType.MXFP4)  # scale 2^-1
        for j in range(16):
            self.assertEqual(y[j], 0.5 * MXFP4[j])
            self.assertEqual(y[16 + j], 0.5 * MXFP4[15 - j])
        self.assertEqual(deq(bytes([0]) + qs, GGMLType.MXFP4)[1], 2.0 ** -128)
        self.assertEqual(deq(bytes([254]) + qs, GGMLType.MXFP4)[2], 2.0 ** 127)


class Errors(unittest.TestCase):
    def test_wrong_byte_count(self):
        with self.assertRaisesRegex(ValueError, "need 34 bytes"):
            dequantize(bytes(33), GGMLType.Q8_0, 32)

    def test_not_a_multiple_of_the_block(self):
        with self.assertRaisesRegex(ValueError, "multiple of the block size"):
            dequantize(bytes(34), GGMLType.Q8_0, 31)

    def test_unsupported_type(self):
        with self.assertRaisesRegex(ValueError, "IQ2_XXS.*not supported"):
            dequantize(bytes(66), GGMLType.IQ2_XXS, 256)

    def test_quantize_rejects_nan(self):
        with self.assertRaisesRegex(ValueError, "NaN"):
            quantize(np.full(32, np.nan, np.float32), GGMLType.Q8_0)


if __name__ == "__main__":
    unittest.main()
