#!/usr/bin/env python3
"""Writes a copy of a GGUF file with changes, for the tests of bad input (reliability_test.sh).

    craft_gguf.py SRC DST [--set KEY=VALUE:TYPE]... [--drop KEY]... [--nan-tensor NAME]
                  [--drop-tensor NAME]...

TYPE: f32, u32, i32, str. VALUE for f32 may be nan or inf. --nan-tensor stores NaN in the first
element of an F32 tensor; --nan-score makes a tokenizer score NaN. Uses the independent reader/writer of python/kvec_ref.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from kvec_ref.gguf import GGUFReader, GGUFWriter, ValueType  # noqa: E402

TYPES = {"f32": ValueType.FLOAT32, "u32": ValueType.UINT32, "i32": ValueType.INT32, "str": ValueType.STRING}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--nan-tensor", action="append", default=[])
    ap.add_argument("--nan-score", action="store_true", help="NaN as the score of token 5")
    ap.add_argument("--drop-tensor", action="append", default=[], help="leave this tensor out")
    a = ap.parse_args()
    r = GGUFReader(a.src)
    w = GGUFWriter(a.dst, alignment=r.alignment)
    for key, v in r.fields.items():
        if key in a.drop or key == "general.alignment":
            continue
        w.fields[key] = v
    if a.nan_score:
        scores = w.fields["tokenizer.ggml.scores"]
        scores.value = np.array(scores.value, dtype=np.float32)
        scores.value[5] = np.nan
    for item in a.set:
        key, rest = item.split("=", 1)
        value, t = rest.rsplit(":", 1)
        vt = TYPES[t]
        parsed = float(value) if vt == ValueType.FLOAT32 else int(value) if vt != ValueType.STRING else value
        w.add(key, parsed, vt)
    for name, info in r.tensors.items():
        if name in a.drop_tensor:
            continue
        data = np.array(r.tensor_bytes(name), dtype=np.uint8)
        if name in a.nan_tensor:
            data[:4] = np.frombuffer(np.float32(np.nan).tobytes(), dtype=np.uint8)
        w.add_raw_tensor(name, info.ne, info.ggml_type, data)
    w.write()


if __name__ == "__main__":
    main()
