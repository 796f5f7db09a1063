"""model_store against a loopback fake of the Hub's HTTP API (no internet)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import model_store
from app.model_store import (
    REPOS,
    DownloadCancelledError,
    DownloadProgress,
    ModelStoreError,
    NotEnoughDiskSpaceError,
    ProgressTracker,
)
from tests.fake_hub import FakeHub, tiny_codec_files, tiny_model_files

MODEL, CODEC = REPOS["model"].repo_id, REPOS["codec"].repo_id


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({MODEL: tiny_model_files(), CODEC: tiny_codec_files()}) as fake:
        yield fake


def run_download(hub: FakeHub, kind: str, dest: Path, cancel: threading.Event | None = None,
                 progress: list[DownloadProgress] | None = None, **kwargs: object):
    sink = progress if progress is not None else []
    return model_store.download(kind, dest, sink.append, cancel or threading.Event(),  # type: ignore[arg-type]
                                endpoint=hub.url, retry_wait_s=0, **kwargs)


def test_plan_lists_every_file_with_its_size(hub: FakeHub, tmp_path: Path) -> None:
    plan = model_store.plan_download(REPOS["codec"], tmp_path / "codec", hub.url)
    files = tiny_codec_files()
    assert {f.name: f.size_bytes for f in plan.files} == {k: len(v) for k, v in files.items()}
    assert plan.missing_bytes == plan.total_bytes == sum(len(v) for v in files.values())


def test_download_reports_progress_and_verifies(hub: FakeHub, tmp_path: Path) -> None:
    progress: list[DownloadProgress] = []
    check = run_download(hub, "model", tmp_path / "model", progress=progress)
    assert check.ok, check.problems
    total = sum(len(v) for v in tiny_model_files().values())
    # First the bytes come, then they are read back for their hashes: each phase 0 → total.
    assert [p.phase for p in progress] == sorted((p.phase for p in progress),
                                                 key=["download", "verify"].index)
    for phase in ("download", "verify"):
        seen = [p for p in progress if p.phase == phase]
        assert seen[0].bytes_done == 0 and seen[0].bytes_total == total
        assert seen[-1].bytes_done == total and seen[-1].fraction == 1.0
        done = [p.bytes_done for p in seen]
        assert done == sorted(done)
    for name, data in tiny_model_files().items():
        assert (tmp_path / "model" / name).read_bytes() == data
    # A second run has nothing left to fetch.
    assert model_store.plan_download(REPOS["model"], tmp_path / "model", hub.url).missing_bytes == 0
    assert run_download(hub, "codec", tmp_path / "codec").ok


def test_disk_space_is_checked_before_anything_is_fetched(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(NotEnoughDiskSpaceError, match="Not enough disk space"):
        run_download(hub, "model", tmp_path / "model", free_bytes=lambda _path: 1000)
    assert hub.file_gets() == []
    assert not (tmp_path / "model" / "model.safetensors").exists()


def test_cancel_stops_a_running_download(hub: FakeHub, tmp_path: Path) -> None:
    cancel = threading.Event()
    outcome: list[BaseException | None] = []

    def work() -> None:
        try:
            run_download(hub, "model", tmp_path / "model", cancel=cancel, max_workers=1)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    hub.gate.clear()  # the first file body waits until the test has pressed cancel
    worker = threading.Thread(target=work)
    worker.start()
    assert hub.get_started.wait(30)
    cancel.set()
    hub.gate.set()
    worker.join(60)
    assert isinstance(outcome[0], DownloadCancelledError)
    assert "Retry" in str(outcome[0])
    assert not any((tmp_path / "model" / name).exists() for name in tiny_model_files())


def test_retry_keeps_finished_files_and_fetches_only_the_rest(
        hub: FakeHub, tmp_path: Path) -> None:
    hub.broken_files = {"flow/hift.pt"}
    with pytest.raises(ModelStoreError, match="Retry"):
        run_download(hub, "codec", tmp_path / "codec", retries=1)
    kept = [n for n in tiny_codec_files() if (tmp_path / "codec" / n).is_file()]
    assert len(kept) == len(tiny_codec_files()) - 1 and "flow/hift.pt" not in kept
    hub.broken_files = set()
    gets_before = len(hub.file_gets())
    assert run_download(hub, "codec", tmp_path / "codec").ok
    assert [p.rsplit("/", 2)[-2:] for p in hub.file_gets()[gets_before:]] == [["flow", "hift.pt"]]


def test_server_errors_are_retried(hub: FakeHub, tmp_path: Path) -> None:
    hub.fail_next_gets = 1
    progress: list[DownloadProgress] = []
    assert run_download(hub, "model", tmp_path / "model", progress=progress).ok
    assert progress[-1].attempt == 2
    assert len(hub.file_gets()) == len(tiny_model_files()) + 1


def test_giving_up_after_the_retries_says_what_to_do(hub: FakeHub, tmp_path: Path) -> None:
    hub.fail_next_gets = 100
    with pytest.raises(ModelStoreError, match="Retry"):
        run_download(hub, "model", tmp_path / "model", retries=2)


def test_unknown_repo_and_no_network_are_explained(tmp_path: Path, hub: FakeHub) -> None:
    with FakeHub({}) as empty, pytest.raises(ModelStoreError, match="not found"):
        model_store.download("model", tmp_path / "m", lambda _p: None, threading.Event(),
                             endpoint=empty.url)
    with pytest.raises(ModelStoreError, match="Cannot reach Hugging Face"):
        model_store.download("model", tmp_path / "m", lambda _p: None, threading.Event(),
                             endpoint="http://127.0.0.1:9")


def test_progress_tracker_speed_and_eta_on_a_virtual_clock() -> None:
    now = [0.0]
    seen: list[DownloadProgress] = []
    tracker = ProgressTracker("repo", 10_000, seen.append, threading.Event(), lambda: now[0],
                              min_interval_s=0.0)
    for _ in range(4):
        tracker.add_bytes(1000)
        now[0] += 1.0
    assert seen[-1].bytes_done == 4000
    assert seen[-1].speed_bytes_per_s == pytest.approx(1000.0)
    assert seen[-1].eta_s == pytest.approx(6.0)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DownloadCancelledError):
        ProgressTracker("repo", 1, seen.append, cancel).add_bytes(1)


def test_formatting() -> None:
    assert model_store.format_bytes(512) == "512 B"
    assert model_store.format_bytes(3 * 1024**3) == "3.0 GiB"
    assert model_store.format_duration(None) == "–"
    assert model_store.format_duration(75) == "1 min 15 s"
    assert model_store.format_duration(3700) == "1 h 01 min"
    assert model_store.default_destination("codec").name == "MOSS-Speech-Codec"
