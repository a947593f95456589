"""A GGUF file's header (metadata and tensor list) read incrementally from any byte source, so that
``python -m gcp doctor`` reads a model in a bucket with ranged reads instead of downloading it.

The header comes first in the file: magic ``GGUF``, version, tensor and key-value counts, the key-value
pairs (the tokenizer's arrays among them, often several MB), then one record a tensor (name, shape,
type, offset). The reader asks its source for more bytes only when a value runs past what it holds,
doubling each read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FIRST_READ = 256 * 1024
# GGUF value types -> struct format (strings and arrays are read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
# llama.cpp's general.file_type (LLAMA_FTYPE_*) names
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
              36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE"}


class GgufHeaderError(ValueError):
    """The bytes are not a GGUF header this reader understands."""


@dataclass
class GgufHeader:
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> shape
    header_bytes: int = 0  # how far into the file the header reaches
    bytes_read: int = 0  # what the reads fetched

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def parameters(self) -> int:
        return sum(math.prod(shape) for shape in self.tensors.values())

    @property
    def quantization(self) -> str:
        file_type = self.metadata.get("general.file_type")
        if file_type is None:
            return "unknown"
        return FILE_TYPES.get(int(file_type), f"type {file_type}")


class _Cursor:
    def __init__(self, read: Callable[[int, int], bytes]) -> None:
        self._read = read  # (start, length) -> bytes; fewer at the end of the file
        self._data = b""
        self._position = 0
        self._next_read = FIRST_READ

    @property
    def position(self) -> int:
        return self._position

    @property
    def fetched(self) -> int:
        return len(self._data)

    def take(self, count: int) -> bytes:
        while self._position + count > len(self._data):
            more = self._read(len(self._data), max(self._next_read, self._position + count - len(self._data)))
            if not more:
                raise GgufHeaderError("the file ends inside its GGUF header")
            self._data += more
            self._next_read *= 2
        chunk = self._data[self._position:self._position + count]
        self._position += count
        return chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item_kind, count = self.unpack("<I"), self.unpack("<Q")
            return [self.value(item_kind) for _ in range(count)]
        raise GgufHeaderError(f"unknown GGUF value type {kind}")


def read_gguf_header(read: Callable[[int, int], bytes]) -> GgufHeader:
    """The header, through ``read(start, length)``: a ranged read of the file."""
    cursor = _Cursor(read)
    if cursor.take(4) != b"GGUF":
        raise GgufHeaderError("not a GGUF file (no GGUF magic)")
    version = cursor.unpack("<I")
    if version < 2:
        raise GgufHeaderError(f"GGUF version {version} is too old")
    tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
    metadata = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.unpack("<I"))
    tensors = {}
    for _ in range(tensor_count):
        name = cursor.string()
        dims = tuple(cursor.unpack("<Q") for _ in range(cursor.unpack("<I")))
        cursor.unpack("<I")  # the tensor's ggml type
        cursor.unpack("<Q")  # its offset in the data section
        tensors[name] = dims
    return GgufHeader(version, metadata, tensors, cursor.position, cursor.fetched)
