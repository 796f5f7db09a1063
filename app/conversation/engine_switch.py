"""What the person is told while an engine loads, and when it cannot be loaded.

The engine is always (re)built on the engine worker (the GPU's one thread); until it is ready,
and whenever it cannot be built (no model folder, a broken one, an engine not in this build,
out of memory), the engine that was running keeps answering. At start-up that is the echo
demo, which the UI labels as such. A failure becomes a banner with the model manager as its
action: the app never stops over it.
"""

from __future__ import annotations

from app import events as ev
from app.conversation.engine_worker import EngineSwapped
from app.engine.base import EngineInfo
from app.settings import Settings

ENGINE_NAMES = {"echo": "the echo demo", "moss_speech": "MOSS-Speech"}


def engine_name(settings: Settings) -> str:
    return ENGINE_NAMES.get(settings.engine.kind, settings.engine.kind)


def loading_event(current: EngineInfo, wanted: Settings) -> ev.EngineStatusChanged:
    meanwhile = " The echo demo answers meanwhile." if current.is_demo else ""
    return ev.EngineStatusChanged(current, loading=True,
                                  message=f"Loading {engine_name(wanted)}…{meanwhile}")


def swap_events(swapped: EngineSwapped, wanted: Settings) -> list[ev.PipelineEvent]:
    """The events for a finished (or failed) engine build."""
    status = ev.EngineStatusChanged(swapped.info, message=swapped.error)
    if not swapped.error:
        return [status]
    meanwhile = ("The echo demo answers meanwhile: it plays your words back, it is not an AI."
                 if swapped.info.is_demo else f"{swapped.info.name} keeps answering.")
    return [status, ev.ErrorReported(
        "engine_unavailable", f"{engine_name(wanted)} could not be loaded: {swapped.error}.",
        f"{meanwhile} Choose or download the model in the model manager.")]
