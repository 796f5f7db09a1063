"""The one screen shown while no model is set up: what the app needs, and two ways on."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.model_store import REPOS

INTRO = (
    "<h2>Welcome to MOSS Voice</h2>"
    "<p>Talk with <b>MOSS-Speech</b>, a speech-to-speech model, on this PC: offline, streaming, "
    "and you can interrupt it by talking.</p>"
    "<p><b>Nothing is set up yet.</b> MOSS-Speech needs three things, and the set-up gets "
    "them in one go: the model ({model}, about 17 GiB) and its codec ({codec}), downloaded "
    "once from Hugging Face or chosen from folders you have, and <b>a voice</b> for its replies "
    "(record your own, choose a file, or get an official example voice). A GPU with 12–22 GiB "
    "of free memory is recommended; the set-up checks yours. No restart is needed.</p>"
)
DEMO = (
    "<p><b>Or try the echo demo first.</b> It runs the whole voice loop (microphone, "
    "turn-taking, interrupting, playback and latency measurement) but it is <b>not an AI</b>: "
    "it plays your own words back. No model or GPU needed.</p>"
)


REMOTE = ("<p><b>No big GPU here?</b> Use MOSS-Speech running on another machine (a lab "
          "server or a bigger PC); everything else stays on this one.</p>")
SPEAKERS = "<p><b>Speakers or headset?</b> Optional, and it takes two seconds:</p>"


class FirstRunPage(QWidget):
    """Emits ``model_manager_requested``, ``demo_requested`` or ``remote_requested``."""

    model_manager_requested = Signal()
    demo_requested = Signal()
    remote_requested = Signal()  # "Use a MOSS-Speech server…" (the remote engine)

    def __init__(self, acoustic_check: QWidget | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("firstRunPage")
        card = QFrame()
        card.setObjectName("firstRunCard")
        card.setFixedWidth(620)  # a fixed width lets the wrapped labels get their height
        card.setStyleSheet("QFrame#firstRunCard { border: 1px solid palette(mid); "
                           "border-radius: 8px; }")
        intro = QLabel(INTRO.format(model=REPOS["model"].repo_id, codec=REPOS["codec"].repo_id))
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        self.model_button = QPushButton("Set up the model and voice…")
        self.model_button.setObjectName("setUpModelButton")
        self.model_button.setDefault(True)
        self.model_button.setMinimumHeight(34)
        self.model_button.clicked.connect(self.model_manager_requested)
        demo = QLabel(DEMO)
        demo.setWordWrap(True)
        demo.setTextFormat(Qt.TextFormat.RichText)
        self.demo_button = QPushButton("Try the echo demo (no AI: plays your words back)")
        self.demo_button.setObjectName("echoDemoButton")
        self.demo_button.setMinimumHeight(30)
        self.demo_button.clicked.connect(self.demo_requested)
        inner = QVBoxLayout(card)
        inner.setContentsMargins(28, 20, 28, 24)
        inner.setSpacing(10)
        inner.addWidget(intro)
        inner.addWidget(self.model_button)
        inner.addSpacing(12)
        inner.addWidget(demo)
        inner.addWidget(self.demo_button)
        inner.addSpacing(12)
        inner.addWidget(self._remote_option())
        if acoustic_check is not None:  # the acoustic check, offered before the first talk
            inner.addSpacing(12)
            speakers = QLabel(SPEAKERS)
            speakers.setWordWrap(True)
            speakers.setTextFormat(Qt.TextFormat.RichText)
            inner.addWidget(speakers)
            inner.addWidget(acoustic_check)
        row = QHBoxLayout()  # (an aligned item would get its plain size hint: clipped text)
        row.addStretch(1)
        row.addWidget(card)
        row.addStretch(1)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        outer.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)

    def _remote_option(self) -> QWidget:
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        text = QLabel(REMOTE)
        text.setWordWrap(True)
        text.setTextFormat(Qt.TextFormat.RichText)
        self.remote_button = QPushButton("Use a MOSS-Speech server…")
        self.remote_button.setObjectName("remoteServerButton")
        self.remote_button.setMinimumHeight(30)
        self.remote_button.clicked.connect(self.remote_requested)
        column.addWidget(text)
        column.addWidget(self.remote_button)
        return box
