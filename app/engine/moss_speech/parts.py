"""Plain types of the MOSS-Speech engine: what it is built from, diagnostics (its own error
lives in :mod:`.errors`, re-exported here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.device import DeviceChoice
from app.engine.moss_speech.errors import EngineInputError, no_voice_error
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.tokenizer import MossTokenizer

__all__ = ["EngineInputError", "EngineParts", "PrefillStat", "no_voice_error"]


@dataclass
class EngineParts:
    """Everything loaded for an engine (see :mod:`app.engine.moss_speech.build`)."""

    model: MossSpeechModel
    tokenizer: MossTokenizer
    codec: MossSpeechCodec
    voice: VoiceConditioning | None
    device: DeviceChoice
    voice_path: Path | None = None


@dataclass(frozen=True)
class PrefillStat:
    reused_rows: int
    total_rows: int
