"""The window on the real pipeline: engine fall-back, no audio system, and the settings
panel's device tools and voice recording through simulated devices."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app import paths
from app.audio.backend import AudioUnavailableError, DeviceInfo, StreamHandle
from app.audio.simulated import SimulatedMicrophone, read_wav
from app.conversation import create_live_pipeline
from app.conversation.demo import SimulatedConversation, demo_sample, demo_settings
from app.conversation.simulation import SimulationOptions
from app.events import EngineStatusChanged, ErrorReported
from app.settings import Settings
from app.ui.main_window import MainWindow
from app.ui.settings_dialog import SettingsDialog
from app.ui.settings_widgets import DeviceEditor, VoicePromptEditor
from tests.ui.conftest import EventLog, no_gpu


class NoPortAudio:
    """An audio backend on a machine without PortAudio: every call says so."""

    def _fail(self) -> None:
        raise AudioUnavailableError("PortAudio library not found; install it (Debian/Ubuntu: "
                                    "sudo apt-get install libportaudio2)")

    def list_devices(self) -> list[DeviceInfo]:
        self._fail()
        return []

    def open_input(self, *_args: object) -> StreamHandle:
        self._fail()
        raise AssertionError

    def open_output(self, *_args: object) -> StreamHandle:
        self._fail()
        raise AssertionError


def show(qtbot: QtBot, window: MainWindow) -> MainWindow:
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_without_portaudio_or_model_the_window_works_and_says_what_to_do(qtbot: QtBot) -> None:
    settings = (Settings().with_value("ui.first_run_done", True)
                .with_value("engine.kind", "moss_speech"))
    window = show(qtbot, MainWindow(settings, gpu_query=no_gpu, port_factory=lambda s:
                                    create_live_pipeline(s, backend=NoPortAudio())))
    log = EventLog(window.bridge, ErrorReported, EngineStatusChanged)
    assert window.start_conversation()
    banners = window.banners.banners
    # Wait for what the pipeline reports, not for the banners: the folder check's banner can
    # come long before the engine build has failed and the echo demo has taken over.
    qtbot.waitUntil(lambda: {"audio", "model_invalid"} <= {e.category
                                                           for e in log.of(ErrorReported)},
                    timeout=60_000)
    built = [e for e in log.of(EngineStatusChanged) if not e.loading and e.message]
    assert len(built) == 1 and built[0].info.is_demo  # the failed build; the demo answers
    assert "engine-loading" not in banners
    audio = banners["error-audio"]
    assert "PortAudio library not found" in audio.message and "libportaudio2" in audio.message
    assert audio.count == 1  # said once, not once per direction
    # one banner for the missing folders: the folder check and the failed build share it
    assert not any(key.startswith("error-engine") for key in banners)
    engine = banners["error-model_invalid"]  # the folder check's or the build's, whichever
    assert "folder is set" in engine.message and "model manager" in engine.message  # came last
    assert engine.action_button.text() == "Set up the model"  # none was ever chosen
    assert engine.message.startswith("<b>MOSS-Speech is not set up yet.</b>")
    assert window.demo_badge.isVisible() and "Echo demo" in window.demo_badge.text()
    assert window.engine_status.text() == "Engine: Echo demo (no model loaded)"
    qtbot.mouseClick(engine.action_button, Qt.MouseButton.LeftButton)
    assert window.model_manager is not None and window.model_manager.isVisible()
    errors: list[str] = []
    window.bridge.on(ErrorReported, lambda e: errors.append(e.message))
    window.open_settings("audio")  # everything else still works
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    mic = dialog.editors["audio.input_device"]
    assert isinstance(mic, DeviceEditor)
    qtbot.waitUntil(lambda: len(errors) == 2)
    assert "No audio devices can be listed" in errors[0] and "cannot be measured" in errors[1]
    assert [mic.combo.itemText(i) for i in range(mic.combo.count())] == ["(system default)"]
    assert "PortAudio library not found" in mic.status.text()  # the page says why, not "silent"
    # The window says what is true: no microphone, in the header and the status bar alike.
    assert window.state_label.text() == "No microphone"
    assert "no microphone" in window.mode_status.text()
    dialog.close()
    window.open_settings("audio")  # asking again does not count the same condition up
    qtbot.waitUntil(lambda: len(errors) == 4)
    assert audio.count == 1 and "(×" not in audio.message_label.text()
    assert not any(key.startswith("error-device") for key in banners)
    window.close()
    port = window.bridge.port
    qtbot.waitUntil(lambda: port.stopped, timeout=60_000)  # type: ignore[union-attr]


@pytest.fixture
def talking_window(qtbot: QtBot):
    """The window on the real pipeline with a simulated microphone that keeps talking."""
    pcm, rate = read_wav(demo_sample())
    microphone = SimulatedMicrophone(pcm, rate, repeat=12)  # ~54 s, played at 10× real time
    port = SimulatedConversation(demo_settings(), microphone, speed=10.0,
                                 options=SimulationOptions(output_devices=("Simulated speaker",
                                                                           "Headphones")))
    settings = demo_settings(Settings().with_value("ui.first_run_done", True))
    window = show(qtbot, MainWindow(settings, port_factory=lambda _s: port, gpu_query=no_gpu))
    window.start_conversation()
    yield window, port
    window.close()
    qtbot.waitUntil(port.finished.is_set, timeout=60_000)
    assert port.error is None


def test_device_list_level_meter_and_test_tone_through_the_pipeline(qtbot: QtBot,
                                                                    talking_window) -> None:
    window, _port = talking_window
    window.open_settings("audio")
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    mic, speaker = dialog.editors["audio.input_device"], dialog.editors["audio.output_device"]
    assert isinstance(mic, DeviceEditor) and isinstance(speaker, DeviceEditor)
    qtbot.waitUntil(lambda: speaker.combo.count() == 3, timeout=60_000)
    assert mic.combo.itemText(1) == "Simulated microphone"
    assert mic.meter is not None
    qtbot.waitUntil(lambda: mic.meter.value() > -30, timeout=60_000)  # the sample's speech
    speaker.combo.setCurrentText("Headphones")
    qtbot.mouseClick(speaker.tone_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: speaker.status.text().startswith("Test tone played"),
                    timeout=60_000)


def test_a_voice_prompt_is_recorded_into_the_data_folder(qtbot: QtBot, talking_window) -> None:
    window, _port = talking_window
    window.open_settings("engine")
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    recorder = dialog.open_voice_recorder()
    qtbot.mouseClick(recorder.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: float(recorder.elapsed.text().split()[0]) >= 5.5, timeout=60_000)
    assert window.state_label.state.value == "idle"  # not listening while it records
    qtbot.mouseClick(recorder.stop_button, Qt.MouseButton.LeftButton)
    editor = dialog.editors["engine.voice_prompt"]
    assert isinstance(editor, VoicePromptEditor)
    qtbot.waitUntil(lambda: editor.value() is not None, timeout=60_000)
    path = editor.value()
    assert path.parent == paths.data_dir() / "voices" and path.suffix == ".wav"
    pcm, rate = read_wav(path)
    assert rate == 16000 and 5.5 <= len(pcm) / rate <= 15.0 and np.max(np.abs(pcm)) > 0.1
    assert editor.problem() is None and "Recorded" in recorder.message.text()
    qtbot.waitUntil(lambda: window.state_label.state.value != "idle")  # listening again
    recorder.close()

