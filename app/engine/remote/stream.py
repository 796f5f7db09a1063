"""One streaming request, run on its own reader thread so the engine thread can stop at once.

The engine thread waits on a queue the reader fills (headers, parsed SSE events, the end or a
failure). A blocked socket read cannot be interrupted by closing the response from another
thread (it wakes only when the read times out), so aborting shuts the socket down, which wakes
the read at once and tells the server, whose request is then aborted. A small watcher thread
turns the voice loop's ``cancel`` event into that abort (control beats data: no polling of the
stream), and the engine thread's queue wait doubles as the stall watchdog.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.engine.remote.client import RemoteClient, RemoteError
from app.engine.remote.protocol import StreamItem

log = logging.getLogger(__name__)
WATCH_POLL_S = 0.05  # how often the cancel watcher checks that its reply is still running


class Cancelled:
    """Queue item: the voice loop cancelled the reply (barge-in, stop)."""


class Ended:
    """Queue item: the response body ended (with or without ``[DONE]`` before it)."""


@dataclass(frozen=True)
class HeadersIn:
    """Queue item: the server answered 200 and the event stream begins."""

    sent_s: float  # request body fully sent (perf_counter)
    headers_s: float  # response headers received


Item = StreamItem | Cancelled | Ended | HeadersIn | RemoteError


@dataclass
class _Connection:
    """The response whose socket an abort shuts down (once its headers are in)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    response: httpx.Response | None = None
    aborted: bool = False
    sent_s: float | None = None
    headers_s: float | None = None

    def attach(self, response: httpx.Response) -> None:
        self.headers_s = time.perf_counter()
        with self.lock:
            self.response = response
            if self.aborted:
                self._shutdown()

    def abort(self) -> None:
        with self.lock:
            self.aborted = True
            self._shutdown()

    def _shutdown(self) -> None:
        response = self.response
        if response is None:  # still sending: the reader aborts once the headers are in
            return
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already closed by the other side
                sock.shutdown(socket.SHUT_RDWR)

    def trace(self, event: str, _info: dict[str, Any]) -> None:
        if event == "http11.send_request_body.complete":
            self.sent_s = time.perf_counter()


class Reply:
    """Start with :meth:`start`; read :meth:`next_item`; always :meth:`finish` (abort or not)."""

    def __init__(self, client: RemoteClient, body: bytes, cancel: threading.Event,
                 name: str) -> None:
        self._client = client
        self._body = body
        self._cancel = cancel
        self._items: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._connection = _Connection()
        self._watching = threading.Event()
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._watcher = threading.Thread(target=self._watch, name=f"{name}-cancel", daemon=True)

    def start(self) -> Reply:
        self._watching.set()
        self._reader.start()
        self._watcher.start()
        return self

    def next_item(self, timeout_s: float) -> Item | None:
        """The next item, or None when nothing came for ``timeout_s`` (a stall)."""
        try:
            return self._items.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def abort(self) -> None:
        """Close the connection now (the server aborts the request)."""
        self._connection.abort()

    def finish(self) -> None:
        """Stop watching ``cancel``. A reply that ended is left to drain (so its connection is
        reused); anything else should be aborted first."""
        self._watching.clear()

    def _read(self) -> None:
        connection = self._connection
        try:
            with self._client.stream(self._body, trace=connection.trace,
                                     on_response=connection.attach) as events:
                headers_s = connection.headers_s or time.perf_counter()
                self._items.put(HeadersIn(connection.sent_s or headers_s, headers_s))
                for item in events:
                    if connection.aborted:
                        return
                    self._items.put(item)
            self._items.put(Ended())
        except RemoteError as exc:
            self._items.put(exc)
        except Exception as exc:  # a bug must not leave the engine waiting for a stall
            log.exception("reading the server's reply failed")
            self._items.put(RemoteError(f"Reading the server's reply failed: "
                                        f"{type(exc).__name__}: {exc}"))

    def _watch(self) -> None:
        while self._watching.is_set():
            if self._cancel.wait(WATCH_POLL_S):
                if self._watching.is_set():
                    self._items.put(Cancelled())  # before the abort's own read error
                    self._connection.abort()
                return
