"""Logging: warnings to the console, everything to a rotating file in the log folder."""

from __future__ import annotations

import logging
import logging.handlers
import sys

from app.paths import log_dir, open_private, private_dir

LOG_FILE_NAME = "moss-voice.log"


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is now (it can be replaced after setup, e.g. by test
    capture or an embedding host), never to a stream that was closed since."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # logging reads and writes this attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose files are 0600 (POSIX): they name devices, folders and what was
    said; rotation renames files, so the backups keep the mode."""

    def _open(self):
        fd = open_private(self.baseFilename, append="a" in self.mode)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


def setup_logging(verbose: bool = False, to_file: bool = True) -> None:
    root = logging.getLogger()
    if getattr(root, "_moss_voice_configured", False):
        return
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if sys.stderr is not None:  # None in windowed (no console) bundles
        console = _CurrentStderrHandler()
        console.setLevel(logging.DEBUG if verbose else logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(console)
    if to_file:
        try:
            folder = private_dir(log_dir())
            handler = PrivateRotatingFileHandler(
                folder / LOG_FILE_NAME, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
            handler.setFormatter(logging.Formatter(
                "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
            root.addHandler(handler)
        except OSError as exc:
            logging.getLogger(__name__).warning("no log file (%s)", exc)
    root._moss_voice_configured = True  # type: ignore[attr-defined]
