"""Tensor type table of the GGML/GGUF format.

Source: the `ggml_type` enum of the GGUF specification (ggml docs/gguf.md, "File Structure")
and the block structs of ggml-common.h (`block_q4_0` ... `block_q6_K`): a quantised tensor is a
sequence of fixed-size blocks, each holding `block_elems` values in `block_bytes` bytes, and a
row (ne[0] values) always holds a whole number of blocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GGMLType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


QK_K = 256  # elements of a K-quant super-block (ggml-common.h: #define QK_K 256)


@dataclass(frozen=True)
class TypeTraits:
    name: str
    block_elems: int  # values per block
    block_bytes: int  # bytes per block


# Sizes from the static_asserts in ggml-common.h (e.g. sizeof(block_q4_K) == 2*2 + 12 + 128).
TYPE_TRAITS: dict[GGMLType, TypeTraits] = {
    GGMLType.F32: TypeTraits("F32", 1, 4),
    GGMLType.F16: TypeTraits("F16", 1, 2),
    GGMLType.BF16: TypeTraits("BF16", 1, 2),
    GGMLType.F64: TypeTraits("F64", 1, 8),
    GGMLType.I8: TypeTraits("I8", 1, 1),
    GGMLType.I16: TypeTraits("I16", 1, 2),
    GGMLType.I32: TypeTraits("I32", 1, 4),
    GGMLType.I64: TypeTraits("I64", 1, 8),
    GGMLType.Q4_0: TypeTraits("Q4_0", 32, 2 + 16),
    GGMLType.Q4_1: TypeTraits("Q4_1", 32, 2 + 2 + 16),
    GGMLType.Q5_0: TypeTraits("Q5_0", 32, 2 + 4 + 16),
    GGMLType.Q5_1: TypeTraits("Q5_1", 32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: TypeTraits("Q8_0", 32, 2 + 32),
    GGMLType.Q8_1: TypeTraits("Q8_1", 32, 2 + 2 + 32),
    GGMLType.Q2_K: TypeTraits("Q2_K", QK_K, QK_K // 16 + QK_K // 4 + 2 + 2),
    GGMLType.Q3_K: TypeTraits("Q3_K", QK_K, QK_K // 8 + QK_K // 4 + 12 + 2),
    GGMLType.Q4_K: TypeTraits("Q4_K", QK_K, 2 + 2 + 12 + QK_K // 2),
    GGMLType.Q5_K: TypeTraits("Q5_K", QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),
    GGMLType.Q6_K: TypeTraits("Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
    GGMLType.Q8_K: TypeTraits("Q8_K", QK_K, 4 + QK_K + 2 * (QK_K // 16)),
    GGMLType.IQ2_XXS: TypeTraits("IQ2_XXS", QK_K, 2 + 2 * (QK_K // 8)),
    GGMLType.IQ2_XS: TypeTraits("IQ2_XS", QK_K, 2 + 2 * (QK_K // 8) + QK_K // 32),
    GGMLType.IQ3_XXS: TypeTraits("IQ3_XXS", QK_K, 2 + 3 * (QK_K // 8)),
    GGMLType.IQ1_S: TypeTraits("IQ1_S", QK_K, 2 + QK_K // 8 + QK_K // 16),
    GGMLType.IQ4_NL: TypeTraits("IQ4_NL", 32, 2 + 16),
    GGMLType.IQ3_S: TypeTraits("IQ3_S", QK_K, 2 + 13 * (QK_K // 32) + QK_K // 64),
    GGMLType.IQ2_S: TypeTraits("IQ2_S", QK_K, 2 + QK_K // 4 + QK_K // 16),
    GGMLType.IQ4_XS: TypeTraits("IQ4_XS", QK_K, 2 + 2 + QK_K // 64 + QK_K // 2),
    GGMLType.IQ1_M: TypeTraits("IQ1_M", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GGMLType.TQ1_0: TypeTraits("TQ1_0", QK_K, (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + 2),
    GGMLType.TQ2_0: TypeTraits("TQ2_0", QK_K, QK_K // 4 + 2),
    GGMLType.MXFP4: TypeTraits("MXFP4", 32, 1 + 16),
}


def type_name(t: int) -> str:
    try:
        return TYPE_TRAITS[GGMLType(t)].name
    except (ValueError, KeyError):
        return f"type#{int(t)}"


def parse_type(name: str | int | GGMLType) -> GGMLType:
    """Accepts a GGMLType, its integer id, or its name in any case ("q8_0", "F16")."""
    if isinstance(name, GGMLType):
        return name
    if isinstance(name, int):
        try:
            return GGMLType(name)
        except ValueError:
            raise ValueError(f"unknown ggml type id {name}") from None
    key = str(name).strip().upper()
    for t, tr in TYPE_TRAITS.items():
        if tr.name == key:
            return t
    raise ValueError(f"unknown ggml type '{name}'")


def row_bytes(t: GGMLType, n: int) -> int:
    """Bytes of a row of n values of type t (n must be a multiple of the block size)."""
    tr = TYPE_TRAITS[t]
    if n % tr.block_elems != 0:
        raise ValueError(f"{tr.name}: {n} values is not a multiple of the block size {tr.block_elems}")
    return n // tr.block_elems * tr.block_bytes
