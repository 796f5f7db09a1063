"""A scripted ConversationPort: a short simulated conversation for ``--screenshot --demo`` and
for GUI tests, until the real voice loop is wired in (then the echo pipeline replaces it).

It behaves like the pipeline towards the UI: its own thread fills two ring buffers with
generated speech-like audio frame by frame and calls the subscribed sinks with events at their
scripted times. Nothing here is a model: the engine it reports is labelled as a simulation, and
its latency figures are made up for the picture, not measured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.engine.base import STAGES, EngineInfo
from app.events import (
    BargeInRecord,
    Command,
    ConversationState,
    EngineStatusChanged,
    PipelineEvent,
    ReplyFinished,
    ReplyStarted,
    Shutdown,
    StateChanged,
    TranscriptUpdated,
    TurnMeasured,
    TurnRecord,
    UserSpeechStarted,
    UserTurnEnded,
)

MIC_RATE_HZ, REPLY_RATE_HZ = 16000, 24000
FRAME_S = 0.02
ENDPOINT_S = 0.5
THINK_S = 0.27  # engine stages before the first audible sample (simulated)
SIMULATED_STAGES_MS = dict(zip(STAGES, (500.0, 38.0, 92.0, 27.0, 63.0, 80.0), strict=True))
SIMULATED_ENGINE = EngineInfo(name="echo (simulated conversation)", is_demo=True, device="cpu",
                              detail="scripted demo: no model, no microphone")


class RingBuffer:
    """Fixed-size float32 ring of the newest samples; one writer thread, any reader thread."""

    def __init__(self, capacity: int, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._data = np.zeros(capacity, np.float32)
        self._written = 0
        self._lock = threading.Lock()

    def write(self, pcm: np.ndarray) -> None:
        pcm = pcm[-len(self._data):]
        with self._lock:
            start = self._written % len(self._data)
            first = min(len(pcm), len(self._data) - start)
            self._data[start:start + first] = pcm[:first]
            self._data[:len(pcm) - first] = pcm[first:]
            self._written += len(pcm)

    def read_latest(self, out: np.ndarray) -> int:
        n = min(len(out), len(self._data))
        with self._lock:
            available = min(n, self._written)
            end = self._written % len(self._data)
            tail = out[len(out) - available:]
            first = min(available, end)
            tail[available - first:] = self._data[end - first:end]
            tail[:available - first] = self._data[len(self._data) - (available - first):]
        out[:len(out) - available] = 0.0
        return available


def speech_like(duration_s: float, rate_hz: int, f0_hz: float, seed: int) -> np.ndarray:
    """Voiced syllables (harmonics of a gliding f0 under a ~4 Hz envelope), deterministic."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(duration_s * rate_hz)) / rate_hz
    f0 = f0_hz * (1.0 + 0.12 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)))
    phase = 2 * np.pi * np.cumsum(f0) / rate_hz
    voice = sum(np.sin(k * phase) / k for k in range(1, 7))
    syllables = np.clip(np.sin(2 * np.pi * rng.uniform(3.2, 4.4) * t) ** 2 * 1.4 - 0.15, 0, 1)
    edges = np.minimum(1.0, np.minimum(t, duration_s - t) / 0.05)
    audio = 0.32 * voice * syllables * edges + rng.normal(0, 0.004, len(t))
    return audio.astype(np.float32)


@dataclass(frozen=True)
class DemoTurn:
    user_text: str
    user_s: float
    reply_text: str
    reply_s: float
    interrupted_after_s: float | None = None  # the next turn barges in here


DEMO_TURNS = (
    DemoTurn("Hi! Can you hear me all right?", 1.5, "Yes, loud and clear. What would you like "
             "to talk about?", 2.4),
    DemoTurn("Tell me something surprising about Mars.", 1.8, "A day on Mars lasts about forty "
             "minutes longer than a day on Earth, and its tallest volcano, Olympus Mons, is "
             "nearly three times the height of Everest.", 4.2, interrupted_after_s=1.6),
    DemoTurn("Wait, how cold does it get there?", 1.6, "At night it can drop to about minus "
             "eighty degrees Celsius, colder than Antarctica in winter.", 3.6),
)


def _words_over(text: str, start_s: float, end_s: float) -> list[tuple[float, str]]:
    """The text revealed word by word between two times (text-branch fill-in)."""
    words = text.split()
    step = (end_s - start_s) / max(1, len(words))
    return [(start_s + (i + 1) * step, " ".join(words[:i + 1])) for i in range(len(words))]


