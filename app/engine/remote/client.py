"""HTTP to the MOSS-Speech server: the health check, the streaming chat request, and every
failure turned into a message a person can act on.

httpx does the HTTP and httpx-sse the Server-Sent Events; nothing here parses HTTP or SSE by
hand. The client is thread-safe (httpx's is), so a reader thread can finish a reply the engine
has stopped listening to while the next request starts.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from httpx_sse import EventSource, SSEError

from app.engine.remote.protocol import CHAT_PATH, HEALTH_PATH, StreamItem, error_detail, parse_event

log = logging.getLogger(__name__)

DOCS = "docs/remote-engine.md"
KEY_ACTION = "Enter the server's API key in Settings → Engine → API key."
ADDRESS_ACTION = "Check Settings → Engine → Server address."
MAX_ERROR_BODY_BYTES = 64 * 1024


class RemoteError(Exception):
    """A failure talking to the server. ``category``: ``remote`` (the server or the way to it)
    or ``input`` (the server refused this turn); ``busy`` marks a full queue (HTTP 503), worth
    asking again after ``retry_after_s`` (the server's Retry-After, if it sent one)."""

    def __init__(self, message: str, action: str = "", category: str = "remote", *,
                 busy: bool = False, retry_after_s: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.action = action
        self.category = category
        self.busy = busy
        self.retry_after_s = retry_after_s
        self.status = status


def normalize_url(url: str) -> str:
    """``http://host:8000/`` or ``.../v1`` (as OpenAI clients write it) → ``http://host:8000``."""
    url = url.strip().rstrip("/")
    return url[:-3].rstrip("/") if url.endswith("/v1") else url


def host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 5.0
    first_audio_s: float = 60.0
    stall_s: float = 15.0

    def httpx(self) -> httpx.Timeout:
        """httpx's own limits are only a backstop: the engine watches stalls itself."""
        backstop = max(self.first_audio_s, self.stall_s) + 5.0
        return httpx.Timeout(connect=self.connect_s, read=backstop,
                             write=max(30.0, self.first_audio_s), pool=self.connect_s)


class RemoteClient:
    def __init__(self, url: str, api_key: str | None = None, timeouts: Timeouts | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = normalize_url(url)
        self.timeouts = timeouts or Timeouts()
        self._client = httpx.Client(base_url=self.url, timeout=self.timeouts.httpx(),
                                    transport=transport, trust_env=False)
        self._api_key = api_key

    def set_api_key(self, api_key: str | None) -> None:
        self._api_key = api_key or None

    @property
    def has_api_key(self) -> bool:
        return self._api_key is not None

    def set_timeouts(self, timeouts: Timeouts) -> None:
        self.timeouts = timeouts
        self._client.timeout = timeouts.httpx()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def health(self) -> dict[str, Any]:
        """``GET /health``; raises RemoteError unless the server says it is ready."""
        try:
            response = self._client.get(HEALTH_PATH, headers=self._headers())
        except httpx.TransportError as exc:
            raise transport_error(exc, self.url, self.timeouts) from exc
        if response.status_code == 503:
            raise RemoteError(f"The server at {self.url} is not ready yet (health: "
                              f"{error_detail(response.content, 120)}).",
                              "It may still be loading the model, which takes minutes; try "
                              "again shortly.", status=503)
        if response.status_code == 404:
            raise RemoteError(f"{self.url} has no {HEALTH_PATH}: it does not look like a "
                              "sglang-omni server.", ADDRESS_ACTION, status=404)
        if response.status_code != 200:
            raise status_error(response.status_code, response.content, self.url,
                               self.has_api_key, response.headers.get("retry-after"))
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        return payload if isinstance(payload, dict) else {}

    @contextmanager
    def stream(self, body: bytes, trace: Callable[[str, dict[str, Any]], None] | None = None,
               on_response: Callable[[httpx.Response], None] | None = None
               ) -> Iterator[Iterator[StreamItem]]:
        """POST the chat request and yield its SSE events, parsed, as they arrive.

        ``on_response`` gets the response once its headers are in (so another thread can
        close its connection); a status other than 200 raises RemoteError with the server's
        message. Transport failures are RemoteError too."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   **self._headers()}
        extensions = {"trace": trace} if trace is not None else None
        try:
            with self._client.stream("POST", CHAT_PATH, content=body, headers=headers,
                                     extensions=extensions) as response:
                if on_response is not None:
                    on_response(response)
                if response.status_code != 200:
                    content = _bounded_read(response)
                    raise status_error(response.status_code, content, self.url,
                                       self.has_api_key, response.headers.get("retry-after"))
                yield _events(response)
        except httpx.TransportError as exc:
            raise transport_error(exc, self.url, self.timeouts) from exc

    def close(self) -> None:
        self._client.close()


def _bounded_read(response: httpx.Response) -> bytes:
    data = b""
    for part in response.iter_bytes():
        data += part
        if len(data) >= MAX_ERROR_BODY_BYTES:
            break
    return data


def _events(response: httpx.Response) -> Iterator[StreamItem]:
    try:
        for event in EventSource(response).iter_sse():
            yield parse_event(event.data, event.event)
    except SSEError as exc:
        raise RemoteError(f"The server did not answer with an event stream ({exc}).",
                          "Check that the server runs the streaming preset "
                          f"(moss_speech_streaming.yaml; {DOCS}).") from exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def transport_error(exc: httpx.TransportError, url: str, timeouts: Timeouts) -> RemoteError:
    """A failure below HTTP (DNS, TCP, TLS, a dropped connection) as a message and an action."""
    where = host_port(url)
    causes = list(_chain(exc))
    text = "; ".join(dict.fromkeys(str(e) for e in causes if str(e)))
    if isinstance(exc, httpx.ConnectTimeout):
        return RemoteError(f"No answer from {where} within {timeouts.connect_s:g} s.",
                           f"Check that the server is running and reachable (firewall, VPN). "
                           f"{ADDRESS_ACTION}")
    if isinstance(exc, httpx.ConnectError):
        host = urlsplit(url).hostname
        if any(isinstance(e, socket.gaierror) for e in causes) or any(
                marker in text for marker in ("Name or service not known", "nodename nor "
                                              "servname", "getaddrinfo failed",
                                              "Temporary failure in name resolution")):
            return RemoteError(f"The server name '{host}' cannot be found (DNS lookup failed).",
                               f"Check the spelling, or use the server's IP address. "
                               f"{ADDRESS_ACTION}")
        if any(isinstance(e, ssl.SSLError) for e in causes) or "SSL" in text:
            reason = next((str(e) for e in causes if isinstance(e, ssl.SSLError)), text)
            return RemoteError(f"A secure (TLS) connection to {where} failed: {reason[:160]}.",
                               "Use http:// if the server does not speak HTTPS, or make sure "
                               "its certificate is valid for this name.")
        if any(isinstance(e, ConnectionRefusedError) for e in causes) or "refused" in text:
            return RemoteError(f"Nothing answers at {where} (connection refused): is the "
                               "MOSS-Speech server running?",
                               f"Start the server ({DOCS}) or fix the port in Settings → "
                               "Engine → Server address.")
        return RemoteError(f"Cannot connect to {where}: {text[:160]}.",
                           f"Check the network and the address. {ADDRESS_ACTION}")
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(f"The server at {where} stopped answering (no data for "
                           f"{timeouts.stall_s:g} s).",
                           "It may be overloaded; try again.")
    if isinstance(exc, httpx.WriteError):
        return RemoteError(f"The request could not be sent to {where}: {text[:160]}.",
                           "Check the network; try again.")
    return RemoteError(f"The connection to {where} was lost mid-reply ({text[:160]}).",
                       "What you heard is kept; try again. If it keeps happening, see the "
                       "server's log.")


def status_error(status: int, body: bytes, url: str, has_key: bool,
                 retry_after: str | None = None) -> RemoteError:
    """An HTTP error status from the server as a message and an action."""
    detail = error_detail(body)
    if status in (400, 422):
        return RemoteError(f"The server refused this turn ({status}): {detail}",
                           "The conversation so far is kept; speak again (the server takes "
                           "turns of up to 30 s).", "input", status=status)
    if status == 401:
        what = ("refused the API key" if has_key else "asks for an API key and none is set "
                "for it")
        return RemoteError(f"The server {what} (401 Unauthorized: {detail}).", KEY_ACTION,
                           status=status)
    if status == 403:
        return RemoteError(f"The server denied access (403 Forbidden: {detail}).",
                           f"Check that your API key may use this server. {KEY_ACTION}",
                           status=status)
    if status == 404:
        return RemoteError(f"{url}{CHAT_PATH} does not exist (404): it does not look like a "
                           "sglang-omni server.", ADDRESS_ACTION, status=status)
    if status == 503:
        return RemoteError(f"The server is busy: its queue is full (503: {detail}).",
                           "Try again in a moment; the server takes a few requests at once.",
                           busy=True, retry_after_s=_seconds(retry_after), status=status)
    return RemoteError(f"The server failed ({status}): {detail}",
                       "Try again; if it keeps happening, see the server's log.", status=status)


def _seconds(retry_after: str | None) -> float | None:
    try:
        return max(0.0, float(retry_after)) if retry_after else None
    except ValueError:
        return None  # an HTTP date: the client's own back-off applies
