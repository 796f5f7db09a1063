"""Hugging Face offline mode: on for the whole app (source and bundle alike), lifted only for
the model manager's download threads, and never against the person's own HF_HUB_OFFLINE."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import OfflineModeIsEnabled

from app import hub_offline, model_store
from app.model_store import REPOS, ModelStoreError
from tests.fake_hub import FakeHub, tiny_codec_files

CODEC = REPOS["codec"].repo_id


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state start-up leaves: flags in the environment (marked as the app's) and
    huggingface_hub's switch (read at import, which happened before this test) on."""
    for name in (*hub_offline.OFFLINE_FLAGS, hub_offline.APPLIED_MARKER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)  # restored after
    assert hub_offline.apply_offline_defaults() == hub_offline.OFFLINE_FLAGS
    assert constants.is_offline_mode()


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({CODEC: tiny_codec_files()}) as fake:
        yield fake


def download_codec(hub: FakeHub, dest: Path, cancel: threading.Event | None = None,
                   **kwargs: object):
    return model_store.download("codec", dest, lambda p: None, cancel or threading.Event(),
                                endpoint=hub.url, retry_wait_s=0, **kwargs)  # type: ignore[arg-type]


def test_apply_offline_defaults_keeps_what_is_set() -> None:
    env = {"HF_HUB_OFFLINE": "0"}
    applied = hub_offline.apply_offline_defaults(env)
    assert env["HF_HUB_OFFLINE"] == "0" and "HF_HUB_OFFLINE" not in applied
    assert env["TRANSFORMERS_OFFLINE"] == "1"
    # As in huggingface_hub: a set HF_HUB_OFFLINE decides, else TRANSFORMERS_OFFLINE does.
    assert not hub_offline.offline_requested(env)
    assert hub_offline.offline_requested({"TRANSFORMERS_OFFLINE": "1"})
    assert hub_offline.offline_requested(hub_offline.apply_offline_defaults({}))


def test_the_persons_flags_are_told_apart_from_the_apps() -> None:
    ours = {}
    hub_offline.apply_offline_defaults(ours)
    assert hub_offline.user_offline_flag(ours) is None  # all set by the app
    assert hub_offline.apply_offline_defaults(ours) == {}  # a second call changes nothing
    assert hub_offline.user_offline_flag(ours) is None
    theirs = {"HF_HUB_OFFLINE": "1"}
    hub_offline.apply_offline_defaults(theirs)
    assert hub_offline.user_offline_flag(theirs) == "HF_HUB_OFFLINE=1"
    assert hub_offline.user_offline_flag({"TRANSFORMERS_OFFLINE": "yes"}) == \
        "TRANSFORMERS_OFFLINE=yes"
    assert hub_offline.user_offline_flag({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}) \
        is None  # their HF_HUB_OFFLINE=0 decides: online


def test_start_up_turns_source_runs_offline_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m app` (app.cli.main) calls the same start-up function as the bundle's hook."""
    from app.cli import main

    for name in (*hub_offline.OFFLINE_FLAGS, hub_offline.APPLIED_MARKER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(SystemExit):
        main(["--version"])
    assert all(os.environ[name] == value for name, value in hub_offline.OFFLINE_FLAGS.items())
    assert constants.is_offline_mode()  # huggingface_hub was imported already: switched too
    assert hub_offline.user_offline_flag() is None


@pytest.mark.usefixtures("offline")
def test_offline_flags_block_a_stray_hub_request(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(Exception) as raised:
        snapshot_download(CODEC, local_dir=tmp_path / "codec", endpoint=hub.url, dry_run=True)
    assert isinstance(raised.value.__cause__, OfflineModeIsEnabled)
    assert hub.requests == []


@pytest.mark.usefixtures("offline")
def test_model_manager_downloads_while_the_app_is_offline(hub: FakeHub, tmp_path: Path) -> None:
    check = download_codec(hub, tmp_path / "codec")
    assert check.ok, check.problems
    for name, data in tiny_codec_files().items():
        assert (tmp_path / "codec" / name).read_bytes() == data
    # Still offline afterwards, in the environment (never touched) and in huggingface_hub.
    assert constants.is_offline_mode()
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"


@pytest.mark.usefixtures("offline")
def test_only_the_download_goes_online(hub: FakeHub, tmp_path: Path) -> None:
    """While a download runs, another thread's Hub request is still refused, and the
    environment still says offline (child processes stay offline)."""
    hub.gate.clear()  # the download's first file body waits
    outcome: list[object] = []

    def work() -> None:
        try:
            outcome.append(download_codec(hub, tmp_path / "codec", max_workers=1))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert hub.get_started.wait(30)
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        seen = len(hub.log)
        with pytest.raises(Exception) as raised:
            snapshot_download(CODEC, local_dir=tmp_path / "stray", endpoint=hub.url,
                              dry_run=True)
        assert isinstance(raised.value.__cause__, OfflineModeIsEnabled)
        assert len(hub.log) == seen  # the stray call sent nothing
    finally:
        hub.gate.set()
        worker.join(60)
    assert getattr(outcome[0], "ok", False), outcome


def test_the_persons_hf_hub_offline_is_respected(hub: FakeHub, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set by the person, not by the app
    monkeypatch.delenv(hub_offline.APPLIED_MARKER, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub_offline.apply_offline_defaults()
    with pytest.raises(ModelStoreError, match="Downloads are off because HF_HUB_OFFLINE=1"):
        download_codec(hub, tmp_path / "codec")
    assert hub.requests == []
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.is_offline_mode()
    with pytest.raises(hub_offline.HubOfflineByUserError), hub_offline.hub_online():
        pass


@pytest.mark.usefixtures("offline")
def test_hub_online_is_per_thread_and_nests() -> None:
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_download() -> None:
        with hub_offline.hub_online():
            inside.set()
            release.wait(10)
            seen.append(bool(constants.is_offline_mode()))

    worker = threading.Thread(target=other_download)
    with hub_offline.hub_online():
        worker.start()
        assert inside.wait(10)
        with hub_offline.hub_online():
            assert not constants.is_offline_mode()
        assert not constants.is_offline_mode()
    assert constants.is_offline_mode()  # this thread's block ended; the worker's has not
    release.set()
    worker.join(10)
    assert seen == [False]
    assert constants.is_offline_mode() and os.environ["HF_HUB_OFFLINE"] == "1"
