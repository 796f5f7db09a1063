"""The structure of an ONNX model file, read from its protobuf wire format (no onnx package, no
onnxruntime session, nothing allocated but the file's bytes).

An ONNX file is one ``ModelProto`` message: fields are (number, wire type) keys followed by a
varint, a fixed 4/8 bytes or a length-prefixed blob. Walking the model, its graph and every
subgraph checks that the bytes form that message exactly (a garbage or truncated file does not),
that the graph has nodes, inputs and outputs, that no tensor's raw bytes disagree with its shape,
and that no tensor points at external data files (onnxruntime would open paths named in the
model; the published CAM++ model has none). The first input and output shapes are returned so
the codec check can compare them with what the flow expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.engine.file_limits import MAX_ONNX_BYTES, check_size

MAX_DEPTH = 8  # graph → node → attribute → subgraph …
# TensorProto.DataType → bytes per element (the fixed-size ones)
ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
                 16: 2}


class OnnxFormatError(ValueError):
    """Not a well-formed ONNX model; the message says what is wrong."""


@dataclass
class OnnxSummary:
    ir_version: int = 0
    nodes: int = 0
    initializers: int = 0
    inputs: list[tuple[str, tuple[int | str, ...]]] = field(default_factory=list)
    outputs: list[tuple[str, tuple[int | str, ...]]] = field(default_factory=list)


Field = tuple[int, int, "int | memoryview"]  # (number, wire type, value or blob: no copy)


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise OnnxFormatError("a number runs past the end of the data (truncated?)")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: memoryview) -> list[Field]:
    """Every field of one message; OnnxFormatError unless the bytes are exactly that."""
    out: list[Field] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise OnnxFormatError("field number 0 (not protobuf data)")
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, wire, value))
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(data):
                raise OnnxFormatError("a fixed-size field runs past the end (truncated?)")
            out.append((number, wire, data[pos:pos + width]))
            pos += width
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise OnnxFormatError("a field runs past the end of the data (truncated?)")
            out.append((number, wire, data[pos:pos + length]))
            pos += length
        else:
            raise OnnxFormatError(f"wire type {wire} (not an ONNX model)")
    return out


def _blobs(items: list[Field], number: int) -> list[memoryview]:
    return [v for n, w, v in items if n == number and w == 2 and isinstance(v, memoryview)]


def _ints(items: list[Field], number: int) -> list[int]:
    values: list[int] = []
    for n, wire, value in items:
        if n != number:
            continue
        if wire == 0 and isinstance(value, int):
            values.append(value)
        elif wire == 2 and isinstance(value, memoryview):  # packed repeated varints
            pos = 0
            while pos < len(value):
                number_value, pos = _varint(value, pos)
                values.append(number_value)
    return values


def _text(items: list[Field], number: int) -> str:
    blobs = _blobs(items, number)
    return bytes(blobs[0][:1024]).decode("utf-8", "replace") if blobs else ""


def _tensor(data: memoryview) -> None:
    items = fields(data)
    name = _text(items, 8)
    if _blobs(items, 13) or 1 in _ints(items, 14):
        raise OnnxFormatError(f"tensor '{name[:60]}' points at an external data file; the app "
                              "opens no files a model names")
    raw = _blobs(items, 9)
    dtype = (_ints(items, 2) or [0])[0]
    if raw and dtype in ELEMENT_BYTES:
        numel = 1
        for dim in _ints(items, 1):
            numel *= dim
        if len(raw[0]) != numel * ELEMENT_BYTES[dtype]:
            raise OnnxFormatError(f"tensor '{name[:60]}' has {len(raw[0]):,} bytes of data, "
                                  f"its shape needs {numel * ELEMENT_BYTES[dtype]:,}")


def _value_info(data: memoryview) -> tuple[str, tuple[int | str, ...]]:
    items = fields(data)
    dims: list[int | str] = []
    for type_proto in _blobs(items, 2):
        for tensor_type in _blobs(fields(type_proto), 1):
            for shape in _blobs(fields(tensor_type), 2):
                for dim in _blobs(fields(shape), 1):
                    dim_items = fields(dim)
                    values = _ints(dim_items, 1)
                    dims.append(values[0] if values else (_text(dim_items, 2) or "?"))
    return _text(items, 1), tuple(dims)


def _attribute(data: memoryview, depth: int, summary: OnnxSummary) -> None:
    items = fields(data)
    for tensor in _blobs(items, 5) + _blobs(items, 10):
        _tensor(tensor)
    for graph in _blobs(items, 6) + _blobs(items, 11):
        _graph(graph, depth + 1, summary, top=False)


def _graph(data: memoryview, depth: int, summary: OnnxSummary, top: bool) -> None:
    if depth > MAX_DEPTH:
        raise OnnxFormatError("subgraphs nested too deeply")
    items = fields(data)
    nodes = _blobs(items, 1)
    for node in nodes:
        for attribute in _blobs(fields(node), 5):
            _attribute(attribute, depth, summary)
    initializers = _blobs(items, 5)
    for tensor in initializers:
        _tensor(tensor)
    if top:
        names = {_text(fields(t), 8) for t in initializers}
        summary.nodes, summary.initializers = len(nodes), len(initializers)
        summary.inputs = [v for v in map(_value_info, _blobs(items, 11)) if v[0] not in names]
        summary.outputs = [_value_info(v) for v in _blobs(items, 12)]


def read_onnx(path: Path) -> OnnxSummary:
    """Summary of a well-formed ONNX model file, or OnnxFormatError saying what is wrong."""
    check_size(path, MAX_ONNX_BYTES, "an ONNX model")
    data = memoryview(path.read_bytes())
    if not data:
        raise OnnxFormatError("empty file")
    items = fields(data)
    summary = OnnxSummary(ir_version=(_ints(items, 1) or [0])[0])
    graphs = _blobs(items, 7)
    if not summary.ir_version or len(graphs) != 1:
        raise OnnxFormatError("not an ONNX model (no IR version or no graph)")
    _graph(graphs[0], 0, summary, top=True)
    if not summary.nodes or not summary.inputs or not summary.outputs:
        raise OnnxFormatError("the graph has no nodes, inputs or outputs")
    return summary
