"""Native MOSS-Speech engine (PyTorch): the AR model and the codec.

Exports are lazy, so importing this package does not import torch until a name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY_EXPORTS = {
    "load_codec": "app.engine.moss_speech.codec",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
