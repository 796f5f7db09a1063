"""Plain types of the MOSS-Speech engine: what it is built from, its own errors, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.device import DeviceChoice
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.tokenizer import MossTokenizer


class EngineInputError(ValueError):
    """A turn or setting the engine cannot use; ``category`` and ``action`` reach the UI."""

    def __init__(self, message: str, action: str, category: str = "input") -> None:
        super().__init__(message)
        self.category, self.action = category, action


def no_voice_error() -> EngineInputError:
    return EngineInputError(
        "No voice prompt is set, so MOSS-Speech has no voice to speak in (the app ships none).",
        "Choose a 3–20 s WAV or FLAC recording of a voice in Settings → Engine → Voice prompt.",
        "voice_prompt")


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
