"""The engine interface: ``respond(turn, cancel)`` yields reply events as they happen.

Plain Python and numpy only (no torch, no Qt), so the voice loop and the UI can use these types
without loading a model. Engines run on the engine worker thread, the only thread that touches
the GPU; ``cancel`` is set from other threads and must be honoured between steps.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from app.settings import Settings

# Stage names of the latency breakdown, in pipeline order (DESIGN.md "Latency").
STAGES = ("endpoint_wait", "encode", "prefill", "first_row", "first_chunk", "output_buffer")
# The remote engine's stages, in the same order (before ``output_buffer``): a full queue's wait,
# the request sent, the server's response headers, its first audio delta.
REMOTE_STAGES = ("busy_wait", "upload", "server_first_byte", "first_audio")


@dataclass(frozen=True)
class UserTurn:
    """One user turn as the engine receives it."""

    turn_id: int
    pcm_16k: np.ndarray  # [T] float32 mono in [-1, 1] at 16 kHz, pre-roll included
    text: str | None = None  # typed text instead of speech
    speculative: bool = False  # started at a short pause; cancelled if the user goes on


@dataclass(frozen=True)
class EngineInfo:
    """What the UI shows about the engine."""

    name: str
    is_demo: bool
    device: str = "cpu"
    precision: str = ""
    detail: str = ""
    warning: str = ""  # e.g. "running on the CPU: replies will be slow"; shown once loaded
    transcribes: bool = True  # transcripts of the turns will come (False: the UI says "not
    # transcribed" instead of waiting, e.g. the remote engine makes no text-branch passes)


@dataclass(frozen=True)
class ReplyAudio:
    turn_id: int
    pcm: np.ndarray = field(repr=False)  # [T] float32 mono
    sample_rate_hz: int = 24000


@dataclass(frozen=True)
class ReplyText:
    """A piece of transcript: a text reply, or a text-branch transcript of either side."""

    turn_id: int
    text: str
    role: Literal["user", "assistant"] = "assistant"
    final: bool = False


@dataclass(frozen=True)
class StageTimed:
    """Duration of one engine stage of a turn (see ``STAGES``)."""

    turn_id: int
    stage: str
    duration_ms: float


@dataclass(frozen=True)
class ReplyDone:
    turn_id: int
    cancelled: bool = False


@dataclass(frozen=True)
class ReplyFailed:
    """The turn failed; the conversation so far is kept and the next turn works."""

    turn_id: int
    category: Literal["out_of_memory", "input", "engine", "voice_prompt", "remote"]
    message: str
    advice: str = ""


@dataclass(frozen=True)
class ReplyNotice:
    """Something the person should know while a reply is delayed (e.g. the server's queue is
    full and the request is asked again); the reply goes on. Shown as a banner."""

    turn_id: int
    category: str
    message: str
    advice: str = ""


EngineEvent = ReplyAudio | ReplyText | StageTimed | ReplyDone | ReplyFailed | ReplyNotice


class Engine(ABC):
    """Base of all engines. Subclasses implement ``info`` and ``respond``."""

    @property
    @abstractmethod
    def info(self) -> EngineInfo:
        """Name, device and whether this is the demo engine."""

    @abstractmethod
    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        """Yield reply events; stop promptly (within one step) once ``cancel`` is set.

        The last event is ``ReplyDone`` or ``ReplyFailed``. Exceptions are the caller's to turn
        into ``ReplyFailed``; engines should still prefer yielding it with advice.
        """

    def prepare(self) -> None:  # noqa: B027
        """Called once on the engine thread before any other call, by an engine built on
        another thread: thread-bound warm-up (CUDA graphs are recorded per thread) goes here."""

    def feed_user_audio(self, turn_id: int, pcm_16k: np.ndarray) -> None:  # noqa: B027
        """User audio as it arrives, before the turn ends (encode while the user talks).

        Called on the engine thread, in order; ``respond`` for the same ``turn_id`` follows
        with the whole turn. Engines that cannot use it ignore it.
        """

    def reply_heard(self, turn_id: int, heard_samples: int, sample_rate_hz: int) -> None:  # noqa: B027
        """How much of a reply reached the speaker, so history keeps only what was heard."""

    def apply_settings(self, settings: Settings) -> None:  # noqa: B027
        """Settings changed that do not need a rebuild (see ``app.settings.ENGINE_BUILD_KEYS``):
        sampling, system prompt, output modality, context bound, streaming, voice prompt.

        Called on the engine thread between turns. Raise (with a message a person can act on)
        to refuse a value; the engine keeps its previous settings then.
        """

    def has_idle_work(self) -> bool:
        """Whether low-priority work (e.g. transcripts) waits for an idle moment."""
        return False

    def idle_work(self, cancel: threading.Event) -> Iterator[EngineEvent | None]:
        """Run low-priority work while no command waits; yield ``None`` after each small step
        (one AR row) and events as they are ready.

        The worker sets ``cancel`` and closes the iterator as soon as a command arrives (a new
        user turn always wins); unfinished work must stay queued for the next idle moment, and
        work that raised must be dropped so it is not retried forever.
        """
        return iter(())

    def reset(self) -> None:  # noqa: B027
        """Start a new conversation (forget history)."""

    def close(self) -> None:  # noqa: B027
        """Release memory and devices."""
