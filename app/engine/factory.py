"""The one place engines are built from settings.

Engine modules other than the echo demo are imported only here and only when chosen, so the
app starts without torch or model code. An engine package plugs in by exposing a module-level
``build_engine(settings) -> Engine`` (see ``ENGINE_MODULES``).
"""

from __future__ import annotations

import importlib

from app.engine.base import Engine
from app.settings import EngineKind, Settings

# kind -> module that provides build_engine(settings); "echo" is built here directly.
ENGINE_MODULES: dict[str, str] = {
    "moss_speech": "app.engine.moss_speech",
}


class EngineUnavailableError(RuntimeError):
    """The chosen engine cannot be built; the message says why and what to use instead."""


def build_engine(settings: Settings, kind: EngineKind | None = None) -> Engine:
    """Build the engine named by ``kind`` (default: ``settings.engine.kind``)."""
    kind = kind or settings.engine.kind
    if kind == "echo":
        from app.engine.echo import EchoEngine

        return EchoEngine()
    module_name = ENGINE_MODULES.get(kind)
    if module_name is None:
        raise EngineUnavailableError(f"unknown engine '{kind}'; choose one of: echo, "
                                     + ", ".join(ENGINE_MODULES))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise EngineUnavailableError(
                f"the '{kind}' engine is not part of this build yet; use the echo demo "
                "(--engine echo) until it is") from exc
        raise
    builder = getattr(module, "build_engine", None)
    if builder is None:
        raise EngineUnavailableError(f"the '{kind}' engine ({module_name}) has no "
                                     "build_engine(settings); use --engine echo for now")
    engine = builder(settings)
    if not isinstance(engine, Engine):
        raise EngineUnavailableError(f"{module_name}.build_engine returned {type(engine)!r}, "
                                     "not an Engine")
    return engine
