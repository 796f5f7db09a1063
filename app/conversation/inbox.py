"""The voice loop's single inlet: control before data.

Producers on other threads (UI commands, player notices, device-loss reports, engine worker
events, the capture callback's "new audio" signal) post here; the voice loop takes everything
at once and handles control items first, so a stop or a push-to-talk press never waits behind
a backlog of audio.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class Inbox:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._control: deque[Any] = deque()
        self._data: deque[Any] = deque()
        self._capture_ready = False
        self._closed = False

    def post_control(self, item: Any) -> None:
        with self._cond:
            self._control.append(item)
            self._cond.notify()

    def post_data(self, item: Any) -> None:
        with self._cond:
            self._data.append(item)
            self._cond.notify()

    def signal_capture(self) -> None:
        """New microphone audio is waiting in the capture buffer (cheap; callback-safe)."""
        with self._cond:
            self._capture_ready = True
            self._cond.notify()

    def wait(self, timeout_s: float) -> None:
        """Block until something was posted, the inbox closed, or the timeout passed."""
        with self._cond:
            if not (self._control or self._data or self._capture_ready or self._closed):
                self._cond.wait(timeout_s)

    def take(self) -> tuple[list[Any], list[Any]]:
        """(control items, data items), each in arrival order; clears the capture signal (the
        caller drains the capture buffer every pass anyway)."""
        with self._cond:
            control, data = list(self._control), list(self._data)
            self._control.clear()
            self._data.clear()
            self._capture_ready = False
        return control, data

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
