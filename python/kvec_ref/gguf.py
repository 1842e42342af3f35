"""GGUF v2/v3 reader and v3 writer.

Written from the GGUF specification (ggml docs/gguf.md, "File Structure"):

    header        magic "GGUF" (bytes 47 47 55 46), version u32, tensor_count u64, kv_count u64
                  (version 1 used u32 counts and string lengths; it is rejected here)
    metadata      kv_count x { key: string, value_type: u32, value }
                  string = { len: u64, bytes (UTF-8, no terminator) }
                  array  = { elem_type: u32, count: u64, values } (arrays may nest)
    tensor infos  tensor_count x { name: string, n_dims: u32, ne[n_dims]: u64, type: u32,
                                   offset: u64 (relative to the data section, multiple of ALIGNMENT) }
    padding       zeros up to the next multiple of ALIGNMENT (general.alignment, u32, default 32)
    data          tensor data; every tensor starts at a multiple of ALIGNMENT

All values are little-endian. ne[0] is the fastest-varying dimension (the row length), so a
tensor with ne = [n_in, n_out] is a numpy array of shape [n_out, n_in] (reversed order).

Reader: `GGUFReader(path)` maps the file read-only (numpy memmap); tensor data are views into
that map until dequantised. Writer: `GGUFWriter(path)`; `add(key, value, type=None)`,
`add_tensor(name, array, ggml_type)`, `write()`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from . import dequant
from .ggml_types import GGMLType, TYPE_TRAITS, parse_type, row_bytes, type_name

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS


class GGUFError(ValueError):
    """A file that is not a valid GGUF file, or a request the file cannot satisfy."""


class ValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# numpy little-endian dtype of every fixed-size value type
_NP_DTYPE = {
    ValueType.UINT8: np.dtype("u1"),
    ValueType.INT8: np.dtype("i1"),
    ValueType.UINT16: np.dtype("<u2"),
    ValueType.INT16: np.dtype("<i2"),
    ValueType.UINT32: np.dtype("<u4"),
    ValueType.INT32: np.dtype("<i4"),
    ValueType.FLOAT32: np.dtype("<f4"),
    ValueType.BOOL: np.dtype("u1"),
    ValueType.UINT64: np.dtype("<u8"),
    ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT64: np.dtype("<f8"),
}

_INT_RANGE = {
    ValueType.UINT8: (0, 2**8 - 1), ValueType.INT8: (-2**7, 2**7 - 1),
    ValueType.UINT16: (0, 2**16 - 1), ValueType.INT16: (-2**15, 2**15 - 1),
    ValueType.UINT32: (0, 2**32 - 1), ValueType.INT32: (-2**31, 2**31 - 1),
    ValueType.UINT64: (0, 2**64 - 1), ValueType.INT64: (-2**63, 2**63 - 1),
}


@dataclass
class GGUFValue:
    """A typed metadata value. For arrays, `type` is ARRAY and `elem_type` the element type;
    `value` is a numpy array (numeric and bool elements), a list of str (strings) or a list of
    GGUFValue (nested arrays)."""

    type: ValueType
    value: Any
    elem_type: ValueType | None = None


@dataclass
class TensorInfo:
    name: str
    ne: tuple[int, ...]          # GGUF dims, ne[0] fastest
    ggml_type: GGMLType
    offset: int                  # relative to the data section
    file_offset: int = 0         # absolute offset in the file
    n_bytes: int = 0

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape (reversed ne): [ne_{n-1}, ..., ne_0]."""
        return tuple(reversed(self.ne))

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)


def _to_plain(v: GGUFValue) -> Any:
    if v.type == ValueType.ARRAY:
        if v.elem_type == ValueType.ARRAY:
            return [_to_plain(x) for x in v.value]
        return v.value
    return v.value


# ============================================================================================
# Reader


