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
    "remote": "app.engine.remote",
}


class EngineUnavailableError(RuntimeError):
    """The chosen engine cannot be built; the message says what is wrong, ``action`` what to do
    in the app and ``cli_action`` (when it differs) what to do on the command line.

    ``category`` names the banner the UI shows: ``model_invalid`` (model or codec folder),
    ``voice_prompt``, ``out_of_memory`` (does not fit the GPU), ``remote`` (the MOSS-Speech
    server cannot be used) or ``engine_unavailable``.
    """

    def __init__(self, message: str, category: str = "engine_unavailable",
                 action: str = "", cli_action: str = "") -> None:
        super().__init__(message)
        self.category = category
        self.action = action
        self.cli_action = cli_action

    def advice(self, context: str = "gui") -> str:
        """What to do, said for where the person is: ``"gui"`` (settings, model manager) or
        ``"cli"`` (options of the command line); the GUI advice when there is no CLI one."""
        return (self.cli_action or self.action) if context == "cli" else self.action


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
                f"the '{kind}' engine is not part of this installation",
                action="Reinstall the app, or use the echo demo meanwhile.") from exc
        raise EngineUnavailableError(
            f"the '{kind}' engine needs the Python package '{exc.name}', which is missing",
            action=f"Install it (pip install {exc.name}) or reinstall the app.") from exc
    builder = getattr(module, "build_engine", None)
    if builder is None:
        raise EngineUnavailableError(f"the '{kind}' engine ({module_name}) has no "
                                     "build_engine(settings)",
                                     action="Reinstall the app, or use the echo demo meanwhile.")
    engine = builder(settings)
    if not isinstance(engine, Engine):
        raise EngineUnavailableError(f"{module_name}.build_engine returned {type(engine)!r}, "
                                     "not an Engine")
    return engine
