"""Pinned revisions, SHA-256 checks recorded in the folder, resume, mirrors and tokens, against
the loopback fake Hub (tests/fake_hub.py)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import snapshot_download
from safetensors.numpy import save as save_safetensors

from app import folder_hashes, folder_integrity, hub_manifest, model_store
from app.model_store import (
    REPOS,
    CheckCancelledError,
    DownloadCancelledError,
    DownloadProgress,
    HashMismatchError,
    ModelStoreError,
)
from tests.fake_hub import OTHER_SHA, FakeHub, tiny_codec_files, tiny_model_files

MODEL, CODEC = REPOS["model"].repo_id, REPOS["codec"].repo_id
PINNED_MODEL, PINNED_CODEC = REPOS["model"].revision, REPOS["codec"].revision


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub({MODEL: tiny_model_files(), CODEC: tiny_codec_files()}) as fake:
        yield fake


def run_download(hub: FakeHub | None, kind: str, dest: Path, **kwargs: object):
    progress: list[DownloadProgress] = kwargs.pop("progress", [])  # type: ignore[assignment]
    cancel = kwargs.pop("cancel", threading.Event())
    endpoint = {"endpoint": hub.url} if hub is not None else {}
    return model_store.download(kind, dest, progress.append, cancel,  # type: ignore[arg-type]
                                retry_wait_s=0, **endpoint, **kwargs)  # type: ignore[arg-type]


def check_hashes(hub: FakeHub | None, kind: str, folder: Path, **kwargs: object):
    endpoint = {"endpoint": hub.url} if hub is not None else {}
    return folder_integrity.verify_hashes(kind, folder, lambda p: None,  # type: ignore[arg-type]
                                     threading.Event(), **endpoint, **kwargs)  # type: ignore[arg-type]


def other_model_files() -> dict[str, bytes]:
    """Another revision: same names, a weights file of another size."""
    files = tiny_model_files(seed=1)
    files["model.safetensors"] = save_safetensors({"extra": np.ones(4, np.float32)})
    return files


def flip_a_byte(path: Path, keep_mtime: bool) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    if keep_mtime:  # bit rot: the disk changed the bytes, nobody wrote the file
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_the_validated_revision_is_requested_even_when_main_moved(hub: FakeHub,
                                                                  tmp_path: Path) -> None:
    hub.add_revision(MODEL, OTHER_SHA, other_model_files(), main=True)
    assert run_download(hub, "model", tmp_path / "model").ok
    for name, data in tiny_model_files().items():  # the pinned files, not main's
        assert (tmp_path / "model" / name).read_bytes() == data
    paths = [r.path for r in hub.log]
    assert f"/api/models/{MODEL}/revision/{PINNED_MODEL}" in paths
    resolves = [p for p in paths if "/resolve/" in p]
    assert resolves and all(f"/resolve/{PINNED_MODEL}/" in p for p in resolves)
    assert not any(OTHER_SHA in p or "/main" in p for p in paths)


def test_hashes_are_recorded_and_reused(hub: FakeHub, tmp_path: Path) -> None:
    folder = tmp_path / "codec"
    assert run_download(hub, "codec", folder).ok
    state = folder_hashes.load_state(folder)
    assert state is not None and state.revision == PINNED_CODEC
    assert set(state.files) == set(tiny_codec_files())
    assert all(record.ok for record in state.files.values())
    assert state.files["flow/hift.pt"].expected == hub_manifest.load_cached(
        CODEC, PINNED_CODEC).file("flow/hift.pt").sha256  # type: ignore[union-attr]
    # A second download reads nothing and fetches nothing; a check without force reuses all.
    progress: list[DownloadProgress] = []
    gets = len(hub.file_gets())
    assert run_download(hub, "codec", folder, progress=progress).ok
    assert len(hub.file_gets()) == gets and progress == []
    report = check_hashes(hub, "codec", folder, force=False)
    assert report.ok and report.hashed_bytes == 0
    assert set(report.reused) == set(tiny_codec_files())
    # Forced, everything is read again.
    forced = check_hashes(hub, "codec", folder)
    assert forced.ok and forced.hashed_bytes == sum(len(v) for v in tiny_codec_files().values())


def test_the_manifest_is_kept_so_a_later_check_needs_no_network(hub: FakeHub,
                                                                tmp_path: Path) -> None:
    folder = tmp_path / "model"
    assert run_download(hub, "model", folder).ok
    api_calls = [r for r in hub.log if r.path.startswith("/api/")]
    assert len(api_calls) == 1 and "blobs=" in api_calls[0].query
    report = check_hashes(None, "model", folder, online=False)
    assert report.ok and len(report.matched) == len(tiny_model_files())
    assert len([r for r in hub.log if r.path.startswith("/api/")]) == 1


@pytest.mark.parametrize("keep_mtime", [True, False], ids=["bit-rot", "rewritten"])
def test_a_corrupted_byte_is_found_and_only_that_file_fetched_again(
        hub: FakeHub, tmp_path: Path, keep_mtime: bool) -> None:
    folder = tmp_path / "codec"
    assert run_download(hub, "codec", folder).ok
    flip_a_byte(folder / "flow" / "hift.pt", keep_mtime)
    report = check_hashes(hub, "codec", folder, force=keep_mtime)
    assert not report.ok and report.mismatched == ("flow/hift.pt",)
    assert "flow/hift.pt" in report.describe()
    assert "downloads just these files again" in report.describe()
    before = len(hub.file_gets())
    assert run_download(hub, "codec", folder).ok
    assert hub.fetched_names()[before:] == ["flow/hift.pt"]
    assert (folder / "flow" / "hift.pt").read_bytes() == tiny_codec_files()["flow/hift.pt"]
    assert check_hashes(hub, "codec", folder).ok


def test_bytes_damaged_in_transit_are_fetched_once_more_then_reported(
        hub: FakeHub, tmp_path: Path) -> None:
    hub.corrupt_next = {"model.safetensors": 1}
    assert run_download(hub, "model", tmp_path / "ok").ok
    assert hub.fetched_names().count("model.safetensors") == 2
    hub.corrupt_next = {"model.safetensors": 10}
    with pytest.raises(HashMismatchError, match=r"model\.safetensors") as raised:
        run_download(hub, "model", tmp_path / "bad")
    assert raised.value.files == ("model.safetensors",)
    assert "Retry" in str(raised.value)


def test_resume_after_cancel_fetches_only_what_is_left(hub: FakeHub, tmp_path: Path) -> None:
    folder = tmp_path / "codec"
    cancel = threading.Event()
    outcome: list[BaseException | None] = []
    hub.hold = {"flow/flow.pt"}  # files are fetched in name order: five come before it
    hub.gate.clear()

    def work() -> None:
        try:
            run_download(hub, "codec", folder, cancel=cancel, max_workers=1)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    assert hub.get_started.wait(30)
    cancel.set()
    hub.gate.set()
    worker.join(60)
    assert isinstance(outcome[0], DownloadCancelledError)
    first = hub.fetched_names()
    assert first == sorted(tiny_codec_files())[:6] and first[-1] == "flow/flow.pt"
    hub.hold = set()
    progress: list[DownloadProgress] = []
    assert run_download(hub, "codec", folder, progress=progress).ok
    again = hub.fetched_names()[len(first):]
    assert sorted(again) == sorted(set(tiny_codec_files()) - set(first[:-1]))
    # The five finished files were read back (hashed), not fetched again.
    verify = [p for p in progress if p.phase == "verify"]
    assert verify[0].bytes_total == sum(len(tiny_codec_files()[n]) for n in first[:-1])


def test_a_folder_of_another_revision_is_recognised(hub: FakeHub, tmp_path: Path) -> None:
    hub.add_revision(MODEL, OTHER_SHA, other_model_files(), main=True)
    old = tmp_path / "old"  # what a download of the moving branch made before this app pinned
    snapshot_download(MODEL, local_dir=old, endpoint=hub.url, token=False)
    finding = folder_hashes.recognise_revision(old, MODEL, PINNED_MODEL)
    assert finding.found == OTHER_SHA and finding.matches is False
    assert finding.source == "recorded by its download"
    assert f"made for revision {OTHER_SHA[:7]}" in finding.message()
    assert f"validated with {PINNED_MODEL[:7]}" in finding.message()
    # Copied by hand (nothing recorded): judged by file list and sizes against the manifest.
    copied = tmp_path / "copied"
    shutil.copytree(old, copied, ignore=shutil.ignore_patterns(".cache"))
    manifest = model_store.manifest(REPOS["model"], hub.url)
    by_sizes = folder_hashes.recognise_revision(copied, MODEL, PINNED_MODEL, manifest)
    assert by_sizes.matches is False and by_sizes.differing == ("model.safetensors",)
    assert "made for another revision" in by_sizes.message()
    # "Use it anyway" is remembered; "re-download" brings the validated revision.
    folder_hashes.accept_revision(old, MODEL, finding)
    assert folder_hashes.recognise_revision(old, MODEL, PINNED_MODEL).accepted
    assert "use it anyway" in folder_hashes.recognise_revision(
        old, MODEL, PINNED_MODEL).message()
    assert run_download(hub, "model", copied).ok
    fixed = folder_hashes.recognise_revision(copied, MODEL, PINNED_MODEL, manifest)
    assert fixed.matches is True and fixed.source == "verified by this app"


def test_a_chosen_folder_of_the_validated_revision_is_verified(hub: FakeHub,
                                                               tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    for name, data in tiny_codec_files().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    assert folder_hashes.recognise_revision(folder, CODEC, PINNED_CODEC).matches is None
    report = check_hashes(hub, "codec", folder)
    assert report.ok and len(report.matched) == len(tiny_codec_files())
    offline_folder = tmp_path / "offline"
    shutil.copytree(folder, offline_folder, ignore=shutil.ignore_patterns(".cache"))
    shutil.rmtree(hub_manifest.cache_path(CODEC, PINNED_CODEC).parent)
    with pytest.raises(ModelStoreError, match="not on this computer yet"):
        check_hashes(hub, "codec", offline_folder, online=False)


def test_a_check_can_be_cancelled(hub: FakeHub, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    assert run_download(hub, "model", folder).ok
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CheckCancelledError, match="check cancelled"):
        folder_integrity.verify_hashes("model", folder, lambda p: None, cancel, endpoint=hub.url)


def test_a_mirror_in_hf_endpoint_gets_the_same_pinning_and_checks(
        hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHub({CODEC: tiny_codec_files()}) as mirror:
        monkeypatch.setenv("HF_ENDPOINT", mirror.url)
        folder = tmp_path / "codec"
        assert run_download(None, "codec", folder).ok
        assert hub.log == []
        assert all(f"/resolve/{PINNED_CODEC}/" in p for p in mirror.file_gets())
        assert f"/api/models/{CODEC}/revision/{PINNED_CODEC}" in [r.path for r in mirror.log]
        flip_a_byte(folder / "flow" / "hift.pt", keep_mtime=True)
        assert check_hashes(None, "codec", folder).mismatched == ("flow/hift.pt",)
        mirror.revisions[CODEC][PINNED_CODEC]["flow/hift.pt"] = b"not the published bytes"
        hub_manifest.cache_path(CODEC, PINNED_CODEC).unlink()  # a mirror that lies on both
        mirror.corrupt_next = {"flow/hift.pt": 10}
        with pytest.raises(HashMismatchError, match=f"{mirror.url} publishes"):
            run_download(None, "codec", folder)


def test_no_credentials_are_sent_unless_asked(hub: FakeHub, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_for_a_mirror")
    assert run_download(hub, "codec", tmp_path / "codec").ok
    assert hub.log and not any("authorization" in r.headers for r in hub.log)
    hub.log.clear()
    hub_manifest.cache_path(CODEC, PINNED_CODEC).unlink()
    assert run_download(hub, "codec", tmp_path / "again", use_token=True).ok
    assert hub.log and all(r.headers.get("authorization") == "Bearer hf_not_for_a_mirror"
                           for r in hub.log)


def test_a_revision_the_hub_no_longer_has_is_explained(hub: FakeHub, tmp_path: Path) -> None:
    del hub.revisions[MODEL][PINNED_MODEL]
    hub.add_revision(MODEL, OTHER_SHA, other_model_files(), main=True)
    with pytest.raises(ModelStoreError, match=f"does not have revision {PINNED_MODEL[:7]}"):
        run_download(hub, "model", tmp_path / "model")
    assert hub.file_gets() == []


def test_doctor_shows_revisions_and_verifies_hashes_on_demand(
        hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main
    from app.settings import Settings
    from app.settings_store import save_settings

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    model, codec = tmp_path / "model", tmp_path / "codec"
    assert run_download(hub, "model", model).ok and run_download(hub, "codec", codec).ok
    save_settings(Settings().with_values({"engine.model_dir": model, "engine.codec_dir": codec}))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"Revision {PINNED_MODEL[:7]} (the one this app is validated with)" in out
    assert "SHA-256: 3 files verified against revision" in out
    flip_a_byte(codec / "flow" / "hift.pt", keep_mtime=True)
    assert main(["doctor"]) == 0  # without the option nothing is read again
    assert "hift.pt" not in capsys.readouterr().out
    assert main(["doctor", "--verify-hashes"]) == 1
    out = capsys.readouterr().out
    assert "-- SHA-256 check of the codec folder: flow/hift.pt: the bytes differ" in out
    assert "ok SHA-256 check of the model folder" in out
    assert "flow/hift.pt did not match revision" in out  # recorded for the summary too
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["models"]["codec"]["hashes"]["mismatched"] == ["flow/hift.pt"]
    assert report["models"]["model"]["revision"]["matches"] is True
    assert report["models"]["codec"]["validated_revision"] == PINNED_CODEC


def test_partial_files_left_by_a_killed_download_are_removed(hub: FakeHub,
                                                             tmp_path: Path) -> None:
    folder = tmp_path / "model"
    partials = folder / ".cache" / "huggingface" / "download"
    partials.mkdir(parents=True)
    old, fresh = partials / "abc.1234abcd.incomplete", partials / "def.5678abcd.incomplete"
    old.write_bytes(bytes(1000))
    fresh.write_bytes(bytes(10))  # maybe another process's download, still running
    os.utime(old, (0, 0))
    assert run_download(hub, "model", folder).ok
    assert not old.exists() and fresh.exists()


def test_a_dropped_connection_resumes_with_a_range_request(hub: FakeHub, tmp_path: Path) -> None:
    """Within one attempt huggingface_hub asks for the rest of the file (Range); the result is
    still checked against the published SHA-256."""
    big = {**tiny_model_files(), "model.safetensors": bytes(range(256)) * 96_000}  # 24.6 MB
    hub.revisions[MODEL][PINNED_MODEL] = big  # (not loadable: only the bytes matter here)
    hub.drop_next = {"model.safetensors": 1}  # cut after 12 MB, past huggingface_hub's 10 MB chunk
    run_download(hub, "model", tmp_path / "model", max_workers=1)
    ranged = [r for r in hub.log if r.method == "GET" and "range" in r.headers]
    assert len(ranged) == 1 and ranged[0].headers["range"].startswith("bytes=10485760-")
    assert (tmp_path / "model" / "model.safetensors").read_bytes() == big["model.safetensors"]
    state = folder_hashes.load_state(tmp_path / "model")
    assert state is not None and state.files["model.safetensors"].ok


def test_records_of_a_failed_check_do_not_claim_the_validated_revision(
        hub: FakeHub, tmp_path: Path) -> None:
    """Checking another revision's folder records mismatches against the validated revision;
    that must not make the folder look like the validated revision afterwards."""
    hub.add_revision(MODEL, OTHER_SHA, other_model_files(), main=True)
    folder = tmp_path / "copied"
    snapshot_download(MODEL, local_dir=tmp_path / "old", endpoint=hub.url, token=False)
    shutil.copytree(tmp_path / "old", folder, ignore=shutil.ignore_patterns(".cache"))
    report = check_hashes(hub, "model", folder)
    assert not report.ok
    finding = folder_hashes.recognise_revision(folder, MODEL, PINNED_MODEL,
                                               hub_manifest.load_cached(MODEL, PINNED_MODEL))
    assert finding.matches is False and finding.source == "judged by its file list and sizes"


@pytest.mark.parametrize("content", [b"[" * 100_000 + b"]" * 100_000, b" " * (2 << 20)],
                         ids=["deeply-nested", "too-big"])
def test_a_hostile_hash_record_is_ignored(hub: FakeHub, tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "codec"
    assert run_download(hub, "codec", folder).ok
    (folder / folder_hashes.STATE_FILE).write_bytes(content)
    assert folder_hashes.load_state(folder) is None
    gets = len(hub.file_gets())
    assert run_download(hub, "codec", folder).ok  # read back, nothing fetched
    assert len(hub.file_gets()) == gets
    assert folder_hashes.load_state(folder) is not None


def test_a_folder_in_the_hugging_face_cache_is_recognised_and_left_clean(
        hub: FakeHub, tmp_path: Path) -> None:
    cache = tmp_path / "hf-cache"
    snapshot = Path(snapshot_download(CODEC, revision=PINNED_CODEC, cache_dir=cache,
                                      endpoint=hub.url, token=False))
    assert snapshot.name == PINNED_CODEC
    finding = folder_hashes.recognise_revision(snapshot, CODEC, PINNED_CODEC)
    assert finding.matches is True and finding.source == "its Hub cache folder's name"
    assert check_hashes(hub, "codec", snapshot).ok
    assert not (snapshot / ".cache").exists()  # the record went to the app's cache
    assert folder_hashes.load_state(snapshot) is not None
