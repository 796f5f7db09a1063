"""The main window: state, talk controls, live waveforms, transcript, latency, banners.

It renders events that arrive through the bridge and sends commands through it; it never waits
on the pipeline. ``port_factory`` builds the voice loop (the pipeline on the real devices in the
app, the same pipeline on simulated devices for ``--screenshot --demo``); a port with a
``start()`` method is started after the window subscribed, on a background thread (it may load
the VAD model and open devices; :mod:`app.ui.voice_loop`). Without a factory the window still
runs and says so.

What the window says about listening is decided in one place (:mod:`app.ui.listening`) from
the state, the mode, mute and the devices the voice loop has open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QTimer
from PySide6.QtGui import QCloseEvent, QIcon, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME
from app.engine.base import EngineInfo
from app.engine.preflight import GpuQuery, query_gpu_memory
from app.events import (
    ApplySettings,
    AudioDevicesOpened,
    ConversationPort,
    ConversationState,
    DeviceLost,
    EngineStatusChanged,
    ErrorReported,
    PressToTalk,
    ReleaseToTalk,
    SetListenMode,
    SetMuted,
    StateChanged,
    StopReply,
)
from app.paths import resource
from app.settings import Settings
from app.settings_store import save_settings
from app.ui.acoustic_check import EchoUi
from app.ui.banners import BannerArea
from app.ui.bridge import UiBridge
from app.ui.controls import MODE_TEXT, STATE_TEXT, HoldToTalkFilter, StateIndicator, TalkControls
from app.ui.conversation_page import ConversationPage
from app.ui.errors import StatusPresenter
from app.ui.first_run import FirstRunPage
from app.ui.listening import Listening, describe
from app.ui.style import apply_app_style
from app.ui.voice_loop import VoiceLoopHost
from app.ui.window_dialogs import WindowDialogs
from app.ui.window_menus import MenuHost
from app.ui.window_text import DEMO_BADGE, DEMO_BADGE_STYLE, engine_label, needs_first_run

PortFactory = Callable[[Settings], ConversationPort]
WAVEFORM_FPS = 30
MIN_WIDTH, MIN_HEIGHT = 800, 500  # the smallest window the layout is made for
MAX_BANNER_SHARE = 0.4  # banners take at most this share of the height, then scroll
__all__ = ["MODE_TEXT", "STATE_TEXT", "MainWindow", "PortFactory", "engine_label",
           "needs_first_run"]


class MainWindow(WindowDialogs, QMainWindow):
    def __init__(self, settings: Settings, engine_info: EngineInfo | None = None,
                 bridge: UiBridge | None = None, port_factory: PortFactory | None = None,
                 persist_settings: bool = True,
                 gpu_query: Callable[[], GpuQuery] = query_gpu_memory) -> None:
        super().__init__()
        apply_app_style()
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(QIcon(str(resource("icons", "moss-voice.svg"))))
        self.resize(1100, 760)
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)
        self._bridge = bridge or UiBridge(parent=self)
        self._port_factory = port_factory
        self.persist_settings = persist_settings
        self.gpu_query = gpu_query  # (see app.ui.window_dialogs)
        self._settings = settings
        self.engine_info = engine_info
        self.listening = Listening(mode=settings.turn.mode, hold_key=settings.turn.hold_to_talk_key)
        self.settings_dialog = None
        self.model_manager = None
        self._muted_for_setup = False
        self._build_widgets()
        self.menus = MenuHost(self, export_conversation=self.transcript._ask_export_path,
                              export_latency=self.latency._ask_export,
                              open_settings=self.open_settings,
                              open_model_manager=self.open_model_manager,
                              reload_engine=lambda: self.status_presenter.reload_engine(),
                              hold_key=lambda: self._settings.turn.hold_to_talk_key)
        self._connect_bridge()
        self.hold_filter = HoldToTalkFilter(self)
        self.hold_filter.pressed.connect(self._on_talk_pressed)
        self.hold_filter.released.connect(self._on_talk_released)
        self.hold_filter.not_needed.connect(self._hold_key_not_needed)
        app = QApplication.instance()
        assert app is not None
        app.installEventFilter(self.hold_filter)
        self.frame_timer = QTimer(self)
        self.frame_timer.setInterval(1000 // WAVEFORM_FPS)
        self.frame_timer.timeout.connect(self.refresh_waveforms)
        self.frame_timer.start()
        self.show_page(self.first_run_scroll if needs_first_run(settings)
                       else self.conversation_page)
        self.apply_settings(settings, engine_info)

    # ---- layout ------------------------------------------------------------------------------

    @property
    def bridge(self) -> UiBridge:
        return self._bridge

    @property
    def banners(self) -> BannerArea:
        return self._banners

    @property
    def port_factory(self) -> PortFactory | None:
        return self._port_factory

    def _build_widgets(self) -> None:
        self.state_label = StateIndicator()
        self.demo_badge = QLabel(DEMO_BADGE)
        self.demo_badge.setObjectName("demoBadge")
        self.demo_badge.setStyleSheet(DEMO_BADGE_STYLE)
        self.controls = TalkControls()
        self.controls.mode_changed.connect(self._on_mode_changed)
        self.controls.talk_pressed.connect(self._on_talk_pressed)
        self.controls.talk_released.connect(self._on_talk_released)
        self.controls.mute_changed.connect(self._on_mute_changed)
        self.controls.stop_requested.connect(lambda: self.bridge.submit(StopReply()))
        self._banners = BannerArea()
        self._banners.room_px = lambda: int(self.height() * MAX_BANNER_SHARE)
        self.page = ConversationPage()
        self.mic_wave, self.reply_wave = self.page.mic_wave, self.page.reply_wave
        self.transcript, self.latency = self.page.transcript, self.page.latency
        for view in (self.transcript, self.latency):
            view.export_failed.connect(
                lambda text: self.banners.show_banner("export", "error", text))
        self.echo_ui = EchoUi(self)
        self.first_run = FirstRunPage(self.echo_ui.panel)
        self.first_run.model_manager_requested.connect(self.open_model_manager)
        self.first_run.demo_requested.connect(self.start_echo_demo)
        self.first_run.remote_requested.connect(self.open_remote_setup)
        self.first_run_scroll = QScrollArea()  # the welcome card fits a small window too
        self.first_run_scroll.setObjectName("firstRunScroll")
        self.first_run_scroll.setWidgetResizable(True)
        self.first_run_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.first_run_scroll.setWidget(self.first_run)
        self.conversation_page = self.page
        self.stack = QStackedWidget()
        self.stack.addWidget(self.first_run_scroll)
        self.stack.addWidget(self.conversation_page)
        header = QHBoxLayout()
        header.addWidget(self.state_label)
        header.addWidget(self.demo_badge)
        header.addStretch(1)
        header.addWidget(self.controls)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(8, 6, 8, 4)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.banners)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self.engine_status, self.device_status, self.mode_status = QLabel(), QLabel(), QLabel()
        self.mode_status.setObjectName("listeningStatus")
        for label in (self.engine_status, self.device_status, self.mode_status):
            label.setStyleSheet("padding: 0 10px; border-left: 1px solid palette(mid);")
            self.statusBar().addPermanentWidget(label)

    def _connect_bridge(self) -> None:
        b = self.bridge
        b.on(StateChanged, lambda e: self.set_state(e.state))
        self.page.connect_bridge(b)
        self.status_presenter = StatusPresenter(self)
        b.on(EngineStatusChanged, self.status_presenter.on_engine_status)
        b.on(DeviceLost, self.status_presenter.on_device_lost)
        b.on(AudioDevicesOpened, self._on_devices_opened)
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
        key = settings.turn.hold_to_talk_key
        self.controls.show_mode(settings.turn.mode, key)
        if not self.hold_filter.set_key(key):
            self.banners.show_banner("hold-key", "warning", f"The hold-to-talk key '{key}' is "
                                     "not a key Qt knows; use the button or pick another key.",
                                     "Settings", lambda: self.open_settings("turn"),
                                     counted=False)
        else:
            self.banners.remove("hold-key")
        self.hold_filter.set_enabled(settings.turn.mode == "push_to_talk")
        self.show_listening(replace(self.listening, mode=settings.turn.mode, hold_key=key))

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

    def engine_running(self) -> bool:
        """The engine the settings name is the one answering (not the demo standing in)."""
        info = self.engine_info
        return self._settings.engine.kind == "echo" or (info is not None and not info.is_demo)

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
                                         "until you quit.", counted=False)
        self.bridge.submit(ApplySettings(settings, reload_engine=reload_engine))

    def show_warning(self, text: str) -> None:
        first_line = text.splitlines()[0] if text else ""
        self.statusBar().showMessage(first_line)
        self.statusBar().setToolTip(text)
        self.banners.show_banner("settings-file", "warning", text.replace("\n", "<br>"),
                                 counted=False)

    # ---- listening ---------------------------------------------------------------------------

    def show_listening(self, listening: Listening) -> None:
        """The one place the header, the controls and the status bar learn about listening."""
        self.listening = listening
        shown = describe(listening)
        self.state_label.show_listening(shown, listening.state)
        self.mode_status.setText(shown.status)
        self.mode_status.setToolTip(shown.tooltip)
        self.controls.show_microphone(listening.loop != "running" or listening.has_microphone)

    def set_loop_status(self, status: str) -> None:
        """The voice loop is "none", "starting" or "running" (app.ui.voice_loop)."""
        self.show_listening(replace(self.listening, loop=status))

    def set_state(self, state: ConversationState) -> None:
        self.show_listening(self.listening.with_state(state))
        self.controls.show_state(state)

    def _on_devices_opened(self, event: AudioDevicesOpened) -> None:
        self.status_presenter.on_devices_opened(event)
        self.show_listening(replace(self.listening, microphone=event.input_device,
                                    has_microphone=event.input_device is not None,
                                    has_speaker=event.output_device is not None))

    # ---- conversation ------------------------------------------------------------------------

    @property
    def showing_first_run(self) -> bool:
        return self.stack.currentWidget() is self.first_run_scroll

    def show_page(self, page: QWidget) -> None:
        """The first-run screen hides the conversation controls (nothing to control yet)."""
        if page is self.first_run:
            page = self.first_run_scroll
        self.stack.setCurrentWidget(page)
        first_run = page is self.first_run_scroll
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
        attached = self.attach_voice_loop()
        if self._muted_for_setup:  # the set-up is over: listen (unless muted by the person)
            self._muted_for_setup = False
            self.bridge.submit(SetMuted(self.controls.mute_button.isChecked()))
        return attached

    def attach_voice_loop(self, announce_missing: bool = True) -> bool:
        """Start the voice loop if none runs. During the first-run set-up (the acoustic check,
        recording a voice) it starts muted: nothing answers before the conversation starts."""
        running = self.bridge.port is not None
        attached = self.voice_loop.attach(announce_missing)
        if attached and not running and self.showing_first_run:
            self.bridge.submit(SetMuted(True))
            self._muted_for_setup = True
        return attached

    def start_echo_demo(self) -> None:
        self.update_settings(self._settings.with_values({"engine.kind": "echo",
                                                         "ui.first_run_done": True}))
        self.start_conversation()

    def refresh_waveforms(self) -> None:
        if self.isVisible() and self.stack.currentWidget() is self.conversation_page:
            self.page.refresh_waveforms()

    def _on_mode_changed(self, mode: str) -> None:
        self.update_settings(self._settings.with_value("turn.mode", mode))
        self.bridge.submit(SetListenMode(mode))  # type: ignore[arg-type]

    def _on_mute_changed(self, muted: bool) -> None:
        self.bridge.submit(SetMuted(muted))
        self.show_listening(replace(self.listening, muted=muted))

    def _on_talk_pressed(self) -> None:
        if self.listening.loop == "running" and not self.listening.has_microphone:
            self._say_no_microphone()
            return
        self.controls.talk_button.setDown(True)
        self.bridge.submit(PressToTalk())

    def _on_talk_released(self) -> None:
        self.controls.talk_button.setDown(False)
        self.bridge.submit(ReleaseToTalk())

    def _hold_key_not_needed(self) -> None:
        if self.listening.loop == "running" and not self.listening.has_microphone:
            self._say_no_microphone()
            return
        key = self._settings.turn.hold_to_talk_key
        self.statusBar().showMessage(f"Always listening: just talk ({key} is for push-to-talk; "
                                     "Enter presses a button).", 6_000)

    def _say_no_microphone(self) -> None:
        self.statusBar().showMessage("No microphone is open, so nothing can be heard: connect "
                                     "one or choose one in Settings → Audio devices.", 8_000)

    def release_port(self, timeout_s: float = 5.0) -> bool:
        return self.voice_loop.release(timeout_s)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.banners.fit()

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