def build_script(turns: tuple[DemoTurn, ...] = DEMO_TURNS,
                 stop_before_end_s: float = 1.2) -> tuple[list[tuple[float, PipelineEvent]],
                                                          np.ndarray, np.ndarray, float]:
    """(timed events, mic audio, reply audio, end time); the last reply is left playing."""
    events: list[tuple[float, PipelineEvent]] = [
        (0.0, EngineStatusChanged(SIMULATED_ENGINE)),
        (0.0, StateChanged(ConversationState.LISTENING, 0.0))]
    total_s = 0.6 + sum(t.user_s + ENDPOINT_S + THINK_S + t.reply_s + 0.6 for t in turns)
    mic = np.random.default_rng(1).normal(0, 0.003, int(total_s * MIC_RATE_HZ)).astype(np.float32)
    reply = np.zeros(int(total_s * REPLY_RATE_HZ), np.float32)
    t0 = 0.6
    for turn_id, turn in enumerate(turns, start=1):
        user_end = t0 + turn.user_s
        start = int(t0 * MIC_RATE_HZ)
        voice = speech_like(turn.user_s, MIC_RATE_HZ, 135.0, turn_id)
        mic[start:start + len(voice)] += voice[:len(mic) - start]
        reply_start = user_end + ENDPOINT_S + THINK_S
        heard_s = turn.interrupted_after_s or turn.reply_s
        rs = int(reply_start * REPLY_RATE_HZ)
        sound = speech_like(heard_s, REPLY_RATE_HZ, 205.0, 10 + turn_id)
        reply[rs:rs + len(sound)] = sound[:len(reply) - rs]
        events += [(t0, UserSpeechStarted(turn_id, t0)),
                   (t0, StateChanged(ConversationState.USER_SPEAKING, t0)),
                   (user_end, StateChanged(ConversationState.ENDPOINTING, user_end)),
                   (user_end + ENDPOINT_S, UserTurnEnded(turn_id, user_end + ENDPOINT_S,
                                                         turn.user_s)),
                   (user_end + ENDPOINT_S, StateChanged(ConversationState.RESPONDING,
                                                        user_end + ENDPOINT_S)),
                   (reply_start, ReplyStarted(turn_id, reply_start)),
                   (reply_start, StateChanged(ConversationState.SPEAKING, reply_start))]
        events += [(at, TranscriptUpdated(turn_id, "user", text, final=False))
                   for at, text in _words_over(turn.user_text, user_end + 0.2, reply_start)]
        events.append((reply_start, TranscriptUpdated(turn_id, "user", turn.user_text, True)))
        events += _reply_events(turn_id, turn, reply_start, user_end)
        t0 = reply_start + (turn.interrupted_after_s - 0.25 if turn.interrupted_after_s
                            else turn.reply_s + 0.6)
    end_s = t0 - 0.6 - stop_before_end_s
    return sorted(events, key=lambda item: item[0]), mic, reply, end_s


def _reply_events(turn_id: int, turn: DemoTurn, start: float,
                  user_end: float) -> list[tuple[float, PipelineEvent]]:
    heard_s = turn.interrupted_after_s
    end = start + (heard_s or turn.reply_s)
    words = turn.reply_text.split()
    if heard_s is not None:  # the text branch transcribes only what was heard
        words = words[:max(1, int(len(words) * heard_s / turn.reply_s))]
    text = " ".join(words)
    events: list[tuple[float, PipelineEvent]] = [
        (at, TranscriptUpdated(turn_id, "assistant", partial))
        for at, partial in _words_over(text, start + 0.3, end)]
    barge = None
    if heard_s is not None:
        onset = end - 0.25
        barge = BargeInRecord(onset, onset + 0.1, end + 0.06, (end + 0.06 - onset) * 1000)
        events.append((end, StateChanged(ConversationState.INTERRUPTED, end)))
    else:
        events.append((end, StateChanged(ConversationState.LISTENING, end)))
    events += [
        (end, ReplyFinished(turn_id, heard_s is not None, (heard_s or turn.reply_s) * 1000)),
        (end, TranscriptUpdated(turn_id, "assistant", text, True,
                                heard_s * 1000 if heard_s is not None else None)),
        (end, TurnMeasured(TurnRecord(
            turn_id, user_end - turn.user_s, user_end, user_end + ENDPOINT_S,
            start - 0.08, start, (start - user_end) * 1000, dict(SIMULATED_STAGES_MS),
            (heard_s or turn.reply_s) * 1000, barge)))]
    return events


class DemoConversationPort:
    """ConversationPort that plays :func:`build_script` on its own thread.

    ``speed`` > 1 plays faster than real time; ``finished`` is set when the script is done.
    """

    def __init__(self, speed: float = 1.0, turns: tuple[DemoTurn, ...] = DEMO_TURNS) -> None:
        self.speed = speed
        self.events, self._mic_audio, self._reply_audio, self.end_s = build_script(turns)
        self.mic_waveform = RingBuffer(MIC_RATE_HZ * 8, MIC_RATE_HZ)
        self.reply_waveform = RingBuffer(REPLY_RATE_HZ * 8, REPLY_RATE_HZ)
        self.commands: list[Command] = []
        self.finished = threading.Event()
        self._sinks: list[Callable[[PipelineEvent], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-conversation", daemon=True)

    def subscribe(self, sink: Callable[[PipelineEvent], None]) -> None:
        self._sinks.append(sink)

    def submit(self, command: Command) -> None:
        self.commands.append(command)  # never blocks
        if isinstance(command, Shutdown):
            self._stop.set()

    def start(self) -> DemoConversationPort:
        self._thread.start()
        return self

    def _run(self) -> None:
        next_event = 0
        n_frames = int(self.end_s / FRAME_S)
        for frame in range(n_frames + 1):
            now = frame * FRAME_S
            mic_at, reply_at = int(now * MIC_RATE_HZ), int(now * REPLY_RATE_HZ)
            self.mic_waveform.write(self._mic_audio[mic_at:mic_at + int(FRAME_S * MIC_RATE_HZ)])
            self.reply_waveform.write(
                self._reply_audio[reply_at:reply_at + int(FRAME_S * REPLY_RATE_HZ)])
            while next_event < len(self.events) and self.events[next_event][0] <= now:
                for sink in self._sinks:
                    sink(self.events[next_event][1])
                next_event += 1
            if self._stop.wait(FRAME_S / self.speed):
                break
        self.finished.set()
