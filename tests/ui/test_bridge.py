from __future__ import annotations

import threading

from pytestqt.qtbot import QtBot

from app.events import ConversationState, StateChanged, StopReply
from app.ui.bridge import UiBridge
from tests.ui.conftest import FakePort, drain_bridge


def test_events_from_other_threads_arrive_on_the_gui_thread_in_order(qtbot: QtBot) -> None:
    bridge = UiBridge()
    seen: list[tuple[float, bool]] = []
    bridge.on(StateChanged, lambda e: seen.append(
        (e.t_s, threading.current_thread() is threading.main_thread())))
    worker = threading.Thread(target=lambda: [bridge.post(
        StateChanged(ConversationState.LISTENING, float(i))) for i in range(200)])
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: len(seen) == 200)
    assert [t for t, _ in seen] == [float(i) for i in range(200)]
    assert all(on_gui for _, on_gui in seen)


def test_commands_go_to_the_attached_port_only(qtbot: QtBot, port: FakePort) -> None:
    bridge = UiBridge()
    assert bridge.submit(StopReply()) is False
    assert bridge.dropped_commands == [StopReply()]
    attached: list[bool] = []
    bridge.port_attached.connect(lambda: attached.append(True))
    bridge.attach(port)
    assert attached == [True] and port.sinks == [bridge.post]
    assert bridge.submit(StopReply()) is True
    assert port.commands == [StopReply()]


def test_a_failing_handler_does_not_stop_the_others(qtbot: QtBot) -> None:
    bridge = UiBridge()
    seen: list[StateChanged] = []

    def broken(_event: StateChanged) -> None:
        raise RuntimeError("bug in one widget")

    bridge.on(StateChanged, broken)
    bridge.on(StateChanged, seen.append)
    event = StateChanged(ConversationState.SPEAKING, 1.0)
    bridge.post(event)
    qtbot.waitUntil(lambda: seen == [event])
    bridge.off(StateChanged, seen.append)
    bridge.post(event)
    bridge.post(StateChanged(ConversationState.IDLE, 2.0))
    drain_bridge(qtbot, bridge)  # both were delivered, to no handler of ours
    assert seen == [event]


def test_background_work_reports_back_on_the_gui_thread(qtbot: QtBot) -> None:
    bridge = UiBridge()
    results: list[object] = []

    def done(value: int) -> None:
        results.append((value, threading.current_thread() is threading.main_thread()))

    def fail() -> int:
        raise ValueError("no such folder")

    bridge.run_in_background(lambda: 6 * 7, done, results.append, name="ok")
    bridge.run_in_background(fail, done, results.append, name="bad")
    qtbot.waitUntil(lambda: len(results) == 2)
    assert (42, True) in results
    assert any(isinstance(r, ValueError) for r in results)


def test_a_result_that_arrives_after_the_window_is_gone_is_dropped(qtbot: QtBot) -> None:
    import shiboken6

    bridge = UiBridge()
    shiboken6.delete(bridge)  # what closing the window does to its bridge
    late_results: list[object] = []
    failures: list[BaseException] = []

    def worker() -> None:  # a download or folder check that finished after the window closed
        try:
            bridge.post(object())
            late_results.append("posted")
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert failures == [] and late_results == ["posted"]  # dropped, no exception in the worker
    assert not shiboken6.isValid(bridge)
