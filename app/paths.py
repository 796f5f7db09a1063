"""Where files live: settings, models, logs, caches and bundled resources.

Everything is under the platform's per-user folders (platformdirs). ``MOSS_VOICE_HOME`` moves all
of them under one folder (portable installs, tests); ``MOSS_VOICE_SETTINGS`` points at another
settings file only. On POSIX the app's folders are 0700 and its files 0600 (:func:`private_dir`,
:func:`write_private`, :func:`open_private`); torch.compile's caches live under the app's cache
(:func:`use_private_compile_caches`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import MutableMapping
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


# ---- private folders and files ---------------------------------------------------------------
# What the app writes about a person (the log, voice recordings and the voice cache, acoustic
# checks, settings) is theirs alone on a shared machine: on POSIX the app's folders are 0700 and
# its files 0600, whatever the umask. Paths the person chose (exports, --output) are theirs to
# decide and follow the umask.

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
COMPILE_CACHE_ENV = {"TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton"}


def app_folders() -> tuple[Path, ...]:
    """The app's own folders (settings, data, cache, logs); a settings file elsewhere
    (``MOSS_VOICE_SETTINGS``) is private too, but its folder is the person's."""
    return config_dir(), data_dir(), cache_dir(), log_dir()


def _app_root_of(path: Path) -> Path | None:
    target = Path(os.path.abspath(path))
    for root in app_folders():
        root = Path(os.path.abspath(root))
        if target == root or root in target.parents:
            return root
    return None


def is_app_path(path: Path | str) -> bool:
    """Whether ``path`` lies inside one of the app's own folders."""
    return _app_root_of(Path(path)) is not None


def _tighten(folder: Path) -> None:
    info = folder.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        folder.chmod(PRIVATE_DIR_MODE)


def private_dir(path: Path | str) -> Path:
    """Create ``path`` and its missing parents as 0700 folders (POSIX, whatever the umask);
    inside the app's own folders an existing folder of ours is tightened to 0700 too, up to the
    app folder it lies in (earlier versions created them 0755). Elsewhere only what this call
    creates is changed."""
    path = Path(path)
    if os.name != "posix":
        path.mkdir(parents=True, exist_ok=True)
        return path
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another thread
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        folder.chmod(PRIVATE_DIR_MODE)
    root = _app_root_of(path)
    if root is not None:
        for folder in (path, *path.parents):
            _tighten(folder)
            if folder == root or folder == folder.parent:
                break
    return path


def private_file_flags(append: bool = False) -> int:
    return os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)


def open_private(path: Path | str, append: bool = False) -> int:
    """A file descriptor for writing ``path``, created 0600 and kept 0600 (an older file with
    wider permissions is tightened)."""
    fd = os.open(path, private_file_flags(append), PRIVATE_FILE_MODE)
    if os.name == "posix":
        os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd


def write_private(path: Path | str, data: bytes) -> Path:
    """Write ``data`` atomically (temporary file + rename) as a 0600 file in a 0700 folder."""
    path = Path(path)
    private_dir(path.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def use_private_compile_caches(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Point torch.compile's caches (inductor, Triton) at 0700 folders under the app's cache
    instead of the shared ``/tmp/torchinductor_$USER``, which another local user can create
    first and fill with code; the person's own settings of these variables win. Call before
    torch is imported. Returns what was set."""
    env = os.environ if environ is None else environ
    applied: dict[str, str] = {}
    for name, folder in COMPILE_CACHE_ENV.items():
        if env.get(name, "").strip():
            continue
        try:
            env[name] = applied[name] = str(private_dir(cache_dir() / folder))
        except OSError:  # a read-only home: torch falls back to its default, with a warning
            continue
    return applied


def scratch_dir(prefix: str) -> Path:
    """A new private temporary folder, removed when the process exits.

    For commands whose objects read from their folder for as long as they live (a bench's tiny
    checkpoint, a voice cache), so a context manager cannot close it earlier; without this, each
    run left tens of MiB in the temp folder (36 soak runs filled 2 GiB on the CI machine)."""
    import atexit
    import shutil

    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