class _Cursor:
    def __init__(self, buf: memoryview, path: str):
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated file: {what} at byte {self.pos} needs {n} bytes, "
                            f"file has {len(self.buf)}")

    def scalar(self, fmt: str, size: int, what: str):
        self.need(size, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(what + " length")
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        # surrogateescape keeps bytes that are not UTF-8 so that a re-written file is identical
        return s.decode("utf-8", errors="surrogateescape")

    def array(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        nbytes = dtype.itemsize * count
        self.need(nbytes, what)
        a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
        self.pos += nbytes
        return a


class GGUFReader:
    """Parses a GGUF file: `.metadata` (plain values), `.fields` (typed values), `.tensors`
    (name -> TensorInfo, in file order), `.version`, `.alignment`, `.data_offset`."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"{self.path}: no such file")
        if p.is_dir():
            raise GGUFError(f"{self.path}: is a directory, not a GGUF file")
        self.file_size = p.stat().st_size
        if self.file_size < 24:
            raise GGUFError(f"{self.path}: too small to be a GGUF file ({self.file_size} bytes)")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(memoryview(self._map), self.path)

        magic = bytes(self._map[:4])
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        cur.pos = 4
        self.version = cur.u32("version")
        if self.version == 1:
            raise GGUFError(f"{self.path}: GGUF version 1 is not supported (only 2 and 3)")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: unsupported GGUF version {self.version} "
                            f"(a big-endian file reads as a huge version)")
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # Every kv needs at least 12 bytes and every tensor info at least 24: reject absurd counts
        # before looping on them.
        if n_kv * 12 + n_tensors * 24 > self.file_size:
            raise GGUFError(f"{self.path}: header claims {n_kv} metadata entries and {n_tensors} "
                            f"tensors, more than the file can hold")

        self.fields: dict[str, GGUFValue] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            vt = self._value_type(cur, f"type of metadata '{key}'")
            if key in self.fields:
                raise GGUFError(f"{self.path}: duplicate metadata key '{key}'")
            self.fields[key] = self._read_value(cur, vt, key, depth=0)
        self.metadata: dict[str, Any] = {k: _to_plain(v) for k, v in self.fields.items()}

        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.fields:
            a = self.fields["general.alignment"]
            if a.type != ValueType.UINT32:
                raise GGUFError(f"{self.path}: general.alignment must be uint32, is {a.type.name}")
            if a.value == 0 or a.value % 8 != 0:
                raise GGUFError(f"{self.path}: general.alignment {a.value} is not a positive multiple of 8")
            self.alignment = int(a.value)

        infos: list[TensorInfo] = []
        self.tensors: dict[str, TensorInfo] = {}
        for i in range(n_tensors):
            name = cur.string(f"name of tensor #{i}")
            n_dims = cur.u32(f"dimension count of tensor '{name}'")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{self.path}: tensor '{name}' has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
            ne = tuple(cur.u64(f"dimension of tensor '{name}'") for _ in range(n_dims))
            if any(d == 0 or d >= 2**62 for d in ne):
                raise GGUFError(f"{self.path}: tensor '{name}' has an invalid shape {list(ne)}")
            t_id = cur.u32(f"type of tensor '{name}'")
            try:
                t = GGMLType(t_id)
                traits = TYPE_TRAITS[t]
            except (ValueError, KeyError):
                raise GGUFError(f"{self.path}: tensor '{name}' has unknown type id {t_id}") from None
            offset = cur.u64(f"offset of tensor '{name}'")
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor name '{name}'")
            if ne[0] % traits.block_elems != 0:
                raise GGUFError(f"{self.path}: tensor '{name}' ({traits.name}) has a row of {ne[0]} "
                                f"values, not a multiple of the block size {traits.block_elems}")
            if offset % self.alignment != 0:
                raise GGUFError(f"{self.path}: tensor '{name}' data offset {offset} is not a multiple "
                                f"of the alignment {self.alignment}")
            info = TensorInfo(name, ne, t, offset)
            info.n_bytes = row_bytes(t, ne[0]) * (info.n_elements // ne[0])
            self.tensors[name] = info
            infos.append(info)

        self.data_offset = _align(cur.pos, self.alignment)
        for info in infos:
            info.file_offset = self.data_offset + info.offset
            if info.file_offset + info.n_bytes > self.file_size:
                raise GGUFError(f"{self.path}: data of tensor '{info.name}' (bytes {info.file_offset}.."
                                f"{info.file_offset + info.n_bytes}) runs past the end of the file "
                                f"({self.file_size} bytes)")
        # overlapping tensors are a corrupt file
        spans = sorted((i.file_offset, i.file_offset + i.n_bytes, i.name) for i in infos)
        for (a0, a1, an), (b0, _b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise GGUFError(f"{self.path}: data of tensors '{an}' and '{bn}' overlap")

    # -- metadata ------------------------------------------------------------------------

    def _value_type(self, cur: _Cursor, what: str) -> ValueType:
        t = cur.u32(what)
        try:
            return ValueType(t)
        except ValueError:
            raise GGUFError(f"{self.path}: {what}: unknown metadata value type {t}") from None

    def _read_value(self, cur: _Cursor, vt: ValueType, key: str, depth: int) -> GGUFValue:
        if vt == ValueType.STRING:
            return GGUFValue(vt, cur.string(f"value of '{key}'"))
        if vt == ValueType.ARRAY:
            if depth > 8:
                raise GGUFError(f"{self.path}: metadata '{key}': arrays nested too deeply")
            et = self._value_type(cur, f"element type of '{key}'")
            n = cur.u64(f"length of '{key}'")
            if n > len(cur.buf) - cur.pos:  # every element takes at least one byte
                raise GGUFError(f"{self.path}: metadata '{key}': array of {n} elements does not fit in the file")
            if et == ValueType.STRING:
                items = [cur.string(f"element of '{key}'") for _ in range(n)]
            elif et == ValueType.ARRAY:
                items = [self._read_value(cur, et, key, depth + 1) for _ in range(n)]
            else:
                items = cur.array(_NP_DTYPE[et], n, f"elements of '{key}'")
                if et == ValueType.BOOL:
                    self._check_bool(items, key)
                    items = items.astype(bool)
                else:
                    items = items.astype(_NP_DTYPE[et].newbyteorder("="))
            return GGUFValue(vt, items, et)
        dt = _NP_DTYPE[vt]
        a = cur.array(dt, 1, f"value of '{key}'")
        if vt == ValueType.BOOL:
            self._check_bool(a, key)
            return GGUFValue(vt, bool(a[0]))
        if vt in (ValueType.FLOAT32, ValueType.FLOAT64):
            return GGUFValue(vt, float(a[0]))
        return GGUFValue(vt, int(a[0]))

    def _check_bool(self, a: np.ndarray, key: str) -> None:
        if (a > 1).any():
            raise GGUFError(f"{self.path}: metadata '{key}': bool byte other than 0 or 1")

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def typed_metadata(self, prefix: str = "") -> dict[str, GGUFValue]:
        """Typed values of every key starting with `prefix` (to copy them into another file)."""
        return {k: v for k, v in self.fields.items() if k.startswith(prefix)}

    # -- tensors -------------------------------------------------------------------------

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise GGUFError(f"{self.path}: no tensor named '{name}'") from None

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Raw bytes of a tensor (uint8 view into the mapped file)."""
        i = self._info(name)
        return self._map[i.file_offset:i.file_offset + i.n_bytes]

    def tensor_f32(self, name: str) -> np.ndarray:
        """Dequantised float32 copy, numpy shape = reversed ne."""
        i = self._info(name)
        try:
            flat = dequant.dequantize(self.tensor_bytes(name), i.ggml_type, i.n_elements)
        except ValueError as e:
            raise GGUFError(f"{self.path}: tensor '{name}': {e}") from None
        return flat.reshape(i.shape)

    def close(self) -> None:
        # numpy memmaps close when the last reference goes; drop ours.
        self._map = None  # type: ignore[assignment]


def _align(pos: int, alignment: int) -> int:
    return pos + (alignment - pos % alignment) % alignment


# ============================================================================================
# Writer


def infer_value(value: Any, vtype: ValueType | None = None, elem_type: ValueType | None = None) -> GGUFValue:
    """Turns a Python value into a typed GGUFValue.

    Without an explicit type: bool -> BOOL, int -> UINT32 if it fits (else INT32 / UINT64 /
    INT64), float -> FLOAT32, str -> STRING, numpy scalar -> its dtype, numpy array -> ARRAY of
    its dtype, list/tuple -> ARRAY whose element type comes from the elements (str -> STRING,
    bool -> BOOL, int -> INT32 if all fit, else INT64, float -> FLOAT32, list -> nested ARRAY).
    """
    if isinstance(value, GGUFValue):
        return value
    if vtype is not None:
        vtype = ValueType(vtype)
        if vtype == ValueType.ARRAY:
            return _array_value(value, elem_type)
        return GGUFValue(vtype, _check_scalar(vtype, value))
    if isinstance(value, (bool, np.bool_)):
        return GGUFValue(ValueType.BOOL, bool(value))
    if isinstance(value, np.generic):
        return GGUFValue(_value_type_of_dtype(value.dtype), value.item())
    if isinstance(value, int):
        for t in (ValueType.UINT32, ValueType.INT32, ValueType.UINT64, ValueType.INT64):
            lo, hi = _INT_RANGE[t]
            if lo <= value <= hi:
                return GGUFValue(t, value)
        raise GGUFError(f"integer {value} does not fit in 64 bits")
    if isinstance(value, float):
        return GGUFValue(ValueType.FLOAT32, value)
    if isinstance(value, str):
        return GGUFValue(ValueType.STRING, value)
    if isinstance(value, (np.ndarray, list, tuple)):
        return _array_value(value, elem_type)
    raise GGUFError(f"cannot store a value of Python type {type(value).__name__} in GGUF metadata")


def _value_type_of_dtype(dt: np.dtype) -> ValueType:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return ValueType.BOOL
    for vt, ndt in _NP_DTYPE.items():
        if vt != ValueType.BOOL and ndt.kind == dt.kind and ndt.itemsize == dt.itemsize:
            return vt
    raise GGUFError(f"numpy dtype {dt} has no GGUF metadata type")


def _check_scalar(t: ValueType, v: Any) -> Any:
    if t == ValueType.STRING:
        if not isinstance(v, str):
            raise GGUFError(f"STRING value expected, got {v!r}")
        return v
    if t == ValueType.BOOL:
        return bool(v)
    if t in (ValueType.FLOAT32, ValueType.FLOAT64):
        return float(v)
    iv = int(v)
    lo, hi = _INT_RANGE[t]
    if not lo <= iv <= hi or iv != v:
        raise GGUFError(f"value {v!r} does not fit in {t.name}")
    return iv


def _array_value(value: Any, elem_type: ValueType | None) -> GGUFValue:
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise GGUFError(f"metadata arrays must be 1-D, got shape {value.shape}")
        et = ValueType(elem_type) if elem_type is not None else _value_type_of_dtype(value.dtype)
        if et == ValueType.STRING:
            return GGUFValue(ValueType.ARRAY, [str(x) for x in value], et)
        if et == ValueType.ARRAY:
            raise GGUFError("a numpy array cannot hold nested arrays")
        return GGUFValue(ValueType.ARRAY, value.astype(bool if et == ValueType.BOOL else _NP_DTYPE[et].newbyteorder("=")), et)
    items = list(value)
    if elem_type is None:
        if not items:
            elem_type = ValueType.INT32
        elif all(isinstance(x, str) for x in items):
            elem_type = ValueType.STRING
        elif all(isinstance(x, (bool, np.bool_)) for x in items):
            elem_type = ValueType.BOOL
        elif all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in items):
            lo, hi = min(items), max(items)
            elem_type = ValueType.INT32 if -2**31 <= lo and hi < 2**31 else ValueType.INT64
        elif all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in items):
            elem_type = ValueType.FLOAT32
        elif all(isinstance(x, (list, tuple, np.ndarray, GGUFValue)) for x in items):
            elem_type = ValueType.ARRAY
        else:
            raise GGUFError("metadata array elements must all be of one kind (str, bool, int, float or array)")
    et = ValueType(elem_type)
    if et == ValueType.STRING:
        if not all(isinstance(x, str) for x in items):
            raise GGUFError("STRING array holds a non-string element")
        return GGUFValue(ValueType.ARRAY, items, et)
    if et == ValueType.ARRAY:
        return GGUFValue(ValueType.ARRAY, [x if isinstance(x, GGUFValue) else _array_value(x, None) for x in items], et)
    if et == ValueType.BOOL:
        return GGUFValue(ValueType.ARRAY, np.array(items, dtype=bool), et)
    arr = np.array(items, dtype=np.float64 if et in (ValueType.FLOAT32, ValueType.FLOAT64) else object)
    if et not in (ValueType.FLOAT32, ValueType.FLOAT64):
        lo, hi = _INT_RANGE[et]
        for x in items:
            if not lo <= int(x) <= hi:
                raise GGUFError(f"array element {x} does not fit in {et.name}")
    return GGUFValue(ValueType.ARRAY, arr.astype(_NP_DTYPE[et].newbyteorder("=")), et)


