"""What the person is told while an engine loads, and when it cannot be loaded.

The engine is always (re)built on the engine worker (the GPU's one thread); until it is ready,
and whenever it cannot be built (no model folder, a broken one, an engine not in this build,
out of memory), the engine that was running keeps answering. At start-up that is the echo
demo, which the UI labels as such. A failure becomes a banner with the model manager as its
action: the app never stops over it.
"""

from __future__ import annotations

from app import events as ev
from app.conversation.engine_worker import EngineBuilding, EngineSwapped
from app.engine.base import EngineInfo
from app.settings import Settings

ENGINE_NAMES = {"echo": "the echo demo", "moss_speech": "MOSS-Speech"}
SLOW_DEVICE_ACTION = ("Install a CUDA build of torch on a machine with an NVIDIA GPU for "
                      "real-time replies (README, 'GPU installation').")


def engine_name(settings: Settings) -> str:
    return ENGINE_NAMES.get(settings.engine.kind, settings.engine.kind)


def loading_event(current: EngineInfo, wanted: Settings,
                  stage: EngineBuilding | None = None) -> ev.EngineStatusChanged:
    """The loading bar: which engine, how far (``stage``), and who answers meanwhile."""
    keeps_answering = not current.is_demo and current.device in ("", "cpu")
    meanwhile = (f" {current.name} answers meanwhile." if keeps_answering else
                 " The echo demo answers meanwhile (it plays your words back).")
    what = f": {stage.what}" if stage is not None else ""
    return ev.EngineStatusChanged(current, loading=True,
                                  progress=stage.fraction if stage is not None else None,
                                  message=f"Loading {engine_name(wanted)}{what}…{meanwhile}")


def status_events(info: EngineInfo, message: str = "") -> list[ev.PipelineEvent]:
    """The engine now answering, plus its warning (e.g. running on the CPU) as a banner."""
    events: list[ev.PipelineEvent] = [ev.EngineStatusChanged(info, message=message)]
    if info.warning:
        events.append(ev.ErrorReported("slow_device", info.warning, SLOW_DEVICE_ACTION))
    return events


def swap_events(swapped: EngineSwapped, wanted: Settings) -> list[ev.PipelineEvent]:
    """The events for a finished (or failed) engine build: one banner per failure.

    A failure keeps its category, so a bad model folder raises the same ``model_invalid``
    banner the model-folder check shows (one banner, not two).
    """
    if not swapped.error:
        return status_events(swapped.info)
    status = ev.EngineStatusChanged(swapped.info, message=swapped.error)
    meanwhile = ("The echo demo answers meanwhile: it plays your words back, it is not an AI."
                 if swapped.info.is_demo else f"{swapped.info.name} keeps answering.")
    action = swapped.action or "Choose or download the model in the model manager."
    message = swapped.error.rstrip(".")
    return [status, ev.ErrorReported(swapped.category,
                                     f"{engine_name(wanted)} could not be loaded: {message}.",
                                     f"{action} {meanwhile}")]
