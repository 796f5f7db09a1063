"""Where files live: settings, models, logs, caches and bundled resources.

Everything is under the platform's per-user folders (platformdirs). ``MOSS_VOICE_HOME`` moves all
of them under one folder (portable installs, tests); ``MOSS_VOICE_SETTINGS`` points at another
settings file only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

from app import APP_ID

HOME_ENV = "MOSS_VOICE_HOME"
SETTINGS_ENV = "MOSS_VOICE_SETTINGS"
SETTINGS_FILE_NAME = "settings.toml"


def _home_override() -> Path | None:
    value = os.environ.get(HOME_ENV, "").strip()
    return Path(value).expanduser() if value else None


def config_dir() -> Path:
    """Folder of the settings file and per-device acoustic check results."""
    home = _home_override()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_ID, appauthor=False))


def data_dir() -> Path:
    """Folder for downloaded models and recordings."""
    home = _home_override()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_ID, appauthor=False))


def models_dir() -> Path:
    """Default download location of the model and codec folders."""
    return data_dir() / "models"


def voices_dir() -> Path:
    """Voice prompts: recordings made in the app and downloaded example voices."""
    return data_dir() / "voices"


def cache_dir() -> Path:
    """Caches that can be deleted at any time (voice conditioning, compiled kernels)."""
    home = _home_override()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_ID, appauthor=False))


def log_dir() -> Path:
    """Folder of the rotating log file."""
    home = _home_override()
    return home / "logs" if home else Path(platformdirs.user_log_dir(APP_ID, appauthor=False))


def settings_path() -> Path:
    """The settings file: ``$MOSS_VOICE_SETTINGS`` if set, else the platform config folder."""
    override = os.environ.get(SETTINGS_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    return config_dir() / SETTINGS_FILE_NAME


def resources_dir() -> Path:
    """Bundled resources; works from source and from a PyInstaller bundle (``sys._MEIPASS``)."""
    bundle_root = getattr(sys, "_MEIPASS", None)
    if bundle_root:
        return Path(bundle_root) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource(*parts: str) -> Path:
    """Path of one bundled resource file."""
    return resources_dir().joinpath(*parts)
