from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLineEdit
from pytestqt.qtbot import QtBot

from app.engine.base import EngineInfo
from app.events import (
    ApplySettings,
    ConversationState,
    DeviceLost,
    EngineStatusChanged,
    ErrorReported,
    PressToTalk,
    ReleaseToTalk,
    SetListenMode,
    SetMuted,
    Shutdown,
    StateChanged,
    StopReply,
)
from app.settings import Settings
from app.settings_store import load_settings
from app.ui.main_window import MainWindow
from tests.ui.conftest import FakePort, done_first_run, fake_gpu, open_window, save_after_layout

MOSS = EngineInfo(name="MOSS-Speech", is_demo=False, device="cuda:0", precision="bf16")


def test_first_run_offers_the_model_manager_and_the_echo_demo(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    window = open_window(qtbot, port=port, start=False)
    assert window.showing_first_run
    assert not window.controls.isVisible()
    save_after_layout(qtbot, window, screenshot_dir / "first_run.png", (window.first_run,))
    qtbot.mouseClick(window.first_run.demo_button, Qt.MouseButton.LeftButton)
    assert not window.showing_first_run
    assert window.bridge.port is port
    assert window.demo_badge.isVisible() and "Echo demo" in window.demo_badge.text()
    saved = load_settings().settings
    assert saved.ui.first_run_done and saved.engine.kind == "echo"
    assert port.commands_of(ApplySettings) == []  # sent before the loop existed: nothing to do


def test_first_run_model_button_opens_the_model_manager(qtbot: QtBot) -> None:
    window = open_window(qtbot)
    qtbot.mouseClick(window.first_run.model_button, Qt.MouseButton.LeftButton)
    assert window.model_manager is not None and window.model_manager.isVisible()
    assert QApplication.activeModalWidget() is None  # nothing blocks the main window


def test_conversation_window_with_all_areas(qtbot: QtBot, port: FakePort,
                                            screenshot_dir: Path) -> None:
    window = open_window(qtbot, done_first_run(), port)
    for name in ("waveformArea", "transcriptArea", "latencyArea"):
        assert window.findChild(object, name) is not None, name
    assert window.mic_wave._source is port.mic_waveform
    assert window.engine_status.text() == "Engine: Echo demo (no model loaded)"
    # Before the voice loop reported anything the window says it is starting (not "Not
    # listening" under an "Always listening" switch).
    assert window.state_label.text() == "Starting…"
    assert window.mode_status.text() == "Always listening — starting the microphone…"
    port.emit(StateChanged(ConversationState.LISTENING, 0.0))
    qtbot.waitUntil(lambda: window.state_label.text() == "Listening")
    assert window.mode_status.text() == "Always listening"
    assert window.controls.always_switch.isChecked()
    save_after_layout(qtbot, window, screenshot_dir / "main_window_empty.png",
                      (window.conversation_page, window.controls))


def test_state_indicator_and_stop_button_follow_events(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    expected = {ConversationState.LISTENING: "Listening",
                ConversationState.USER_SPEAKING: "You are speaking",
                ConversationState.RESPONDING: "Thinking",
                ConversationState.SPEAKING: "Speaking",
                ConversationState.INTERRUPTED: "Interrupted"}
    for state, text in expected.items():
        port.emit(StateChanged(state, 0.0))
        qtbot.waitUntil(lambda t=text: window.state_label.text() == t)
        stoppable = state in (ConversationState.RESPONDING, ConversationState.SPEAKING)
        assert window.controls.stop_button.isEnabled() == stoppable
    port.emit(StateChanged(ConversationState.SPEAKING, 1.0))
    qtbot.waitUntil(window.controls.stop_button.isEnabled)
    qtbot.mouseClick(window.controls.stop_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(window.controls.mute_button, Qt.MouseButton.LeftButton)
    assert port.commands_of(StopReply) == [StopReply()]
    assert port.commands_of(SetMuted) == [SetMuted(True)]
    assert window.controls.mute_button.text() == "Unmute microphone"


def test_mode_switch_and_hold_to_talk_key(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    qtbot.keyPress(window, Qt.Key.Key_Space)  # always listening: the key does nothing
    assert port.commands_of(PressToTalk) == []
    window.controls.always_switch.setChecked(False)
    assert port.commands_of(SetListenMode) == [SetListenMode("push_to_talk")]
    assert load_settings().settings.turn.mode == "push_to_talk"
    assert window.mode_status.text().startswith("Push-to-talk")
    assert window.controls.talk_button.isVisible()
    qtbot.keyPress(window, Qt.Key.Key_Space)
    qtbot.keyPress(window, Qt.Key.Key_Space)  # already held: one press only
    qtbot.keyRelease(window, Qt.Key.Key_Space)
    assert port.commands_of(PressToTalk) == [PressToTalk()]
    assert port.commands_of(ReleaseToTalk) == [ReleaseToTalk()]
    qtbot.mousePress(window.controls.talk_button, Qt.MouseButton.LeftButton)
    qtbot.mouseRelease(window.controls.talk_button, Qt.MouseButton.LeftButton)
    assert len(port.commands_of(PressToTalk)) == 2 and len(port.commands_of(ReleaseToTalk)) == 2
    typing = QLineEdit(window)  # typing a space in a text field must not talk
    typing.show()
    typing.setFocus()
    qtbot.keyPress(typing, Qt.Key.Key_Space)
    assert len(port.commands_of(PressToTalk)) == 2 and typing.text() == " "
    window.controls.always_switch.setChecked(True)
    assert port.commands_of(SetListenMode)[-1] == SetListenMode("always_listening")
    assert not window.controls.talk_button.isVisible()


def test_engine_status_and_reload_progress(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    port.emit(EngineStatusChanged(MOSS, loading=True, progress=0.4, message="reading weights"))
    qtbot.waitUntil(lambda: "engine-loading" in window.banners.banners)
    banner = window.banners.banners["engine-loading"]
    assert banner.progress.value() == 40 and "reading weights" in banner.message
    port.emit(EngineStatusChanged(MOSS, loading=False))
    qtbot.waitUntil(lambda: "engine-loading" not in window.banners.banners)
    assert window.engine_status.text() == "Engine: MOSS-Speech · bf16"
    assert window.device_status.text() == "Device: cuda:0"
    assert not window.demo_badge.isVisible()


def test_error_banners_are_non_modal_and_act(qtbot: QtBot, port: FakePort,
                                             screenshot_dir: Path) -> None:
    window = open_window(qtbot, done_first_run(), port)
    port.emit(ErrorReported("out_of_memory", "CUDA ran out of memory during the reply.",
                            "Choose int8 in Settings → Engine."))
    port.emit(ErrorReported("engine", "The engine raised RuntimeError."))
    port.emit(ErrorReported("engine", "The engine raised RuntimeError."))
    port.emit(DeviceLost("input", "USB Mic", "Built-in Microphone", 3.0))
    port.emit(ErrorReported("model_invalid", "model.safetensors is truncated."))
    qtbot.waitUntil(lambda: len(window.banners.banners) == 4)
    assert QApplication.activeModalWidget() is None
    engine = window.banners.banners["error-engine"]
    assert engine.count == 2 and "(×2)" in engine.message_label.text()
    assert "Built-in Microphone" in window.banners.banners["device-input"].message
    save_after_layout(qtbot, window, screenshot_dir / "main_window_errors.png",
                      tuple(window.banners.banners.values()))
    qtbot.mouseClick(engine.action_button, Qt.MouseButton.LeftButton)
    assert port.commands_of(ApplySettings)[-1].reload_engine is True
    oom = window.banners.banners["error-out_of_memory"]
    assert oom.action_button.text() == "Choose a smaller precision"
    qtbot.mouseClick(oom.action_button, Qt.MouseButton.LeftButton)
    dialog = window.settings_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.groups[dialog.group_list.currentRow()] == "engine"
    qtbot.mouseClick(window.banners.banners["error-model_invalid"].action_button,
                     Qt.MouseButton.LeftButton)
    assert window.model_manager is not None
    qtbot.mouseClick(oom.close_button, Qt.MouseButton.LeftButton)
    assert "error-out_of_memory" not in window.banners.banners
    assert window.isVisible()


def test_without_a_voice_loop_the_window_says_so(qtbot: QtBot) -> None:
    window = open_window(qtbot, done_first_run())
    assert window.start_conversation() is False
    assert "No voice loop" in window.banners.banners["no-pipeline"].message


def test_a_failing_voice_loop_start_is_an_error_banner(qtbot: QtBot) -> None:
    def broken(_settings: Settings) -> FakePort:
        raise OSError("no input device")

    window = MainWindow(done_first_run(), port_factory=broken, gpu_query=fake_gpu(23.0))
    qtbot.addWidget(window)
    assert window.start_conversation() is False
    assert "no input device" in window.banners.banners["pipeline-start"].message


def test_settings_file_warning_and_shutdown(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    window.show_warning("Some settings were reset:\n  - vad.threshold: bad")
    assert window.statusBar().currentMessage() == "Some settings were reset:"
    assert "vad.threshold" in window.banners.banners["settings-file"].message
    window.close()
    assert port.commands_of(Shutdown) == [Shutdown()]


def test_a_configured_but_broken_model_folder_is_reported(qtbot: QtBot, port: FakePort,
                                                         tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    settings = (done_first_run().with_value("engine.kind", "moss_speech")
                .with_value("engine.model_dir", tmp_path / "model")
                .with_value("engine.codec_dir", tmp_path / "missing"))
    window = open_window(qtbot, settings, port)
    qtbot.waitUntil(lambda: "error-model_invalid" in window.banners.banners)
    text = window.banners.banners["error-model_invalid"].message
    assert "model: This folder is empty — is it the right one?" in text
    assert "codec: This folder does not exist yet" in text
    assert window.banners.banners["error-model_invalid"].action_button.text() == (
        "Open the model manager")


def test_closing_the_window_asks_the_voice_loop_to_stop_and_release_waits_for_it(
        qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port)
    window.close()
    assert port.commands_of(Shutdown)  # the close event only asks; the GUI never waits on it
    assert port.closed_with == []
    assert window.release_port(timeout_s=2.5)  # after the event loop: wait for the release
    assert port.closed_with == [2.5]
