"""Special setting editors: precision with its VRAM estimate, the voice prompt (file or
recording), and audio devices with a level meter and a test tone.

Audio never touches a device here: listing devices, metering, the tone and the recording are
commands to the voice loop (app.events), answered by events that arrive through the bridge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.engine.preflight import (
    GpuQuery,
    ModelDims,
    estimate,
    gib,
    read_voice_seconds,
    recommend,
)
from app.events import (
    AudioDevicesListed,
    InputLevelMeasured,
    MonitorInputLevel,
    PlayTestTone,
    ToneTestFinished,
)
from app.ui.bridge import UiBridge
from app.ui.folder_words import tiny_model_note
from app.ui.levels import LevelMeter
from app.ui.settings_form import ChoiceEditor, FieldEditor, PathEditor, SettingField
from app.ui.voice_recorder import RECORD_MAX_S, RECORD_MIN_S, VoiceRecordDialog

__all__ = ["DeviceEditor", "PrecisionEditor", "VoicePromptEditor", "VoiceRecordDialog",
           "tone_failure_advice", "voice_prompt_problem"]
VOICE_MIN_S, VOICE_MAX_S = 1.0, 60.0  # accepted voice-prompt files (settings description)
DEFAULT_DEVICE = "(system default)"


def voice_prompt_problem(path: Path | None) -> str | None:
    """Why a voice-prompt file cannot be used, or None (empty means: no voice prompt)."""
    if path is None:
        return None
    if not path.is_file():
        return f"{path} does not exist."
    try:
        duration_s = read_voice_seconds(path)
    except Exception as exc:
        return (f"{path.name} is not an audio file that can be read ({type(exc).__name__}); "
                "use a WAV or FLAC file.")
    if not VOICE_MIN_S <= duration_s <= VOICE_MAX_S:
        return (f"{path.name} is {duration_s:.1f} s long; a voice prompt must be "
                f"{VOICE_MIN_S:.0f}–{VOICE_MAX_S:.0f} s.")
    return None


class PrecisionEditor(ChoiceEditor):
    """Each precision shown with its VRAM estimate; marks what fits once free VRAM is known."""

    def __init__(self, field: SettingField, options: list[Any]) -> None:
        super().__init__(field, options, optional=False)
        self.context_rows = 4096
        self.dims = ModelDims()
        self.flow_cache_bytes: int | None = None  # None: the default settings'
        self.gpu: GpuQuery | None = None
        self.note = QLabel("Checking the GPU…")
        self.note.setObjectName("precisionNote")
        container = QWidget()
        container.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        row = QHBoxLayout()
        row.addWidget(self.combo)
        row.addStretch(1)
        layout = QVBoxLayout(container)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.note)
        self.container = container
        self.refresh()

    def set_context(self, context_rows: int, dims: ModelDims | None = None,
                    flow_cache_bytes: int | None = None) -> None:
        self.context_rows = int(context_rows)
        self.dims = dims or self.dims
        self.flow_cache_bytes = flow_cache_bytes
        self.refresh()

    def set_gpu(self, gpu: GpuQuery) -> None:
        self.gpu = gpu
        self.refresh()

    def refresh(self) -> None:
        best = self.gpu.best if self.gpu else None
        needs = {option: estimate(option, self.context_rows, self.dims, self.flow_cache_bytes)
                 for option in self.options}
        for option, need in needs.items():
            mark = ""
            if best is not None:
                mark = "  ✓ fits" if need.fits(best.free_bytes) else "  ✗ too big"
            self.set_item_text(option, f"{option} — about {gib(need.total_bytes)}{mark}")
        self.combo.setToolTip(self.field.tooltip + "\n\nEstimated GPU memory:\n" + "\n".join(
            need.breakdown() for need in needs.values()))
        tiny = tiny_model_note(self.dims.param_count())
        if tiny:  # one short line (a wrapped one is squeezed in the form); the rest on hover
            self.note.setText("A tiny test model: the figures are mostly working memory.")
            self.note.setToolTip(tiny)
            return
        if self.gpu is None:
            return
        if best is None:
            self.note.setText("No NVIDIA GPU found: the model would run on the CPU (slow).")
            self.note.setToolTip(self.gpu.note)
            return
        advice = recommend(best.free_bytes, self.context_rows, self.dims,
                           self.flow_cache_bytes)
        self.note.setText(f"{best.name}: {gib(best.free_bytes)} free. Recommended: "
                          f"{advice.precision or 'none fits'}.")
        self.note.setToolTip(advice.message)


class VoicePromptEditor(PathEditor):
    """A WAV/FLAC file, or record 5–15 s in the app (through the voice loop)."""

    record_requested = Signal()

    def __init__(self, field: SettingField) -> None:
        super().__init__(field, optional=True, file_filter="Audio (*.wav *.flac)")
        self.record_button = QPushButton("Record…")
        self.record_button.setToolTip(f"Record {RECORD_MIN_S:.0f}–{RECORD_MAX_S:.0f} s of your "
                                      "voice with the current microphone")
        self.record_button.clicked.connect(self.record_requested)
        self.row.addWidget(self.record_button)

    def problem(self) -> str | None:
        return voice_prompt_problem(self.value())


def tone_failure_advice(message: str) -> str:
    """A failed test tone, with the next step to take."""
    text = message.rstrip(".")
    lowered = text.lower()
    if "busy" in lowered or "in use" in lowered or "unanticipated host error" in lowered:
        step = ("Another program may be using it: close programs that play sound (a call, a "
                "video), or choose another speaker, then press Test tone again.")
    elif "not found" in lowered or "no such" in lowered or "invalid" in lowered:
        step = "It is not connected now: plug it in, press Refresh, or choose another one."
    else:
        step = "Check that it is switched on and not muted, or choose another speaker."
    return f"The test tone failed: {text}. {step}"


class DeviceEditor(FieldEditor):
    """Device by name, from the list the voice loop found; inputs get a live level meter,
    outputs a test tone. Refresh asks for the list again."""

    refresh_requested = Signal()

    def __init__(self, field: SettingField, bridge: UiBridge) -> None:
        container = QWidget()
        super().__init__(field, container)
        self.bridge = bridge
        self.is_input = field.name.startswith("input")
        self.what = "microphone" if self.is_input else "speaker"
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.addItem(DEFAULT_DEVICE)
        self.combo.currentTextChanged.connect(self.changed)
        self.monitoring = False
        self.tone_pending = False
        self.found: tuple[str, ...] | None = None  # None until the voice loop answered
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.meter = LevelMeter() if self.is_input else None
        self.tone_button = None if self.is_input else QPushButton("Test tone")
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip(f"Look for {self.what}s again")
        self.refresh_button.clicked.connect(self.refresh_requested)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        if self.tone_button is not None:
            self.tone_button.clicked.connect(self.play_tone)
            row.addWidget(self.tone_button)
        row.addWidget(self.refresh_button)
        layout = QVBoxLayout(container)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        if self.meter is not None:
            layout.addWidget(self.meter)
        layout.addWidget(self.status)
        self.combo.currentTextChanged.connect(self._on_device_chosen)
        if bridge.port is None:
            self.status.setText(f"The {self.what}s cannot be listed or tested: the voice loop "
                                "is not running.")
            if self.meter is not None:
                self.meter.set_unavailable("not measured")
        else:
            self.status.setText(f"Looking for {self.what}s…")

    def value(self) -> str | None:
        text = self.combo.currentText().strip()
        return None if not text or text == DEFAULT_DEVICE else text

    def set_value(self, value: Any) -> None:
        text = value or DEFAULT_DEVICE
        if self.combo.findText(text) < 0:
            self.combo.addItem(text)
        self.combo.setCurrentText(text)

    def set_devices(self, event: AudioDevicesListed) -> None:
        current = self.combo.currentText()
        names = event.inputs if self.is_input else event.outputs
        default = event.default_input if self.is_input else event.default_output
        self.found = tuple(names)
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(DEFAULT_DEVICE)
        self.combo.addItems(list(names))
        missing = bool(current) and current != DEFAULT_DEVICE and current not in names
        if missing:
            self.combo.addItem(current)
        self.combo.setCurrentText(current or DEFAULT_DEVICE)
        self.combo.blockSignals(False)
        self.status.setText(self.found_text(names, default, current if missing else None))
        if event.problem:  # nothing could be listed at all: say why and what to do
            self.status.setText(f"{event.problem} Install or start the system's audio (on "
                                "Linux: PortAudio, e.g. libportaudio2), then restart the app.")
        if not names and self.meter is not None:
            self.meter.set_unavailable("no microphone")
        if self.tone_button is not None:
            self.tone_button.setEnabled(bool(names))

    def found_text(self, names: tuple[str, ...], default: str | None,
                   missing: str | None) -> str:
        """What was found, in words, and what to do when nothing was."""
        if not names:
            return (f"No {self.what} found. Connect one (or switch it on), check that the "
                    "system's sound settings show it, then press Refresh.")
        listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        text = f"Found {len(names)} {self.what}{'s' if len(names) != 1 else ''}: {listed}."
        if default:
            text += f" The system default is {default}."
        if missing:
            text += f" '{missing}' is not connected now."
        return text

    def show_check_problem(self, message: str) -> None:
        """A device check that failed (the level cannot be measured): said here."""
        if self.is_input and ("level" in message or "microphone" in message):
            self.status.setText(message)

    def start_monitoring(self, enabled: bool) -> None:
        if self.is_input:
            self.monitoring = enabled
            self.bridge.submit(MonitorInputLevel(self.value(), enabled))

    def _on_device_chosen(self) -> None:
        if self.monitoring:  # meter the newly chosen microphone instead
            self.start_monitoring(True)
        if self.meter is not None:
            self.meter.set_level(-60.0)

    def show_level(self, event: InputLevelMeasured) -> None:
        if self.meter is not None and event.device_name == self.value():
            self.meter.set_level(event.peak_dbfs)

    def play_tone(self) -> None:
        if self.bridge.submit(PlayTestTone(self.value())):
            self.tone_pending = True
            self.status.setText("Playing a test tone…")

    def show_tone_result(self, event: ToneTestFinished) -> None:
        if self.tone_pending and event.device_name == self.value():
            self.tone_pending = False
            self.status.setText("Test tone played: did you hear a beep? If not, check the "
                                "volume or choose another speaker." if event.ok else
                                tone_failure_advice(event.message))
