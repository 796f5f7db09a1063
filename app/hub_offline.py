"""Hugging Face offline mode for the installed app, lifted only for the model manager's downloads.

The bundle's runtime hook (packaging/hooks/rth_moss_voice.py) calls :func:`apply_offline_defaults`
before anything else runs, so no library can reach the network by accident (a tokenizer or
config lookup that would otherwise ask the Hub). The model manager is the one place that may go
online, on an explicit click: :mod:`app.model_store` wraps its Hub calls in :func:`hub_online`.

huggingface_hub reads ``HF_HUB_OFFLINE`` once, at import, into ``constants.HF_HUB_OFFLINE`` and
checks that attribute before every request, so both the environment (for a first import inside
the block) and the attribute (for an earlier import) are switched.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

# Flags the bundle sets unless the person set them already (their value wins).
OFFLINE_FLAGS: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
# The two that huggingface_hub reads for its offline switch (either one turns it on).
HUB_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TRUE = {"1", "ON", "YES", "TRUE"}

_lock = threading.Lock()
_online_users = 0
_saved_env: dict[str, str | None] = {}
_saved_switch = [False]  # huggingface_hub's switch as it was before the first block


def apply_offline_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each offline flag that is not set yet; returns the flags this call set."""
    env = os.environ if environ is None else environ
    applied = {}
    for name, value in OFFLINE_FLAGS.items():
        if name not in env:
            env[name] = value
            applied[name] = value
    return applied


def offline_requested(environ: MutableMapping[str, str] | None = None) -> bool:
    """What huggingface_hub makes of the environment: offline when either switch is true."""
    env = os.environ if environ is None else environ
    value = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in _TRUE


@contextmanager
def hub_online() -> Iterator[None]:
    """Allow Hub requests inside the block (thread-safe, nestable); the offline state as it was
    comes back when the last block ends."""
    global _online_users
    with _lock:
        if _online_users == 0:
            from huggingface_hub import constants  # imported while the flags still hold

            _saved_switch[0] = constants.HF_HUB_OFFLINE
            _saved_env.clear()
            _saved_env.update({name: os.environ.pop(name, None) for name in HUB_SWITCHES})
            constants.HF_HUB_OFFLINE = False
        _online_users += 1
    try:
        yield
    finally:
        with _lock:
            _online_users -= 1
            if _online_users == 0:
                from huggingface_hub import constants

                for name, value in _saved_env.items():
                    if value is not None:
                        os.environ[name] = value
                constants.HF_HUB_OFFLINE = _saved_switch[0]
