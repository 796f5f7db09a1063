"""The remote engine in the window: the first-run way to a MOSS-Speech server, the API-key field
(keyring, never the settings), its banners and its latency stages."""

from __future__ import annotations

import socket
from pathlib import Path

from keyring.backends import fail
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.engine.base import EngineInfo
from app.engine.remote.api_key import ApiKeyStore, forget_session_keys
from app.engine.remote.standin import StandInServer
from app.events import ApplySettings, EngineStatusChanged, ErrorReported, TurnRecord
from app.settings import Settings
from app.ui.bridge import UiBridge
from app.ui.latency_panel import LatencyPanel
from app.ui.remote_setup import RemoteSetupDialog
from app.ui.settings_dialog import SettingsDialog
from tests.engine.remote.remote_helpers import MemoryKeyring
from tests.ui.conftest import (
    FakePort,
    done_first_run,
    drain_bridge,
    no_gpu,
    open_window,
    save_after_layout,
)


def setup_dialog(qtbot: QtBot, store: ApiKeyStore | None = None,
                 port: FakePort | None = None) -> RemoteSetupDialog:
    dialog = RemoteSetupDialog(Settings(), UiBridge(port or FakePort()),
                               store or ApiKeyStore(MemoryKeyring(), environ={}))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog


def test_first_run_offers_a_server_and_switches_to_the_remote_engine(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    window = open_window(qtbot, port=port, start=False)
    assert window.showing_first_run and window.first_run.remote_button.isVisible()
    save_after_layout(qtbot, window, screenshot_dir / "first_run_remote.png",
                      (window.first_run.remote_button,))
    with StandInServer() as server:
        dialog = window.open_remote_setup()
        assert isinstance(dialog, RemoteSetupDialog)
        dialog.url_edit.setText(server.url)
        qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "is ready" in dialog.result_label.text())
        qtbot.waitUntil(lambda: "No key is stored" in dialog.key_field.status.text())
        save_after_layout(qtbot, dialog, screenshot_dir / "remote_setup.png",
                          (dialog.result_label,))
        qtbot.mouseClick(dialog.use_button, Qt.MouseButton.LeftButton)
    assert not window.showing_first_run
    engine = window.settings.engine
    assert engine.kind == "remote" and engine.remote_url == server.url
    assert window.settings.ui.first_run_done
    assert port.sinks  # the conversation started: the voice loop builds the remote engine


def test_the_connection_check_says_what_is_wrong(qtbot: QtBot) -> None:
    dialog = setup_dialog(qtbot)
    dialog.url_edit.setText("192.168.1.20:8000")
    qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    assert "must start with http://" in dialog.result_label.text()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    dialog.url_edit.setText(f"http://127.0.0.1:{free}")
    qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "connection refused" in dialog.result_label.text())
    assert "Start the server" in dialog.result_label.text()


def test_the_key_goes_to_the_keyring_or_the_session_never_the_settings(qtbot: QtBot) -> None:
    backend = MemoryKeyring()
    dialog = setup_dialog(qtbot, ApiKeyStore(backend, environ={}))
    dialog.url_edit.setText("http://lab:8000")
    field = dialog.key_field
    field.edit.setText("typed-secret")
    qtbot.mouseClick(field.save_button, Qt.MouseButton.LeftButton)
    assert field.edit.text() == ""  # the key left the widget at once
    qtbot.waitUntil(lambda: "Saved in the system keyring" in field.status.text())
    assert list(backend.passwords.values()) == ["typed-secret"]
    with qtbot.waitSignal(field.changed):
        qtbot.mouseClick(field.forget_button, Qt.MouseButton.LeftButton)
    assert backend.passwords == {}
    forget_session_keys()
    no_keyring = setup_dialog(qtbot, ApiKeyStore(fail.Keyring(), environ={}))
    no_keyring.url_edit.setText("http://lab:8000")
    no_keyring.key_field.edit.setText("typed-secret")
    with qtbot.waitSignal(no_keyring.chosen) as chosen:
        qtbot.mouseClick(no_keyring.use_button, Qt.MouseButton.LeftButton)
    assert chosen.args == ["http://lab:8000"]
    assert "kept in memory until the app closes" in no_keyring.key_field.status.text()
    assert ApiKeyStore(fail.Keyring(), environ={}).get("http://lab:8000") == "typed-secret"
    forget_session_keys()


