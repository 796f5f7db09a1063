"""Running the end-of-turn model for the voice loop (issue 23): off the voice-loop thread, at
most once per pause, never blocking capture.

The turn controller asks (``EndpointQuery``) when a pause reaches ``smart_pause_ms``; the
pipeline hands the turn's last 8 s to an endpointer here and, on later pumps, passes the
verdicts back (``TurnController.endpoint_verdict``). A verdict for a pause that is over (the
person went on) is simply ignored by the controller.

- :class:`ThreadedEndpointer` (real devices): one daemon thread; a newer query replaces one not
  yet started, so the model never queues up behind itself.
- :class:`InlineEndpointer` (simulations on the virtual clock): runs the model at once and
  delivers the verdict when the virtual clock has moved on by the model's CPU time (the
  thread's own CPU time, so other jobs on the machine do not inflate it), as a real machine of
  the same speed would; or by a fixed ``delay_s`` (runs without compute charging stay
  bit-for-bit repeatable).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class TurnCompleteness(Protocol):
    def probability(self, pcm_16k: np.ndarray) -> float: ...


@dataclass(frozen=True)
class Verdict:
    turn_id: int
    pause: int
    probability: float
    cost_ms: float  # CPU time of the decision (features + model)


class Endpointer(Protocol):
    def submit(self, turn_id: int, pause: int, pcm_16k: np.ndarray, now_s: float) -> None: ...

    def poll(self, now_s: float) -> list[Verdict]: ...

    def close(self) -> None: ...


def _decide(model: TurnCompleteness, turn_id: int, pause: int,
            pcm_16k: np.ndarray) -> Verdict | None:
    started = time.thread_time()
    try:
        probability = model.probability(pcm_16k)
    except Exception:  # a broken model must not take the voice loop down: silence decides
        log.exception("the end-of-turn model failed")
        return None
    return Verdict(turn_id, pause, probability, (time.thread_time() - started) * 1000)


class ThreadedEndpointer:
    """``load`` builds the model on the endpointer's own thread (the pipeline's start is not
    held up by it); until it is loaded, or if loading fails (``problem``), queries get no
    answer and silence decides."""

    def __init__(self, load: Callable[[], TurnCompleteness]) -> None:
        self._load = load
        self._model: TurnCompleteness | None = None
        self.problem: str | None = None
        self._queries: queue.Queue[tuple[int, int, np.ndarray] | None] = queue.Queue(maxsize=1)
        self._done: list[Verdict] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="end-of-turn", daemon=True)
        self._thread.start()

    def submit(self, turn_id: int, pause: int, pcm_16k: np.ndarray, now_s: float) -> None:
        query = (turn_id, pause, pcm_16k)
        try:
            self._queries.put_nowait(query)
        except queue.Full:  # the older query has not started: this one replaces it
            with contextlib.suppress(queue.Empty):
                self._queries.get_nowait()
            self._queries.put_nowait(query)

    def poll(self, now_s: float) -> list[Verdict]:
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        try:
            self._queries.put_nowait(None)
        except queue.Full:
            self._queries.get_nowait()
            self._queries.put_nowait(None)
        self._thread.join(2.0)

    def _run(self) -> None:
        try:
            self._model = self._load()
        except Exception as exc:  # missing or broken file, onnxruntime refusing it
            log.warning("end-of-turn model not used: %s", exc)
            self.problem = str(exc)
        while (query := self._queries.get()) is not None:
            if self._model is None:
                continue
            verdict = _decide(self._model, *query)
            if verdict is not None:
                with self._lock:
                    self._done.append(verdict)


NOMINAL_DELAY_S = 0.03  # one decision on this project's 2-core machine: 31 ms (bench end-of-turn)


class InlineEndpointer:
    def __init__(self, model: TurnCompleteness, delay_s: float | None = None) -> None:
        self._model = model
        self.delay_s = delay_s
        self._due: list[tuple[float, Verdict]] = []
        self.costs_ms: list[float] = []

    def submit(self, turn_id: int, pause: int, pcm_16k: np.ndarray, now_s: float) -> None:
        verdict = _decide(self._model, turn_id, pause, pcm_16k)
        if verdict is not None:
            self.costs_ms.append(verdict.cost_ms)
            delay = verdict.cost_ms / 1000 if self.delay_s is None else self.delay_s
            self._due.append((now_s + delay, verdict))

    def poll(self, now_s: float) -> list[Verdict]:
        ready = [v for due, v in self._due if due <= now_s + 1e-9]
        self._due = [(due, v) for due, v in self._due if due > now_s + 1e-9]
        return ready

    def close(self) -> None:
        self._due = []
