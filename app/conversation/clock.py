"""Clocks for the voice loop: the wall clock for real devices, a virtual clock for simulation.

All pipeline times are seconds on one clock. With real devices that is ``time.monotonic()``
minus the clock's origin; device timestamps (already on ``time.monotonic()``) are moved onto it
with :meth:`Clock.from_device_time`.

The virtual clock and honest latency
------------------------------------
A simulated run goes faster than real time, but engine compute must still cost time, or a slow
engine would look instant. The model:

- The simulation driver advances virtual time in steps (one audio block each) and, after each
  step, waits until the engine worker is *quiescent*: idle on its queue, or waiting for the
  virtual clock (:meth:`VirtualClock.settle`).
- The worker keeps its own cursor on the virtual timeline. Each engine call (``next()`` on the
  reply iterator, ``feed_user_audio``, ``reply_heard``) is timed on the wall clock and that
  duration is *charged*: the cursor moves on by it (:meth:`Clock.charge`). Work queued while the
  worker is busy starts at the cursor, not earlier, so a slow ``feed_user_audio`` delays the
  reply that follows it.
- Before an event leaves the worker it waits until the virtual clock reaches the event's time
  (:meth:`Clock.wait_until`), so audio and decisions downstream see it exactly when a real
  machine of the same speed would (to the 10 ms step of the driver); the event carries its
  exact time for the metrics.
- An engine call that is already running is charged in full even if a cancel arrives in the
  middle of it in virtual time: cancellation is observed at the engine's next step, as it would
  be on real hardware (a MOSS-Speech step is one AR row, a few tens of ms).
- Compute on the voice-loop thread (VAD, turn controller) is not charged; the voice-loop
  benchmark measures it separately (well under 1 ms per 32 ms frame).

With ``charge_compute=False`` engine calls take zero virtual time: runs are then bit-for-bit
deterministic (wall-clock jitter no longer leaks into the timeline).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod


class Clock(ABC):
    """Pipeline time in seconds, plus the hooks the engine worker reports its work through."""

    @abstractmethod
    def now(self) -> float: ...

    def from_device_time(self, device_time_s: float) -> float:
        """A device callback timestamp on this clock."""
        return device_time_s

    def work_posted(self) -> None:  # noqa: B027
        """A command was queued for the worker (called before the put)."""

    def work_started(self) -> None:  # noqa: B027
        """The worker took a command off its queue."""

    def work_finished(self) -> None:  # noqa: B027
        """The worker finished one command."""

    def charge(self, start_s: float, compute_s: float) -> float:
        """Work that started at ``start_s`` took ``compute_s`` of wall time: when is it done?
        (Wall clock: now, the time really passed.)"""
        return self.now()

    def wait_until(self, t_s: float) -> None:  # noqa: B027
        """Block the worker until the clock reaches ``t_s`` (virtual clock only)."""

    def close(self) -> None:  # noqa: B027
        """Release anything waiting on this clock."""


class WallClock(Clock):
    """Monotonic wall time since the clock was created.

    ``device_times_are_monotonic``: real devices stamp with ``time.monotonic()`` (converted by
    subtracting the origin); the paced simulation stamps in seconds since its start already.
    """

    def __init__(self, device_times_are_monotonic: bool = True) -> None:
        self._origin = time.monotonic()
        self._convert = device_times_are_monotonic

    def now(self) -> float:
        return time.monotonic() - self._origin

    def from_device_time(self, device_time_s: float) -> float:
        return device_time_s - self._origin if self._convert else device_time_s

    def restart(self) -> None:
        """Make now() start from zero again (a paced run starts after its setup is done)."""
        self._origin = time.monotonic()

    def sleep_until(self, t_s: float) -> None:
        """Pace a simulated run to real time."""
        delay = t_s - self.now()
        if delay > 0:
            time.sleep(delay)


class VirtualClock(Clock):
    """Driver-advanced time; see the module docstring for the compute-charging model.

    It tracks one worker (the engine worker): quiescent means the worker is waiting for the
    clock, or idle with nothing queued.
    """

    def __init__(self, charge_compute: bool = True) -> None:
        self.charge_compute = charge_compute
        self._cond = threading.Condition()
        self._now = 0.0
        self._pending = 0  # commands queued, not yet picked up
        self._running = False  # the worker is executing (not waiting for the clock)
        self._waiting_until: float | None = None  # the worker waits for this virtual time
        self._closed = False
        self.charged_s = 0.0  # total engine compute charged so far

    def now(self) -> float:
        return self._now

    def work_posted(self) -> None:
        with self._cond:
            self._pending += 1

    def work_started(self) -> None:
        with self._cond:
            self._pending -= 1
            self._running = True

    def work_finished(self) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()

    def charge(self, start_s: float, compute_s: float) -> float:
        charged = compute_s if self.charge_compute else 0.0
        with self._cond:
            self.charged_s += charged
        return start_s + charged

    def wait_until(self, t_s: float) -> None:
        with self._cond:
            if t_s <= self._now or self._closed:
                return
            self._waiting_until, self._running = t_s, False
            self._cond.notify_all()
            while self._waiting_until is not None and not self._closed:
                self._cond.wait()
            self._waiting_until, self._running = None, True

    def advance_to(self, t_s: float) -> None:
        """Move time forward and release the worker if its result is due by then."""
        with self._cond:
            self._now = max(self._now, t_s)
            if self._waiting_until is not None and self._waiting_until <= self._now:
                self._waiting_until, self._running = None, True  # runnable again, now
                self._cond.notify_all()

    def _quiescent(self) -> bool:
        return self._waiting_until is not None or (not self._running and self._pending == 0)

    def settle(self, timeout_s: float = 120.0) -> None:
        """Block until the worker waits for a later time, or is idle with nothing queued."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._quiescent() and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the engine worker did not finish its step within "
                                       f"{timeout_s:.0f} s of wall time")
                self._cond.wait(remaining)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
