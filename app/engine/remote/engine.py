"""``RemoteEngine``: MOSS-Speech served by sglang-omni on another machine, behind the voice
loop's engine interface. Everything that makes the conversation feel good (microphone, echo
cancelling, VAD, turn-taking, barge-in, transcript, latency) stays local; only the reply is
made remotely.

Per turn: the user's audio and the conversation so far (cut at what the user heard, see
:mod:`.history`) go up as one streaming chat request; PCM deltas become ``ReplyAudio`` as they
arrive, text deltas ``ReplyText``. Cancel (barge-in, stop) closes the connection at once and
the server aborts the request. A full queue (503) is asked again with growing waits, and the
person is told. Every failure ends the turn with a message and keeps the conversation.
Latency stages: ``upload`` (request built and sent), ``server_first_byte`` (until the
response headers), ``first_audio`` (until the first audio delta), and ``busy_wait`` when the
server's queue was full.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Literal

from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    ReplyNotice,
    ReplyText,
    StageTimed,
    UserTurn,
)
from app.engine.remote.client import RemoteClient, RemoteError, Timeouts, host_port
from app.engine.remote.history import Exchange, History, Turn, heard_reply, user_turn
from app.engine.remote.protocol import (
    REPLY_RATE_HZ,
    Chunk,
    Done,
    Ignored,
    PcmAssembler,
    Sampling,
    ServerFailure,
    Usage,
    request_json,
    s16le_to_float,
)
from app.engine.remote.stream import Cancelled, Ended, HeadersIn, Reply
from app.settings import Settings

log = logging.getLogger(__name__)

MAX_BUSY_WAIT_S = 30.0
Outcome = Literal["done", "cancelled", "failed", "busy"]


@dataclass
class _Pending:
    """A reply waiting for ``reply_heard`` (dropped if a new turn comes first)."""

    turn_id: int
    user: Turn
    audio: bytearray = field(default_factory=bytearray)  # s16le 24 kHz, as received
    text: str = ""


@dataclass
class _Attempt:
    """One request's progress (one per 503 retry)."""

    turn_id: int
    started_s: float
    busy_wait_ms: float = 0.0
    pcm: PcmAssembler = field(default_factory=PcmAssembler)
    headers: HeadersIn | None = None
    first_audio: bool = False
    replying: bool = False  # audio or text has come: from now on, silence is a stall
    done: bool = False
    ignored: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None


