"""An ONNX file's weights left where they lie: the graph without them, and their byte ranges in the file.

The twin edits a graph before ONNX Runtime opens it. Parsed whole, a graph with embedded weights
would be held three times over (the parsed proto, the edited copy, ONNX Runtime's own). Instead the
top-level initializers' ``raw_data`` is cut out of the file's protobuf encoding here (read from a
memory map, by the wire format: field numbers from onnx.proto3), and the edited graph names each
range as ONNX external data of the file itself (``location``, ``offset``, ``length``), which ONNX
Runtime reads from the file. Weights already in external files stay as they are.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Dict, Iterator, Tuple

MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_NAME, TENSOR_RAW_DATA = 7, 5, 8, 9  # onnx.proto3 field numbers
SMALLEST = 1024  # smaller raw data stays in the graph (scalars the twin reads, shape constants)
Ranges = Dict[str, Tuple[int, int]]  # initializer name -> (offset, length) of its raw data in the file


def without_weights(path: str | Path) -> tuple[bytes, Ranges]:
    """The serialized model of ``path`` without its large embedded weights, and where they are."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        ranges: Ranges = {}
        parts = [_graph(buf, start, end, ranges) if field == MODEL_GRAPH else buf[key:end]
                 for field, key, start, end in _fields(buf, 0, len(buf))]
        return b"".join(parts), ranges


def refer(model, location: str, ranges: Ranges) -> None:
    """Point each initializer in ``ranges`` at its bytes in ``location`` (relative to the graph's folder)."""
    from onnx import TensorProto

    for tensor in model.graph.initializer:
        if tensor.name in ranges:
            offset, length = ranges[tensor.name]
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", offset), ("length", length)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)


def _graph(buf: mmap.mmap, start: int, end: int, ranges: Ranges) -> bytes:
    """The graph field re-encoded with its large initializers' raw data cut out (recorded in ``ranges``)."""
    parts = []
    for field, key, a, b in _fields(buf, start, end):
        if field != GRAPH_INITIALIZER:
            parts.append(buf[key:b])
            continue
        kept, name, raw = [], "", (0, 0)
        for tensor_field, tensor_key, ta, tb in _fields(buf, a, b):
            if tensor_field == TENSOR_RAW_DATA:
                raw = (ta, tb - ta)
            else:
                kept.append(buf[tensor_key:tb])
                name = bytes(buf[ta:tb]).decode() if tensor_field == TENSOR_NAME else name
        if raw[1] < SMALLEST:
            parts.append(buf[key:b])
            continue
        ranges[name] = raw
        parts.append(_delimited(GRAPH_INITIALIZER, b"".join(kept)))
    return _delimited(MODEL_GRAPH, b"".join(parts))


def _fields(buf: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, key offset, value start, value end) of each field of the message in ``buf[start:end]``."""
    i = start
    while i < end:
        key_at = i
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            a, (_, j) = i, _varint(buf, i)
        elif wire == 2:
            length, a = _varint(buf, i)
            j = a + length
        elif wire in (1, 5):  # fixed 64 / 32 bits
            a, j = i, i + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"not an ONNX model: protobuf wire type {wire} at byte {key_at}")
        yield field, key_at, a, j
        i = j
    if i != end:
        raise ValueError("not an ONNX model: a protobuf field runs past its message")


def _varint(buf: mmap.mmap, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _delimited(field: int, payload: bytes) -> bytes:
    return _encode(field << 3 | 2) + _encode(len(payload)) + payload


def _encode(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
