"""Reading and writing the settings TOML file without ever losing a person's settings.

A corrupt or partly invalid file never stops the app: each bad key falls back to its default
with a warning naming the key and the reason. When the app itself starts (``repair=True``) the
original file is first kept as a timestamped backup (``settings.toml.<date>-<time>.bak``; a new
backup never overwrites an older one, an identical one is reused, the newest ``BACKUPS_KEPT``
are kept) and the cleaned settings are written back so the warning is shown once. Commands that
only report (``doctor``, ``--screenshot``, ``converse --saved-settings``) load with
``repair=False``: they never write the file.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import sys
import tempfile
import time
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
BACKUPS_KEPT = 5  # timestamped backups kept per settings file (a legacy .bak is never removed)


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
    repaired: bool = True  # False: read only, the file was left as it is

    def warning_text(self) -> str:
        """One message for a banner or the console; empty when the file was clean."""
        if not self.issues:
            return ""
        lines = [f"Some settings in {self.path} were not usable and were reset:" if self.repaired
                 else f"Some settings in {self.path} are not usable (their defaults are used; "
                 "the file is left as it is):"]
        lines += [f"  - {issue}" for issue in self.issues]
        if self.backup_path:
            lines.append(f"Your original file is kept as {self.backup_path}.")
        return "\n".join(lines)


MAX_SETTINGS_BYTES = 1 << 20  # ours is ~2 KB


def legacy_backup_path(path: Path) -> Path:
    """The single backup name of earlier versions (``settings.toml.bak``); read, never written."""
    return path.with_name(path.name + ".bak")


def backup_path_for(path: Path, when_s: float | None = None) -> Path:
    """A new backup's name: ``<name>.<YYYYmmdd-HHMMSS-microseconds>.bak``."""
    when_s = time.time() if when_s is None else when_s
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when_s))
    return path.with_name(f"{path.name}.{stamp}-{int(when_s % 1 * 1e6):06d}.bak")


def backups_of(path: Path) -> list[Path]:
    """The timestamped backups of ``path``, oldest first (the legacy .bak is not included)."""
    return [candidate for _, candidate in _dated_backups(path)]


def _dated_backups(path: Path) -> list[tuple[tuple[str, int], Path]]:
    """((timestamp, counter), backup) sorted oldest first."""
    pattern = re.compile(rf"^{re.escape(path.name)}\.(\d{{8}}-\d{{6}}-\d{{6}})(?:-(\d+))?\.bak$")
    found = []
    for candidate in path.parent.glob(f"{path.name}.*.bak") if path.parent.is_dir() else []:
        match = pattern.match(candidate.name)
        if match:
            found.append(((match.group(1), int(match.group(2) or 0)), candidate))
    return sorted(found)


def load_settings(path: Path | None = None, *, repair: bool = True) -> LoadedSettings:
    """Load settings from ``path`` (default: :func:`app.paths.settings_path`); never raises.

    With ``repair`` (the app starting) a file with problems is backed up and rewritten clean;
    without it (commands that only report) nothing is written.
    """
    path = Path(path) if path is not None else settings_path()
    if not path.exists():
        return LoadedSettings(Settings(), path)
    settings, issues = _read(path)
    if not issues:
        return LoadedSettings(settings, path)
    if not repair:
        return LoadedSettings(settings, path, issues, repaired=False)
    return _recover(path, settings, issues)


def _read(path: Path) -> tuple[Settings, list[SettingsIssue]]:
    if path.is_dir():
        return Settings(), [SettingsIssue("(file)", "is a folder, not a settings file; using "
                                          "all defaults")]
    try:
        if path.stat().st_size > MAX_SETTINGS_BYTES:  # read nothing that big (issue 21)
            raise OSError(f"{path.stat().st_size:,} bytes; a settings file is a few KB")
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        issue = SettingsIssue("(file)", f"could not be read ({_short(exc)}); using all defaults")
        return Settings(), [issue]
    try:
        raw = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # RecursionError: deep nesting
        issue = SettingsIssue("(file)", f"is not valid TOML ({exc}); using all defaults")
        return Settings(), [issue]
    return _validate_with_fallback(raw)


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
    """Keep the original as a backup, then write the cleaned settings (only once the backup
    exists; a path that is not a file is left alone)."""
    if not path.is_file():
        return LoadedSettings(settings, path, issues, None, repaired=False)
    try:
        backup = make_backup(path)
    except OSError as exc:
        issues = [*issues, SettingsIssue("(file)", f"could not be backed up ({_short(exc)}); "
                                         "left as it is")]
        return LoadedSettings(settings, path, issues, None, repaired=False)
    try:
        save_settings(settings, path)
    except OSError as exc:
        issues = [*issues, SettingsIssue("(file)", f"could not be rewritten ({_short(exc)})")]
        return LoadedSettings(settings, path, issues, backup, repaired=False)
    return LoadedSettings(settings, path, issues, backup)


def make_backup(path: Path, now_s: float | None = None) -> Path:
    """Copy ``path`` to a new timestamped backup (named for ``now_s``, default now), or return
    an existing backup with the same bytes; never overwrites a file. Timestamped backups
    beyond the newest ``BACKUPS_KEPT`` are removed. Streams: a huge file is not read whole."""
    for existing in [*reversed(backups_of(path)), legacy_backup_path(path)]:
        if existing.is_file() and filecmp.cmp(path, existing, shallow=False):
            return existing
    base = backup_path_for(path, now_s)
    stamp = base.name[len(path.name) + 1:-len(".bak")]
    same_time = [counter for (other, counter), _ in _dated_backups(path) if other == stamp]
    first = max(same_time) + 1 if same_time else 0  # newer than every backup of that moment
    for attempt in range(first, first + 1000):
        target = base if not attempt else base.with_name(f"{base.name[:-4]}-{attempt}.bak")
        try:  # exclusive: an existing file is never replaced; private like the settings
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out, path.open("rb") as source:
            shutil.copyfileobj(source, out)
        break
    else:
        raise FileExistsError(f"no free backup name next to {path}")
    for old in backups_of(path)[:-BACKUPS_KEPT]:
        old.unlink(missing_ok=True)
    return target


def settings_write_problem(path: Path | None = None) -> str | None:
    """Why the settings could not be saved at ``path`` (None: they can). Writes nothing but an
    anonymous probe file in the settings folder, removed at once."""
    path = Path(path) if path is not None else settings_path()
    if path.is_dir():
        return (f"{path} is a folder, not a file, so settings cannot be saved; rename or "
                "remove that folder")
    if path.exists() and not path.is_file():
        return f"{path} is not a regular file, so settings cannot be saved"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"settings cannot be saved: {folder} is a file where a folder is needed"
    if folder != path.parent:  # the settings folder will be created: can it be?
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"settings cannot be saved: the folder {folder} is not writable"
        return None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"settings cannot be saved: the folder {folder} is not writable ({exc.strerror})"
    return None


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
