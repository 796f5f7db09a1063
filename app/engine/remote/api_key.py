"""The remote server's optional API key: kept in the system keyring, never in the settings file
or a log.

Keys are stored per server (scheme://host:port), so a key is never sent to another server.
When the system has no usable keyring (a headless Linux box without a Secret Service, a locked
keychain), a key the person enters is kept in memory for this session only, and they are told.
For scripts, ``MOSS_VOICE_API_KEY`` in the environment is used when nothing else is stored.

The keyring backend is injected (tests pass keyring's fail backend or an in-memory one);
by default it is the one keyring picks for this system.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

log = logging.getLogger(__name__)

SERVICE = "MOSS Voice remote engine"
ENV_VAR = "MOSS_VOICE_API_KEY"
Place = Literal["keyring", "session", "environment"]

_session_keys: dict[str, str] = {}  # server → key, for this process only
_session_lock = threading.Lock()


def server_id(url: str) -> str:
    """The part of a server address a key belongs to: ``scheme://host:port``."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme or "http"
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


@dataclass(frozen=True)
class SaveResult:
    place: Place | None  # where the key now is (None: the key was removed)
    message: str


class ApiKeyStore:
    def __init__(self, backend: KeyringBackend | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self._backend = backend
        self._environ = os.environ if environ is None else environ

    @property
    def backend(self) -> KeyringBackend:
        if self._backend is None:
            import keyring

            self._backend = keyring.get_keyring()
        return self._backend

    def get(self, url: str) -> str | None:
        """The key for the server at ``url``, or None (no key: requests go without one)."""
        found = self.find(url)
        return found[0] if found else None

    def find(self, url: str) -> tuple[str, Place] | None:
        server = server_id(url)
        with _session_lock:
            if server in _session_keys:
                return _session_keys[server], "session"
        try:
            key = self.backend.get_password(SERVICE, server)
        except Exception as exc:  # no keyring, a locked one, a D-Bus error: never fatal
            log.debug("no API key from the keyring for %s (%s)", server, type(exc).__name__)
            key = None
        if key:
            return key, "keyring"
        if self._environ.get(ENV_VAR):
            return self._environ[ENV_VAR], "environment"
        return None

    def save(self, url: str, key: str) -> SaveResult:
        """Store ``key`` for the server at ``url`` (an empty key removes it)."""
        key = key.strip()
        if not key:
            return self.forget(url)
        server = server_id(url)
        try:
            self.backend.set_password(SERVICE, server, key)
            stored = self.backend.get_password(SERVICE, server) == key  # a null keyring lies
        except Exception as exc:
            log.warning("the system keyring cannot store the API key for %s (%s)", server,
                        type(exc).__name__)
            stored = False
        with _session_lock:
            if stored:
                _session_keys.pop(server, None)
            else:
                _session_keys[server] = key
        if stored:
            return SaveResult("keyring", f"Saved in the system keyring for {server}.")
        return SaveResult("session", "This system has no usable keyring: the key is kept in "
                                     "memory until the app closes, and asked for again next "
                                     "time.")

    def forget(self, url: str) -> SaveResult:
        server = server_id(url)
        with _session_lock:
            _session_keys.pop(server, None)
        try:
            if self.backend.get_password(SERVICE, server) is not None:
                self.backend.delete_password(SERVICE, server)
        except Exception as exc:
            log.debug("removing the API key for %s: %s", server, type(exc).__name__)
        return SaveResult(None, f"No API key is stored for {server}.")


def forget_session_keys() -> None:
    """Drop every session-only key (tests; a new session starts empty anyway)."""
    with _session_lock:
        _session_keys.clear()
