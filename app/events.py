"""The event vocabulary between the voice loop, metrics and the UI.

Events are past-tense facts flowing one way (pipeline → metrics and UI); commands are
imperatives flowing from the UI to the pipeline's single inlet (:mod:`app.commands`,
re-exported here). No Qt, no torch. Control events
(barge-in, stop, errors) are never dropped; data (waveforms) travels in ring buffers, not here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

# The UI → pipeline commands live in app.commands; re-exported so that both sides share one
# vocabulary (ev.StopReply as well as ev.StateChanged).
from app.commands import (  # noqa: F401
    ApplySettings,
    Command,
    ListAudioDevices,
    MonitorInputLevel,
    PlayTestTone,
    PressToTalk,
    ReleaseToTalk,
    RunAcousticCheck,
    SetListenMode,
    SetMuted,
    Shutdown,
    StartVoiceRecording,
    StopReply,
    StopVoiceRecording,
)
from app.engine.base import EngineInfo
from app.settings import EchoMode


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
    t_s: float  # the speech onset
    audio_from_s: float | None = None  # the turn's audio starts here (pre-roll included)


@dataclass(frozen=True)
class UserTurnEnded:
    turn_id: int
    t_s: float
    duration_s: float


@dataclass(frozen=True)
class UserTurnDropped:
    """A user turn that had started was dropped before it ended (muted, switched mode, paused
    for a recording): no reply follows it."""

    turn_id: int
    t_s: float


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
    """Transcript of one side of a turn. ``text`` is the whole text so far for this
    ``turn_id`` and ``role``: each update replaces the previous one (the UI never appends)."""

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
class EndpointDecision:
    """How the end of a turn was decided: ``by`` silence (no model, the model late, or the
    long silence after "not yet"), the end-of-turn ``model`` (finished), the turn ``cap``, or
    the push-to-talk ``release``; the silence waited; the model's probability for the last
    pause and the CPU time of that decision, when it was asked; how many earlier early ends
    of this turn were taken back because the person went on speaking; whether the model's
    "finished" waited for ``vad.smart_warmup_silence_ms`` (the echo canceller warming up)."""

    by: str
    silence_ms: float
    probability: float | None = None
    model_ms: float | None = None
    resumed: int = 0  # ends taken back because the person went on (see end_of_turn.py)
    waited_for_canceller: bool = False  # "finished" held to the warm-up silence


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
    user_audio_from_s: float | None = None  # first sample of the turn's audio (pre-roll)
    endpoint_decision: EndpointDecision | None = None


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
class AudioDevicesOpened:
    """The devices the conversation has open now: after start, after a settings change and
    after a device was lost or replaced. None: no device of that direction is open, so nothing
    is heard (input) or played (output) until one is."""

    input_device: str | None
    output_device: str | None


@dataclass(frozen=True)
class ErrorReported:
    """Shown as a non-modal banner; ``action`` names what the person can do about it."""

    category: str
    message: str
    action: str = ""
    turn_id: int | None = None  # the turn it happened on, when it belongs to one


@dataclass(frozen=True)
class FalseInterruptionDetected:
    """Speech during a reply was not confirmed (a cough, a door, leaked echo): the reply's
    volume came back (``reply_stopped`` False), or it had been stopped and no turn followed.
    ``session_count`` is the running total this session."""

    turn_id: int
    t_s: float
    reply_stopped: bool
    session_count: int


@dataclass(frozen=True)
class AcousticCheckFinished:
    """Answer to RunAcousticCheck. ``ok`` False: the check could not run (``message`` says
    why). ``echo_detected`` False: the microphone did not hear the chirp (a headset). The delay
    is from the speaker's DAC time to the microphone's capture time (what the device latencies
    do not already account for); ``round_trip_ms`` adds the latencies the devices report.
    ``echo_return_loss_db``: how much quieter the echo is at the microphone than the signal
    sent to the speaker (0 dB: as loud; higher is better)."""

    ok: bool
    input_device: str | None
    output_device: str | None
    echo_detected: bool = False
    delay_ms: float | None = None
    round_trip_ms: float | None = None
    echo_return_loss_db: float | None = None
    recommended_mode: EchoMode | None = None
    message: str = ""


# ---- settings-panel helpers: device pickers, level meter, test tone, voice recording --------
# The settings panel asks for these through commands (app.commands); the voice loop owns
# every audio device, so the UI never opens one itself. A port that cannot do one answers with
# ErrorReported(category="device_check", ...): the panel shows it where it was asked (the
# conversation's own device problems are category "audio" and become banners).


@dataclass(frozen=True)
class AudioDevicesListed:
    """Answer to ListAudioDevices: device names as the settings store them; ``problem`` says
    why none could be listed (no audio system)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    default_input: str | None = None
    default_output: str | None = None
    problem: str = ""


@dataclass(frozen=True)
class InputLevelMeasured:
    """While MonitorInputLevel is on: the level of the monitored microphone, ~10 per second."""

    device_name: str | None  # None = the system default
    rms_dbfs: float
    peak_dbfs: float


@dataclass(frozen=True)
class ToneTestFinished:
    """Answer to PlayTestTone."""

    device_name: str | None
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class VoiceRecordingProgressed:
    """While a voice prompt is being recorded, ~10 per second."""

    elapsed_s: float
    level_dbfs: float


@dataclass(frozen=True)
class VoiceRecordingFinished:
    """The recording stopped (StopVoiceRecording, max duration, or a failure).

    ``path`` is the written WAV, or None when nothing usable was kept (``message`` says why).
    """

    path: Path | None
    duration_s: float
    message: str = ""


PipelineEvent = (
    StateChanged
    | UserSpeechStarted
    | UserTurnEnded
    | UserTurnDropped
    | ReplyStarted
    | ReplyFinished
    | TranscriptUpdated
    | TurnMeasured
    | EngineStatusChanged
    | DeviceLost
    | AudioDevicesOpened
    | ErrorReported
    | AudioDevicesListed
    | InputLevelMeasured
    | ToneTestFinished
    | VoiceRecordingProgressed
    | VoiceRecordingFinished
    | FalseInterruptionDetected
    | AcousticCheckFinished
)


# ---- the pipeline as the UI sees it ---------------------------------------------------------


class WaveformSource(Protocol):
    """A ring buffer of recent samples the UI polls (~30-60 Hz) without allocating."""

    @property
    def sample_rate_hz(self) -> int:
        """May change while a source is shown (another output device): read it each frame."""
        ...

    def read_latest(self, out: np.ndarray) -> int:
        """Copy the newest ``len(out)`` samples into ``out`` (oldest first); return how many
        were available (the rest of ``out`` is zero-filled at the start)."""
        ...


class ConversationPort(Protocol):
    """What the UI may do with the running conversation: send commands, receive events.

    ``subscribe`` sinks are called from pipeline threads; the UI's single bridge object turns
    them into queued Qt signals. ``submit`` never blocks.
    """

    @property
    def mic_waveform(self) -> WaveformSource: ...

    @property
    def reply_waveform(self) -> WaveformSource: ...

    def submit(self, command: Command) -> None: ...

    def subscribe(self, sink: Callable[[PipelineEvent], None]) -> None: ...

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop and wait (at most ``timeout_s``) until devices and the engine are released;
        True when they were. Called once the window is gone, so waiting is fine then."""
        ...
