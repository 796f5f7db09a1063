"""The safetensors header, read and checked as the safetensors reader checks it, torch-free.

Layout: 8 bytes little-endian header length N, N bytes of JSON ``{name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {str: str}}``, then the tensor bytes. The reader
(safetensors 0.4+) refuses a file whose tensors do not tile the data exactly (from byte 0, no
gaps, no overlaps, each ``end − begin`` = elements × item size) or whose size differs from
8 + N + the furthest end; we refuse the same files, so a folder that verifies also loads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.file_limits import MAX_SAFETENSORS_HEADER_BYTES, parse_json

ITEM_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
}


class HeaderError(ValueError):
    """The header is damaged; the message says how (the caller adds the file name)."""


@dataclass(frozen=True)
class HeaderEntry:
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _ints(value: Any, count: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list) or (count is not None and len(value) != count):
        raise TypeError("not a list of the right length")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise TypeError("not non-negative integers")
    return tuple(value)


def _entry(name: str, raw: Any) -> HeaderEntry:
    if not isinstance(raw, dict):
        raise HeaderError(f"damaged entry for tensor '{name}'")
    dtype = raw.get("dtype")
    if dtype not in ITEM_BYTES:
        raise HeaderError(f"tensor '{name}' has an unknown dtype {str(dtype)[:20]!r}")
    try:
        shape = _ints(raw.get("shape"))
        begin, end = _ints(raw.get("data_offsets"), 2)
    except TypeError as exc:
        raise HeaderError(f"damaged entry for tensor '{name}' ({exc})") from exc
    numel = 1
    for dim in shape:
        numel *= dim
    if end - begin != numel * ITEM_BYTES[dtype]:
        raise HeaderError(f"tensor '{name}': its offsets ({begin}, {end}) do not hold "
                          f"{list(shape)} {dtype}")
    return HeaderEntry(dtype, shape, begin, end)


def read_header(path: Path) -> tuple[dict[str, HeaderEntry], int, int]:
    """(entries by name, header length, file size) of a safetensors file; HeaderError when the
    safetensors reader would refuse it (OSError when it cannot be read)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise HeaderError("not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len < 2 or header_len > MAX_SAFETENSORS_HEADER_BYTES or 8 + header_len > size:
            raise HeaderError("not a safetensors file (bad header length)")
        text = handle.read(header_len)
    try:
        header = parse_json(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"not a safetensors file ({exc})") from exc
    if not isinstance(header, dict):
        raise HeaderError("not a safetensors file (header is not a table)")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise HeaderError("damaged __metadata__ (must map names to strings)")
    entries = {str(name): _entry(str(name), raw) for name, raw in header.items()}
    _check_tiling(entries, size, 8 + header_len)
    return entries, header_len, size


def _check_tiling(entries: dict[str, HeaderEntry], size: int, data_start: int) -> None:
    """Tensors cover the data from byte 0 without gaps or overlaps, and the file ends exactly
    at the furthest tensor end (measured over all tensors, not the last one listed)."""
    position = 0
    for name, entry in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != position:
            raise HeaderError(f"tensor '{name}' starts at byte {entry.begin}, expected "
                              f"{position} (overlapping or missing data)")
        position = entry.end
    data_end = max((entry.end for entry in entries.values()), default=0)
    expected = data_start + data_end
    if size < expected:
        raise HeaderError(f"file is truncated ({size:,} bytes, expected {expected:,})")
    if size > expected:
        raise HeaderError(f"{size - expected:,} unexpected bytes after the last tensor "
                          f"({size:,} bytes, expected {expected:,})")
