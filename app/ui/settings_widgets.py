"""Special setting editors: precision with its VRAM estimate, the voice prompt (file or
recording), and audio devices with a level meter and a test tone.

Audio never touches a device here: listing devices, metering, the tone and the recording are
commands to the voice loop (app.events), answered by events that arrive through the bridge.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
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
    StartVoiceRecording,
    StopVoiceRecording,
    ToneTestFinished,
    VoiceRecordingFinished,
    VoiceRecordingProgressed,
)
from app.paths import data_dir
from app.ui.bridge import UiBridge
from app.ui.settings_form import ChoiceEditor, FieldEditor, PathEditor, SettingField

VOICE_MIN_S, VOICE_MAX_S = 1.0, 60.0  # accepted voice-prompt files (settings description)
RECORD_MIN_S, RECORD_MAX_S = 5.0, 15.0  # in-app recordings
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
        self.note.setWordWrap(True)
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
        if self.gpu is None:
            return
        if best is None:
            self.note.setText(f"No GPU found ({self.gpu.note}); the model would run on the CPU "
                              "(slow).")
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


class LevelMeter(QProgressBar):
    """Input level in dBFS (−60…0)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRange(-60, 0)
        self.setValue(-60)
        self.setFormat("silent")
        self.setMaximumHeight(16)

    def set_level(self, dbfs: float) -> None:
        value = int(max(-60.0, min(0.0, dbfs)))
        self.setValue(value)
        self.setFormat("silent" if dbfs <= -60 else f"{dbfs:.0f} dBFS")


class DeviceEditor(FieldEditor):
    """Device by name; inputs get a live level meter, outputs a test tone."""

    def __init__(self, field: SettingField, bridge: UiBridge) -> None:
        container = QWidget()
        super().__init__(field, container)
        self.bridge = bridge
        self.is_input = field.name.startswith("input")
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.addItem(DEFAULT_DEVICE)
        self.combo.currentTextChanged.connect(self.changed)
        self.monitoring = False
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.meter = LevelMeter() if self.is_input else None
        self.tone_button = None if self.is_input else QPushButton("Test tone")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        if self.tone_button is not None:
            self.tone_button.clicked.connect(self.play_tone)
            row.addWidget(self.tone_button)
        layout = QVBoxLayout(container)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        if self.meter is not None:
            layout.addWidget(self.meter)
        layout.addWidget(self.status)
        self.combo.currentTextChanged.connect(self._on_device_chosen)
        if bridge.port is None:
            self.status.setText("Device tests need the voice loop, which is not running.")

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
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(DEFAULT_DEVICE)
        self.combo.addItems(list(names))
        if current and self.combo.findText(current) < 0:
            self.combo.addItem(current)
            self.status.setText(f"'{current}' is not connected now.")
        self.combo.setCurrentText(current or DEFAULT_DEVICE)
        self.combo.blockSignals(False)

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
            self.status.setText("Playing a test tone…")

    def show_tone_result(self, event: ToneTestFinished) -> None:
        if not self.is_input and event.device_name == self.value():
            self.status.setText("Test tone played." if event.ok else
                                f"The test tone failed: {event.message}")


class VoiceRecordDialog(QDialog):
    """Record a voice prompt through the voice loop; emits ``recorded(path)`` when usable."""

    recorded = Signal(Path)

    def __init__(self, bridge: UiBridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Record a voice prompt")
        self.setModal(True)
        self.bridge = bridge
        self.recording = False
        intro = QLabel(f"Speak naturally for {RECORD_MIN_S:.0f}–{RECORD_MAX_S:.0f} seconds in a "
                       "quiet room. Replies will use this voice. Recording stops by itself after "
                       f"{RECORD_MAX_S:.0f} s.")
        intro.setWordWrap(True)
        self.meter = LevelMeter()
        self.elapsed = QLabel("0.0 s")
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.start_button = QPushButton("Start recording")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(lambda: self.bridge.submit(StopVoiceRecording(True)))
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.stop_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.meter)
        layout.addWidget(self.elapsed, 0, Qt.AlignmentFlag.AlignRight)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        bridge.on(VoiceRecordingProgressed, self.on_progress)
        bridge.on(VoiceRecordingFinished, self.on_finished)
        if bridge.port is None:
            self.start_button.setEnabled(False)
            self.message.setText("Recording needs the voice loop, which is not running.")

    @staticmethod
    def new_path() -> Path:
        return data_dir() / "voices" / time.strftime("voice-prompt-%Y%m%d-%H%M%S.wav")

    def start(self) -> None:
        path = self.new_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.bridge.submit(StartVoiceRecording(path, RECORD_MIN_S, RECORD_MAX_S)):
            self.recording = True
            self.start_button.setEnabled(False)
            self.stop_button.setEnabled(True)
            self.message.setText("Recording…")

    def on_progress(self, event: VoiceRecordingProgressed) -> None:
        self.meter.set_level(event.level_dbfs)
        self.elapsed.setText(f"{event.elapsed_s:.1f} s")

    def on_finished(self, event: VoiceRecordingFinished) -> None:
        self.recording = False
        self.start_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        if event.path is None or event.duration_s < RECORD_MIN_S:
            self.message.setText(event.message or f"Too short ({event.duration_s:.1f} s); "
                                 f"record at least {RECORD_MIN_S:.0f} s.")
            return
        self.message.setText(f"Recorded {event.duration_s:.1f} s: {event.path}")
        self.recorded.emit(event.path)

    def done(self, result: int) -> None:
        if self.recording:
            self.bridge.submit(StopVoiceRecording(keep=False))
        self.bridge.off(VoiceRecordingProgressed, self.on_progress)
        self.bridge.off(VoiceRecordingFinished, self.on_finished)
        super().done(result)
