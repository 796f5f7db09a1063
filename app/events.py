"""The event vocabulary between the voice loop, metrics and the UI.

Events are past-tense facts flowing one way (pipeline → metrics and UI); commands are
imperatives flowing from the UI to the pipeline's single inlet. No Qt, no torch. Control events
(barge-in, stop, errors) are never dropped; data (waveforms) travels in ring buffers, not here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from app.engine.base import EngineInfo
from app.settings import ListenMode, Settings


class ConversationState(str, enum.Enum):
    IDLE = "idle"  # not listening (muted, or push-to-talk released)
    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    ENDPOINTING = "endpointing"  # the user paused; waiting to see if the turn ended
    RESPONDING = "responding"  # the engine is working, nothing audible yet ("thinking")
    SPEAKING = "speaking"
    INTERRUPTED = "interrupted"


# ---- pipeline → UI / metrics -------------------------------------------------------------


@dataclass(frozen=True)
class StateChanged:
    state: ConversationState
    t_s: float


@dataclass(frozen=True)
class UserSpeechStarted:
    turn_id: int
    t_s: float


@dataclass(frozen=True)
class UserTurnEnded:
    turn_id: int
    t_s: float
    duration_s: float


@dataclass(frozen=True)
class ReplyStarted:
    """The first reply sample reached the speaker."""

    turn_id: int
    t_s: float


@dataclass(frozen=True)
class ReplyFinished:
    turn_id: int
    interrupted: bool
    heard_ms: float


@dataclass(frozen=True)
class TranscriptUpdated:
    turn_id: int
    role: Literal["user", "assistant"]
    text: str
    final: bool = False
    heard_ms: float | None = None  # set on interrupted replies: where the user stopped hearing


@dataclass(frozen=True)
class BargeInRecord:
    onset_s: float  # user speech onset at the microphone
    detected_s: float  # when the app decided it was a barge-in
    silent_s: float  # playback silent at the speaker
    stop_latency_ms: float  # silent - onset


@dataclass(frozen=True)
class TurnRecord:
    """One turn's latency record; all ``_s`` values are seconds from the first input sample."""

    turn_id: int
    user_onset_s: float
    user_end_s: float
    endpoint_s: float
    engine_first_audio_s: float | None
    first_audible_s: float | None
    response_latency_ms: float | None
    stages_ms: dict[str, float] = field(default_factory=dict)
    heard_ms: float = 0.0
    barge_in: BargeInRecord | None = None


@dataclass(frozen=True)
class TurnMeasured:
    record: TurnRecord


@dataclass(frozen=True)
class EngineStatusChanged:
    info: EngineInfo
    loading: bool = False
    progress: float | None = None  # 0..1 while loading
    message: str = ""


@dataclass(frozen=True)
class DeviceLost:
    direction: Literal["input", "output"]
    device_name: str
    fallback_name: str | None  # the device now in use, or None if there is none
    t_s: float


@dataclass(frozen=True)
class ErrorReported:
    """Shown as a non-modal banner; ``action`` names what the person can do about it."""

    category: str
    message: str
    action: str = ""


# ---- UI → pipeline commands ----------------------------------------------------------------


@dataclass(frozen=True)
class PressToTalk:
    pass


@dataclass(frozen=True)
class ReleaseToTalk:
    pass


@dataclass(frozen=True)
class SetListenMode:
    mode: ListenMode


@dataclass(frozen=True)
class SetMuted:
    muted: bool


@dataclass(frozen=True)
class StopReply:
    pass


@dataclass(frozen=True)
class ApplySettings:
    settings: Settings


@dataclass(frozen=True)
class Shutdown:
    pass


PipelineEvent = (
    StateChanged
    | UserSpeechStarted
    | UserTurnEnded
    | ReplyStarted
    | ReplyFinished
    | TranscriptUpdated
    | TurnMeasured
    | EngineStatusChanged
    | DeviceLost
    | ErrorReported
)
Command = (
    PressToTalk | ReleaseToTalk | SetListenMode | SetMuted | StopReply | ApplySettings | Shutdown
)


# ---- the pipeline as the UI sees it ---------------------------------------------------------


class WaveformSource(Protocol):
    """A ring buffer of recent samples the UI polls (~30-60 Hz) without allocating."""

    sample_rate_hz: int

    def read_latest(self, out: np.ndarray) -> int:
        """Copy the newest ``len(out)`` samples into ``out`` (oldest first); return how many
        were available (the rest of ``out`` is zero-filled at the start)."""
        ...


class ConversationPort(Protocol):
    """What the UI may do with the running conversation: send commands, receive events.

    ``subscribe`` sinks are called from pipeline threads; the UI's single bridge object turns
    them into queued Qt signals. ``submit`` never blocks.
    """

    mic_waveform: WaveformSource
    reply_waveform: WaveformSource

    def submit(self, command: Command) -> None: ...

    def subscribe(self, sink: Callable[[PipelineEvent], None]) -> None: ...