def test_the_settings_panel_has_the_key_field_under_the_server_address(
        qtbot: QtBot, screenshot_dir: Path) -> None:
    dialog = SettingsDialog(Settings(), UiBridge(FakePort()), gpu_query=no_gpu)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.show_group("engine")
    dialog.editors["engine.kind"].set_value("remote")
    dialog.editors["engine.remote_url"].set_value("http://lab:8000")
    dialog.api_key_field.edit.setText("not-a-setting")
    qtbot.waitUntil(lambda: "address first" not in dialog.api_key_field.status.text())
    save_after_layout(qtbot, dialog, screenshot_dir / "settings_engine_remote.png",
                      (dialog.api_key_field,))
    settings, errors = dialog.candidate()
    assert not errors and settings is not None and settings.engine.kind == "remote"
    assert "not-a-setting" not in settings.model_dump_json()
    dialog.editors["engine.remote_url"].set_value("ftp://lab")
    assert "http://" in dialog.candidate()[1]["engine.remote_url"]


def test_server_banners_offer_to_try_again(qtbot: QtBot, port: FakePort,
                                           screenshot_dir: Path) -> None:
    window = open_window(qtbot, done_first_run(), port)
    port.emit(ErrorReported("remote", "Nothing answers at lab:8000 (connection refused): is "
                            "the MOSS-Speech server running?",
                            "Start the server (docs/remote-engine.md) or fix the port in "
                            "Settings → Engine → Server address."))
    port.emit(ErrorReported("server_busy", "Its queue is full (HTTP 503): asking again in 2 s "
                            "(try 2 of 4).",
                            "Nothing to do: the reply follows once the server has room."))
    drain_bridge(qtbot, window.bridge)
    save_after_layout(qtbot, window, screenshot_dir / "remote_banners.png",
                      tuple(window.banners.banners.values()))
    banner = window.banners.banners["error-remote"]
    assert "Problem with the MOSS-Speech server" in banner.message
    assert "conversation so far is kept" in banner.message
    assert "is busy" in window.banners.banners["error-server_busy"].message
    qtbot.mouseClick(banner.action_button, Qt.MouseButton.LeftButton)
    assert port.commands_of(ApplySettings)[-1].reload_engine


def test_a_remote_engine_expects_no_transcripts_and_shows_its_stages(
        qtbot: QtBot, port: FakePort, screenshot_dir: Path) -> None:
    window = open_window(qtbot, done_first_run().with_value("engine.kind", "remote"), port)
    port.emit(EngineStatusChanged(EngineInfo("MOSS-Speech server", False, "server lab:8000",
                                             transcribes=False)))
    drain_bridge(qtbot, window.bridge)
    assert not window.transcript.model.transcribing
    assert "server lab:8000" in window.device_status.text()
    panel = LatencyPanel()
    qtbot.addWidget(panel)
    stages = {"endpoint_wait": 500.0, "upload": 4.0, "server_first_byte": 30.0,
              "first_audio": 2500.0, "output_buffer": 90.0}
    panel.add_record(TurnRecord(1, 0.0, 1.0, 1.5, 4.0, 4.1, 3124.0, stages))
    panel.resize(560, 300)
    panel.show()
    save_after_layout(qtbot, panel, screenshot_dir / "latency_remote_stages.png",
                      (panel.stage_bar,))
    names = [name for name, _ in panel.stage_bar.segments()]
    assert names == ["endpoint_wait", "upload", "server_first_byte", "first_audio",
                     "output_buffer"]
    shown = [s for s, label in panel.legend_labels.items() if label.isVisible()]
    assert set(shown) == {"endpoint_wait", "upload", "server_first_byte", "first_audio",
                          "output_buffer"}
    assert "Server first byte 30 ms" in panel.legend_labels["server_first_byte"].text()
    tooltip = panel.stage_bar.toolTip()
    assert "Upload: 4 ms" in tooltip and "Server first byte: 30 ms" in tooltip
    assert "First audio: 2500 ms" in tooltip