def _encode_string(s: str) -> bytes:
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _encode_payload(v: GGUFValue) -> bytes:
    """Value bytes without the leading type tag."""
    t = v.type
    if t == ValueType.STRING:
        return _encode_string(v.value)
    if t == ValueType.ARRAY:
        et = v.elem_type
        n = len(v.value)
        head = struct.pack("<IQ", int(et), n)
        if et == ValueType.STRING:
            return head + b"".join(_encode_string(s) for s in v.value)
        if et == ValueType.ARRAY:
            return head + b"".join(_encode_payload(x) for x in v.value)  # each: elem type, count, values
        return head + np.asarray(v.value).astype(_NP_DTYPE[et]).tobytes()
    return np.array([v.value], dtype=_NP_DTYPE[t]).tobytes()


@dataclass
class _PendingTensor:
    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLType
    source: Any           # float array to encode, or raw bytes
    raw: bool
    n_bytes: int
    offset: int = 0


class GGUFWriter:
    """Writes a GGUF v3 file. Tensors are encoded one at a time while writing."""

    def __init__(self, path: str | Path, alignment: int = DEFAULT_ALIGNMENT):
        if alignment <= 0 or alignment % 8 != 0:
            raise GGUFError(f"alignment {alignment} is not a positive multiple of 8")
        self.path = str(path)
        self.alignment = alignment
        self.fields: dict[str, GGUFValue] = {}
        self._tensors: list[_PendingTensor] = []
        self._names: set[str] = set()
        if alignment != DEFAULT_ALIGNMENT:
            self.add("general.alignment", alignment, ValueType.UINT32)

    def add(self, key: str, value: Any, vtype: ValueType | None = None, elem_type: ValueType | None = None) -> None:
        """Adds (or replaces) a metadata entry. See `infer_value` for type inference."""
        if not key or not isinstance(key, str):
            raise GGUFError(f"invalid metadata key {key!r}")
        if key == "general.alignment":
            v = infer_value(value, vtype or ValueType.UINT32)
            if v.type != ValueType.UINT32 or v.value != self.alignment:
                raise GGUFError("set general.alignment through GGUFWriter(alignment=...)")
        self.fields[key] = infer_value(value, vtype, elem_type)

    def add_tensor(self, name: str, array: np.ndarray, ggml_type: GGMLType | str | int = GGMLType.F32) -> None:
        """Adds a tensor from a float array of numpy shape [..., ne1, ne0], encoded as ggml_type."""
        t = parse_type(ggml_type)
        a = np.asarray(array)
        if a.ndim == 0 or a.ndim > MAX_DIMS:
            raise GGUFError(f"tensor '{name}': {a.ndim} dimensions (1..{MAX_DIMS} allowed)")
        if a.size == 0:
            raise GGUFError(f"tensor '{name}' is empty")
        if t not in dequant.SUPPORTED_QUANT:
            raise GGUFError(f"tensor '{name}': writing {type_name(t)} is not supported")
        ne = tuple(int(d) for d in reversed(a.shape))
        try:
            n_bytes = row_bytes(t, ne[0]) * (a.size // ne[0])
        except ValueError as e:
            raise GGUFError(f"tensor '{name}': {e}") from None
        self._push(_PendingTensor(name, ne, t, a, False, n_bytes))

    def add_raw_tensor(self, name: str, ne: Iterable[int], ggml_type: GGMLType | str | int, data: bytes | np.ndarray) -> None:
        """Adds already-encoded tensor bytes with GGUF dims ne (ne[0] fastest)."""
        t = parse_type(ggml_type)
        ne = tuple(int(d) for d in ne)
        if not 1 <= len(ne) <= MAX_DIMS or any(d <= 0 for d in ne):
            raise GGUFError(f"tensor '{name}': invalid dims {list(ne)}")
        n = int(np.prod(ne))
        try:
            n_bytes = row_bytes(t, ne[0]) * (n // ne[0])
        except ValueError as e:
            raise GGUFError(f"tensor '{name}': {e}") from None
        buf = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
        if buf.size != n_bytes:
            raise GGUFError(f"tensor '{name}': {type_name(t)} {list(ne)} needs {n_bytes} bytes, got {buf.size}")
        self._push(_PendingTensor(name, ne, t, buf, True, n_bytes))

    def _push(self, p: _PendingTensor) -> None:
        if not p.name or len(p.name.encode()) > 64:
            raise GGUFError(f"tensor name {p.name!r} must be 1..64 bytes")
        if p.name in self._names:
            raise GGUFError(f"duplicate tensor name '{p.name}'")
        self._names.add(p.name)
        self._tensors.append(p)

    def write(self) -> None:
        head = bytearray()
        head += GGUF_MAGIC
        head += struct.pack("<IQQ", 3, len(self._tensors), len(self.fields))
        for k, v in self.fields.items():
            head += _encode_string(k)
            head += struct.pack("<I", int(v.type))
            head += _encode_payload(v)
        offset = 0
        for p in self._tensors:
            p.offset = offset
            head += _encode_string(p.name)
            head += struct.pack("<I", len(p.ne))
            head += struct.pack(f"<{len(p.ne)}Q", *p.ne)
            head += struct.pack("<IQ", int(p.ggml_type), offset)
            offset = _align(offset + p.n_bytes, self.alignment)
        if self._tensors:  # the data section starts aligned (nothing to align when it is empty)
            head += b"\0" * (_align(len(head), self.alignment) - len(head))

        tmp = Path(self.path + ".tmp")
        with open(tmp, "wb") as f:
            f.write(head)
            for p in self._tensors:
                data = p.source if p.raw else dequant.quantize(p.source, p.ggml_type)
                if data.size != p.n_bytes:  # internal consistency
                    raise GGUFError(f"tensor '{p.name}': encoded {data.size} bytes, expected {p.n_bytes}")
                f.write(data.tobytes())
                f.write(b"\0" * (_align(p.n_bytes, self.alignment) - p.n_bytes))
        tmp.replace(self.path)
