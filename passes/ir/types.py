"""MLIR types as small Python objects, and their numpy representation in the emulator.

Value layout (the translator and every op rely on it):

| MLIR type              | uniform value            | per-lane value          |
|------------------------|--------------------------|-------------------------|
| iN / index / fN        | numpy scalar of `dtype`  | ndarray (L,)            |
| vector<n x T>          | ndarray (n,)             | ndarray (L, n)          |
| !llvm.ptr<AS>          | np.int64 address         | ndarray (L,) int64      |
| !llvm.struct / array   | tuple of element values  | tuple of element values |

L is the lane count of the wave being run (32 × batched workgroups). `index` is held as
int64; i1 as bool. LDS pointers (address space 3) are byte offsets into the workgroup's
LDS; global pointers (1, 0) are host addresses of the caller's tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np

from .caches import register_cache


@dataclass(frozen=True, slots=True)
class Type:
    kind: str  # "int" | "float" | "index" | "vector" | "ptr" | "struct" | "array" | "other"
    width: int = 0  # bits for int/float; address space for ptr
    name: str = ""  # float name ("f32", "bf16", "f8E4M3FN"), or the raw text for "other"
    elem: "Type | None" = None  # vector / array element
    count: int = 0  # vector / array length
    fields: tuple["Type", ...] = ()  # struct members

    def __str__(self) -> str:
        return type_text(self)

    @property
    def scalar(self) -> "Type":
        return self.elem if self.kind == "vector" else self

    @property
    def dtype(self) -> np.dtype:
        return dtype_of(self)

    @property
    def nbytes(self) -> int:
        return byte_size(self)


INDEX = Type("index", 64, "index")

_FLOATS = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
}
_FLOAT_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
_INTS = {1: np.dtype(np.bool_), 8: np.dtype(np.int8), 16: np.dtype(np.int16),
         32: np.dtype(np.int32), 64: np.dtype(np.int64)}
UNSIGNED = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
            64: np.dtype(np.uint64)}


def dtype_of(t: Type) -> np.dtype:
    k = t.kind
    if k == "int":
        if t.width in _INTS:
            return _INTS[t.width]
        return np.dtype((np.uint8, (t.width + 7) // 8))  # wide ints (i128) stay raw bytes
    if k == "index":
        return _INTS[64]
    if k == "float":
        return _FLOATS[t.name]
    if k == "vector":
        return dtype_of(t.elem)
    if k == "ptr":
        return _INTS[64]
    raise TypeError(f"no numpy dtype for MLIR type {t}")


def byte_size(t: Type) -> int:
    k = t.kind
    if k == "int":
        return max(1, t.width // 8) if t.width != 1 else 1
    if k == "float":
        return _FLOATS[t.name].itemsize
    if k == "index":
        return 8
    if k in ("vector", "array"):
        return t.count * byte_size(t.elem)
    if k == "ptr":
        return 8 if t.width not in (3, 5) else 4
    if k == "struct":
        return sum(byte_size(f) for f in t.fields)
    raise TypeError(f"no byte size for MLIR type {t}")


def type_text(t: Type) -> str:
    k = t.kind
    if k == "int":
        return f"i{t.width}"
    if k in ("float", "index", "other"):
        return t.name
    if k == "vector":
        return f"vector<{t.count}x{type_text(t.elem)}>"
    if k == "ptr":
        return f"!llvm.ptr<{t.width}>" if t.width else "!llvm.ptr"
    if k == "array":
        return f"!llvm.array<{t.count} x {type_text(t.elem)}>"
    if k == "struct":
        return "!llvm.struct<(" + ", ".join(type_text(f) for f in t.fields) + ")>"
    return t.name


# ----------------------------------------------------------------------------- parser

_TOKEN = re.compile(r"\s*(!llvm\.struct<|!llvm\.array<|!llvm\.ptr<\d+>|!llvm\.ptr|vector<|[()<>,]|x|[^\s(),<>]+)")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def peek(self, s: str) -> bool:
        rest = self.text[self.pos:].lstrip()
        return rest.startswith(s)

    def eat(self, s: str) -> None:
        rest = self.text[self.pos:]
        stripped = rest.lstrip()
        if not stripped.startswith(s):
            raise ValueError(f"cannot parse MLIR type {self.text!r}: expected {s!r} at {self.pos}")
        self.pos += len(rest) - len(stripped) + len(s)

    def ident(self) -> str:
        m = re.compile(r"\s*([A-Za-z0-9_.!]+)").match(self.text, self.pos)
        if not m:
            raise ValueError(f"cannot parse MLIR type {self.text!r} at {self.pos}")
        self.pos = m.end()
        return m.group(1)

    def type(self) -> Type:
        if self.peek("!llvm.struct<") or self.peek("struct<"):  # members spell nested structs bare
            self.eat("!llvm.struct<" if self.peek("!llvm.struct<") else "struct<")
            if self.peek("packed"):
                self.eat("packed")
            self.eat("(")
            fields = []
            while not self.peek(")"):
                fields.append(self.type())
                if self.peek(","):
                    self.eat(",")
            self.eat(")")
            self.eat(">")
            return Type("struct", fields=tuple(fields))
        if self.peek("!llvm.array<") or self.peek("array<"):
            self.eat("!llvm.array<" if self.peek("!llvm.array<") else "array<")
            n = int(self.ident())
            self.eat("x")
            elem = self.type()
            self.eat(">")
            return Type("array", elem=elem, count=n)
        if self.peek("vector<"):
            self.eat("vector<")
            m = re.compile(r"\s*(\d+)x").match(self.text, self.pos)
            if not m:
                raise ValueError(f"unsupported vector type {self.text!r} (only 1-D fixed vectors)")
            self.pos = m.end()
            elem = self.type()
            self.eat(">")
            return Type("vector", elem=elem, count=int(m.group(1)))
        if self.peek("!llvm.ptr<") or self.peek("ptr<"):
            self.eat("!llvm.ptr<" if self.peek("!llvm.ptr<") else "ptr<")
            asp = int(self.ident())
            self.eat(">")
            return Type("ptr", width=asp)
        if self.peek("!llvm.ptr") or self.peek("ptr"):
            self.eat("!llvm.ptr" if self.peek("!llvm.ptr") else "ptr")
            return Type("ptr", width=0)
        word = self.ident()
        if re.fullmatch(r"i\d+", word):
            return Type("int", int(word[1:]))
        if word == "index":
            return INDEX
        if word in _FLOATS:
            bits = _FLOAT_BITS.get(word, 8)
            return Type("float", bits, word)
        return Type("other", name=word)


@register_cache
@lru_cache(maxsize=4096)
def parse_type(text: str) -> Type:
    p = _Parser(text)
    try:
        t = p.type()
    except (ValueError, IndexError):
        return Type("other", name=text)  # function types, tokens, ...: opaque to the emulator
    if p.text[p.pos:].strip():
        return Type("other", name=text)
    return t


# ----------------------------------------------------------------------------- memref types

# memory spaces of a memref type, as the LLVM address space they lower to (AMDGPU)
_MEMREF_SPACES = {"": 0, "global": 1, "workgroup": 3, "private": 5}


@dataclass(frozen=True, slots=True)
class MemRef:
    """A ranked memref type with a static shape and layout: the byte address of element
    (i, j, ...) is the aligned base + (offset + sum(index_k * strides_k)) * elem bytes."""

    shape: tuple[int, ...]
    elem: Type
    space: int  # the LLVM address space (3: LDS)
    strides: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * byte_size(self.elem)


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside any <>, [] or ()."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<[(":
            depth += 1
        elif ch in ">])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()] if cur.strip() else parts


@register_cache
@lru_cache(maxsize=1024)
def parse_memref(text: str) -> MemRef | None:
    """The `MemRef` of a memref type's text, or None when it is not a ranked memref with a
    static shape, an identity or static `strided<>` layout and a known memory space."""
    text = text.strip()
    if not (text.startswith("memref<") and text.endswith(">")):
        return None
    head, *rest = _split_top(text[len("memref<"):-1])
    m = re.fullmatch(r"((?:\d+x)*)(.+)", head)
    elem = parse_type(m.group(2))
    if elem.kind == "other":
        return None
    shape = tuple(int(d) for d in m.group(1).split("x")[:-1])
    strides = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape)))
    offset, space = 0, 0
    for part in rest:
        strided = re.fullmatch(r"strided<\[([-\d, ]*)\](?:,\s*offset:\s*(-?\d+))?>", part)
        named = re.fullmatch(r"#gpu\.address_space<(\w+)>", part)
        if strided:
            strides = tuple(int(s) for s in strided.group(1).split(",") if s.strip())
            offset = int(strided.group(2) or 0)
        elif named and named.group(1) in _MEMREF_SPACES:
            space = _MEMREF_SPACES[named.group(1)]
        elif part.isdigit():
            space = int(part)
        else:
            return None  # a dynamic stride/offset, an affine map, an unknown memory space
    if len(strides) != len(shape):
        return None
    return MemRef(shape, elem, space, strides, offset)
