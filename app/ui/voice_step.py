"""The guided set-up's voice step: the voice the replies speak in, three ways to get one.

Record your own (a short text to read, a level meter, playback: app.ui.voice_recorder), choose
a WAV or FLAC file (the picker opens in the voices folder), or fetch one of the official
example voices of the MOSS-Speech repository (app.voices: pinned, checksum-verified). The
download runs on a worker thread and reports through the bridge; the window never waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QWidget,
)

from app import voices
from app.ui.bridge import UiBridge
from app.ui.elided import ElidedLabel
from app.ui.settings_form import default_folder, nearest_existing
from app.ui.settings_widgets import voice_prompt_problem
from app.ui.voice_recorder import VoiceRecordDialog

OK_STYLE, BAD_STYLE = "color: #2e7d32;", "color: #c0392b;"
AUDIO_FILTER = "Audio (*.wav *.flac)"


class VoiceStep(QGroupBox):
    """Emits ``changed(path or None)``; ``ready`` says whether the voice can be used."""

    changed = Signal(object)

    def __init__(self, bridge: UiBridge, voice: Path | None, *,
                 start_voice_loop: Callable[[], bool] | None = None,
                 catalogue: Sequence[voices.ExampleVoice] = voices.EXAMPLE_VOICES,
                 voices_url: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__("2. Voice", parent)
        self.setObjectName("voiceStep")
        self.bridge = bridge
        self.start_voice_loop = start_voice_loop
        self.catalogue = list(catalogue)
        self.voices_url = voices_url
        self.voice: Path | None = None
        self.problem: str | None = "no voice"
        self.recorder: VoiceRecordDialog | None = None
        self.cancel = threading.Event()
        self.downloading: voices.ExampleVoice | None = None
        intro = QLabel("MOSS-Speech answers in the voice of a short recording. Record your "
                       "own, choose a file, or get an official example voice.")
        intro.setWordWrap(True)
        self.path_label = ElidedLabel()
        self.status = QLabel()
        self.status.setObjectName("voiceStatus")
        self.status.setWordWrap(True)
        self.record_button = QPushButton("Record your own…")
        self.record_button.clicked.connect(self.record)
        self.choose_button = QPushButton("Choose a file…")
        self.choose_button.clicked.connect(self.choose_file)
        self.example_combo = QComboBox()
        for example in self.catalogue:
            self.example_combo.addItem(example.title)
        self.example_combo.setToolTip(voices.LICENCE_NOTE)
        self.example_button = QPushButton("Get and use")
        self.example_button.setToolTip(voices.LICENCE_NOTE)
        self.example_button.clicked.connect(self.use_example)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        examples = QHBoxLayout()
        examples.addWidget(QLabel("Example:"))
        examples.addWidget(self.example_combo, 1)
        examples.addWidget(self.example_button)
        grid = QGridLayout(self)
        grid.addWidget(intro, 0, 0, 1, 3)
        grid.addWidget(self.path_label, 1, 0, 1, 3)
        grid.addWidget(self.status, 2, 0, 1, 3)
        grid.addWidget(self.record_button, 3, 0)
        grid.addWidget(self.choose_button, 3, 1)
        grid.addLayout(examples, 4, 0, 1, 3)
        grid.addWidget(self.progress, 5, 0, 1, 3)
        grid.setColumnStretch(2, 1)
        bridge.on(voices.VoiceDownloadProgress, self._on_progress)
        self.set_voice(voice)

    @property
    def ready(self) -> bool:
        return self.problem is None

    def set_voice(self, path: Path | None) -> None:
        """Show ``path`` as the voice, checked (duration, readable)."""
        self.voice = Path(path) if path is not None else None
        self.problem = "no voice" if path is None else voice_prompt_problem(self.voice)
        self.path_label.set_full_text(str(self.voice) if self.voice else "")
        self.path_label.setVisible(self.voice is not None)
        if self.voice is None:
            self.status.setStyleSheet(BAD_STYLE)
            self.status.setText("✗ No voice chosen yet: spoken replies need one.")
        elif self.problem:
            self.status.setStyleSheet(BAD_STYLE)
            self.status.setText(f"✗ {self.problem}")
        else:
            self.status.setStyleSheet(OK_STYLE)
            self.status.setText(f"✓ Replies will speak in this voice ({self.voice.name}).")
        self.changed.emit(self.voice)

    # ---- the three ways ------------------------------------------------------------------

    def record(self) -> VoiceRecordDialog:
        if self.bridge.port is None and self.start_voice_loop is not None:
            self.start_voice_loop()  # recording goes through the voice loop's microphone
        dialog = VoiceRecordDialog(self.bridge, self)
        dialog.recorded.connect(self.set_voice)
        dialog.finished.connect(lambda _r: setattr(self, "recorder", None))
        self.recorder = dialog
        dialog.show()
        return dialog

    def start_folder(self) -> Path:
        """Where the file picker opens: the current voice's folder, else the voices folder."""
        if self.voice is not None and self.voice.parent.is_dir():
            return self.voice.parent
        return nearest_existing(default_folder("engine.voice_prompt"))

    def choose_file(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Choose a voice recording",
                                                str(self.start_folder()), AUDIO_FILTER)
        if chosen:
            self.set_voice(Path(chosen))

    def use_example(self) -> None:
        """Fetch the chosen example voice (unless it is here already) and use it."""
        if self.downloading is not None or not self.catalogue:
            return
        voice = self.catalogue[self.example_combo.currentIndex()]
        self.downloading = voice
        self.cancel = threading.Event()
        cancel, url = self.cancel, self.voices_url
        self.example_button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.show()
        self.status.setStyleSheet("")
        self.status.setText(f"Getting the {voice.title.split(' (')[0].lower()}…")
        self.bridge.run_in_background(
            lambda: voices.download_voice(voice, self.bridge.post, cancel, base_url=url),
            self._on_downloaded, self._on_download_failed, name=f"voice-{voice.key}")

    def _on_progress(self, progress: voices.VoiceDownloadProgress) -> None:
        if self.downloading is not None and progress.key == self.downloading.key:
            self.progress.setValue(int(1000 * progress.fraction))

    def _on_downloaded(self, path: Path) -> None:
        self.downloading = None
        self.example_button.setEnabled(True)
        self.progress.hide()
        self.set_voice(path)

    def _on_download_failed(self, exc: BaseException) -> None:
        self.downloading = None
        self.example_button.setEnabled(True)
        self.progress.hide()
        self.status.setStyleSheet(BAD_STYLE)
        self.status.setText(f"✗ {exc}" if isinstance(exc, voices.VoiceDownloadError) else
                            f"✗ The example voice could not be fetched ({exc}).")

    def close_step(self) -> None:
        """The dialog is closing: stop a download, stop listening for its progress."""
        self.cancel.set()
        self.bridge.off(voices.VoiceDownloadProgress, self._on_progress)
        if self.recorder is not None:
            self.recorder.close()
