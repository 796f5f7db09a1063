"""What the main window says about the engine, and whether the first-run screen is due."""

from __future__ import annotations

from pathlib import Path

from app.engine.base import EngineInfo
from app.settings import Settings

DEMO_BADGE = "Echo demo — no model loaded"
DEMO_BADGE_STYLE = ("QLabel#demoBadge { background: #fff3bf; color: #5c4400; border: 1px solid "
                    "#e0c060; border-radius: 4px; padding: 2px 8px; font-weight: 600; }")


def engine_label(settings: Settings, info: EngineInfo | None) -> str:
    if info is not None:
        if info.is_demo:
            return f"Engine: {info.name} (no model loaded)"
        precision = f" · {info.precision}" if info.precision else ""
        return f"Engine: {info.name}{precision}"
    if settings.engine.kind == "echo":
        return "Engine: Echo demo (no model loaded)"
    return "Engine: MOSS-Speech (not loaded yet)"


def needs_first_run(settings: Settings) -> bool:
    """No model set up and the first-run screen not yet answered."""
    engine = settings.engine
    model_set = bool(engine.model_dir and engine.codec_dir and Path(engine.model_dir).is_dir()
                     and Path(engine.codec_dir).is_dir())
    return not settings.ui.first_run_done and not (engine.kind == "moss_speech" and model_set)
