"""Driving the MOSS-Speech engine directly in tests: build, feed, respond, collect."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from app.engine.base import EngineEvent, ReplyAudio, ReplyText, StageTimed, UserTurn
from app.engine.moss_speech.build import build_engine
from app.engine.moss_speech.codec.testing import speech_like
from app.engine.moss_speech.engine import MossSpeechEngine
from app.engine.moss_speech.testing import tiny_engine_settings
from app.settings import Settings

FEED_SAMPLES = 320  # 20 ms pieces, like the voice loop's turn feed


def settings_for(folder: Path, **changes: object) -> Settings:
    """Tiny-engine settings; ``changes`` are dotted keys with '__' for '.'."""
    settings = tiny_engine_settings(folder)
    for key, value in changes.items():
        settings = settings.with_value(key.replace("__", "."), value)
    return settings


def make_engine(folder: Path, **changes: object) -> MossSpeechEngine:
    return build_engine(settings_for(folder, **changes))


def question(seconds: float = 1.0, seed: int = 11) -> np.ndarray:
    return speech_like(seconds, 16000, seed=seed)


def feed(engine: MossSpeechEngine, turn_id: int, pcm: np.ndarray) -> None:
    for start in range(0, len(pcm), FEED_SAMPLES):
        engine.feed_user_audio(turn_id, pcm[start:start + FEED_SAMPLES])


def respond(engine: MossSpeechEngine, turn: UserTurn, cancel: threading.Event | None = None,
            on_event: Callable[[EngineEvent], None] | None = None) -> list[EngineEvent]:
    events = []
    for event in engine.respond(turn, cancel or threading.Event()):
        events.append(event)
        if on_event is not None:
            on_event(event)
    return events


def audio_of(events: list[EngineEvent]) -> np.ndarray:
    pieces = [e.pcm for e in events if isinstance(e, ReplyAudio)]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def stages_of(events: list[EngineEvent]) -> dict[str, float]:
    return {e.stage: e.duration_ms for e in events if isinstance(e, StageTimed)}


def talk(engine: MossSpeechEngine, turn_id: int, pcm: np.ndarray,
         heard_samples: int | None = None) -> list[EngineEvent]:
    """One whole turn: feed, respond, and tell the engine what was heard (all by default)."""
    feed(engine, turn_id, pcm)
    events = respond(engine, UserTurn(turn_id, pcm))
    heard = len(audio_of(events)) if heard_samples is None else heard_samples
    engine.reply_heard(turn_id, heard, 24000)
    return events


def transcripts(engine: MossSpeechEngine) -> list[ReplyText]:
    """Run the idle work to its end; the transcript events it produced."""
    return [e for e in engine.idle_work(threading.Event()) if isinstance(e, ReplyText)]
