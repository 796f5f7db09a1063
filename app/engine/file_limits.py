"""Bounds on every file header and config file the app parses.

A model or codec folder comes from the internet and may be edited by anyone, so each reader
checks sizes before it reads and refuses input that would take unbounded time or memory: a JSON
number with 10,000 digits, an array nested 100,000 deep, a YAML alias bomb, a 2 GB header. The
limits are far above what the published files need (noted per limit) and far below what hurts.
Torch-free; each problem is a :class:`~app.engine.folders.FolderError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIB = 1 << 20
# config.json, preprocessor_config.json, the shard index (the published index is ~50 KB)
MAX_CONFIG_JSON_BYTES = 4 * MIB
# tokenizer.json (Qwen3's is ~11 MB)
MAX_TOKENIZER_JSON_BYTES = 64 * MIB
# a safetensors header (446 tensors of the AR model: ~40 KB)
MAX_SAFETENSORS_HEADER_BYTES = 16 * MIB
# flow/config.yaml (a few KB) and the nodes it may expand to through YAML aliases
MAX_YAML_BYTES = 1 * MIB
MAX_YAML_NODES = 50_000
# data.pkl inside a torch checkpoint (a state dict's pickle is ~100 bytes per tensor)
MAX_PICKLE_BYTES = 32 * MIB
# campplus.onnx (~28 MB)
MAX_ONNX_BYTES = 512 * MIB
# digits of one integer in a JSON file (a 64-bit number has 20)
MAX_JSON_INT_DIGITS = 24


class BoundsError(ValueError):
    """A file is larger or deeper than any real one; the message says which limit."""


def check_size(path: Path, limit: int, what: str) -> int:
    """The file's size in bytes, or BoundsError when it is over ``limit``."""
    size = path.stat().st_size
    if size > limit:
        raise BoundsError(f"{size:,} bytes is too large for {what} (at most {limit:,})")
    return size


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise BoundsError(f"a number with {len(text)} digits")
    return int(text)


def _no_constant(name: str) -> Any:
    raise BoundsError(f"'{name}' is not a number JSON allows")


def parse_json(data: bytes | str) -> Any:
    """``json.loads`` with integers of at most 24 digits, no NaN/Infinity, and a RecursionError
    for deep nesting turned into BoundsError (time and memory stay linear in the size)."""
    try:
        return json.loads(data, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError as exc:
        raise BoundsError("nested too deeply") from exc


def read_json_bounded(path: Path, limit: int = MAX_CONFIG_JSON_BYTES) -> Any:
    """Parse a JSON file of at most ``limit`` bytes (OSError, ValueError or BoundsError)."""
    check_size(path, limit, "this file")
    return parse_json(path.read_bytes().decode("utf-8"))
