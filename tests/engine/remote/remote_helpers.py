"""Helpers for the remote-engine tests: settings that point at the stand-in server, an engine
that talks to it, and event filters."""

from __future__ import annotations

import threading

import keyring.backend
import numpy as np
from keyring.compat import properties

from app.engine.base import EngineEvent, ReplyAudio, UserTurn
from app.engine.remote.engine import RemoteEngine
from app.settings import Settings


def remote_settings(url: str, values: dict[str, object] | None = None,
                    **engine: object) -> Settings:
    """Settings for the remote engine at ``url``; ``engine`` sets ``engine.*`` keys, ``values``
    any ``group.key``. Turns end by silence (the pipelines here time the user's turns; the
    end-of-turn model has its own tests)."""
    changes: dict[str, object] = {"engine.kind": "remote", "engine.remote_url": url,
                                  "vad.smart_endpoint": False}
    changes.update({f"engine.{k}": v for k, v in engine.items()})
    changes.update(values or {})
    return Settings().with_values(changes)


def make_engine(url: str, key: str | None = None, values: dict[str, object] | None = None,
                **engine: object) -> RemoteEngine:
    return RemoteEngine(remote_settings(url, values, **engine), api_key=lambda: key,
                        busy_backoff_s=0.01)


def reply(engine: RemoteEngine, turn: UserTurn,
          cancel: threading.Event | None = None) -> list[EngineEvent]:
    return list(engine.respond(turn, cancel or threading.Event()))


def audio_of(events: list[EngineEvent]) -> np.ndarray:
    parts = [e.pcm for e in events if isinstance(e, ReplyAudio)]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def of(events: list[EngineEvent], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A keyring backend that keeps passwords in a dict (never chosen by keyring itself)."""

    @properties.classproperty
    def priority(cls) -> float:  # noqa: N805 - a class property
        raise RuntimeError("test backend: keyring must not pick it by itself")

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.passwords.pop((service, username), None)
