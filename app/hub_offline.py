"""Hugging Face offline mode for the whole app, lifted only inside the model manager's downloads.

:func:`apply_offline_defaults` runs at start-up from source (``app.cli.main``) and in the bundle
(its runtime hook, packaging/hooks/rth_moss_voice.py, and then ``app.cli.main`` again), so both
behave the same: no library reaches the network by accident (a tokenizer or config lookup that
would otherwise ask the Hub). A flag the person set themselves is kept, and remembered as theirs.

The model manager is the one place that may go online, on an explicit click: its Hub calls run
inside :func:`hub_online`, which lifts offline mode **for the calling thread only**. The
environment is never changed (child processes and other threads stay offline), and when the
person set ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) themselves, :func:`hub_online` refuses
with :class:`HubOfflineByUserError` instead of overriding them.

huggingface_hub reads the flags once, at import, into ``constants.HF_HUB_OFFLINE`` and tests
that attribute's truth before every request (``constants.is_offline_mode()``); we put a
:class:`ScopedOfflineSwitch` there, whose truth depends on the asking thread.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

# Flags the app sets unless the person set them already (their value wins).
OFFLINE_FLAGS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
# The two that huggingface_hub reads for its offline switch (the first one set decides).
HUB_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
# Names of the flags this app set (comma-separated), so a person's own flag is told apart from
# ours, in this process and in its children.
APPLIED_MARKER = "MOSS_VOICE_OFFLINE_DEFAULTS"
_TRUE = {"1", "ON", "YES", "TRUE"}

_scope = threading.local()  # .depth: how many hub_online blocks this thread is inside
_install_lock = threading.Lock()


class HubOfflineByUserError(RuntimeError):
    """The person turned Hugging Face offline themselves; downloads respect that."""


def apply_offline_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each offline flag that is not set yet; returns the flags this call set.

    The one start-up function for source runs and the bundle. Called again it changes nothing.
    On the process environment it also updates huggingface_hub's switch if that was imported
    already (it reads the environment only at import).
    """
    env = os.environ if environ is None else environ
    applied = {}
    for name, value in OFFLINE_FLAGS.items():
        if name not in env:
            env[name] = value
            applied[name] = value
    if applied:
        ours = set(_applied_names(env)) | set(applied)
        env[APPLIED_MARKER] = ",".join(sorted(ours))
    if environ is None:
        sync_hub_switch()
    return applied


def _applied_names(env: MutableMapping[str, str]) -> list[str]:
    return [name for name in env.get(APPLIED_MARKER, "").split(",") if name]


def _switch_value(values: MutableMapping[str, str]) -> bool | None:
    """As huggingface_hub decides: the first switch set (non-empty) wins; None if neither is."""
    for name in HUB_SWITCHES:
        value = values.get(name, "")
        if value:
            return value.strip().upper() in _TRUE
    return None


def offline_requested(environ: MutableMapping[str, str] | None = None) -> bool:
    """What huggingface_hub makes of the environment: offline when the deciding switch is true."""
    env = os.environ if environ is None else environ
    return bool(_switch_value(env))


def person_switches(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The Hub switches set by the person (or their scripts), not by this app."""
    env = os.environ if environ is None else environ
    ours = set(_applied_names(env))
    return {name: env[name] for name in HUB_SWITCHES if name in env and name not in ours}


def user_offline_flag(environ: MutableMapping[str, str] | None = None) -> str | None:
    """``"HF_HUB_OFFLINE=1"`` (say) when the person, not this app, turned the Hub offline."""
    theirs = person_switches(environ)
    if not _switch_value(theirs):
        return None
    name = next(n for n in HUB_SWITCHES if theirs.get(n))
    return f"{name}={theirs[name]}"


def downloads_blocked_message(flag: str) -> str:
    return (f"Downloads are off because {flag} is set in the environment this app was started "
            "from (you, or a script, set it; the app never sets it for you to keep). Unset it, "
            "or set it to 0, and start the app again; or choose folders you already have.")


class ScopedOfflineSwitch:
    """huggingface_hub's ``HF_HUB_OFFLINE``: true (offline) except in threads inside
    :func:`hub_online`. Only its truth is ever asked for."""

    def __init__(self, offline: bool) -> None:
        self.offline = bool(offline)

    def __bool__(self) -> bool:
        return self.offline and getattr(_scope, "depth", 0) == 0

    def __repr__(self) -> str:
        return f"ScopedOfflineSwitch(offline={self.offline}, this thread={bool(self)})"


def sync_hub_switch() -> None:
    """Make huggingface_hub's switch follow the environment now (if it is imported)."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        with _install_lock:
            constants.HF_HUB_OFFLINE = ScopedOfflineSwitch(offline_requested())  # type: ignore[attr-defined]


def _installed_switch() -> ScopedOfflineSwitch:
    from huggingface_hub import constants  # reads the flags at first import

    with _install_lock:
        current: object = constants.HF_HUB_OFFLINE
        if isinstance(current, ScopedOfflineSwitch):
            return current
        switch = ScopedOfflineSwitch(bool(current))
        setattr(constants, "HF_HUB_OFFLINE", switch)  # noqa: B010 (typed bool; only its truth is used)
        return switch


def hub_is_offline() -> bool:
    """huggingface_hub's offline switch as the calling thread sees it."""
    return bool(_installed_switch())


@contextmanager
def hub_online() -> Iterator[None]:
    """Allow Hub requests from this thread inside the block (nestable); other threads, child
    processes and the environment stay as they were.

    Raises :class:`HubOfflineByUserError` when the person set the offline flag themselves.
    """
    flag = user_offline_flag()
    if flag:
        raise HubOfflineByUserError(downloads_blocked_message(flag))
    _installed_switch()
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1
