from __future__ import annotations

import threading
import time
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
    ReplyText,
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


class Transcribing(RecordingEngine):
    """Idle work in steps: each job takes ``steps`` steps and ends with a transcript.
    ``on_step(job, step)`` runs inside a step, on the worker thread (e.g. to post a command)."""

    def __init__(self, jobs: list[int], steps: int = 3, on_step=None) -> None:
        super().__init__()
        self.jobs = list(jobs)
        self.steps = steps
        self.on_step = on_step or (lambda job, step: None)
        self.progress: list[tuple[int, int]] = []
        self.settings_seen: list[object] = []

    def has_idle_work(self) -> bool:
        return bool(self.jobs)

    def idle_work(self, cancel: threading.Event) -> Iterator[EngineEvent | None]:
        self.thread_names.add(threading.current_thread().name)
        while self.jobs and not cancel.is_set():
            job = self.jobs[0]
            for step in range(self.steps):
                self.progress.append((job, step))
                self.on_step(job, step)
                yield None
                if cancel.is_set():
                    return  # unfinished: the job stays queued
            self.jobs.pop(0)
            yield ReplyText(job, f"transcript {job}", "user", final=True)

    def apply_settings(self, settings) -> None:
        self.thread_names.add(threading.current_thread().name)
        if settings.engine.system_prompt == "refuse":
            error = ValueError("that voice file is silent")
            error.category, error.action = "voice_prompt", "Choose another file."
            raise error
        self.settings_seen.append(settings)


def test_idle_work_runs_when_nothing_waits_and_its_events_carry_no_reply() -> None:
    engine = Transcribing([1, 2])
    collector = Collector()
    worker = start(engine, collector)
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.stop()
    texts = [e for e in collector.events if isinstance(e.event, ReplyText)
             and e.event.text.startswith("transcript")]
    assert [(e.seq, e.event.turn_id) for e in texts] == [(0, 1), (0, 2)]
    assert engine.jobs == [] and engine.thread_names == {"engine-worker"}
    assert not worker.busy


def test_a_command_preempts_idle_work_within_one_step_and_the_work_resumes() -> None:
    worker: EngineWorker

    def post_feed_during_a_step(job: int, step: int) -> None:
        if (job, step) == (1, 1) and ("feed", 7) not in engine.calls:
            worker.feed(7, np.zeros(160, np.float32))

    engine = Transcribing([1], steps=3, on_step=post_feed_during_a_step)
    finished = threading.Event()
    collector = Collector(lambda item: isinstance(item.event, ReplyText) and finished.set())
    worker = start(engine, collector)
    worker.heard(0, 0, 24000)  # any command: idle work is looked for after it
    assert finished.wait(10)
    worker.stop()
    # step (1, 1) saw the feed arrive: nothing more of the job ran before the feed was handled
    first_feed = engine.progress.index((1, 1)) + 1
    assert engine.progress[:first_feed] == [(1, 0), (1, 1)]
    assert ("feed", 7) in engine.calls
    assert engine.progress[first_feed:] == [(1, 0), (1, 1), (1, 2)]  # resumed from the start
    assert [e.event.text for e in collector.events] == ["transcript 1"]


def test_settings_reach_the_engine_on_its_thread_and_a_refusal_is_reported() -> None:
    from app.settings import Settings

    engine, collector = Transcribing([]), Collector()
    worker = start(engine, collector)
    worker.apply_settings(Settings().with_value("engine.system_prompt", "Be brief."))
    worker.apply_settings(Settings().with_value("engine.system_prompt", "refuse"))
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.stop()
    assert [s.engine.system_prompt for s in engine.settings_seen] == ["Be brief."]
    refused = collector.events[0]
    assert refused.seq == 0 and isinstance(refused.event, ReplyFailed)
    assert refused.event.category == "voice_prompt" and refused.event.advice == (
        "Choose another file.")
    assert engine.thread_names == {"engine-worker"}


def test_idle_work_on_the_virtual_clock_is_charged_step_by_step() -> None:
    clock = VirtualClock(charge_compute=True)

    def slow_step(job: int, step: int) -> None:
        deadline = time.perf_counter() + 0.02
        while time.perf_counter() < deadline:  # 20 ms of real compute per step
            pass

    engine = Transcribing([1], steps=3, on_step=slow_step)
    done_at: list[float] = []
    collector = Collector(lambda item: isinstance(item.event, ReplyText)
                          and done_at.append(item.ready_s))
    worker = start(engine, collector, clock)
    worker.heard(0, 0, 24000)
    step = 0
    while not done_at and step < 1000:
        step += 1
        clock.advance_to(step * 0.01)
        clock.settle()
    worker.stop()
    assert done_at and done_at[0] >= 0.06  # three 20 ms steps of virtual time


class OnTheGpu(Named):
    @property
    def info(self) -> EngineInfo:
        return EngineInfo(name=self.name, is_demo=False, device="cuda:0")


def test_an_engine_on_the_gpu_is_closed_before_the_next_one_is_built() -> None:
    """Two models rarely fit one GPU: the old one frees its memory first, and if the new one
    then cannot be built, the echo demo answers."""
    first = OnTheGpu("first")
    collector = Collector()
    worker = start(first, collector)
    closed_before_build: list[bool] = []

    def build() -> Engine:
        closed_before_build.append(first.closed)
        raise OSError("model folder is missing config.json")

    worker.swap_engine(build)
    collector.wait_done()
    worker.stop()
    assert closed_before_build == [True]
    [swapped] = [e.event for e in collector.events]
    assert swapped.info.is_demo and "config.json" in swapped.error


class Preparing(RecordingEngine):
    def __init__(self) -> None:
        super().__init__()
        self.prepared_on: list[str] = []

    def prepare(self) -> None:
        self.prepared_on.append(threading.current_thread().name)
        self.calls.append(("prepare", 0))


def test_the_engine_prepares_on_its_thread_before_start_returns() -> None:
    engine, collector = Preparing(), Collector()
    worker = EngineWorker(engine, WallClock(), collector)
    worker.start()
    assert engine.prepared_on == ["engine-worker"]  # done before start() returned
    worker.respond(turn(1), seq=1)
    collector.wait_done()
    worker.stop()
    assert engine.calls[:2] == [("prepare", 0), ("respond", 1)]
