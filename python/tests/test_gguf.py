"""GGUF reader and writer: hand-built files, round trips, llama.cpp-written files, bad files."""

import struct
import tempfile
import unittest
from pathlib import Path

import numpy as np

from kvec_ref.ggml_types import GGMLType
from kvec_ref.gguf import GGUFError, GGUFReader, GGUFValue, GGUFWriter, ValueType

ROOT = Path(__file__).resolve().parents[2]
VOCABS = ROOT / "data" / "tokenizer-vectors"


def gstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def handmade_gguf(kvs: list, tensors: list, alignment: int = 32, version: int = 3, data: bytes = b"") -> bytes:
    """Bytes of a GGUF file assembled field by field from the spec. kvs: (key, type, payload
    bytes); tensors: (name, ne, type, offset)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, payload in kvs:
        out += gstr(k) + struct.pack("<I", t) + payload
    for name, ne, t, off in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", t, off)
    if tensors:
        out += b"\0" * ((alignment - len(out) % alignment) % alignment)
    return out + data


class TempDir(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name: str, data: bytes) -> str:
        p = self.dir / name
        p.write_bytes(data)
        return str(p)


class HandmadeFiles(TempDir):
    def test_reads_every_value_type(self):
        kvs = [
            ("a.u8", 0, struct.pack("<B", 200)),
            ("a.i8", 1, struct.pack("<b", -5)),
            ("a.u16", 2, struct.pack("<H", 60000)),
            ("a.i16", 3, struct.pack("<h", -30000)),
            ("a.u32", 4, struct.pack("<I", 4000000000)),
            ("a.i32", 5, struct.pack("<i", -2000000000)),
            ("a.f32", 6, struct.pack("<f", 1.5)),
            ("a.bool", 7, b"\x01"),
            ("a.str", 8, gstr("héllo")),
            ("a.u64", 10, struct.pack("<Q", 2**63 + 1)),
            ("a.i64", 11, struct.pack("<q", -2**62)),
            ("a.f64", 12, struct.pack("<d", -0.1)),
            ("a.arr_i32", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, -2, 3)),
            ("a.arr_str", 9, struct.pack("<IQ", 8, 2) + gstr("x") + gstr("")),
            ("a.arr_nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 0, 2) + b"\x01\x02"
             + struct.pack("<IQ", 8, 1) + gstr("z")),
            ("a.arr_empty", 9, struct.pack("<IQ", 6, 0)),
        ]
        data = struct.pack("<4f", 1, 2, 3, 4)
        raw = handmade_gguf(kvs, [("t", (2, 2), 0, 0)], data=data)
        r = GGUFReader(self.write("m.gguf", raw))
        md = r.metadata
        self.assertEqual((md["a.u8"], md["a.i8"], md["a.u16"], md["a.i16"]), (200, -5, 60000, -30000))
        self.assertEqual((md["a.u32"], md["a.i32"], md["a.f32"], md["a.bool"]), (4000000000, -2000000000, 1.5, True))
        self.assertEqual((md["a.str"], md["a.u64"], md["a.i64"], md["a.f64"]), ("héllo", 2**63 + 1, -2**62, -0.1))
        self.assertEqual(list(md["a.arr_i32"]), [1, -2, 3])
        self.assertEqual(md["a.arr_str"], ["x", ""])
        self.assertEqual(list(md["a.arr_nested"][0]), [1, 2])
        self.assertEqual(md["a.arr_nested"][1], ["z"])
        self.assertEqual(len(md["a.arr_empty"]), 0)
        self.assertEqual(r.fields["a.u32"].type, ValueType.UINT32)
        self.assertEqual(r.fields["a.arr_str"].elem_type, ValueType.STRING)
        t = r.tensors["t"]
        self.assertEqual((t.ne, t.shape, t.n_bytes, t.file_offset % 32), ((2, 2), (2, 2), 16, 0))
        np.testing.assert_array_equal(r.tensor_f32("t"), [[1, 2], [3, 4]])

    def test_version_2_and_custom_alignment(self):
        kvs = [("general.alignment", 4, struct.pack("<I", 64))]
        data = struct.pack("<2f", 7, 8) + b"\0" * 56 + struct.pack("<2f", 9, 10)
        raw = handmade_gguf(kvs, [("a", (2,), 0, 0), ("b", (2,), 0, 64)], alignment=64, version=2, data=data)
        r = GGUFReader(self.write("v2.gguf", raw))
        self.assertEqual((r.version, r.alignment, r.data_offset % 64), (2, 64, 0))
        self.assertEqual(list(r.tensor_f32("b")), [9, 10])


class BadFiles(TempDir):
    def assertBad(self, raw: bytes, pattern: str):
        path = self.write("bad.gguf", raw)
        with self.assertRaisesRegex(GGUFError, pattern):
            GGUFReader(path)

    def test_magic_version_truncation(self):
        self.assertBad(b"GGML" + bytes(40), "not a GGUF file")
        self.assertBad(handmade_gguf([], [], version=1) + bytes(8), "version 1 is not supported")
        self.assertBad(handmade_gguf([("k", 8, gstr("value"))], [])[:-3], "truncated")
        self.assertBad(b"GGUF", "too small")

    def test_bad_metadata(self):
        self.assertBad(handmade_gguf([("k", 42, b"\0\0\0\0")], []), "unknown metadata value type 42")
        self.assertBad(handmade_gguf([("k", 4, b"\1\0\0\0"), ("k", 4, b"\2\0\0\0")], []), "duplicate metadata key")
        self.assertBad(handmade_gguf([("k", 7, b"\x02")], []), "bool")
        self.assertBad(handmade_gguf([("k", 9, struct.pack("<IQ", 4, 2**40))], []), "does not fit")
        self.assertBad(handmade_gguf([("general.alignment", 4, struct.pack("<I", 12))], []), "multiple of 8")

    def test_bad_tensors(self):
        self.assertBad(handmade_gguf([], [("t", (4,), 0, 0)], data=bytes(8)), "runs past the end")
        self.assertBad(handmade_gguf([], [("t", (4,), 0, 8)], data=bytes(64)), "not a multiple of the alignment")
        self.assertBad(handmade_gguf([], [("t", (4,), 99, 0)], data=bytes(64)), "unknown type id 99")
        self.assertBad(handmade_gguf([], [("t", (33,), 8, 0)], data=bytes(64)), "block size")
        self.assertBad(handmade_gguf([], [("t", (1, 1, 1, 1, 1), 0, 0)], data=bytes(64)), "5 dimensions")
        self.assertBad(handmade_gguf([], [("t", (4,), 0, 0), ("t", (4,), 0, 32)], data=bytes(64)), "duplicate tensor")
        self.assertBad(handmade_gguf([], [("a", (16,), 0, 0), ("b", (4,), 0, 32)], data=bytes(128)), "overlap")

    def test_missing_file(self):
        with self.assertRaises(FileNotFoundError):
            GGUFReader(self.dir / "none.gguf")


class RoundTrip(TempDir):
    def test_metadata_of_every_type(self):
        w = GGUFWriter(self.dir / "rt.gguf")
        values = {
            "v.u8": GGUFValue(ValueType.UINT8, 255), "v.i8": GGUFValue(ValueType.INT8, -128),
            "v.u16": GGUFValue(ValueType.UINT16, 65535), "v.i16": GGUFValue(ValueType.INT16, -1),
            "v.u32": 7, "v.i32": -7, "v.u64": 2**40, "v.i64": -2**40,
            "v.f32": 0.25, "v.f64": GGUFValue(ValueType.FLOAT64, 1e-300), "v.bool": False,
            "v.str": "tokens \u2581 and \U0001F600", "v.strs": ["a", "bb", "\u0120c"],
            "v.ints": [1, 2, -3], "v.floats": [0.5, -1.0], "v.bools": [True, False],
            "v.np_u8": np.array([1, 2, 255], dtype=np.uint8), "v.np_f64": np.array([1.5], dtype=np.float64),
            "v.nested": [[1, 2], ["x"]],
        }
        for k, v in values.items():
            w.add(k, v)
        w.write()
        r = GGUFReader(self.dir / "rt.gguf")
        types = {k: r.fields[k].type for k in values}
        self.assertEqual(types["v.u32"], ValueType.UINT32)
        self.assertEqual(types["v.i32"], ValueType.INT32)
        self.assertEqual(types["v.u64"], ValueType.UINT64)
        self.assertEqual(types["v.i64"], ValueType.INT64)
        self.assertEqual(types["v.f32"], ValueType.FLOAT32)
        self.assertEqual(r.fields["v.ints"].elem_type, ValueType.INT32)
        self.assertEqual(r.fields["v.np_u8"].elem_type, ValueType.UINT8)
        self.assertEqual(r.fields["v.np_f64"].elem_type, ValueType.FLOAT64)
        md = r.metadata
        self.assertEqual((md["v.u8"], md["v.i8"], md["v.u16"], md["v.i16"]), (255, -128, 65535, -1))
        self.assertEqual((md["v.f64"], md["v.bool"], md["v.str"]), (1e-300, False, values["v.str"]))
        self.assertEqual(md["v.strs"], values["v.strs"])
        self.assertEqual(list(md["v.ints"]), [1, 2, -3])
        self.assertEqual(list(md["v.bools"]), [True, False])
        self.assertEqual(list(md["v.nested"][0]), [1, 2])
        self.assertEqual(md["v.nested"][1], ["x"])

    def test_value_checks(self):
        w = GGUFWriter(self.dir / "x.gguf")
        with self.assertRaisesRegex(GGUFError, "does not fit in UINT8"):
            w.add("k", 256, ValueType.UINT8)
        with self.assertRaisesRegex(GGUFError, "one kind"):
            w.add("k", ["a", 1])
        with self.assertRaisesRegex(GGUFError, "cannot store"):
            w.add("k", object())

    def test_tensors_of_every_written_type(self):
        rng = np.random.default_rng(3)
        arrays = {
            "f32": (rng.standard_normal((3, 64)).astype(np.float32), GGMLType.F32, 0.0),
            "f16": (rng.standard_normal((2, 2, 32)).astype(np.float32), GGMLType.F16, 1e-3),
            "bf16": (rng.standard_normal(96).astype(np.float32), GGMLType.BF16, 1e-2),
            "q8": (rng.standard_normal((4, 64)).astype(np.float32), GGMLType.Q8_0, 2e-2),
            "q4": (rng.standard_normal((1, 1, 2, 32)).astype(np.float32), GGMLType.Q4_0, 0.5),
            "odd": (np.arange(7, dtype=np.float32), GGMLType.F32, 0.0),
        }
        for alignment in (32, 64):
            path = self.dir / f"t{alignment}.gguf"
            w = GGUFWriter(path, alignment=alignment)
            w.add("general.architecture", "test")
            for name, (a, t, _) in arrays.items():
                w.add_tensor(name, a, t)
            w.add_raw_tensor("raw", (32,), GGMLType.Q8_0, struct.pack("<e", 2.0) + bytes(range(32)))
            w.write()
            r = GGUFReader(path)
            self.assertEqual(r.alignment, alignment)
            for name, (a, t, tol) in arrays.items():
                info = r.tensors[name]
                self.assertEqual(info.ggml_type, t)
                self.assertEqual(info.shape, a.shape)
                self.assertEqual(info.file_offset % alignment, 0)
                got = r.tensor_f32(name)
                np.testing.assert_allclose(got, a, atol=tol * np.abs(a).max() + 1e-7, err_msg=name)
            np.testing.assert_array_equal(r.tensor_f32("raw"), np.arange(32) * 2.0)
            self.assertEqual(r.tensor_bytes("f32").tobytes(), arrays["f32"][0].tobytes())

    def test_writer_rejects_bad_tensors(self):
        w = GGUFWriter(self.dir / "x.gguf")
        with self.assertRaisesRegex(GGUFError, "block size"):
            w.add_tensor("a", np.zeros((2, 31), np.float32), GGMLType.Q8_0)
        w.add_tensor("a", np.zeros(4, np.float32))
        with self.assertRaisesRegex(GGUFError, "duplicate"):
            w.add_tensor("a", np.zeros(4, np.float32))
        with self.assertRaisesRegex(GGUFError, "not supported"):
            w.add_tensor("b", np.zeros(256, np.float32), GGMLType.Q4_K)
        with self.assertRaisesRegex(GGUFError, "needs 34 bytes"):
            w.add_raw_tensor("c", (32,), GGMLType.Q8_0, bytes(10))

    def test_llama_cpp_files_are_rewritten_byte_for_byte(self):
        # vocabulary-only GGUF files written by llama.cpp (tests/ of llama.cpp, MIT)
        files = sorted(VOCABS.glob("*.gguf"))
        self.assertTrue(files, f"no GGUF files in {VOCABS}")
        for f in files:
            r = GGUFReader(f)
            self.assertIn("tokenizer.ggml.tokens", r.metadata)
            w = GGUFWriter(self.dir / "copy.gguf", alignment=r.alignment)
            for k, v in r.fields.items():
                if k != "general.alignment":
                    w.add(k, v)
            w.write()
            self.assertEqual((self.dir / "copy.gguf").read_bytes(), f.read_bytes(), f.name)


if __name__ == "__main__":
    unittest.main()
