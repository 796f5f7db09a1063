"""State indicator, talk controls and the hold-to-talk key."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QWidget,
)

from app.events import ConversationState
from app.settings import ListenMode

STATE_TEXT = {
    ConversationState.IDLE: "Not listening",
    ConversationState.LISTENING: "Listening",
    ConversationState.USER_SPEAKING: "You are speaking",
    ConversationState.ENDPOINTING: "You are speaking",
    ConversationState.RESPONDING: "Thinking",
    ConversationState.SPEAKING: "Speaking",
    ConversationState.INTERRUPTED: "Interrupted",
}
STATE_COLORS = {
    ConversationState.IDLE: "#8a8a8a",
    ConversationState.LISTENING: "#2e9d57",
    ConversationState.USER_SPEAKING: "#1f78d1",
    ConversationState.ENDPOINTING: "#1f78d1",
    ConversationState.RESPONDING: "#d48806",
    ConversationState.SPEAKING: "#8e44ad",
    ConversationState.INTERRUPTED: "#c0392b",
}
MODE_TEXT = {"always_listening": "Always listening", "push_to_talk": "Push-to-talk"}
_TEXT_INPUTS = (QLineEdit, QTextEdit, QPlainTextEdit, QAbstractSpinBox, QComboBox)


class StateIndicator(QLabel):
    """A coloured dot and the state in words."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("stateLabel")
        self.state = ConversationState.IDLE
        self.set_state(ConversationState.IDLE)

    def set_state(self, state: ConversationState) -> None:
        self.state = state
        color = STATE_COLORS[state]
        self.setText(STATE_TEXT[state])
        self.setStyleSheet(
            f"QLabel#stateLabel {{ font-size: 18px; font-weight: 600; color: {color}; "
            f"padding: 2px 10px; border: 2px solid {color}; border-radius: 13px; }}")
        self.setToolTip(f"Conversation state: {state.value}")


def key_from_name(name: str) -> tuple[int, Qt.KeyboardModifier] | None:
    """Qt key and modifiers of a setting like 'Space' or 'Ctrl+F9'; None if not a key."""
    sequence = QKeySequence.fromString(name)
    if sequence.count() != 1:
        return None
    combination = sequence[0]  # type: ignore[index]  # QKeySequence supports [i] at runtime
    if not sequence.toString() or combination.key() == Qt.Key.Key_unknown:
        return None
    return int(combination.key()), combination.keyboardModifiers()


class HoldToTalkFilter(QObject):
    """Application-wide key filter: holding the key talks while the main window has focus.

    Ignored while a text field has focus (typing a space must not talk) and while the mode is
    always-listening; auto-repeat is ignored, and losing focus while held releases.
    """

    pressed = Signal()
    released = Signal()

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self._window = window
        self._key: tuple[int, Qt.KeyboardModifier] | None = None
        self.enabled = False
        self.held = False

    def set_key(self, name: str) -> bool:
        self._key = key_from_name(name)
        return self._key is not None

    def set_enabled(self, enabled: bool) -> None:
        self.enabled = enabled
        if not enabled:
            self.release_if_held()

    def release_if_held(self) -> None:
        if self.held:
            self.held = False
            self.released.emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.WindowDeactivate and watched is self._window:
            self.release_if_held()
            return False
        if kind not in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease) or not self.enabled:
            return False
        if not isinstance(watched, QWidget) or watched.window() is not self._window:
            return False
        assert isinstance(event, QKeyEvent)
        if self._key is None or event.key() != self._key[0]:
            return False
        if isinstance(watched, _TEXT_INPUTS) or isinstance(QApplication.focusWidget(),
                                                            _TEXT_INPUTS):
            return False
        if event.isAutoRepeat():
            return True
        if kind == QEvent.Type.KeyPress and not self.held:
            if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier != self._key[1]:
                return False
            self.held = True
            self.pressed.emit()
        elif kind == QEvent.Type.KeyRelease and self.held:
            self.release_if_held()
        return True


class TalkControls(QWidget):
    """Always-listening switch, push-to-talk button, mute and stop-reply."""

    mode_changed = Signal(str)
    talk_pressed = Signal()
    talk_released = Signal()
    mute_changed = Signal(bool)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.always_switch = QCheckBox("Always listening")
        self.always_switch.setToolTip("On: the app listens all the time and answers when you "
                                      "pause. Off: push-to-talk (hold the button or the key).")
        self.always_switch.toggled.connect(self._on_always_switch_toggled)
        self.talk_button = QPushButton("Hold to talk")
        self.talk_button.setObjectName("talkButton")
        self.talk_button.setMinimumWidth(150)
        self.talk_button.pressed.connect(self.talk_pressed)
        self.talk_button.released.connect(self.talk_released)
        self.mute_button = QPushButton("Mute microphone")
        self.mute_button.setCheckable(True)
        self.mute_button.toggled.connect(self._on_mute_button_toggled)
        self.stop_button = QPushButton("Stop reply")
        self.stop_button.setToolTip("Stop the assistant now (Esc), or just start talking")
        self.stop_button.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.always_switch, self.talk_button, self.mute_button, self.stop_button):
            layout.addWidget(widget)

    def show_mode(self, mode: ListenMode, key_name: str) -> None:
        """Reflect the mode without emitting mode_changed."""
        self.always_switch.blockSignals(True)
        self.always_switch.setChecked(mode == "always_listening")
        self.always_switch.blockSignals(False)
        self.talk_button.setVisible(mode == "push_to_talk")
        self.talk_button.setText(f"Hold to talk ({key_name})")

    def show_state(self, state: ConversationState) -> None:
        self.stop_button.setEnabled(state in (ConversationState.RESPONDING,
                                              ConversationState.SPEAKING))

    def _on_always_switch_toggled(self, checked: bool) -> None:
        mode = "always_listening" if checked else "push_to_talk"
        self.talk_button.setVisible(not checked)
        self.mode_changed.emit(mode)

    def _on_mute_button_toggled(self, muted: bool) -> None:
        self.mute_button.setText("Unmute microphone" if muted else "Mute microphone")
        self.mute_changed.emit(muted)
