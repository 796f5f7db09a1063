"""Hub and network errors in words, each with what to do next (no Qt, no Hub import at load)."""

from __future__ import annotations

import os
from typing import Protocol

from app.hub_manifest import ManifestError, short
from app.hub_offline import HubOfflineByUserError


class RepoLike(Protocol):
    @property
    def repo_id(self) -> str: ...

    @property
    def revision(self) -> str: ...


def is_transient(exc: BaseException) -> bool:
    """Network drops, timeouts and server errors are worth a retry; 4xx and disk errors are not."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return status is None or status >= 500 or status == 429
    name = type(exc).__name__
    transient_names = ("ConnectError", "TimeoutException", "ReadTimeout", "ConnectTimeout",
                       "RemoteProtocolError", "ReadError", "NetworkError", "WriteError")
    return name in transient_names or any(t in name for t in ("Timeout", "Connect"))


def describe_hub_error(spec: RepoLike, exc: BaseException, revision: str | None = None) -> str:
    """What went wrong, in words, with what to do next."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, HubOfflineByUserError | ManifestError):
        return str(exc)
    revision = short(revision or spec.revision)
    where = os.environ.get("HF_ENDPOINT", "").strip() or "Hugging Face"
    detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if isinstance(exc, GatedRepoError):
        return (f"{spec.repo_id} needs a Hugging Face login with access to it. Log in with "
                "`hf auth login`, turn on Downloads › Send Hugging Face token in the settings, "
                f"then press Retry. ({detail})")
    if isinstance(exc, RevisionNotFoundError):
        return (f"{where} does not have revision {revision} of {spec.repo_id}, the one this app "
                "is validated with (it may have been removed, or a mirror may not carry it). "
                f"Choose a folder you already have, or use another mirror. ({detail})")
    if isinstance(exc, RepositoryNotFoundError):
        return (f"{spec.repo_id} was not found on {where} (or needs a login). Check the network, "
                f"or choose a folder you already have. ({detail})")
    if isinstance(exc, OfflineModeIsEnabled):
        return (f"Hugging Face is in offline mode in this process, so {spec.repo_id} cannot be "
                f"downloaded. ({detail})")
    if isinstance(exc, LocalEntryNotFoundError) or is_transient(exc):
        return (f"Cannot reach {where} to download {spec.repo_id}. Check the internet "
                f"connection and press Retry, or choose a folder you already have. ({detail})")
    if isinstance(exc, OSError):
        return (f"Writing {spec.repo_id} to disk failed: {detail}. Check the folder's "
                "permissions and free space, then press Retry.")
    return f"Downloading {spec.repo_id} failed: {detail}. Press Retry."
