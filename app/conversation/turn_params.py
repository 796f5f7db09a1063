"""The turn controller's parameters, from the settings (see :mod:`app.conversation.turns`)."""

from __future__ import annotations

from dataclasses import dataclass

from app.settings import ListenMode, Settings


@dataclass(frozen=True)
class TurnParams:
    mode: ListenMode = "always_listening"
    barge_in: bool = True
    barge_in_min_speech_ms: float = 64.0
    pre_roll_ms: float = 300.0
    speculative_start: bool = True
    speculative_pause_ms: float = 150.0
    max_user_turn_s: float = 60.0
    # Semantic end of turn (issue 23; the pipeline turns it off when the model is missing):
    smart_endpoint: bool = False
    smart_pause_ms: float = 150.0  # ask the model at this much silence ...
    endpoint_silence_ms: float = 500.0  # ... end here if it has not answered ...
    smart_long_silence_ms: float = 1800.0  # ... and here at the latest when it said "not yet"
    smart_threshold: float = 0.85  # finished at or above: end early (speech going on resumes)
    smart_warmup_silence_ms: float = 400.0  # ... at this silence while the canceller warms up
    smart_unfinished_threshold: float = 0.3  # under: wait up to the long silence

    @classmethod
    def from_settings(cls, settings: Settings) -> TurnParams:
        vad = settings.vad
        return cls(mode=settings.turn.mode,
                   barge_in=settings.turn.barge_in and settings.echo.mode != "half_duplex",
                   barge_in_min_speech_ms=settings.turn.barge_in_min_speech_ms,
                   pre_roll_ms=vad.pre_roll_ms,
                   speculative_start=settings.engine.speculative_start,
                   speculative_pause_ms=settings.engine.speculative_pause_ms,
                   max_user_turn_s=settings.turn.max_user_turn_s,
                   smart_endpoint=vad.smart_endpoint, smart_pause_ms=vad.smart_pause_ms,
                   endpoint_silence_ms=vad.endpoint_silence_ms,
                   smart_long_silence_ms=max(vad.smart_long_silence_ms,
                                             vad.endpoint_silence_ms),
                   smart_threshold=vad.smart_threshold,
                   smart_warmup_silence_ms=min(max(vad.smart_warmup_silence_ms,
                                                   vad.smart_pause_ms),
                                               vad.endpoint_silence_ms),
                   smart_unfinished_threshold=min(vad.smart_unfinished_threshold,
                                                  vad.smart_threshold))

    @property
    def smart(self) -> bool:
        return self.smart_endpoint and self.mode == "always_listening"
