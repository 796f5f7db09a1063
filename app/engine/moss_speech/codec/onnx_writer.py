"""A stand-in CAM++ speaker model written as ONNX bytes with a ~40-line protobuf encoder,
so tiny test codecs need neither the real model nor the ``onnx`` package.

Graph (opset 13): feats [1, T, 80] → square → mean over time → MatMul W [80, 192] → Add b →
Tanh → embedding [1, 192]. It depends on the voice (the mean of mean-normalised fbank frames
would not), which is all tests need.
"""

from __future__ import annotations

import numpy as np

_FLOAT = 1  # TensorProto.FLOAT
_ATTR_INTS, _ATTR_INT = 7, 2


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _field_bytes(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _tensor(name: str, array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array, dtype="<f4")
    dims = b"".join(_field_varint(1, d) for d in array.shape)
    return dims + _field_varint(2, _FLOAT) + _field_bytes(8, name) + _field_bytes(9,
                                                                                array.tobytes())


def _value_info(name: str, dims: list[int | str]) -> bytes:
    shape = b"".join(_field_bytes(1, _field_varint(1, d) if isinstance(d, int)
                                  else _field_bytes(2, d)) for d in dims)
    tensor_type = _field_varint(1, _FLOAT) + _field_bytes(2, shape)
    return _field_bytes(1, name) + _field_bytes(2, _field_bytes(1, tensor_type))


def _node(op: str, inputs: list[str], outputs: list[str], attributes: bytes = b"") -> bytes:
    return (b"".join(_field_bytes(1, i) for i in inputs)
            + b"".join(_field_bytes(2, o) for o in outputs)
            + _field_bytes(3, f"{op}_{outputs[0]}") + _field_bytes(4, op) + attributes)


def _attribute_ints(name: str, values: list[int]) -> bytes:
    body = _field_bytes(1, name) + _field_varint(20, _ATTR_INTS)
    body += b"".join(_field_varint(8, v) for v in values)
    return _field_bytes(5, body)


def _attribute_int(name: str, value: int) -> bytes:
    return _field_bytes(5, _field_bytes(1, name) + _field_varint(3, value)
                        + _field_varint(20, _ATTR_INT))


def speaker_model_bytes(weight: np.ndarray, bias: np.ndarray) -> bytes:
    """ONNX model bytes for ``tanh(mean_t(feats²) @ weight + bias)``; weight [80, D]."""
    n_mels, dim = weight.shape
    nodes = [
        _node("Mul", ["feats", "feats"], ["squared"]),
        _node("ReduceMean", ["squared"], ["pooled"],
              _attribute_ints("axes", [1]) + _attribute_int("keepdims", 0)),
        _node("MatMul", ["pooled", "W"], ["projected"]),
        _node("Add", ["projected", "b"], ["biased"]),
        _node("Tanh", ["biased"], ["embedding"]),
    ]
    graph = b"".join(_field_bytes(1, n) for n in nodes) + _field_bytes(2, "tiny_campplus")
    graph += _field_bytes(5, _tensor("W", weight)) + _field_bytes(5, _tensor("b", bias))
    graph += _field_bytes(11, _value_info("feats", [1, "T", n_mels]))
    graph += _field_bytes(12, _value_info("embedding", [1, dim]))
    opset = _field_bytes(1, "") + _field_varint(2, 13)
    return (_field_varint(1, 7) + _field_bytes(2, "moss-voice tests") + _field_bytes(7, graph)
            + _field_bytes(8, opset))


def speaker_model_reference(feats: np.ndarray, weight: np.ndarray, bias: np.ndarray
                            ) -> np.ndarray:
    """What the graph computes, in numpy (for tests): feats [T, 80] -> [D]."""
    return np.tanh((feats.astype(np.float64) ** 2).mean(axis=0) @ weight + bias).astype(
        np.float32)



