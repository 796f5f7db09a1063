"""Command-line values that are settings (``--set GROUP.KEY=VALUE``, ``--remote-url``): checked
by the settings model itself while the command line is read, with its error as one line
(the mechanism: :mod:`app.cli.options`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.cli.options import InputError, Validator, quoted

if TYPE_CHECKING:
    from app.settings import Settings


class SettingOverride(Validator):
    """``GROUP.KEY=VALUE`` naming a real setting with a value it accepts on its own."""

    allowed = "GROUP.KEY=VALUE naming a setting, e.g. vad.endpoint_silence_ms=700"

    def __call__(self, text: str) -> tuple[str, object]:
        from app.settings import Settings

        key, sep, value_text = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise self.refuse(text)
        value = parse_setting_value(value_text.strip())
        try:
            Settings().with_value(key, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not allowed: "
                                             f"{settings_error_text(exc)}") from None
        return key, value

    def bad_examples(self) -> list[str]:
        return ["", "nonsense", "=3", "vad.threshold=2", "vad.nope=1", "nope.x=1",
                "vad.endpoint_silence_ms=nan", "turn.mode=shouting"]


class SettingValue(Validator):
    """The value of one setting given by its own option (e.g. ``--remote-url``): not empty, and
    accepted by the settings model."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.allowed = f"a value {key} accepts"

    def __call__(self, text: str) -> str:
        from app.settings import Settings

        if not text.strip():
            raise self.refuse(text, "is empty")
        try:
            Settings().with_value(self.key, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not allowed: "
                                             f"{settings_error_text(exc)}") from None
        return text

    def bad_examples(self) -> list[str]:
        return ["", " "] + (["ftp://x", "http://", "localhost:8000", "http://h:99999"]
                            if self.key == "engine.remote_url" else [])


def with_changes(settings: Settings, changes: Iterable[tuple[str, str, object]]) -> Settings:
    """``settings`` with each ``(option, key, value)`` applied in turn; a combination the
    settings refuse raises InputError naming the option that made it (``--set`` shows its
    ``key=value``)."""
    for option, key, value in changes:
        try:
            settings = settings.with_value(key, value)
        except ValueError as exc:
            shown = f"{key}={value}" if option == "--set" else value
            raise InputError(option, shown, settings_error_text(exc)) from None
    return settings


def parse_setting_value(text: str) -> object:
    """``--set`` values: JSON literals (500, 0.6, true, null, "x"), else the plain text."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def settings_error_text(exc: ValueError) -> str:
    """A settings validation error as one line: ``key: what is allowed (got value)``."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return " ".join(str(exc).split())
    parts = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        message = error["msg"][:1].lower() + error["msg"][1:]
        parts.append(f"{key}: {message} (got {error.get('input')!r})")
    return "; ".join(parts)
