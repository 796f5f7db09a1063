"""The MOSS-Speech engine's own error: a turn or setting it cannot use (no imports, so every
engine module can raise it without an import circle)."""

from __future__ import annotations


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
