"""Vectorised numpy (de)quantisation of GGML tensor types.

Written from the block layouts of ggml-common.h (struct fields and their order) and the
element order of the reference `dequantize_row_*` functions of ggml-quants.c (llama.cpp,
ggml/src). Every function works on a whole tensor at once: the raw bytes are viewed as a
[n_blocks, block_bytes] uint8 matrix, each field is a column slice of it, and the values of a
block are produced with index tables instead of per-element loops.

Arithmetic follows the reference order in float32 (e.g. Q4_K computes (d * sc) * q - dmin * m),
so results are normally bit-identical to ggml's scalar code.

Block layouts (byte offsets inside one block; f16 = IEEE half, little-endian):
  Q4_0  (32 values, 18 B): d f16 | qs[16]: value j<16 = (qs[j] & 15) - 8, j>=16 = (qs[j-16] >> 4) - 8; x = q*d
  Q4_1  (32, 20 B): d f16 | m f16 | qs[16]: same nibble order, x = q*d + m
  Q5_0  (32, 22 B): d | qh[4] (uint32 LE) | qs[16]: bit 4 of value j is bit j of qh; x = (q - 16)*d
  Q5_1  (32, 24 B): d | m | qh[4] | qs[16]: x = q*d + m
  Q8_0  (32, 34 B): d | qs[32] int8: x = q*d
  Q2_K (256, 84 B): scales[16] (low nibble scale, high nibble min) | qs[64] | d | dmin
  Q3_K (256, 110 B): hmask[32] | qs[64] | scales[12] (16 x 6-bit, offset 32) | d
  Q4_K (256, 144 B): d | dmin | scales[12] (8 x (6-bit scale, 6-bit min)) | qs[128]
  Q5_K (256, 176 B): d | dmin | scales[12] | qh[32] | qs[128]
  Q6_K (256, 210 B): ql[128] | qh[64] | scales[16] int8 | d
  IQ4_NL (32, 18 B): d | qs[16]: nibbles as Q4_0 index the grid kvalues_iq4nl; x = d*grid[q]
  IQ4_XS (256, 136 B): d | scales_h u16 | scales_l[4] | qs[128]: 8 sub-blocks of 32, 6-bit scale
        ls = (scales_l[j/2] >> 4*(j%2)) & 15 | ((scales_h >> 2j) & 3) << 4; x = d*(ls-32)*grid[q]
  MXFP4 (32, 17 B): e (E8M0) | qs[16]: nibbles as Q4_0 index kvalues_mxfp4; x = 2^(e-128)*val[q]
The K-quant element orders are spelled out beside each function.
"""

from __future__ import annotations

import numpy as np

from .ggml_types import GGMLType, QK_K, TYPE_TRAITS, type_name

# Blocks processed per step, to bound the temporaries when a large tensor is dequantised.
_CHUNK_BLOCKS = 1 << 16


# --------------------------------------------------------------------------------------------
# scalar formats


def f16_to_f32(u16: np.ndarray) -> np.ndarray:
    """uint16 bit patterns (any shape) -> float32 (exact)."""
    return np.ascontiguousarray(u16).view("<f2").astype(np.float32)


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns -> float32: a bf16 is the top half of an f32 (exact)."""
    return (np.ascontiguousarray(u16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, ((u >> 16) | np.uint32(64)).astype(np.uint16), rounded)
    return rounded


def _half_col(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The f16 field at byte `offset` of every block -> float32 [n_blocks, 1]."""
    return f16_to_f32(blocks[:, offset:offset + 2].copy().view("<u2"))


# --------------------------------------------------------------------------------------------
# 32-value block formats


def _dq_q4_0(b: np.ndarray) -> np.ndarray:  # b [nb, 18] -> [nb, 32]
    d = _half_col(b, 0)
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int8) - np.int8(8)
    return q.astype(np.float32) * d


