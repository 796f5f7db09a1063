from __future__ import annotations

import threading
import time

import pytest

from app.conversation.clock import VirtualClock, WallClock


def test_settle_waits_for_a_runnable_worker_and_not_for_one_waiting_on_the_clock() -> None:
    clock = VirtualClock()
    log: list[str] = []
    go = threading.Event()

    def worker() -> None:
        clock.work_started()
        go.wait(5)
        ready = clock.charge(0.0, 0.025)  # 25 ms of compute
        log.append(f"computed {ready:.3f}")
        clock.wait_until(ready)
        log.append(f"released at {clock.now():.3f}")
        clock.work_finished()

    clock.work_posted()
    thread = threading.Thread(target=worker)
    thread.start()
    go.set()
    clock.settle()  # returns once the worker waits for 0.025
    assert log == ["computed 0.025"]
    clock.advance_to(0.02)
    clock.settle()
    assert log == ["computed 0.025"]
    clock.advance_to(0.03)
    clock.settle()  # the worker ran to completion before settle returned
    assert log == ["computed 0.025", "released at 0.030"]
    thread.join(5)


def test_without_charging_compute_is_free_and_runs_are_repeatable() -> None:
    clock = VirtualClock(charge_compute=False)
    assert clock.charge(1.5, 0.4) == 1.5 and clock.charged_s == 0.0


def test_settle_times_out_with_a_clear_message_if_the_worker_hangs() -> None:
    clock = VirtualClock()
    clock.work_posted()  # posted, never picked up
    with pytest.raises(TimeoutError, match="did not finish"):
        clock.settle(timeout_s=0.01)


def test_close_releases_a_waiting_worker() -> None:
    clock = VirtualClock()
    done = threading.Event()

    def worker() -> None:
        clock.work_started()
        clock.wait_until(10.0)
        done.set()

    clock.work_posted()
    threading.Thread(target=worker).start()
    clock.settle()
    clock.close()
    assert done.wait(5)


def test_wall_clock_moves_device_timestamps_onto_its_origin() -> None:
    clock = WallClock()
    now_mono = time.monotonic()
    assert clock.from_device_time(now_mono) == pytest.approx(clock.now(), abs=0.05)
    paced = WallClock(device_times_are_monotonic=False)
    assert paced.from_device_time(1.25) == 1.25
