"""THE one Qt object that receives anything from other threads.

Pipeline sinks, download workers, the GPU query and folder checks all hand their results to
``UiBridge.post`` from whatever thread they run on. ``post`` puts the event in a thread-safe
queue and posts a wake-up QEvent (QCoreApplication.postEvent is thread-safe); on the GUI thread
the bridge drains the queue in order and runs the handlers registered for each event type, at
most ``MAX_EVENTS_PER_DRAIN`` at a time so a flood never stalls painting. Commands go the other
way through ``submit``, which never blocks (ConversationPort.submit does not). No other QObject
in the UI is touched from a non-GUI thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Signal

from app.events import Command, ConversationPort

log = logging.getLogger(__name__)
T = TypeVar("T")
Handler = Callable[[Any], None]
WAKE_EVENT = QEvent.Type(QEvent.registerEventType())
MAX_EVENTS_PER_DRAIN = 200


@dataclass(frozen=True)
class TaskFinished:
    """A background task's result, delivered to its ``done`` callback on the GUI thread."""

    done: Callable[[Any], None]
    value: Any


@dataclass(frozen=True)
class TaskFailed:
    failed: Callable[[BaseException], None]
    error: BaseException


class UiBridge(QObject):
    """Events in (any thread) → handlers on the GUI thread; commands out to the port."""

    port_attached = Signal()

    def __init__(self, port: ConversationPort | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._handlers: dict[type, list[Handler]] = defaultdict(list)
        self._port: ConversationPort | None = None
        self.dropped_commands: list[Command] = []  # sent while no pipeline was attached
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        if port is not None:
            self.attach(port)

    # ---- the pipeline --------------------------------------------------------------------

    @property
    def port(self) -> ConversationPort | None:
        return self._port

    def attach(self, port: ConversationPort) -> None:
        """Start receiving the pipeline's events (its sinks call ``post`` from its threads)."""
        if self._port is port:
            return
        self._port = port
        port.subscribe(self.post)
        self.port_attached.emit()

    def submit(self, command: Command) -> bool:
        """Send a command to the pipeline; False (and kept for inspection) when none is attached."""
        if self._port is None:
            log.info("no voice loop attached; command %s not sent", type(command).__name__)
            self.dropped_commands.append(command)
            del self.dropped_commands[:-50]
            return False
        self._port.submit(command)
        return True

    # ---- events ----------------------------------------------------------------------------

    def post(self, event: object) -> None:
        """Thread-safe: deliver ``event`` to the GUI thread's handlers (in posting order).

        Delivery is always queued, even from the GUI thread: handlers never re-enter each other.
        """
        self._inbox.put(event)
        try:
            QCoreApplication.postEvent(self, QEvent(WAKE_EVENT))
        except RuntimeError:  # the window, and this bridge, are gone (a late worker result)
            log.debug("bridge deleted; %s dropped", type(event).__name__)

    def event(self, event: QEvent) -> bool:
        if event.type() != WAKE_EVENT:
            return super().event(event)
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True
            self._dispatch(item)
        if not self._inbox.empty():  # more left: continue after the GUI has painted
            QCoreApplication.postEvent(self, QEvent(WAKE_EVENT))
        return True

    def on(self, event_type: type[T], handler: Callable[[T], None]) -> None:
        """Call ``handler(event)`` on the GUI thread for every posted ``event_type``."""
        self._handlers[event_type].append(handler)

    def off(self, event_type: type, handler: Callable[[Any], None]) -> None:
        handlers = self._handlers.get(event_type, [])
        if handler in handlers:
            handlers.remove(handler)

    def _dispatch(self, event: object) -> None:
        if isinstance(event, TaskFinished):
            self._call(event.done, event.value)
            return
        if isinstance(event, TaskFailed):
            self._call(event.failed, event.error)
            return
        for handler in list(self._handlers.get(type(event), ())):
            self._call(handler, event)

    def _call(self, handler: Callable[[Any], None], argument: Any) -> None:
        # One failing handler must not take the event loop (and the app) down with it.
        try:
            handler(argument)
        except Exception:
            log.exception("UI handler %r failed on %r", handler, type(argument).__name__)

    # ---- background work -------------------------------------------------------------------

    def run_in_background(self, work: Callable[[], T], done: Callable[[T], None],
                          failed: Callable[[BaseException], None], name: str) -> threading.Thread:
        """Run ``work()`` on a daemon thread; ``done(result)`` or ``failed(exc)`` on the GUI thread.

        Used for anything that may block: downloads, the GPU query (imports torch), folder checks.
        """

        def run() -> None:
            try:
                result = work()
            except BaseException as exc:  # delivered, never swallowed
                self.post(TaskFailed(failed, exc))
            else:
                self.post(TaskFinished(done, result))

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread
