"""The commands the UI sends to the pipeline's single inlet (imperatives, one way; the events
flowing back are :mod:`app.events`, which re-exports these so both sides share one
vocabulary). No Qt, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.settings import ListenMode, Settings


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
    """New settings. Most apply live; ``reload_engine`` is set (after the person confirmed)
    when an engine field changed (kind, folders, device, precision, chunk checkpoint), or to
    retry a failed load: the pipeline then rebuilds the engine, reporting
    EngineStatusChanged(loading=True, progress), and keeps the transcript. A change to one of
    ``app.settings.ENGINE_BUILD_KEYS`` rebuilds it even without the flag."""

    settings: Settings
    reload_engine: bool = False


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class RunAcousticCheck:
    """Play a short chirp on the current speaker and listen to it on the current microphone:
    echo delay, echo return loss, a recommended echo mode (AcousticCheckFinished). A reply that
    is playing is stopped first. The result is stored per device pair and its delay is given to
    the echo canceller."""


@dataclass(frozen=True)
class ListAudioDevices:
    """Answered by AudioDevicesListed."""


@dataclass(frozen=True)
class MonitorInputLevel:
    """Start (``enabled``) or stop InputLevelMeasured events for one microphone; a new start
    replaces the monitored device (one at a time)."""

    device_name: str | None
    enabled: bool


@dataclass(frozen=True)
class PlayTestTone:
    """Play a short tone on one output device, or the recording at ``path`` instead (a voice
    just recorded, played back); answered by ToneTestFinished."""

    device_name: str | None
    frequency_hz: float = 440.0
    duration_ms: int = 1000
    path: Path | None = None


@dataclass(frozen=True)
class StartVoiceRecording:
    """Record a voice prompt from the current microphone into ``path`` (WAV, 16 kHz or more).

    Recording stops by itself after ``max_duration_s``; shorter than ``min_duration_s`` is
    reported as not usable. Progress: VoiceRecordingProgressed; end: VoiceRecordingFinished.
    """

    path: Path
    min_duration_s: float = 5.0
    max_duration_s: float = 15.0


@dataclass(frozen=True)
class StopVoiceRecording:
    """Stop the recording; ``keep=False`` discards it."""

    keep: bool = True


Command = (
    PressToTalk | ReleaseToTalk | SetListenMode | SetMuted | StopReply | ApplySettings | Shutdown
    | ListAudioDevices | MonitorInputLevel | PlayTestTone | StartVoiceRecording
    | StopVoiceRecording | RunAcousticCheck
)
