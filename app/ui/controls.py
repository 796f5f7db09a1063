"""State indicator, talk controls and the hold-to-talk key."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractButton,
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
from app.ui.listening import MODE_TEXT, STATE_TEXT, Shown

__all__ = ["MODE_TEXT", "STATE_TEXT", "HoldToTalkFilter", "StateIndicator", "TalkControls",
           "key_from_name"]
_TEXT_INPUTS = (QLineEdit, QTextEdit, QPlainTextEdit, QAbstractSpinBox, QComboBox)
_ACTIVATE_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class StateIndicator(QLabel):
    """A coloured outline and the listening state in words (app.ui.listening decides)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("stateLabel")
        self.state = ConversationState.IDLE  # the last state the voice loop reported

    def show_listening(self, shown: Shown, state: ConversationState | None) -> None:
        if state is not None:
            self.state = state
        self.setText(shown.header)
        self.setStyleSheet(
            f"QLabel#stateLabel {{ font-size: 17px; font-weight: 600; color: {shown.color}; "
            f"padding: 1px 10px; border: 2px solid {shown.color}; border-radius: 12px; }}")
        self.setToolTip(shown.tooltip)


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
    """Application-wide key filter for the main window: the talk key always belongs to talking.

    In push-to-talk mode holding it talks (``pressed``/``released``); in always-listening mode
    pressing it only emits ``not_needed`` (so it never clicks the focused button). Return and
    Enter activate the focused button instead. Ignored while a text field has focus (typing a
    space must not talk); auto-repeat is ignored, and losing focus while held releases.
    """

    pressed = Signal()
    released = Signal()
    not_needed = Signal()

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self._window = window
        self._key: tuple[int, Qt.KeyboardModifier] | None = None
        self.enabled = False  # push-to-talk mode
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
        if kind not in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease):
            return False
        if not isinstance(watched, QWidget) or watched.window() is not self._window:
            return False
        assert isinstance(event, QKeyEvent)
        focus = QApplication.focusWidget()
        if isinstance(watched, _TEXT_INPUTS) or isinstance(focus, _TEXT_INPUTS):
            return False
        if self._key is not None and event.key() == self._key[0]:
            return self._talk_key(kind, event)
        if (event.key() in _ACTIVATE_KEYS and kind == QEvent.Type.KeyPress
                and isinstance(focus, QAbstractButton) and watched is focus
                and focus.isEnabled()):
            focus.animateClick()
            return True
        return False

    def _talk_key(self, kind: QEvent.Type, event: QKeyEvent) -> bool:
        assert self._key is not None
        if kind == QEvent.Type.KeyPress and not self.held and (
                event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier != self._key[1]):
            return False
        if event.isAutoRepeat():
            return True
        if not self.enabled:
            if kind == QEvent.Type.KeyPress:
                self.not_needed.emit()
            return True
        if kind == QEvent.Type.KeyPress and not self.held:
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

    def show_microphone(self, available: bool) -> None:
        """No microphone: nothing to talk into, nothing to mute."""
        self.talk_button.setEnabled(available)
        self.mute_button.setEnabled(available)
        tip = "" if available else "No microphone is open: connect one or choose one in " \
            "Settings → Audio devices."
        self.talk_button.setToolTip(tip or "Hold while you speak")
        self.mute_button.setToolTip(tip)

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
