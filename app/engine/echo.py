"""The echo demo engine: replies with the user's own utterance, so the whole voice loop can be
tried with no model and no GPU. The UI labels it as a demo ("no model loaded").

The reply is the turn's audio with leading and trailing silence trimmed, resampled to 24 kHz
and yielded in ``chunk_ms`` chunks. Optional artificial delays make it behave like a slow
engine in tests and benchmarks; they are spent waiting on ``cancel``, so cancel is honoured
within one chunk (and at once during a delay).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import soxr

from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyAudio,
    ReplyDone,
    ReplyText,
    StageTimed,
    UserTurn,
)

REPLY_RATE_HZ = 24000
INPUT_RATE_HZ = 16000
TRIM_WINDOW_MS = 10.0
TRIM_MARGIN_MS = 50.0
TRIM_FLOOR_DBFS = -50.0  # windows quieter than this (or 40 dB under the peak) are silence


def trim_silence(pcm: np.ndarray, rate_hz: int) -> np.ndarray:
    """Cut leading and trailing silence, keeping a short margin around the speech."""
    window = max(1, int(rate_hz * TRIM_WINDOW_MS / 1000))
    count = len(pcm) // window
    if count == 0:
        return pcm
    rms = np.sqrt(np.mean(np.square(pcm[: count * window].reshape(count, window)), axis=1))
    level = 20 * np.log10(np.maximum(rms, 1e-10))
    loud = np.flatnonzero(level > max(TRIM_FLOOR_DBFS, float(level.max()) - 40.0))
    if len(loud) == 0:
        return pcm[:0]
    margin = int(rate_hz * TRIM_MARGIN_MS / 1000)
    start = max(0, loud[0] * window - margin)
    end = min(len(pcm), (loud[-1] + 1) * window + margin)
    return pcm[start:end]


class EchoEngine(Engine):
    def __init__(self, first_chunk_delay_ms: float = 0.0, chunk_delay_ms: float = 0.0,
                 chunk_ms: float = 40.0) -> None:
        self.first_chunk_delay_s = first_chunk_delay_ms / 1000.0
        self.chunk_delay_s = chunk_delay_ms / 1000.0
        self.chunk_samples = max(1, int(REPLY_RATE_HZ * chunk_ms / 1000))

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(name="Echo demo", is_demo=True, device="cpu",
                          detail="No model loaded: plays your own words back.")

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        started = time.perf_counter()
        if turn.text is not None and len(turn.pcm_16k) == 0:
            yield ReplyText(turn.turn_id, f"(echo demo) {turn.text}", final=True)
            yield ReplyDone(turn.turn_id)
            return
        speech = trim_silence(np.asarray(turn.pcm_16k, dtype=np.float32), INPUT_RATE_HZ)
        reply = soxr.resample(speech, INPUT_RATE_HZ, REPLY_RATE_HZ).astype(np.float32)  # [T]
        if cancel.wait(self.first_chunk_delay_s) if self.first_chunk_delay_s else cancel.is_set():
            yield ReplyDone(turn.turn_id, cancelled=True)
            return
        for index, start in enumerate(range(0, len(reply), self.chunk_samples)):
            if index and self.chunk_delay_s and cancel.wait(self.chunk_delay_s):
                break
            if cancel.is_set():
                break
            if index == 0:
                first_ms = (time.perf_counter() - started) * 1000
                yield StageTimed(turn.turn_id, "first_chunk", first_ms)
            yield ReplyAudio(turn.turn_id, reply[start:start + self.chunk_samples],
                             REPLY_RATE_HZ)
        if cancel.is_set():
            yield ReplyDone(turn.turn_id, cancelled=True)
            return
        seconds = len(reply) / REPLY_RATE_HZ
        yield ReplyText(turn.turn_id, f"[echo demo: replays your {seconds:.1f} s of speech]",
                        final=True)
        yield ReplyDone(turn.turn_id)
