"""The remote engine: MOSS-Speech served by sglang-omni on a bigger machine, over its
OpenAI-style streaming HTTP API (docs/remote-engine.md). Plugs into :mod:`app.engine.factory`
through ``build_engine``; nothing heavy is imported until an engine is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engine.base import Engine
    from app.settings import Settings


def build_engine(settings: Settings) -> Engine:
    """The remote engine for ``settings``, after the server's ``/health`` said it is ready;
    EngineUnavailableError (category ``remote``) says what is wrong otherwise."""
    from app.engine.factory import EngineUnavailableError
    from app.engine.remote.api_key import ApiKeyStore
    from app.engine.remote.client import RemoteError
    from app.engine.remote.engine import RemoteEngine

    url = settings.engine.remote_url
    if not url:
        raise EngineUnavailableError(
            "no server address is set", "remote",
            "Enter it in Settings → Engine → Server address (docs/remote-engine.md says how "
            "to start a MOSS-Speech server).")
    store = ApiKeyStore()
    engine = RemoteEngine(settings, api_key=lambda: store.get(url))
    try:
        engine.check_health()
    except RemoteError as exc:
        engine.close()
        raise EngineUnavailableError(str(exc).rstrip("."), "remote", exc.action) from exc
    return engine


def health_report(settings: Settings, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """``doctor``'s view of the configured server (None when no remote server is set up):
    whether its ``/health`` says it is ready, and what to do when it does not."""
    url = settings.engine.remote_url
    if not url and settings.engine.kind != "remote":
        return None
    if not url:
        return {"url": None, "ok": False, "problem": "engine.kind is remote but no server "
                "address is set (Settings → Engine → Server address)"}
    from app.engine.remote.api_key import ApiKeyStore
    from app.engine.remote.client import RemoteClient, RemoteError, Timeouts

    client = RemoteClient(url, ApiKeyStore().get(url), Timeouts(connect_s=timeout_s))
    try:
        health = client.health()
    except RemoteError as exc:
        return {"url": client.url, "ok": False, "problem": f"{exc} {exc.action}".strip()}
    finally:
        client.close()
    return {"url": client.url, "ok": True, "status": health.get("status", "healthy")}
