"""The engine worker: a plain thread that owns the engine. The only thread that may touch a GPU.

Commands arrive on a queue and run in order: user audio while the user speaks
(``feed_user_audio``), a reply (``respond``), what was heard (``reply_heard``), settings, reset,
engine swap, stop. When the queue is empty and the engine has low-priority work (transcripts),
the worker runs it step by step (``Engine.idle_work``); any new command preempts it within one
step, and the engine resumes it at the next idle moment.

Each ``respond`` gets its own ``threading.Event``; the voice loop sets it directly on barge-in
(control beats data: no queue in between) and the worker stops forwarding the reply after the
current step and closes the engine's iterator.

Every engine call is timed and reported to the clock (see :mod:`app.conversation.clock`), and
every event goes out as a :class:`WorkerEvent` stamped with the time it became available.
Engine exceptions become ``ReplyFailed`` events; the worker, and the app, keep going.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from app.conversation.clock import Clock
from app.engine import build_progress
from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyDone,
    ReplyFailed,
    UserTurn,
)
from app.settings import Settings

log = logging.getLogger(__name__)
_DONE = object()  # end of an idle-work iterator

FAILURE_ADVICE = "The conversation so far is kept; try again. If it keeps happening, see the log."
OOM_ADVICE = ("The GPU ran out of memory. Try a smaller precision (int8 or int4) in the settings, "
              "or close other programs that use the GPU.")


@dataclass(frozen=True)
class EngineSwapped:
    """The worker now runs another engine (or failed to build it and kept the old one)."""

    info: EngineInfo
    error: str = ""
    category: str = "engine_unavailable"  # of the error: model_invalid, out_of_memory, ...
    action: str = ""  # what the person can do about the error


@dataclass(frozen=True)
class EngineBuilding:
    """An engine build on the worker got to another stage (``fraction`` 0..1)."""

    fraction: float
    what: str


@dataclass(frozen=True)
class WorkerEvent:
    seq: int  # the respond call it belongs to; 0 = outside any reply (feed errors, swaps)
    event: EngineEvent | EngineSwapped | EngineBuilding
    ready_s: float  # clock time at which the event became available


@dataclass(frozen=True)
class _Feed:
    turn_id: int
    pcm_16k: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class _Respond:
    turn: UserTurn
    seq: int
    cancel: threading.Event


@dataclass(frozen=True)
class _Heard:
    turn_id: int
    heard_samples: int
    sample_rate_hz: int


@dataclass(frozen=True)
class _Call:
    name: str  # "swap", "settings", "idle" or "stop"
    build: Callable[[], Engine] | None = None
    settings: Settings | None = None


def failure_event(turn_id: int, exc: BaseException) -> ReplyFailed:
    """An engine exception as a ReplyFailed a person can act on. Exceptions that carry a
    ``category`` and an ``action`` (the engine's own errors) keep their message and advice."""
    category = getattr(exc, "category", None)
    if category in ("out_of_memory", "input", "engine", "voice_prompt"):
        return ReplyFailed(turn_id, category, str(exc), getattr(exc, "action", "") or "")
    text = f"{type(exc).__name__}: {exc}"
    if "OutOfMemory" in type(exc).__name__ or "out of memory" in str(exc).lower():
        return ReplyFailed(turn_id, "out_of_memory", text, OOM_ADVICE)
    return ReplyFailed(turn_id, "engine", text, FAILURE_ADVICE)


class EngineWorker:
    def __init__(self, engine: Engine, clock: Clock, emit: Callable[[WorkerEvent], None],
                 name: str = "engine-worker") -> None:
        self._engine = engine
        self._clock = clock
        self._emit = emit
        self._queue: queue.Queue[_Feed | _Respond | _Heard | _Call] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._cursor_s = 0.0  # the worker's own position on the clock (see clock.py)
        self._cancels: dict[int, threading.Event] = {}
        self._cancels_lock = threading.Lock()
        self._idle_cancel: threading.Event | None = None  # set to preempt idle work
        self._idle_pending = False  # an idle step is queued or running
        self._idle_broken = False  # idle work raised: none until the next reply
        self._prepared = threading.Event()

    @property
    def busy(self) -> bool:
        """Commands are queued, or low-priority work (transcripts) is still to run."""
        return not self._queue.empty() or self._idle_pending

    @property
    def info(self) -> EngineInfo:
        return self._engine.info

    def start(self) -> None:
        """Start the thread; returns once the engine has prepared itself on it (``prepare``:
        e.g. recording CUDA graphs, which belong to the thread that recorded them)."""
        self._thread.start()
        self._prepared.wait()

    # ---- commands (any thread; never block) -------------------------------------------------

    def feed(self, turn_id: int, pcm_16k: np.ndarray) -> None:
        self._post(_Feed(turn_id, pcm_16k))

    def respond(self, turn: UserTurn, seq: int) -> threading.Event:
        """Queue a reply; returns its cancel event (set it to stop the reply)."""
        cancel = threading.Event()
        with self._cancels_lock:
            self._cancels[seq] = cancel
        self._post(_Respond(turn, seq, cancel))
        return cancel

    def heard(self, turn_id: int, heard_samples: int, sample_rate_hz: int) -> None:
        self._post(_Heard(turn_id, heard_samples, sample_rate_hz))

    def apply_settings(self, settings: Settings) -> None:
        """Settings that do not rebuild the engine (``Engine.apply_settings``)."""
        self._post(_Call("settings", settings=settings))

    def swap_engine(self, build: Callable[[], Engine]) -> None:
        """Build a new engine on the worker thread (it owns the GPU) and close the old one."""
        self._post(_Call("swap", build))

    def cancel_all(self) -> None:
        with self._cancels_lock:
            for cancel in self._cancels.values():
                cancel.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel everything, finish, close the engine, join the thread."""
        self.cancel_all()
        if self._thread.is_alive():
            self._post(_Call("stop"))
            self._thread.join(timeout_s)

    def _post(self, command: _Feed | _Respond | _Heard | _Call) -> None:
        self._clock.work_posted()
        self._queue.put(command)
        idle_cancel = self._idle_cancel
        if idle_cancel is not None and not (isinstance(command, _Call) and command.name == "idle"):
            idle_cancel.set()  # a real command preempts idle work at its next step

    # ---- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._engine.prepare()
        except Exception:
            log.exception("preparing the engine on its thread failed")
        finally:
            self._prepared.set()
        while True:
            command = self._queue.get()
            self._clock.work_started()
            if isinstance(command, _Call) and command.name == "stop":
                self._clock.work_finished()
                break
            try:
                self._cursor_s = max(self._cursor_s, self._clock.now())
                self._handle(command)
            except Exception:  # never let one bad command end the worker
                log.exception("engine worker command %r failed", type(command).__name__)
            finally:
                self._queue_idle_work()  # before work_finished: the clock never sees a gap
                self._clock.work_finished()
        try:
            self._engine.close()
        except Exception:
            log.exception("closing the engine failed")

    def _handle(self, command: _Feed | _Respond | _Heard | _Call) -> None:
        if isinstance(command, _Respond):
            try:
                self._respond(command)
            finally:
                with self._cancels_lock:
                    self._cancels.pop(command.seq, None)
        elif isinstance(command, _Feed):
            self._call_engine(command.turn_id, "feed_user_audio", lambda: self._engine
                              .feed_user_audio(command.turn_id, command.pcm_16k))
        elif isinstance(command, _Heard):
            self._call_engine(command.turn_id, "reply_heard", lambda: self._engine.reply_heard(
                command.turn_id, command.heard_samples, command.sample_rate_hz))
        elif command.name == "settings" and (settings := command.settings) is not None:
            self._call_engine(0, "applying settings to the engine",
                              lambda: self._engine.apply_settings(settings))
        elif command.name == "idle":
            self._idle()
        elif command.name == "swap" and command.build is not None:
            self._swap(command.build)

    def _send(self, seq: int, event: EngineEvent | EngineSwapped | EngineBuilding) -> None:
        """Emit once the clock has reached the worker's cursor (the event's time)."""
        self._clock.wait_until(self._cursor_s)
        self._emit(WorkerEvent(seq, event, self._cursor_s))

    def _timed(self, call: Callable[[], object]) -> None:
        started = time.perf_counter()
        try:
            call()
        finally:
            self._cursor_s = self._clock.charge(self._cursor_s, time.perf_counter() - started)

    def _call_engine(self, turn_id: int, what: str, call: Callable[[], object]) -> None:
        """Run one engine call on the clock; a failure is logged and reported as a
        ReplyFailed for ``turn_id`` (outside any reply: the worker goes on)."""
        try:
            self._timed(call)
        except Exception as exc:
            log.exception("%s failed", what)
            self._send(0, failure_event(turn_id, exc))

    # ---- idle work ---------------------------------------------------------------------------

    def _queue_idle_work(self) -> None:
        """Queue one idle step when nothing else waits and the engine has idle work."""
        if self._idle_pending or self._idle_broken or not self._queue.empty():
            return
        try:
            wanted = self._engine.has_idle_work()
        except Exception:
            log.exception("has_idle_work failed")
            self._idle_broken = True
            return
        if wanted:
            self._idle_pending = True
            self._post(_Call("idle"))

    def _idle(self) -> None:
        """Run idle work until it is done or a command arrives (checked after every step)."""
        self._idle_pending = False
        if not self._queue.empty():
            return
        cancel = self._idle_cancel = threading.Event()
        work = self._engine.idle_work(cancel)
        steps = 0
        try:
            while not cancel.is_set() and self._queue.empty():
                steps += 1
                started = time.perf_counter()
                try:
                    item = next(work, _DONE)
                except Exception:
                    log.exception("engine idle work failed; it stops until the next reply")
                    self._idle_broken = True
                    return
                finally:
                    self._cursor_s = self._clock.charge(self._cursor_s,
                                                        time.perf_counter() - started)
                if item is _DONE:
                    if steps == 1 and self._engine.has_idle_work():  # would spin forever
                        log.warning("the engine reports idle work but yields none; stopping it")
                        self._idle_broken = True
                    return
                if item is None:
                    self._clock.wait_until(self._cursor_s)  # lets a virtual clock move on
                else:
                    self._send(0, item)  # type: ignore[arg-type]
        finally:
            self._idle_cancel = None
            close = getattr(work, "close", None)
            if close is not None:
                close()

    def _respond(self, command: _Respond) -> None:
        self._idle_broken = False
        turn, cancel = command.turn, command.cancel
        if cancel.is_set():
            self._send(command.seq, ReplyDone(turn.turn_id, True))
            return
        events: Iterator[EngineEvent] | None = None
        try:
            events = self._engine.respond(turn, cancel)
            self._forward(command, events)
        finally:
            if events is not None and hasattr(events, "close"):
                events.close()

    def _forward(self, command: _Respond, events: Iterator[EngineEvent]) -> None:
        turn_id, cancel, seq = command.turn.turn_id, command.cancel, command.seq
        while True:
            started = time.perf_counter()
            try:
                event: EngineEvent | None = next(events)
            except StopIteration:
                event = None
            except Exception as exc:
                log.exception("engine respond() failed for turn %d", turn_id)
                event = failure_event(turn_id, exc)
            self._cursor_s = self._clock.charge(self._cursor_s, time.perf_counter() - started)
            if event is None:  # the engine ended without saying so: close the reply for it
                event = ReplyDone(turn_id, cancelled=cancel.is_set())
            if cancel.is_set() and not isinstance(event, ReplyDone | ReplyFailed):
                event = ReplyDone(turn_id, cancelled=True)
            self._send(seq, event)
            if isinstance(event, ReplyDone | ReplyFailed):
                return

    def _close_engine(self) -> None:
        try:
            self._engine.close()
        except Exception:
            log.exception("closing the previous engine failed")

    def _swap(self, build: Callable[[], Engine]) -> None:
        """Build the new engine, then close the old one, so a failed build keeps the old one
        answering. An engine holding accelerator memory is closed first instead (two models
        rarely fit one GPU); the echo demo answers if the new one then fails to build."""
        started = time.perf_counter()
        info = self._engine.info
        if not info.is_demo and info.device not in ("", "cpu"):
            self._close_engine()
            from app.engine.echo import EchoEngine

            self._engine = EchoEngine()
        try:
            with build_progress.reporting_to(lambda fraction, what: self._emit(
                    WorkerEvent(0, EngineBuilding(fraction, what), self._cursor_s))):
                engine = build()
        except Exception as exc:
            category = getattr(exc, "category", None)
            if category:  # the engine's own error: its message is written for people
                log.warning("the engine cannot be built: %s", exc)
                error, action = str(exc), getattr(exc, "action", "") or ""
                self._send(0, EngineSwapped(self._engine.info, error, category, action))
            else:
                log.exception("building the engine failed")
                self._send(0, EngineSwapped(self._engine.info, f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._cursor_s = self._clock.charge(self._cursor_s, time.perf_counter() - started)
        self._close_engine()
        self._engine = engine
        self._idle_broken = False
        self._send(0, EngineSwapped(engine.info))
