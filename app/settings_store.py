"""Reading and writing the settings TOML file without ever losing a person's settings.

A corrupt or partly invalid file never stops the app: each bad key falls back to its default
with a warning naming the key and the reason, the original file is kept as ``<name>.bak``, and
the cleaned settings are written back so the warning is shown once.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError

from app.paths import private_dir, settings_path
from app.settings import Settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_MAX_REPAIR_ROUNDS = 64


@dataclass(frozen=True)
class SettingsIssue:
    """One problem found in the settings file, in words a person can act on."""

    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}"


@dataclass
class LoadedSettings:
    settings: Settings
    path: Path
    issues: list[SettingsIssue] = field(default_factory=list)
    backup_path: Path | None = None

    def warning_text(self) -> str:
        """One message for a banner or the console; empty when the file was clean."""
        if not self.issues:
            return ""
        lines = [f"Some settings in {self.path} were not usable and were reset:"]
        lines += [f"  - {issue}" for issue in self.issues]
        if self.backup_path:
            lines.append(f"Your original file is kept as {self.backup_path}.")
        return "\n".join(lines)


MAX_SETTINGS_BYTES = 1 << 20  # ours is ~2 KB


def backup_path_for(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def load_settings(path: Path | None = None) -> LoadedSettings:
    """Load settings from ``path`` (default: :func:`app.paths.settings_path`); never raises."""
    path = Path(path) if path is not None else settings_path()
    if not path.exists():
        return LoadedSettings(Settings(), path)
    try:
        if path.stat().st_size > MAX_SETTINGS_BYTES:  # read nothing that big (issue 21)
            raise OSError(f"{path.stat().st_size:,} bytes; a settings file is a few KB")
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        issue = SettingsIssue("(file)", f"could not be read ({_short(exc)}); using all defaults")
        return _recover(path, Settings(), [issue])
    try:
        raw = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # RecursionError: deep nesting
        issue = SettingsIssue("(file)", f"is not valid TOML ({exc}); using all defaults")
        return _recover(path, Settings(), [issue])
    settings, issues = _validate_with_fallback(raw)
    if issues:
        return _recover(path, settings, issues)
    return LoadedSettings(settings, path)


def _validate_with_fallback(raw: dict[str, Any]) -> tuple[Settings, list[SettingsIssue]]:
    """Validate; drop each offending key (back to its default) until the rest validates."""
    issues: list[SettingsIssue] = []
    defaults = Settings().model_dump()
    for _ in range(_MAX_REPAIR_ROUNDS):
        try:
            return Settings.model_validate(raw), issues
        except ValidationError as exc:
            for error in exc.errors():
                issue = _drop_bad_key(raw, error, defaults)
                if issue is not None:
                    issues.append(issue)
    return Settings(), [*issues, SettingsIssue("(file)", "could not be repaired; using defaults")]


def _drop_bad_key(
    raw: dict[str, Any], error: Any, defaults: dict[str, Any]
) -> SettingsIssue | None:
    loc = [str(part) for part in error["loc"]]
    if not loc:
        return None
    group = loc[0]
    section = raw.get(group)
    if len(loc) == 1 or not isinstance(section, dict):
        if group not in raw:
            return None
        del raw[group]
        if group not in defaults:
            return SettingsIssue(group, "unknown setting, ignored")
        if isinstance(defaults[group], dict):
            return SettingsIssue(group, "must be a table of settings; using its defaults")
        return _issue_for(group, error, defaults[group])
    name = loc[1]
    if name not in section:
        return None
    del section[name]
    key = f"{group}.{name}"
    if name not in defaults.get(group, {}):
        return SettingsIssue(key, "unknown setting, ignored")
    return _issue_for(key, error, defaults[group][name])


def _issue_for(key: str, error: Any, default: object) -> SettingsIssue:
    got = error.get("input")
    shown_default = "empty" if default is None else repr(_plain(default))
    reason = f"{error['msg']} (got {got!r}); using the default {shown_default}"
    return SettingsIssue(key, reason)


def _recover(path: Path, settings: Settings, issues: list[SettingsIssue]) -> LoadedSettings:
    """Keep the original as .bak (never overwriting an older backup with a copy of itself)."""
    backup = backup_path_for(path)
    try:
        if path.is_file():
            shutil.copy2(path, backup)
        else:
            backup = None  # type: ignore[assignment]
    except OSError as exc:
        issues = [*issues, SettingsIssue("(file)", f"backup to {backup} failed ({_short(exc)})")]
        return LoadedSettings(settings, path, issues, None)
    if backup is not None:
        try:
            save_settings(settings, path)
        except OSError as exc:
            issues = [*issues, SettingsIssue("(file)", f"could not be rewritten ({_short(exc)})")]
    return LoadedSettings(settings, path, issues, backup)


def settings_to_toml(settings: Settings) -> str:
    """TOML text of the settings; unset optional values are left out (TOML has no null)."""
    data = _without_none(settings.model_dump(mode="json"))
    header = "# MOSS Voice settings. Edit while the app is closed, or use Settings in the app.\n"
    return header + tomli_w.dumps(data)


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves half a file."""
    path = Path(path) if path is not None else settings_path()
    private_dir(path.parent)  # 0700 (POSIX); the file itself is mkstemp's 0600
    fd, tmp_name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(settings_to_toml(settings))
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Path) else value


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
