"""Using a MOSS-Speech server: the setup dialog the first-run screen opens, and the API-key
field the settings panel shows under the server address.

The key goes to the system keyring (or, without one, to memory for this session, and the person
is told), never to the settings file. Keyring calls and the connection check run off the GUI
thread (a keyring may ask to be unlocked; a server may take seconds to answer).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.remote.api_key import ApiKeyStore, SaveResult
from app.settings import Settings
from app.ui.bridge import UiBridge

PLACES = {"keyring": "A key is stored in the system keyring for this server.",
          "session": "A key is kept for this session only (this system has no usable keyring).",
          "environment": "The key comes from MOSS_VOICE_API_KEY in the environment."}
NO_KEY = "No key is stored for this server (most servers need none)."
INTRO = (
    "<p><b>Talk with MOSS-Speech running on another machine</b>, a lab server or a bigger GPU "
    "(the server needs about 27 GiB of GPU memory). Your microphone, echo cancelling, "
    "turn-taking and interrupting stay on this PC; only your turns and the replies travel.</p>"
    "<p>Start the server with sglang-omni's MOSS-Speech streaming preset "
    "(docs/remote-engine.md says how), then enter its address.</p>")
OK_STYLE, ERROR_STYLE = "color: #1e7b34;", "color: #c0392b;"


def check_server(url: str, api_key: str | None) -> str:
    """Ask ``url``'s /health; returns what to tell the person, raises RemoteError."""
    from app.engine.remote.client import RemoteClient, Timeouts

    client = RemoteClient(url, api_key, Timeouts(connect_s=5.0))
    try:
        client.health()
    finally:
        client.close()
    return f"The server at {client.url} is ready."


def url_problem(url: str) -> str:
    """What is wrong with a server address ('' when nothing)."""
    if not url.strip():
        return "Enter the server's address, e.g. http://192.168.1.20:8000."
    try:
        Settings().with_value("engine.remote_url", url)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return ""


class ApiKeyField(QWidget):
    """A password field with Save and Forget for the server ``url()`` names."""

    changed = Signal()  # a key was saved or forgotten

    def __init__(self, url: Callable[[], str], bridge: UiBridge,
                 store: ApiKeyStore | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.url, self.bridge = url, bridge
        self.store = store or ApiKeyStore()
        self.edit = QLineEdit()
        self.edit.setObjectName("apiKeyEdit")
        self.edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.edit.setPlaceholderText("(optional) the server's API key")
        self.edit.setToolTip("Sent as 'Authorization: Bearer <key>'. Kept in the system "
                             "keyring, never in the settings file.")
        self.save_button = QPushButton("Save key")
        self.forget_button = QPushButton("Forget")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setStyleSheet("color: gray;")
        self.save_button.clicked.connect(lambda: self.save())
        self.forget_button.clicked.connect(self.forget)
        self._refresh_soon = QTimer(self, singleShot=True, interval=400)  # typing the address
        self._refresh_soon.timeout.connect(self.refresh)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit, 1)
        row.addWidget(self.save_button)
        row.addWidget(self.forget_button)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addLayout(row)
        column.addWidget(self.status)
        self.refresh()

    def address_changed(self) -> None:
        """Call when the server address changes: the status follows once typing pauses."""
        self._refresh_soon.start()

    def refresh(self) -> None:
        url = self.url()
        if url_problem(url):
            self.status.setText("Enter the server address first.")
            return
        self.bridge.run_in_background(lambda: self.store.find(url), self._show_found,
                                      self._failed, name="api-key-find")

    def _show_found(self, found: tuple[str, str] | None) -> None:
        self.status.setText(PLACES.get(found[1], NO_KEY) if found else NO_KEY)

    def save(self, then: Callable[[], None] | None = None) -> None:
        """Store the typed key (off the GUI thread); ``then`` runs once it is stored."""
        key, url = self.edit.text(), self.url()
        if problem := url_problem(url):
            self.status.setText(problem)
            return
        if not key.strip():
            self.status.setText("Type the key first (or Forget to remove a stored one).")
            return
        self.edit.clear()  # the key leaves the widget at once

        def done(result: SaveResult) -> None:
            self._done(result)
            if then is not None:
                then()

        def failed(exc: BaseException) -> None:
            self._failed(exc)
            if then is not None:  # the server will say if it needs the key
                then()

        self.bridge.run_in_background(lambda: self.store.save(url, key), done, failed,
                                      name="api-key-save")

    def forget(self) -> None:
        url = self.url()
        if url_problem(url):
            return
        self.bridge.run_in_background(lambda: self.store.forget(url), self._done,
                                      self._failed, name="api-key-forget")

    def _done(self, result: SaveResult) -> None:
        self.status.setText(result.message)
        self.changed.emit()

    def _failed(self, exc: BaseException) -> None:
        self.status.setText(f"The keyring failed: {type(exc).__name__}.")


class RemoteSetupDialog(QDialog):
    """Address, optional key, a connection check; emits ``chosen(url)`` on 'Use this server'."""

    chosen = Signal(str)

    def __init__(self, settings: Settings, bridge: UiBridge, store: ApiKeyStore | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Use a MOSS-Speech server")
        self.bridge = bridge
        self.store = store or ApiKeyStore()
        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        self.url_edit = QLineEdit(settings.engine.remote_url)
        self.url_edit.setObjectName("remoteUrlEdit")
        self.url_edit.setPlaceholderText("http://192.168.1.20:8000")
        self.key_field = ApiKeyField(self.url_edit.text, bridge, self.store)
        self.url_edit.textChanged.connect(self.key_field.address_changed)
        self.result_label = QLabel()
        self.result_label.setObjectName("remoteCheckResult")
        self.result_label.setWordWrap(True)
        self.check_button = QPushButton("Check connection")
        self.check_button.clicked.connect(self.check)
        self.use_button = QPushButton("Use this server")
        self.use_button.setObjectName("useRemoteButton")
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self.use)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        form = QFormLayout()
        form.addRow("Server address", self.url_edit)
        form.addRow("API key", self.key_field)
        buttons = QHBoxLayout()
        buttons.addWidget(self.check_button)
        buttons.addStretch(1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(cancel)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.result_label)
        layout.addLayout(buttons)
        self.setMinimumWidth(560)

    def _show(self, text: str, ok: bool) -> None:
        self.result_label.setStyleSheet(OK_STYLE if ok else ERROR_STYLE)
        self.result_label.setText(text)

    def check(self) -> None:
        url = self.url_edit.text().strip()
        if problem := url_problem(url):
            self._show(problem, False)
            return
        self._show("Checking…", True)
        self.check_button.setEnabled(False)
        key_text = self.key_field.edit.text().strip()

        def work() -> str:
            return check_server(url, key_text or self.store.get(url))

        self.bridge.run_in_background(work, self._checked, self._check_failed,
                                      name="remote-check")

    def _checked(self, text: str) -> None:
        self.check_button.setEnabled(True)
        self._show(text, True)

    def _check_failed(self, exc: BaseException) -> None:
        self.check_button.setEnabled(True)
        action = getattr(exc, "action", "")
        self._show(f"{exc} {action}".strip(), False)

    def use(self) -> None:
        url = self.url_edit.text().strip()
        if problem := url_problem(url):
            self._show(problem, False)
            return
        def chosen() -> None:
            self.chosen.emit(url)
            self.accept()

        if self.key_field.edit.text().strip():  # stored first: the engine reads it when built
            self.use_button.setEnabled(False)
            self.key_field.save(then=chosen)
        else:
            chosen()