class RemoteEngine(Engine):
    """``api_key``: a callable giving the current key (re-read when settings apply), so the
    key never sits in settings; ``busy_backoff_s``: the first wait after a 503 (doubling)."""

    def __init__(self, settings: Settings, api_key: Callable[[], str | None] = lambda: None,
                 busy_backoff_s: float = 1.0) -> None:
        engine = settings.engine
        self._api_key = api_key
        self.client = RemoteClient(engine.remote_url, None,  # the key: in apply_settings
                                   self._timeouts(settings))
        self.history = History()
        self.busy_backoff_s = busy_backoff_s
        self._pending: _Pending | None = None
        self._retry_after_s: float | None = None  # the server's Retry-After on its last 503
        self.last_usage: Usage | None = None
        self.last_finish_reason: str | None = None
        self.apply_settings(settings)

    @staticmethod
    def _timeouts(settings: Settings) -> Timeouts:
        engine = settings.engine
        return Timeouts(engine.remote_connect_timeout_s, engine.remote_first_audio_timeout_s,
                        engine.remote_stall_timeout_s)

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(name="MOSS-Speech server", is_demo=False,
                          device=f"server {host_port(self.client.url)}",
                          detail=f"{self.client.url}, model '{self.model}'", transcribes=False)

    def check_health(self) -> None:
        """Raises RemoteError unless the server says it is ready."""
        self.client.health()

    def apply_settings(self, settings: Settings) -> None:
        engine, sampling = settings.engine, settings.sampling
        self.model = engine.remote_model.strip()
        self.modality = engine.output_modality
        self.history.context_rows = engine.remote_context_rows
        self.history.system_prompt = engine.system_prompt
        self.history.modality = engine.output_modality
        self.busy_retries = engine.remote_busy_retries
        self.sampling = Sampling(sampling.temperature, sampling.top_p, sampling.top_k,
                                 sampling.repetition_penalty, sampling.max_new_rows,
                                 sampling.seed)
        self.client.set_timeouts(self._timeouts(settings))
        self.client.set_api_key(self._api_key())

    # ---- replies -----------------------------------------------------------------------------

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        started = time.perf_counter()
        self._pending = None  # a reply never confirmed (a speculative one the user talked past)
        user = user_turn(turn.pcm_16k, turn.text)
        if user.text is None and not user.pcm_16k:
            yield ReplyFailed(turn.turn_id, "input", "The turn held no audio to answer.",
                              "Speak a little longer, or check the microphone.")
            return
        pending = self._pending = _Pending(turn.turn_id, user)
        messages = self.history.messages_json(user)
        first_started, busy_wait_ms = started, 0.0
        for attempt in range(self.busy_retries + 1):
            body = request_json(messages, self.model, self.modality, self.sampling,
                                f"moss-voice-{uuid.uuid4().hex}")
            state = _Attempt(turn.turn_id, started, busy_wait_ms)
            outcome = yield from self._run(state, body, cancel, pending)
            if outcome != "busy":
                return
            if attempt == self.busy_retries:
                break
            wait_s = self._busy_wait_s(attempt)
            yield ReplyNotice(turn.turn_id, "server_busy",
                              f"Its queue is full (HTTP 503): asking again in {wait_s:g} s "
                              f"(try {attempt + 2} of {self.busy_retries + 1}).",
                              "Nothing to do: the reply follows once the server has room.")
            if cancel.wait(wait_s):
                yield ReplyDone(turn.turn_id, cancelled=True)
                return
            started = time.perf_counter()
            busy_wait_ms = (started - first_started) * 1000
        self._pending = None
        yield ReplyFailed(turn.turn_id, "remote",
                          f"The MOSS-Speech server stayed busy (queue full) through "
                          f"{self.busy_retries + 1} tries.",
                          "Try again in a moment, or ask its operator about the load; the "
                          "conversation so far is kept.")

    def _busy_wait_s(self, attempt: int) -> float:
        backoff = self.busy_backoff_s * 2 ** attempt
        return min(MAX_BUSY_WAIT_S, max(backoff, self._retry_after_s or 0.0))

    def _run(self, state: _Attempt, body: bytes, cancel: threading.Event,
             pending: _Pending) -> Generator[EngineEvent, None, Outcome]:
        """One request; returns (through StopIteration) how it ended."""
        reply = Reply(self.client, body, cancel, f"remote-{state.turn_id}").start()
        timeouts = self.client.timeouts
        deadline = state.started_s + timeouts.first_audio_s
        ended_well = False
        try:
            while True:
                item = reply.next_item(deadline - time.perf_counter())
                if item is None:
                    yield self._stalled(state)
                    return "failed"
                if isinstance(item, Cancelled) or cancel.is_set():
                    yield ReplyDone(state.turn_id, cancelled=True)
                    return "cancelled"
                if isinstance(item, RemoteError):
                    if item.busy:
                        self._retry_after_s = item.retry_after_s
                        return "busy"
                    yield self._failed(state, item)
                    return "failed"
                if isinstance(item, Ended | ServerFailure):
                    yield self._ended_early(state, item)
                    return "failed"
                if isinstance(item, Done):
                    ended_well = True
                    yield from self._finish(state, pending)
                    return "done"
                yield from self._handle(state, item, pending)
                if state.replying:  # any bytes from the server restart the stall watch
                    deadline = time.perf_counter() + timeouts.stall_s
        finally:
            if not ended_well:
                reply.abort()
            reply.finish()

    def _handle(self, state: _Attempt, item: HeadersIn | Chunk | Ignored,
                pending: _Pending) -> Iterator[EngineEvent]:
        if isinstance(item, HeadersIn):
            state.headers = item
            yield StageTimed(state.turn_id, "upload", (item.sent_s - state.started_s) * 1000)
            yield StageTimed(state.turn_id, "server_first_byte",
                             (item.headers_s - item.sent_s) * 1000)
            if state.busy_wait_ms:
                yield StageTimed(state.turn_id, "busy_wait", state.busy_wait_ms)
            return
        if isinstance(item, Ignored):
            state.ignored += 1
            if state.ignored == 1:
                log.warning("turn %d: ignored a line from the server: %s", state.turn_id,
                            item.reason)
            return
        if item.finish_reason is not None:
            state.finish_reason = item.finish_reason
        if item.usage is not None:
            state.usage = item.usage
        if item.text:
            state.replying = True
            pending.text += item.text
            yield ReplyText(state.turn_id, pending.text)
        whole = state.pcm.push(item.audio) if item.audio else b""
        if whole:
            state.replying = True
            if not state.first_audio:
                state.first_audio = True
                since = state.headers.headers_s if state.headers else state.started_s
                yield StageTimed(state.turn_id, "first_audio",
                                 (time.perf_counter() - since) * 1000)
            pending.audio += whole
            yield ReplyAudio(state.turn_id, s16le_to_float(whole), REPLY_RATE_HZ)

    def _finish(self, state: _Attempt, pending: _Pending) -> Iterator[EngineEvent]:
        if pending.text:
            yield ReplyText(state.turn_id, pending.text, final=True)
        self.last_usage, self.last_finish_reason = state.usage, state.finish_reason
        usage = state.usage or Usage()
        log.info("turn %d answered by the server: finish %s, %d prompt rows, %d reply rows, "
                 "%.1f s of audio%s%s", state.turn_id, state.finish_reason,
                 usage.prompt_tokens, usage.completion_tokens,
                 len(pending.audio) / 2 / REPLY_RATE_HZ,
                 f", {state.ignored} unknown line(s) ignored" if state.ignored else "",
                 f", {state.pcm.odd_deltas} odd-length audio delta(s)"
                 if state.pcm.odd_deltas else "")
        yield ReplyDone(state.turn_id)

    # ---- failures: each ends the turn, keeps the conversation and says what to do ------------

    def _failed(self, state: _Attempt, error: RemoteError) -> ReplyFailed:
        log.warning("turn %d: %s", state.turn_id, error)
        if error.category == "input":
            self._pending = None  # the server never took this turn: it stays out of history
            return ReplyFailed(state.turn_id, "input", str(error), error.action)
        return ReplyFailed(state.turn_id, "remote", str(error), error.action)

    def _stalled(self, state: _Attempt) -> ReplyFailed:
        timeouts = self.client.timeouts
        if state.replying:
            message = (f"The MOSS-Speech server sent nothing for {timeouts.stall_s:g} s in the "
                       "middle of a reply (a stalled stream); the reply was stopped.")
            action = ("What you heard is kept. If the server is just slow, raise Settings → "
                      "Engine → Remote stall timeout.")
        else:
            message = (f"The MOSS-Speech server did not start a reply within "
                       f"{timeouts.first_audio_s:g} s.")
            action = ("It may be busy with other requests; try again, or raise Settings → "
                      "Engine → Remote first audio timeout.")
        log.warning("turn %d: %s", state.turn_id, message)
        return ReplyFailed(state.turn_id, "remote", message, action)

    def _ended_early(self, state: _Attempt, item: Ended | ServerFailure) -> ReplyFailed:
        if isinstance(item, ServerFailure):
            message = (f"The MOSS-Speech server failed during the reply: {item.message}"
                       + (f" ({item.code})" if item.code else ""))
            action = "What you heard is kept; try again. The server's log says more."
        else:
            message = "The connection to the MOSS-Speech server ended in the middle of a reply."
            action = "What you heard is kept; try again."
        log.warning("turn %d: %s", state.turn_id, message)
        return ReplyFailed(state.turn_id, "remote", message, action)

    # ---- what was heard ----------------------------------------------------------------------

    def reply_heard(self, turn_id: int, heard_samples: int, sample_rate_hz: int) -> None:
        pending = self._pending
        if pending is None or pending.turn_id != turn_id:
            return
        self._pending = None
        heard_24k = round(heard_samples * REPLY_RATE_HZ / max(1, sample_rate_hz))
        assistant = heard_reply(bytes(pending.audio), heard_24k, pending.text)
        self.history.commit(Exchange(pending.user, assistant))

    def reset(self) -> None:
        self.history.clear()
        self._pending = None

    def close(self) -> None:
        self._pending = None
        self.client.close()
