"""What the person is told while an engine loads, and when it cannot be loaded.

The engine is always (re)built on the engine worker (the GPU's one thread); until it is ready,
and whenever it cannot be built (no model folder, a broken one, an engine not in this build,
out of memory), the engine that was running keeps answering. At start-up that is the echo
demo, which the UI labels as such. A failure becomes a banner with the model manager as its
action: the app never stops over it.
"""

from __future__ import annotations

from collections.abc import Callable

from app import events as ev
from app.conversation.engine_worker import EngineBuilding, EngineSwapped, EngineWorker
from app.engine.base import Engine, EngineInfo
from app.settings import Settings, needs_engine_rebuild

ENGINE_NAMES = {"echo": "the echo demo", "moss_speech": "MOSS-Speech",
                "remote": "the MOSS-Speech server"}
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
    end = "" if message.endswith(("?", "!")) else "."  # "is the server running?" stays so
    return [status, ev.ErrorReported(swapped.category,
                                     f"{engine_name(wanted)} could not be loaded: {message}{end}",
                                     f"{action} {meanwhile}")]


class EngineSwitch:
    """Which engine answers, and when to build another (on the worker, the GPU's thread).

    ``as_wanted``: the engine answering is the one the settings name (False while the echo
    demo stands in for one that could not be built); then any setting that decides a build
    retries it, so choosing the missing voice loads the model at once."""

    def __init__(self, worker: EngineWorker, factory: Callable[[Settings], Engine] | None,
                 emit: Callable[[ev.PipelineEvent], None], load_at_start: bool) -> None:
        self._worker = worker
        self._factory = factory
        self._emit = emit
        self.load_at_start = load_at_start and factory is not None
        self.as_wanted = not self.load_at_start

    def apply(self, old: Settings, new: Settings, reload: bool) -> None:
        """New settings: rebuild when they change what the engine is built from (or when
        asked), else the running engine takes them live."""
        if reload or needs_engine_rebuild(old, new, self.as_wanted):
            self.rebuild(new)
        else:  # sampling, prompt, context, streaming, voice: the engine applies them live
            self._worker.apply_settings(new)

    def rebuild(self, wanted: Settings) -> None:
        """Build the engine ``wanted`` names on the worker; the current one answers meanwhile."""
        if (factory := self._factory) is not None:
            self._emit(loading_event(self._worker.info, wanted))
            self._worker.swap_engine(lambda: factory(wanted))

    def on_worker_event(self, event: EngineSwapped | EngineBuilding, settings: Settings) -> None:
        """Show a build's progress or outcome."""
        if isinstance(event, EngineSwapped):
            self.as_wanted = not event.error
            for item in swap_events(event, settings):
                self._emit(item)
        else:
            self._emit(loading_event(self._worker.info, settings, event))
