"""Shared test helpers for the voice loop: committed speech fixtures, track building, engines
that record what the pipeline asked of them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from app.audio.simulated import read_wav
from app.engine.base import EngineEvent, UserTurn
from app.engine.echo import EchoEngine
from app.vad.base import FRAME_S, Segmenter, VadParams, VadUpdate

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "audio"
RATE = 16000


@cache
def speech(name: str) -> np.ndarray:
    """A committed 16 kHz mono espeak-ng utterance (hello, question, stop, sea)."""
    pcm, rate = read_wav(FIXTURES / f"{name}.wav")
    assert rate == RATE
    pcm = pcm[:, 0].copy()
    pcm.setflags(write=False)
    return pcm


def track(parts: list[tuple[float, np.ndarray]], total_s: float,
          rate: int = RATE) -> np.ndarray:
    """Mono track with each clip starting at its time (seconds)."""
    out = np.zeros(int(total_s * rate), np.float32)
    for start_s, clip in parts:
        start = int(start_s * rate)
        out[start:start + len(clip)] += clip[: len(out) - start]
    return out


def duration(name: str) -> float:
    return len(speech(name)) / RATE


def vad_updates(probabilities: list[float], params: VadParams | None = None,
                may_be_swallowed: bool = False) -> list[VadUpdate]:
    """Segmenter updates for a scripted list of per-frame probabilities."""
    segmenter = Segmenter(params or VadParams())
    return [segmenter.update(p, i * FRAME_S, (i + 1) * FRAME_S, may_be_swallowed)
            for i, p in enumerate(probabilities)]


class RecordingEngine(EchoEngine):
    """The echo engine, remembering every call the worker made and what cancel looked like."""

    def __init__(self, **kwargs: float) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, int]] = []
        self.fed: dict[int, list[np.ndarray]] = {}
        self.turns: list[UserTurn] = []
        self.heard: list[tuple[int, int, int]] = []
        self.cancelled_turns: list[int] = []
        self.thread_names: set[str] = set()
        self.closed = False

    def feed_user_audio(self, turn_id: int, pcm_16k: np.ndarray) -> None:
        self.thread_names.add(threading.current_thread().name)
        self.calls.append(("feed", turn_id))
        self.fed.setdefault(turn_id, []).append(np.array(pcm_16k))

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        self.thread_names.add(threading.current_thread().name)
        self.calls.append(("respond", turn.turn_id))
        self.turns.append(turn)
        try:
            yield from super().respond(turn, cancel)
        finally:  # also when the worker closes the iterator early
            if cancel.is_set():
                self.cancelled_turns.append(turn.turn_id)

    def reply_heard(self, turn_id: int, heard_samples: int, sample_rate_hz: int) -> None:
        self.calls.append(("heard", turn_id))
        self.heard.append((turn_id, heard_samples, sample_rate_hz))

    def close(self) -> None:
        self.closed = True


class FakeSd:
    """Just enough of sounddevice: host APIs, devices, defaults, streams that record kwargs."""

    class PortAudioError(Exception):
        pass

    class WasapiSettings:
        def __init__(self, auto_convert: bool = False) -> None:
            self.auto_convert = auto_convert

    def __init__(self, apis: list[dict[str, Any]], devices: list[dict[str, Any]],
                 default: tuple[int, int] = (-1, -1), fail_open: bool = False) -> None:
        self.apis, self.devices, self.streams = apis, devices, []
        self.default = SimpleNamespace(device=list(default))
        fake = self

        class Stream:
            def __init__(self, **kwargs: Any) -> None:
                if fail_open:
                    raise fake.PortAudioError("Invalid sample rate")
                self.kwargs, self.latency, self.state = kwargs, 0.012, "created"
                fake.streams.append(self)

            def start(self) -> None:
                self.state = "started"

            def abort(self) -> None:
                self.state = "aborted"

            def close(self) -> None:
                self.state = "closed"

        self.InputStream = self.OutputStream = Stream

    def query_hostapis(self) -> list[dict[str, Any]]:
        return self.apis

    def query_devices(self) -> list[dict[str, Any]]:
        return self.devices