def _dq_q4_1(b: np.ndarray) -> np.ndarray:  # b [nb, 20]
    d = _half_col(b, 0)
    m = _half_col(b, 2)
    qs = b[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    return q.astype(np.float32) * d + m


_BIT32 = np.arange(32, dtype=np.uint32)


def _q5_values(qh_bytes: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """5-bit unsigned values [nb, 32] from qh (4 bytes, LE uint32) and 16 nibble bytes."""
    qh = qh_bytes.copy().view("<u4")  # [nb, 1]
    high = ((qh >> _BIT32) & 1).astype(np.uint8) << 4  # [nb, 32], bit j -> value j
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    return low | high


def _dq_q5_0(b: np.ndarray) -> np.ndarray:  # b [nb, 22]
    d = _half_col(b, 0)
    q = _q5_values(b[:, 2:6], b[:, 6:22]).astype(np.int8) - np.int8(16)
    return q.astype(np.float32) * d


def _dq_q5_1(b: np.ndarray) -> np.ndarray:  # b [nb, 24]
    d = _half_col(b, 0)
    m = _half_col(b, 2)
    q = _q5_values(b[:, 4:8], b[:, 8:24])
    return q.astype(np.float32) * d + m


def _dq_q8_0(b: np.ndarray) -> np.ndarray:  # b [nb, 34]
    d = _half_col(b, 0)
    q = b[:, 2:34].copy().view(np.int8)
    return q.astype(np.float32) * d


# --------------------------------------------------------------------------------------------
# K-quants (super-blocks of 256 values). Index tables map an element e in 0..255 to the byte
# and bit position holding its quant.

_E = np.arange(QK_K)

# Q2_K / Q3_K: the block is two halves of 128 values; in a half, four passes j = 0..3 each take
# bits 2j..2j+1 of the same 32 bytes; a pass is two groups of 16 values, each with its own scale.
# So value e lives in byte (e // 128) * 32 + e % 32 at shift 2 * ((e % 128) // 32), and
# its scale index is e // 16.
_K2_BYTE = (_E // 128) * 32 + _E % 32
_K2_SHIFT = (2 * ((_E % 128) // 32)).astype(np.uint8)
# Q3_K high bit: hmask byte e % 32, bit e // 32 (the reference shifts the mask once per pass).
_K3_HBYTE = _E % 32
_K3_HBIT = (_E // 32).astype(np.uint8)

# Q4_K / Q5_K: four chunks of 64 values; a chunk uses 32 bytes, low nibbles for its first 32
# values (sub-block 2c) and high nibbles for the next 32 (sub-block 2c + 1). Sub-block = e // 32.
_K4_BYTE = (_E // 64) * 32 + _E % 32
_K4_SHIFT = (4 * ((_E // 32) % 2)).astype(np.uint8)
_K5_HBIT = (_E // 32).astype(np.uint8)  # Q5_K: bit (e // 32) of qh[e % 32]

# Q6_K: two halves of 128 values; in a half (ql 64 bytes, qh 32 bytes), value l + 32 g
# (g = 0..3, l = 0..31) takes the low nibble (g = 0, 1) or high nibble (g = 2, 3) of
# ql[l + 32 * (g % 2)] and bits 2g..2g+1 of qh[l]. Scale index = e // 16.
_G6 = (_E % 128) // 32
_L6 = _E % 32
_K6_QLBYTE = (_E // 128) * 64 + _L6 + 32 * (_G6 % 2)
_K6_QLSHIFT = (4 * (_G6 // 2)).astype(np.uint8)
_K6_QHBYTE = (_E // 128) * 32 + _L6
_K6_QHSHIFT = (2 * _G6).astype(np.uint8)

_SUB16 = _E // 16  # 16 groups of 16 values
_SUB32 = _E // 32  # 8 groups of 32 values


def _scale_min_k4(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K packed scales: 12 bytes -> eight 6-bit scales and eight 6-bit mins.

    Sub-blocks 0..3: scale = byte[j] & 63, min = byte[j + 4] & 63.
    Sub-blocks 4..7: low 4 bits in byte[j + 4] (scale: low nibble, min: high nibble),
    top 2 bits in the top 2 bits of byte[j - 4] (scale) and byte[j] (min).
    sc [nb, 12] -> (scales [nb, 8], mins [nb, 8]) as uint8.
    """
    lo_s = sc[:, 0:4] & 63
    lo_m = sc[:, 4:8] & 63
    hi_s = (sc[:, 8:12] & 0x0F) | ((sc[:, 0:4] >> 6) << 4)
    hi_m = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return np.concatenate([lo_s, hi_s], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def _dq_q2_k(b: np.ndarray) -> np.ndarray:  # b [nb, 84]
    scales = b[:, 0:16]
    qs = b[:, 16:80]
    d = _half_col(b, 80)
    dmin = _half_col(b, 82)
    q = (qs[:, _K2_BYTE] >> _K2_SHIFT) & 3  # [nb, 256]
    dl = d * (scales & 0x0F).astype(np.float32)  # [nb, 16]
    ml = dmin * (scales >> 4).astype(np.float32)
    return dl[:, _SUB16] * q.astype(np.float32) - ml[:, _SUB16]


def _q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """Q3_K: 12 bytes -> sixteen signed scales (6-bit value - 32). sc [nb, 12] -> int8 [nb, 16].

    Low 4 bits of scale s: byte s & 15 for s < 8, byte (s - 8) >> 4 for s >= 8.
    High 2 bits: bits 2*(s // 4) .. +1 of byte 8 + s % 4.
    """
    low = np.concatenate([sc[:, 0:8] & 0x0F, sc[:, 0:8] >> 4], axis=1)  # [nb, 16]
    s = np.arange(16)
    high = (sc[:, 8 + s % 4] >> (2 * (s // 4)).astype(np.uint8)) & 3
    return (low | (high << 4)).astype(np.int8) - np.int8(32)


def _dq_q3_k(b: np.ndarray) -> np.ndarray:  # b [nb, 110]
    hmask = b[:, 0:32]
    qs = b[:, 32:96]
    scales = _q3_k_scales(b[:, 96:108])
    d = _half_col(b, 108)
    q = ((qs[:, _K2_BYTE] >> _K2_SHIFT) & 3).astype(np.int8)
    hbit = (hmask[:, _K3_HBYTE] >> _K3_HBIT) & 1
    q = q - np.where(hbit == 1, np.int8(0), np.int8(4)).astype(np.int8)  # range -4..3
    dl = d * scales.astype(np.float32)  # [nb, 16]
    return dl[:, _SUB16] * q.astype(np.float32)


def _dq_q4_k(b: np.ndarray) -> np.ndarray:  # b [nb, 144]
    d = _half_col(b, 0)
    dmin = _half_col(b, 2)
    sc, mn = _scale_min_k4(b[:, 4:16])
    qs = b[:, 16:144]
    q = (qs[:, _K4_BYTE] >> _K4_SHIFT) & 0x0F
    d1 = d * sc.astype(np.float32)  # [nb, 8]
    m1 = dmin * mn.astype(np.float32)
    return d1[:, _SUB32] * q.astype(np.float32) - m1[:, _SUB32]


def _dq_q5_k(b: np.ndarray) -> np.ndarray:  # b [nb, 176]
    d = _half_col(b, 0)
    dmin = _half_col(b, 2)
    sc, mn = _scale_min_k4(b[:, 4:16])
    qh = b[:, 16:48]
    qs = b[:, 48:176]
    low = (qs[:, _K4_BYTE] >> _K4_SHIFT) & 0x0F
    high = (qh[:, _E % 32] >> _K5_HBIT) & 1
    q = low + (high << 4)
    d1 = d * sc.astype(np.float32)
    m1 = dmin * mn.astype(np.float32)
    return d1[:, _SUB32] * q.astype(np.float32) - m1[:, _SUB32]


def _dq_q6_k(b: np.ndarray) -> np.ndarray:  # b [nb, 210]
    ql = b[:, 0:128]
    qh = b[:, 128:192]
    scales = b[:, 192:208].copy().view(np.int8)  # [nb, 16]
    d = _half_col(b, 208)
    low = (ql[:, _K6_QLBYTE] >> _K6_QLSHIFT) & 0x0F
    high = (qh[:, _K6_QHBYTE] >> _K6_QHSHIFT) & 3
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)  # -32..31
    dl = d * scales.astype(np.float32)
    return dl[:, _SUB16] * q.astype(np.float32)


# The grids of ggml-common.h: IQ4_NL/IQ4_XS levels, and MXFP4's E2M1 values doubled (its scale
# 2^(e-128) is half the E8M0 value 2^(e-127)).
_IQ4NL_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                       dtype=np.float32)
_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _grid_nibbles(qs: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """qs [nb, 16] -> grid values [nb, 32], nibbles ordered as Q4_0."""
    return grid[np.concatenate([qs & 0x0F, qs >> 4], axis=1)]


def _dq_iq4_nl(b: np.ndarray) -> np.ndarray:  # b [nb, 18]
    return _grid_nibbles(b[:, 2:18], _IQ4NL_GRID) * _half_col(b, 0)


def _dq_iq4_xs(b: np.ndarray) -> np.ndarray:  # b [nb, 136]
    nb = b.shape[0]
    d = _half_col(b, 0)                                              # [nb, 1]
    scales_h = b[:, 2:4].copy().view("<u2").astype(np.int32)        # [nb, 1]
    j = np.arange(8)
    low = (b[:, 4 + j // 2].astype(np.int32) >> (4 * (j % 2))) & 15  # [nb, 8]
    ls = low | (((scales_h >> (2 * j)) & 3) << 4)                    # [nb, 8]
    dl = d * (ls - 32).astype(np.float32)                            # [nb, 8]
    q = _grid_nibbles(b[:, 8:136].reshape(nb * 8, 16), _IQ4NL_GRID).reshape(nb, 8, 32)
    return (q * dl[:, :, None]).reshape(nb, 256)


def _dq_mxfp4(b: np.ndarray) -> np.ndarray:  # b [nb, 17]
    d = np.ldexp(np.float32(1.0), b[:, 0:1].astype(np.int32) - 128).astype(np.float32)  # [nb, 1]
    return _grid_nibbles(b[:, 1:17], _MXFP4_VALUES) * d


_BLOCK_DEQUANT = {
    GGMLType.Q4_0: _dq_q4_0,
    GGMLType.Q4_1: _dq_q4_1,
    GGMLType.Q5_0: _dq_q5_0,
    GGMLType.Q5_1: _dq_q5_1,
    GGMLType.Q8_0: _dq_q8_0,
    GGMLType.Q2_K: _dq_q2_k,
    GGMLType.Q3_K: _dq_q3_k,
    GGMLType.Q4_K: _dq_q4_k,
    GGMLType.Q5_K: _dq_q5_k,
    GGMLType.Q6_K: _dq_q6_k,
    GGMLType.IQ4_NL: _dq_iq4_nl,
    GGMLType.IQ4_XS: _dq_iq4_xs,
    GGMLType.MXFP4: _dq_mxfp4,
}

SUPPORTED_DEQUANT = frozenset(_BLOCK_DEQUANT) | {
    GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64,
    GGMLType.I8, GGMLType.I16, GGMLType.I32,
}


def dequantize(raw, ggml_type: int, n_elements: int) -> np.ndarray:
    """Raw tensor bytes -> float32 array of n_elements values (1-D, in storage order).

    raw: bytes / bytearray / memoryview / uint8 numpy array holding exactly the tensor's bytes.
    """
    try:
        t = GGMLType(int(ggml_type))
    except ValueError:
        raise ValueError(f"unknown ggml type id {ggml_type}") from None
    if t not in SUPPORTED_DEQUANT:
        raise ValueError(f"dequantisation of {type_name(t)} is not supported "
                         f"(supported: {', '.join(sorted(TYPE_TRAITS[x].name for x in SUPPORTED_DEQUANT))})")
    buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1)
    if buf.dtype != np.uint8:
        buf = buf.view(np.uint8)
    tr = TYPE_TRAITS[t]
    if n_elements % tr.block_elems != 0:
        raise ValueError(f"{tr.name}: {n_elements} values is not a multiple of the block size "
                         f"{tr.block_elems}")
    n_blocks = n_elements // tr.block_elems
    if buf.size != n_blocks * tr.block_bytes:
        raise ValueError(f"{tr.name}: {n_elements} values need {n_blocks * tr.block_bytes} bytes, "
                         f"got {buf.size}")

    if t == GGMLType.F32:
        return buf.view("<f4").astype(np.float32)
    if t == GGMLType.F16:
        return f16_to_f32(buf.view("<u2"))
    if t == GGMLType.BF16:
        return bf16_to_f32(buf.view("<u2"))
    if t == GGMLType.F64:
        return buf.view("<f8").astype(np.float32)
    if t in (GGMLType.I8, GGMLType.I16, GGMLType.I32):
        return buf.view({GGMLType.I8: "i1", GGMLType.I16: "<i2", GGMLType.I32: "<i4"}[t]).astype(np.float32)

    fn = _BLOCK_DEQUANT[t]
    blocks = buf.reshape(n_blocks, tr.block_bytes)  # [n_blocks, block_bytes]
    out = np.empty((n_blocks, tr.block_elems), dtype=np.float32)  # [n_blocks, block_elems]
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN/inf scale in the file propagates
        for start in range(0, n_blocks, _CHUNK_BLOCKS):
            stop = min(n_blocks, start + _CHUNK_BLOCKS)
            out[start:stop] = fn(blocks[start:stop])
    return out.reshape(-1)


# --------------------------------------------------------------------------------------------
# Quantisation (what the GGUF writer needs). Same rules as ggml's reference quantize_row_*_ref
# for the simple block formats: scale from the absolute maximum (or min/max), round half away
# from zero, scale stored as f16.


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C roundf(): round half away from zero (numpy's round is half to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).astype("<f2").view(np.uint8)


def _blocks_of(x: np.ndarray, qk: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if x.size % qk != 0:
        raise ValueError(f"{x.size} values is not a multiple of the block size {qk}")
    return x.reshape(-1, qk)


def _safe_inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1).astype(np.float32), 0).astype(np.float32)


def _signed_max(xb: np.ndarray) -> np.ndarray:
    """Per block, the value of largest magnitude (sign kept; first one on ties). [nb, 1]."""
    idx = np.argmax(np.abs(xb), axis=1)
    return xb[np.arange(xb.shape[0]), idx][:, None]


def _q_q8_0(x: np.ndarray) -> np.ndarray:
    xb = _blocks_of(x, 32)  # [nb, 32]
    d = (np.abs(xb).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    q = _round_half_away(xb * _safe_inverse(d)).astype(np.int8)
    return np.concatenate([_f32_to_f16_bits(d).reshape(-1, 2), q.view(np.uint8)], axis=1)


def _q_q4_0(x: np.ndarray) -> np.ndarray:
    xb = _blocks_of(x, 32)
    d = (_signed_max(xb) / np.float32(-8)).astype(np.float32)
    v = xb * _safe_inverse(d) + np.float32(8.5)
    q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)  # C (int8_t) cast truncates
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_f32_to_f16_bits(d).reshape(-1, 2), qs], axis=1)


def _q_q4_1(x: np.ndarray) -> np.ndarray:
    xb = _blocks_of(x, 32)
    mn = xb.min(axis=1, keepdims=True)
    mx = xb.max(axis=1, keepdims=True)
    d = ((mx - mn) / np.float32(15)).astype(np.float32)
    v = (xb - mn) * _safe_inverse(d) + np.float32(0.5)
    q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_f32_to_f16_bits(d).reshape(-1, 2), _f32_to_f16_bits(mn).reshape(-1, 2), qs], axis=1)


def _pack_q5(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """q [nb, 32] 5-bit values -> (qh bytes [nb, 4], qs bytes [nb, 16])."""
    qs = (q[:, :16] & 0x0F) | ((q[:, 16:] & 0x0F) << 4)
    bits = ((q.astype(np.uint32) >> 4) & 1) << _BIT32
    qh = bits.sum(axis=1, dtype=np.uint32).astype("<u4").reshape(-1, 1).view(np.uint8)
    return qh, qs.astype(np.uint8)


def _q_q5_0(x: np.ndarray) -> np.ndarray:
    xb = _blocks_of(x, 32)
    d = (_signed_max(xb) / np.float32(-16)).astype(np.float32)
    v = xb * _safe_inverse(d) + np.float32(16.5)
    q = np.minimum(31, np.trunc(v).astype(np.int32)).astype(np.uint8)
    qh, qs = _pack_q5(q)
    return np.concatenate([_f32_to_f16_bits(d).reshape(-1, 2), qh, qs], axis=1)


def _q_q5_1(x: np.ndarray) -> np.ndarray:
    xb = _blocks_of(x, 32)
    mn = xb.min(axis=1, keepdims=True)
    mx = xb.max(axis=1, keepdims=True)
    d = ((mx - mn) / np.float32(31)).astype(np.float32)
    v = (xb - mn) * _safe_inverse(d) + np.float32(0.5)
    q = np.minimum(31, np.trunc(v).astype(np.int32)).astype(np.uint8)
    qh, qs = _pack_q5(q)
    return np.concatenate([_f32_to_f16_bits(d).reshape(-1, 2), _f32_to_f16_bits(mn).reshape(-1, 2), qh, qs], axis=1)


_BLOCK_QUANT = {
    GGMLType.Q8_0: _q_q8_0,
    GGMLType.Q4_0: _q_q4_0,
    GGMLType.Q4_1: _q_q4_1,
    GGMLType.Q5_0: _q_q5_0,
    GGMLType.Q5_1: _q_q5_1,
}

SUPPORTED_QUANT = frozenset(_BLOCK_QUANT) | {GGMLType.F32, GGMLType.F16, GGMLType.BF16}


def quantize(x: np.ndarray, ggml_type: int) -> np.ndarray:
    """float array (storage order; any shape, flattened) -> raw bytes (uint8 array) of the type."""
    t = GGMLType(int(ggml_type))
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    if t == GGMLType.F32:
        return x.astype("<f4").view(np.uint8)
    if t == GGMLType.F16:
        return _f32_to_f16_bits(x)
    if t == GGMLType.BF16:
        return f32_to_bf16_bits(x).astype("<u2").view(np.uint8)
    if t not in _BLOCK_QUANT:
        raise ValueError(f"quantisation to {type_name(t)} is not supported "
                         f"(supported: {', '.join(sorted(TYPE_TRAITS[s].name for s in SUPPORTED_QUANT))})")
    if not np.isfinite(x).all():
        raise ValueError(f"cannot quantise to {type_name(t)}: the tensor holds NaN or infinity")
    out = [_BLOCK_QUANT[t](x[i:i + 32 * _CHUNK_BLOCKS]) for i in range(0, x.size, 32 * _CHUNK_BLOCKS)]
    if not out:
        return np.zeros(0, dtype=np.uint8)
    return np.concatenate(out, axis=0).reshape(-1)
