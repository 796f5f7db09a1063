"""What the turn controller decides: actions the pipeline carries out (one small frozen
dataclass each). Pure data: no Qt, no torch, no devices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.events import ConversationState


@dataclass(frozen=True)
class StateSet:
    state: ConversationState
    t_s: float


@dataclass(frozen=True)
class TurnStarted:
    """Start sending the user's audio to the engine, from ``audio_from_s``."""

    turn_id: int
    onset_s: float
    audio_from_s: float


@dataclass(frozen=True)
class TurnEnded:
    """The user's turn is over: hand it to the engine (or confirm the speculative reply)."""

    turn_id: int
    onset_s: float
    user_end_s: float  # end of the last voiced frame
    endpoint_s: float  # when the decision was made
    decided_by: Literal["silence", "model", "cap", "release"] = "silence"
    model_probability: float | None = None  # the end-of-turn model's verdict on this pause
    # the model's "finished" waited for ``smart_warmup_silence_ms``: the echo canceller was
    # still learning the room
    waited_for_canceller: bool = False
    # speech going on may still take this end back (``TurnResumed``): an early end by the
    # model, or an end by silence the model was unsure of (between its two thresholds)
    resumable: bool = False

    @property
    def final(self) -> bool:
        """No speech going on can take this end back."""
        return not self.resumable


@dataclass(frozen=True)
class TurnResumed:
    """The person went on speaking after the end-of-turn model ended their turn early: the
    turn continues (same id, its audio whole); withdraw the reply to it, if any."""

    turn_id: int
    resumed_s: float  # the speech that goes on began in the frame starting here (heard first)
    t_s: float


@dataclass(frozen=True)
class EndpointQuery:
    """Ask the end-of-turn model whether the turn so far is finished (once per pause)."""

    turn_id: int
    pause: int  # the pause's number within the turn
    t_s: float
    # the end of the last voiced VAD frame before the pause (what the model hears: the
    # silence counts from the level's end, up to 64 ms sooner, see app.vad.sound.SpeechEnd)
    speech_end_s: float
    # where the model's audio may start: the onset's pre-roll, as its scores were measured on
    # (the turn's audio may start sooner, at a weakly voiced lead-in; a longer lead of rain
    # moved a German sentence's score from unsure to "not finished")
    heard_from_s: float


@dataclass(frozen=True)
class TurnAbandoned:
    turn_id: int


@dataclass(frozen=True)
class SpeculationStarted:
    turn_id: int
    t_s: float


@dataclass(frozen=True)
class SpeculationCancelled:
    turn_id: int
    t_s: float


@dataclass(frozen=True)
class ReplyInterrupted:
    """Fade the reply out and cancel the engine, now."""

    turn_id: int
    onset_s: float  # the interrupting speech (or press) began
    detected_s: float
    cause: Literal["speech", "push_to_talk", "stop"]
    was_audible: bool


@dataclass(frozen=True)
class DuckSet:
    ducked: bool


@dataclass(frozen=True)
class FalseInterruption:
    """Speech during a reply was not confirmed: the duck was restored (``reply_stopped`` False)
    or the reply had already been stopped and no turn followed (True)."""

    turn_id: int
    onset_s: float
    t_s: float
    reply_stopped: bool


Action = (StateSet | TurnStarted | TurnEnded | TurnAbandoned | SpeculationStarted
          | SpeculationCancelled | ReplyInterrupted | DuckSet
          | FalseInterruption | EndpointQuery | TurnResumed)
