"""The window states ``--screenshot PNG --state S`` can show, each set up as a person meets it.

- ``first-run``: a fresh installation's welcome screen.
- ``demo``: the demo conversation, played through the real pipeline (echo engine, simulated
  devices fed from the bundled sample).
- ``settings`` and ``settings:PAGE`` (``engine``, ``replies``, ``listening``, ``echo``,
  ``audio``, ``transcript``): the settings panel on that page.
- ``model-manager``: the guided set-up (model, codec, voice, memory check) on this machine.
- ``errors``: every kind of banner, from the same presenter the app uses.
- ``no-audio``: the real pipeline on a machine where no microphone and no speaker exist.

Each state returns the widget to grab and ``expected``: texts that must be visible in it (the
test checks them after layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtWidgets import QWidget

from app.engine.base import EngineInfo
from app.engine.preflight import GpuQuery, query_gpu_memory
from app.events import DeviceLost, EngineStatusChanged, ErrorReported
from app.settings import Settings
from app.ui.main_window import MainWindow
from app.ui.settings_text import PAGES

DEMO_SPEED = 4.0  # the demo conversation plays 4× faster than real time
SETTINGS_PAGES = tuple(page.key for page in PAGES)
STATES = ("first-run", "demo", "settings", *(f"settings:{p}" for p in SETTINGS_PAGES),
          "model-manager", "errors", "no-audio")
ERRORS = (  # (category, message, action): one of each kind the app shows
    ErrorReported("model_invalid", "model: This is not a MOSS-Speech model folder: config.json "
                  "is not valid JSON.", "Choose or download it again in the model manager."),
    ErrorReported("voice_prompt", "MOSS-Speech could not be loaded: voice.wav is 75.0 s long; "
                  "a voice prompt must be 1–60 s.", "Choose another recording."),
    ErrorReported("out_of_memory", "The GPU ran out of memory during the reply.",
                  "Try int8 or int4 in Settings → Model and voice."),
    ErrorReported("engine", "RuntimeError: CUDA error: an illegal memory access was encountered",
                  "The conversation so far is kept; try again."),
    ErrorReported("audio", "No speaker is available (no output device).",
                  "Connect headphones or speakers or choose them in the settings."),
    ErrorReported("slow_device", "MOSS-Speech runs on the CPU: replies will be much slower "
                  "than real time.", "Install a CUDA build of torch on a machine with an "
                  "NVIDIA GPU."),
)
ERROR_TITLES = ("The model folder cannot be used", "The voice cannot be used",
                "The GPU ran out of memory", "The reply failed", "No speaker",
                "Replies will be slow", "Microphone 'USB Mic' was disconnected",
                "Loading MOSS-Speech")


def demo_port_factory(settings: Settings) -> object:
    """The bundled conversation through the real pipeline (echo engine, simulated devices)."""
    from app.conversation.demo import demo_conversation

    return demo_conversation(settings, speed=DEMO_SPEED)  # started once the window subscribed


@dataclass
class Shown:
    widget: QWidget
    expected: tuple[str, ...]
    window: MainWindow
    ready: Callable[[], bool] = lambda: True  # the state has finished setting itself up
    after: list[Callable[[], None]] = field(default_factory=list)  # clean-up


def show_state(state: str, settings: Settings, *,
               gpu_query: Callable[[], GpuQuery] = query_gpu_memory) -> Shown:
    """Build and show the window (and dialog) for ``state``; raises ValueError if unknown."""
    if state not in STATES:
        raise ValueError(f"unknown state '{state}'; choose one of: {', '.join(STATES)}")
    builders: dict[str, Callable[[Settings, Callable[[], GpuQuery]], Shown]] = {
        "first-run": _first_run, "demo": _demo, "model-manager": _model_manager,
        "errors": _errors, "no-audio": _no_audio}
    if state.startswith("settings"):
        return _settings(state.partition(":")[2] or SETTINGS_PAGES[0], settings, gpu_query)
    return builders[state](settings, gpu_query)


def _window(settings: Settings, gpu_query: Callable[[], GpuQuery],
            port_factory: Callable[[Settings], object] | None = None) -> MainWindow:
    window = MainWindow(settings, port_factory=port_factory,  # type: ignore[arg-type]
                        persist_settings=False, gpu_query=gpu_query)
    window.resize(1180, 800)
    window.show()
    return window


def _first_run(settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    window = _window(Settings(), gpu_query)
    return Shown(window, ("Welcome to MOSS Voice", "a voice", "Set up the model and voice…",
                          "Try the echo demo"), window)


def _demo(settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    from app.conversation.demo import demo_settings

    window = _window(demo_settings(Settings().with_value("ui.first_run_done", True)), gpu_query,
                     demo_port_factory)
    window.start_conversation()
    finished = getattr(window.bridge.port, "finished", None)
    return Shown(window, ("Response latency", "Echo demo — no model loaded", "Transcript"),
                 window, ready=finished.is_set if finished is not None else lambda: True)


def _settings(page: str, settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    if page not in SETTINGS_PAGES:
        raise ValueError(f"unknown settings page '{page}'; choose one of: "
                         f"{', '.join(SETTINGS_PAGES)}")
    window = _window(settings.with_value("ui.first_run_done", True), gpu_query)
    window.open_settings(page)
    dialog = window.settings_dialog
    assert dialog is not None
    title = next(p.title for p in PAGES if p.key == page)
    precision = getattr(dialog, "editors", {}).get("engine.precision")
    return Shown(dialog, (title, "Restore page defaults", "Apply", "Cancel"), window,
                 ready=lambda: getattr(precision, "gpu", True) is not None)  # GPU answered


def _model_manager(settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    window = _window(settings, gpu_query)
    window.open_model_manager()
    dialog = window.model_manager
    assert dialog is not None
    return Shown(dialog, ("1. Model and codec", "2. Voice", "Record your own…",
                          "Use MOSS-Speech"), window,
                 ready=lambda: getattr(dialog, "gpu", None) is not None)


def _errors(settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    window = _window(settings.with_value("ui.first_run_done", True), gpu_query)
    window.show_page(window.conversation_page)
    post = window.bridge.post
    for event in ERRORS:
        post(event)
    post(DeviceLost("input", "USB Mic", "Built-in Microphone", 3.0))
    post(EngineStatusChanged(EngineInfo("Echo demo", is_demo=True), loading=True, progress=0.4,
                             message="Loading MOSS-Speech: reading the model weights… The "
                             "echo demo answers meanwhile."))
    window.resize(1180, 900)
    return Shown(window, ERROR_TITLES, window,
                 ready=lambda: len(window.banners.banners) == len(ERRORS) + 2)


def _no_audio(settings: Settings, gpu_query: Callable[[], GpuQuery]) -> Shown:
    from app.audio.simulated import SimulatedBackend, SimulatedMicrophone
    from app.conversation.clock import WallClock
    from app.conversation.pipeline import Pipeline
    from app.engine.echo import EchoEngine
    from app.vad.energy import EnergyScorer

    def no_devices(wanted: Settings) -> Pipeline:
        import numpy as np

        backend = SimulatedBackend(SimulatedMicrophone(np.zeros(16000, np.float32), 16000),
                                   input_devices=(), output_devices=())
        return Pipeline(wanted, EchoEngine(), backend, clock=WallClock(False),
                        scorer=EnergyScorer())

    window = _window(settings.with_values({"ui.first_run_done": True, "engine.kind": "echo"}),
                     gpu_query, no_devices)
    window.start_conversation()
    port = window.bridge.port
    shown = Shown(window, ("No microphone", "No microphone is available",
                           "No speaker is available"), window,
                  ready=lambda: window.state_label.text() == "No microphone"
                  and {"error-audio-input", "error-audio-output"} <= set(window.banners.banners))
    def release() -> None:
        if port is not None:
            port.close(5.0)

    shown.after.append(release)
    return shown
