from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from voice_helpers import RecordingEngine, speech

from app.conversation.clock import VirtualClock, WallClock
from app.conversation.engine_worker import EngineSwapped, EngineWorker, WorkerEvent
from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    UserTurn,
)
from app.engine.echo import EchoEngine


class Collector:
    """Collects worker events; ``wait_done`` blocks until a reply has ended."""

    def __init__(self, on_event=None) -> None:
        self.events: list[WorkerEvent] = []
        self.done = threading.Semaphore(0)
        self.on_event = on_event
        self.threads: set[str] = set()

    def __call__(self, item: WorkerEvent) -> None:
        self.threads.add(threading.current_thread().name)
        self.events.append(item)
        if self.on_event:
            self.on_event(item)
        if isinstance(item.event, ReplyDone | ReplyFailed | EngineSwapped):
            self.done.release()

    def wait_done(self) -> None:
        assert self.done.acquire(timeout=10), "the worker did not finish"

    def kinds(self, seq: int | None = None) -> list[str]:
        return [type(e.event).__name__ for e in self.events if seq is None or e.seq == seq]


def start(engine: Engine, collector: Collector, clock=None) -> EngineWorker:
    worker = EngineWorker(engine, clock or WallClock(), collector)
    worker.start()
    return worker


def turn(turn_id: int = 1) -> UserTurn:
    return UserTurn(turn_id, speech("hello"))


def test_feeds_then_respond_run_in_order_on_the_worker_thread() -> None:
    engine, collector = RecordingEngine(), Collector()
    worker = start(engine, collector)
    worker.feed(1, np.zeros(160, np.float32))
    worker.feed(1, np.ones(160, np.float32))
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.heard(1, 1234, 24000)
    worker.stop()
    assert engine.calls == [("feed", 1), ("feed", 1), ("respond", 1), ("heard", 1)]
    assert engine.heard == [(1, 1234, 24000)] and engine.closed
    assert engine.thread_names == {"engine-worker"} and collector.threads == {"engine-worker"}
    assert collector.kinds()[-1] == "ReplyDone" and "ReplyAudio" in collector.kinds()


def test_cancel_is_honoured_within_one_chunk() -> None:
    engine = RecordingEngine()
    cancels: list[threading.Event] = []

    def cancel_after_second_chunk(item: WorkerEvent) -> None:
        audio = [e for e in collector.events if isinstance(e.event, ReplyAudio)]
        if len(audio) == 2:
            cancels[0].set()

    collector = Collector(cancel_after_second_chunk)
    worker = start(engine, collector)
    cancels.append(worker.respond(turn(1), seq=5))
    collector.wait_done()
    worker.stop()
    assert collector.kinds().count("ReplyAudio") == 2
    assert isinstance(collector.events[-1].event, ReplyDone)
    assert collector.events[-1].event.cancelled and engine.cancelled_turns == [1]


def test_a_reply_cancelled_before_it_starts_never_reaches_the_engine() -> None:
    engine, collector = RecordingEngine(), Collector()
    worker = EngineWorker(engine, WallClock(), collector)
    cancel = worker.respond(turn(1), seq=1)
    cancel.set()
    worker.start()
    collector.wait_done()
    worker.stop()
    assert ("respond", 1) not in engine.calls and collector.kinds() == ["ReplyDone"]


class Exploding(EchoEngine):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        self.calls += 1
        if self.calls == 1:
            yield ReplyAudio(turn.turn_id, np.zeros(240, np.float32))
            raise self.error
        yield from super().respond(turn, cancel)


class OutOfMemoryError(RuntimeError):
    """Named like torch's, which is how the worker recognises it without importing torch."""


@pytest.mark.parametrize(("error", "category"), [(ValueError("bad shape"), "engine"),
                                                 (OutOfMemoryError("CUDA"), "out_of_memory")])
def test_an_engine_exception_becomes_reply_failed_and_the_next_turn_works(
        error: Exception, category: str) -> None:
    collector = Collector()
    worker = start(Exploding(error), collector)
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.respond(turn(2), seq=2)
    collector.wait_done()
    worker.stop()
    failed = collector.events[1].event
    assert isinstance(failed, ReplyFailed) and failed.category == category
    assert type(error).__name__ in failed.message and failed.advice
    assert collector.kinds(seq=2)[-1] == "ReplyDone" and "ReplyAudio" in collector.kinds(seq=2)


class Silent(EchoEngine):
    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        yield ReplyAudio(turn.turn_id, np.zeros(240, np.float32))


def test_a_reply_without_done_is_closed_by_the_worker() -> None:
    collector = Collector()
    worker = start(Silent(), collector)
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.stop()
    assert collector.kinds() == ["ReplyAudio", "ReplyDone"]


class Named(EchoEngine):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.closed = False

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(name=self.name, is_demo=False)

    def close(self) -> None:
        self.closed = True


def test_engines_are_swapped_on_the_worker_and_a_failed_build_keeps_the_old_one() -> None:
    first, second = Named("first"), Named("second")
    collector = Collector()
    worker = start(first, collector)
    worker.swap_engine(lambda: second)
    collector.wait_done()
    assert first.closed and worker.info.name == "second"

    def broken() -> Engine:
        raise OSError("model folder is missing config.json")

    worker.swap_engine(broken)
    collector.wait_done()
    worker.stop()
    swapped = [e.event for e in collector.events]
    assert swapped[0] == EngineSwapped(second.info)
    assert swapped[1].info.name == "second" and "config.json" in swapped[1].error
    assert second.closed  # closed at stop


def test_on_the_virtual_clock_engine_time_is_charged_before_events_leave() -> None:
    clock = VirtualClock(charge_compute=True)
    seen: list[tuple[float, float]] = []
    collector = Collector(lambda item: seen.append((item.ready_s, clock.now())))
    worker = start(EchoEngine(first_chunk_delay_ms=60), collector, clock)
    worker.respond(turn(1), seq=1)
    step = 0
    while not collector.done.acquire(blocking=False):
        step += 1
        clock.advance_to(step * 0.01)
        clock.settle()
    worker.stop()
    first_audio = next(r for r, _ in seen)
    assert first_audio >= 0.06  # 60 ms of (real) engine time became 60 ms of virtual time
    assert all(now >= ready for ready, now in seen)  # nothing left before its time
    assert clock.charged_s >= 0.06
