"""The remote engine: MOSS-Speech served by sglang-omni on a bigger machine, over its
OpenAI-style streaming HTTP API (docs/remote-engine.md). Plugs into :mod:`app.engine.factory`
through ``build_engine``; nothing heavy is imported until an engine is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
