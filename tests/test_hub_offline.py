"""The bundle's Hugging Face offline flags block stray Hub requests, and the model manager's
downloads still work because each lifts them for its own call only."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import OfflineModeIsEnabled

from app import hub_offline, model_store
from app.model_store import REPOS
from tests.fake_hub import FakeHub, tiny_codec_files

CODEC = REPOS["codec"].repo_id


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state the runtime hook leaves: flags in the environment and huggingface_hub's switch
    (read at import, which happened before this test) on."""
    for name in hub_offline.OFFLINE_FLAGS:
        monkeypatch.delenv(name, raising=False)
    assert hub_offline.apply_offline_defaults() == hub_offline.OFFLINE_FLAGS
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({CODEC: tiny_codec_files()}) as fake:
        yield fake


def test_apply_offline_defaults_keeps_what_is_set() -> None:
    env = {"HF_HUB_OFFLINE": "0"}
    applied = hub_offline.apply_offline_defaults(env)
    assert env["HF_HUB_OFFLINE"] == "0" and "HF_HUB_OFFLINE" not in applied
    assert env["TRANSFORMERS_OFFLINE"] == "1"
    # As in huggingface_hub: a set HF_HUB_OFFLINE decides, else TRANSFORMERS_OFFLINE does.
    assert not hub_offline.offline_requested(env)
    assert hub_offline.offline_requested({"TRANSFORMERS_OFFLINE": "1"})
    assert hub_offline.offline_requested(hub_offline.apply_offline_defaults({}))


@pytest.mark.usefixtures("offline")
def test_offline_flags_block_a_stray_hub_request(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(Exception) as raised:
        snapshot_download(CODEC, local_dir=tmp_path / "codec", endpoint=hub.url, dry_run=True)
    assert isinstance(raised.value.__cause__, OfflineModeIsEnabled)
    assert hub.requests == []


@pytest.mark.usefixtures("offline")
def test_model_manager_downloads_while_the_app_is_offline(hub: FakeHub, tmp_path: Path) -> None:
    check = model_store.download("codec", tmp_path / "codec", lambda p: None, threading.Event(),
                                 endpoint=hub.url, retry_wait_s=0)
    assert check.ok, check.problems
    for name, data in tiny_codec_files().items():
        assert (tmp_path / "codec" / name).read_bytes() == data
    # Offline again afterwards, in the environment and in huggingface_hub.
    assert constants.HF_HUB_OFFLINE is True
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"


@pytest.mark.usefixtures("offline")
def test_hub_online_nests_across_threads_and_restores_once() -> None:
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_download() -> None:
        with hub_offline.hub_online():
            inside.set()
            release.wait(10)
            seen.append(constants.HF_HUB_OFFLINE)

    worker = threading.Thread(target=other_download)
    with hub_offline.hub_online():
        worker.start()
        assert inside.wait(10)
        assert "HF_HUB_OFFLINE" not in os.environ
    # This block ended, the worker's has not: still online for it.
    assert constants.HF_HUB_OFFLINE is False
    release.set()
    worker.join(10)
    assert seen == [False]
    assert constants.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"
