"""Native MOSS-Speech in PyTorch: the AR model and the codec (no trust_remote_code, no upstream
model code).

Public entry points, imported lazily so ``import app.engine.moss_speech`` stays cheap:
``load_model``, ``MossSpeechModel`` (``forward_grid``), ``load_tokenizer``, ``build_prompt``,
``generate_rows``, ``GenerationSession``, ``Sampling``, ``MossSpeechConfig``, ``load_codec``,
and the voice-loop engine: ``build_engine(settings)`` (the factory's hook), ``MossSpeechEngine``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MossSpeechConfig": "app.engine.moss_speech.config",
    "MossSpeechModel": "app.engine.moss_speech.model",
    "load_model": "app.engine.moss_speech.weights",
    "load_tokenizer": "app.engine.moss_speech.tokenizer",
    "build_prompt": "app.engine.moss_speech.prompt",
    "Turn": "app.engine.moss_speech.prompt",
    "generate_rows": "app.engine.moss_speech.generate",
    "GenerationSession": "app.engine.moss_speech.generate",
    "text_pass": "app.engine.moss_speech.generate",
    "Sampling": "app.engine.moss_speech.sampling",
    "reply_codes": "app.engine.moss_speech.reply",
    "reply_text": "app.engine.moss_speech.reply",
    "ReplyStream": "app.engine.moss_speech.reply",
    "load_codec": "app.engine.moss_speech.codec",
    "build_engine": "app.engine.moss_speech.build",
    "MossSpeechEngine": "app.engine.moss_speech.engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
