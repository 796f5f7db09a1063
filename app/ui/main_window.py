"""The main window: state, talk controls, live waveforms, transcript, latency, banners.

It renders events that arrive through the bridge and sends commands through it; it never waits
on the pipeline. ``port_factory`` builds the voice loop (the pipeline on the real devices in the
app, the same pipeline on simulated devices for ``--screenshot --demo``); a port with a
``start()`` method is started after the window subscribed, on a background thread (it may load
the VAD model and open devices; :mod:`app.ui.voice_loop`). Without a factory the window still
runs and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QCloseEvent, QColor, QDesktopServices, QIcon
from PySide6.QtWidgets import (
    QApplication,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME, __version__
from app.engine.base import EngineInfo
from app.engine.preflight import GpuQuery, query_gpu_memory
from app.events import (
    ApplySettings,
    ConversationPort,
    ConversationState,
    DeviceLost,
    EngineStatusChanged,
    ErrorReported,
    PressToTalk,
    ReleaseToTalk,
    ReplyFinished,
    ReplyStarted,
    SetListenMode,
    SetMuted,
    StateChanged,
    StopReply,
    TranscriptUpdated,
    TurnMeasured,
    UserSpeechStarted,
    UserTurnEnded,
)
from app.paths import log_dir, resource
from app.settings import Settings
from app.settings_store import save_settings
from app.ui.acoustic_check import EchoUi
from app.ui.banners import BannerArea
from app.ui.bridge import UiBridge
from app.ui.controls import MODE_TEXT, STATE_TEXT, HoldToTalkFilter, StateIndicator, TalkControls
from app.ui.errors import StatusPresenter
from app.ui.first_run import FirstRunPage
from app.ui.latency_panel import LatencyPanel
from app.ui.transcript_view import TranscriptView
from app.ui.voice_loop import VoiceLoopHost
from app.ui.waveform import WaveformWidget

PortFactory = Callable[[Settings], ConversationPort]
WAVEFORM_FPS = 30
DEMO_BADGE = "Echo demo — no model loaded"
__all__ = ["MODE_TEXT", "STATE_TEXT", "MainWindow", "PortFactory", "engine_label"]


def engine_label(settings: Settings, info: EngineInfo | None) -> str:
    if info is not None:
        demo = " — demo, no model loaded" if info.is_demo else ""
        return f"Engine: {info.name}{demo}"
    if settings.engine.kind == "echo":
        return "Engine: echo — demo, no model loaded"
    return "Engine: MOSS-Speech (not loaded)"


def needs_first_run(settings: Settings) -> bool:
    """No model set up and the first-run screen not yet answered."""
    engine = settings.engine
    model_set = bool(engine.model_dir and engine.codec_dir and Path(engine.model_dir).is_dir()
                     and Path(engine.codec_dir).is_dir())
    return not settings.ui.first_run_done and not (engine.kind == "moss_speech" and model_set)


class MainWindow(QMainWindow):
    def __init__(self, settings: Settings, engine_info: EngineInfo | None = None,
                 bridge: UiBridge | None = None, port_factory: PortFactory | None = None,
                 persist_settings: bool = True,
                 gpu_query: Callable[[], GpuQuery] = query_gpu_memory) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(QIcon(str(resource("icons", "moss-voice.svg"))))
        self.resize(1100, 760)
        self.bridge = bridge or UiBridge(parent=self)
        self.port_factory = port_factory
        self.persist_settings = persist_settings
        self.gpu_query = gpu_query  # run off the GUI thread by the dialogs that show VRAM
        self._settings = settings
        self.engine_info = engine_info
        self.settings_dialog: QWidget | None = None
        self.model_manager: QWidget | None = None
        self._build_widgets()
        self._build_menus()
        self._connect_bridge()
        self.hold_filter = HoldToTalkFilter(self)
        self.hold_filter.pressed.connect(self._on_talk_pressed)
        self.hold_filter.released.connect(self._on_talk_released)
        app = QApplication.instance()
        assert app is not None
        app.installEventFilter(self.hold_filter)
        self.frame_timer = QTimer(self)
        self.frame_timer.setInterval(1000 // WAVEFORM_FPS)
        self.frame_timer.timeout.connect(self.refresh_waveforms)
        self.frame_timer.start()
        self.show_page(self.first_run if needs_first_run(settings) else self.conversation_page)
        self.apply_settings(settings, engine_info)

    # ---- layout ------------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.state_label = StateIndicator()
        self.demo_badge = QLabel(DEMO_BADGE)
        self.demo_badge.setObjectName("demoBadge")
        self.demo_badge.setStyleSheet("QLabel#demoBadge { background: #fff3bf; color: #5c4400; "
                                      "border: 1px solid #e0c060; border-radius: 4px; "
                                      "padding: 3px 8px; font-weight: 600; }")
        self.controls = TalkControls()
        self.controls.mode_changed.connect(self._on_mode_changed)
        self.controls.talk_pressed.connect(self._on_talk_pressed)
        self.controls.talk_released.connect(self._on_talk_released)
        self.controls.mute_changed.connect(lambda muted: self.bridge.submit(SetMuted(muted)))
        self.controls.stop_requested.connect(lambda: self.bridge.submit(StopReply()))
        self.banners = BannerArea()
        self.mic_wave = WaveformWidget("Microphone", QColor("#1f78d1"))
        self.reply_wave = WaveformWidget("Reply", QColor("#8e44ad"))
        self.transcript = TranscriptView()
        self.latency = LatencyPanel()
        for view in (self.transcript, self.latency):
            view.export_failed.connect(
                lambda text: self.banners.show_banner("export", "error", text))
        self.echo_ui = EchoUi(self)
        self.first_run = FirstRunPage(self.echo_ui.panel)
        self.first_run.model_manager_requested.connect(self.open_model_manager)
        self.first_run.demo_requested.connect(self.start_echo_demo)
        self.first_run.remote_requested.connect(self.open_remote_setup)
        self.conversation_page = self._build_conversation_page()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.first_run)
        self.stack.addWidget(self.conversation_page)
        header = QHBoxLayout()
        header.addWidget(self.state_label)
        header.addWidget(self.demo_badge)
        header.addStretch(1)
        header.addWidget(self.controls)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.addLayout(header)
        layout.addWidget(self.banners)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self.engine_status, self.device_status, self.mode_status = QLabel(), QLabel(), QLabel()
        for label in (self.engine_status, self.device_status, self.mode_status):
            label.setStyleSheet("padding: 0 10px; border-left: 1px solid palette(mid);")
            self.statusBar().addPermanentWidget(label)

    def _titled_area(self, title: str, name: str, *widgets: QWidget) -> QGroupBox:
        box = QGroupBox(title)
        box.setObjectName(name)
        layout = QVBoxLayout(box)
        for widget in widgets:
            layout.addWidget(widget)
        return box

    def _build_conversation_page(self) -> QWidget:
        waves = self._titled_area("Microphone and reply", "waveformArea",
                                  self.mic_wave, self.reply_wave)
        transcript = self._titled_area("Transcript", "transcriptArea", self.transcript)
        latency = self._titled_area("Latency", "latencyArea", self.latency)
        lower = QSplitter()
        lower.addWidget(transcript)
        lower.addWidget(latency)
        lower.setSizes([500, 600])
        splitter = QSplitter()
        splitter.setOrientation(splitter.orientation().Vertical)
        splitter.addWidget(waves)
        splitter.addWidget(lower)
        splitter.setSizes([200, 480])
        return splitter

    def _build_menus(self) -> None:
        def action(menu_name: str, text: str, slot: Callable[[], object]) -> QAction:
            act = QAction(text, self)
            act.triggered.connect(lambda _checked=False: slot())
            menus[menu_name].addAction(act)
            return act

        bar = self.menuBar()
        menus = {name: bar.addMenu(name) for name in ("&File", "&Settings", "&Help")}
        action("&File", "Export conversation…", self.transcript._ask_export_path)
        action("&File", "Export latency as CSV…", lambda: self.latency._ask_export(".csv"))
        action("&File", "Export latency as JSON…", lambda: self.latency._ask_export(".json"))
        menus["&File"].addSeparator()
        action("&File", "Quit", self.close)
        action("&Settings", "Settings…", self.open_settings)
        action("&Settings", "Model manager…", self.open_model_manager)
        action("&Help", "Open log folder", lambda: QDesktopServices.openUrl(
            QUrl.fromLocalFile(str(log_dir()))))
        action("&Help", "About", lambda: QMessageBox.about(
            self, f"About {APP_NAME}", f"{APP_NAME} {__version__}: talk with MOSS-Speech."))

    def _connect_bridge(self) -> None:
        b = self.bridge
        b.on(StateChanged, lambda e: self.set_state(e.state))
        for kind in (UserSpeechStarted, UserTurnEnded, ReplyStarted, ReplyFinished,
                     TranscriptUpdated):
            b.on(kind, self.transcript.apply)
        b.on(TurnMeasured, lambda e: self.latency.add_record(e.record))
        self.status_presenter = StatusPresenter(self)
        b.on(EngineStatusChanged, self.status_presenter.on_engine_status)
        b.on(DeviceLost, self.status_presenter.on_device_lost)
        b.on(ErrorReported, self.status_presenter.on_error)
        self.voice_loop = VoiceLoopHost(self)

    # ---- settings ----------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self._settings

    def apply_settings(self, settings: Settings, engine_info: EngineInfo | None = None) -> None:
        """Show ``settings`` (no command is sent; see ``update_settings``)."""
        self._settings = settings
        self.show_engine(engine_info)
        self.mode_status.setText(MODE_TEXT[settings.turn.mode])
        key = settings.turn.hold_to_talk_key
        self.controls.show_mode(settings.turn.mode, key)
        if not self.hold_filter.set_key(key):
            self.banners.show_banner("hold-key", "warning", f"The hold-to-talk key '{key}' is "
                                     "not a key Qt knows; use the button or pick another key.",
                                     "Settings", lambda: self.open_settings("turn"))
        self.hold_filter.set_enabled(settings.turn.mode == "push_to_talk")

    def show_engine(self, info: EngineInfo | None) -> None:
        """Show the engine (``info``, else the last one known): name, device, demo badge, and
        whether transcripts are expected. Engine status events need only this."""
        if info is not None:
            self.engine_info = info
        info, settings = self.engine_info, self._settings
        self.engine_status.setText(engine_label(settings, info))
        self.device_status.setText(f"Device: {info.device if info else settings.engine.device}")
        is_demo = info.is_demo if info is not None else settings.engine.kind == "echo"
        self.demo_badge.setText(DEMO_BADGE if info is None or info.name.lower().startswith("echo")
                                else f"Demo: {info.name} — no model loaded")
        transcribes = info.transcribes if info is not None else True
        self.transcript.set_transcribing(not is_demo and transcribes
                                         and settings.transcript.text_branch)
        self.demo_badge.setToolTip(info.detail if info is not None else "")
        self.demo_badge.setVisible(is_demo and not self.showing_first_run)

    def update_settings(self, settings: Settings, reload_engine: bool = False) -> None:
        """Adopt new settings: show, save and send them to the pipeline."""
        self.apply_settings(settings)
        if self.settings_dialog is not None and hasattr(self.settings_dialog, "sync_external"):
            self.settings_dialog.sync_external(settings)
        if self.persist_settings:
            try:
                save_settings(settings)
            except OSError as exc:
                self.banners.show_banner("save-settings", "error",
                                         f"Settings could not be saved ({exc}); they apply "
                                         "until you quit.")
        self.bridge.submit(ApplySettings(settings, reload_engine=reload_engine))

    def show_warning(self, text: str) -> None:
        first_line = text.splitlines()[0] if text else ""
        self.statusBar().showMessage(first_line)
        self.statusBar().setToolTip(text)
        self.banners.show_banner("settings-file", "warning", text.replace("\n", "<br>"))

    # ---- conversation ------------------------------------------------------------------------

    @property
    def showing_first_run(self) -> bool:
        return self.stack.currentWidget() is self.first_run

    def show_page(self, page: QWidget) -> None:
        """The first-run screen hides the conversation controls (nothing to control yet)."""
        self.stack.setCurrentWidget(page)
        first_run = page is self.first_run
        for widget in (self.state_label, self.controls):
            widget.setVisible(not first_run)
        if first_run:
            self.demo_badge.hide()

    def start_conversation(self) -> bool:
        """Build and attach the voice loop (if a factory was given); False if none runs."""
        self.show_page(self.conversation_page)
        self.apply_settings(self._settings)
        if self._settings.engine.kind == "moss_speech":
            self.status_presenter.check_model_folders()
        return self.attach_voice_loop()

    def attach_voice_loop(self, announce_missing: bool = True) -> bool:
        return self.voice_loop.attach(announce_missing)

    def start_echo_demo(self) -> None:
        self.update_settings(self._settings.with_values({"engine.kind": "echo",
                                                         "ui.first_run_done": True}))
        self.start_conversation()

    def refresh_waveforms(self) -> None:
        if self.isVisible() and self.stack.currentWidget() is self.conversation_page:
            self.mic_wave.refresh()
            self.reply_wave.refresh()

    def set_state(self, state: ConversationState) -> None:
        self.state_label.set_state(state)
        self.controls.show_state(state)

    def _on_mode_changed(self, mode: str) -> None:
        self.update_settings(self._settings.with_value("turn.mode", mode))
        self.bridge.submit(SetListenMode(mode))  # type: ignore[arg-type]

    def _on_talk_pressed(self) -> None:
        self.controls.talk_button.setDown(True)
        self.bridge.submit(PressToTalk())

    def _on_talk_released(self) -> None:
        self.controls.talk_button.setDown(False)
        self.bridge.submit(ReleaseToTalk())

    # ---- dialogs -------------------------------------------------------------------------------

    def open_settings(self, group: str | None = None) -> None:
        from app.ui.settings_dialog import SettingsDialog

        dialog = self.settings_dialog
        if not isinstance(dialog, SettingsDialog):
            dialog = SettingsDialog(self._settings, self.bridge, self, gpu_query=self.gpu_query)
            dialog.applied.connect(self.update_settings)
            dialog.finished.connect(lambda _r: setattr(self, "settings_dialog", None))
            self.settings_dialog = dialog
        if group:
            dialog.show_group(group)
        dialog.show()
        dialog.raise_()

    def open_model_manager(self) -> None:
        from app.ui.model_manager import ModelManagerDialog

        if self.model_manager is None:
            dialog = ModelManagerDialog(self._settings, self.bridge, parent=self,
                                        gpu_query=self.gpu_query)
            dialog.folders_chosen.connect(self.use_model_folders)
            dialog.finished.connect(lambda _r: setattr(self, "model_manager", None))
            self.model_manager = dialog
        self.model_manager.show()
        self.model_manager.raise_()

    def use_model_folders(self, model_dir: Path, codec_dir: Path, precision: str) -> None:
        """The model manager verified both folders: switch to MOSS-Speech and (re)load it."""
        values: dict[str, object] = {"engine.kind": "moss_speech", "engine.model_dir": model_dir,
                                     "engine.codec_dir": codec_dir, "ui.first_run_done": True}
        if precision:
            values["engine.precision"] = precision
        self.update_settings(self._settings.with_values(values), reload_engine=True)
        self.start_conversation()

    def open_remote_setup(self) -> QWidget:
        """"Use a MOSS-Speech server…": address and key, then the remote engine."""
        from app.ui.remote_setup import RemoteSetupDialog

        dialog = RemoteSetupDialog(self._settings, self.bridge, parent=self)
        dialog.chosen.connect(self.use_remote_server)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def use_remote_server(self, url: str) -> None:
        values = {"engine.kind": "remote", "engine.remote_url": url, "ui.first_run_done": True}
        self.update_settings(self._settings.with_values(values), reload_engine=True)
        self.start_conversation()

    def release_port(self, timeout_s: float = 5.0) -> bool:
        return self.voice_loop.release(timeout_s)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.frame_timer.stop()
        self.voice_loop.shutdown()
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self.hold_filter)
        for dialog in (self.settings_dialog, self.model_manager):
            if dialog is not None:
                dialog.close()
        super().closeEvent(event)
