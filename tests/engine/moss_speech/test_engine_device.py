"""The engine's decode step: which one runs and why, the fall-back when one cannot be built,
re-recording on the engine thread, and the CUDA paths (opt-in: need a GPU)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from app.engine.base import ReplyDone, UserTurn
from app.engine.moss_speech import decode_step
from app.engine.moss_speech.build import build_engine, load_parts, warm_up
from app.engine.moss_speech.decode_step import StaticStep
from app.engine.moss_speech.engine import MossSpeechEngine
from app.engine.moss_speech.kv_cache import KVCaches
from app.engine.moss_speech.model import MossSpeechModel
from tests.engine.moss_speech.engine_helpers import audio_of, question, settings_for, talk

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class ThreadBoundStaticStep(StaticStep):
    """The static step, marked as belonging to the thread that made it (as graphs do)."""

    thread_bound = True


def three_turns(engine: MossSpeechEngine) -> list[np.ndarray]:
    """A whole turn, one barged in on after half its audio (KV roll-back), and one more."""
    first = audio_of(talk(engine, 1, question(1.0, seed=1)))
    second = audio_of(talk(engine, 2, question(0.8, seed=2), heard_samples=len(first) // 2))
    return [first, second, audio_of(talk(engine, 3, question(0.6, seed=3)))]


def test_a_decode_step_that_cannot_be_built_falls_back_to_eager_with_its_reason(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def no_compiler(model: MossSpeechModel, caches: KVCaches) -> StaticStep:
        raise RuntimeError("inductor: no C++ compiler found")

    monkeypatch.setitem(decode_step.BUILDERS, "compile", no_compiler)
    caplog.set_level(logging.INFO)
    settings = settings_for(engine_folder)
    engine = MossSpeechEngine(load_parts(settings), settings, decode_path="compile")
    warm_up(engine)
    assert engine.decode_path == "eager" and engine.info.detail.endswith("decode step: eager")
    assert engine.session.decode.notes == [
        "compile failed: RuntimeError: inductor: no C++ compiler found"]
    assert "decode step on cpu: eager (compile failed" in caplog.text
    events = talk(engine, 1, question(1.0))
    assert isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0


def test_the_static_step_answers_exactly_like_eager_across_a_barge_in(
        engine_folder: Path) -> None:
    settings = settings_for(engine_folder)
    static = MossSpeechEngine(load_parts(settings), settings, decode_path="static")
    eager = MossSpeechEngine(load_parts(settings), settings)  # auto: eager on the CPU
    assert (static.decode_path, eager.decode_path) == ("static", "eager")
    assert eager.session.decode.notes[0].startswith("compile skipped: opt-in on the CPU")
    ours, theirs = three_turns(static), three_turns(eager)
    assert all(len(a) > 0 for a in ours) and len(ours[1]) > 0
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_prepare_records_a_thread_bound_step_again_on_the_engine_thread(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(decode_step.BUILDERS, "static", ThreadBoundStaticStep)
    settings = settings_for(engine_folder)
    engine = MossSpeechEngine(load_parts(settings), settings, decode_path="static")
    built_on = engine.session
    engine.prepare()  # same thread: nothing to do
    assert engine.session is built_on
    seen: dict[str, object] = {}

    def worker() -> None:
        engine.prepare()
        seen["thread"] = threading.get_ident()
        seen["decode"] = engine.session.decode
        seen["events"] = list(engine.respond(UserTurn(1, question(1.0)), threading.Event()))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(120)
    decode = seen["decode"]
    assert engine.session is not built_on and isinstance(decode.step, ThreadBoundStaticStep)
    assert decode.thread == seen["thread"] != threading.get_ident()
    events = seen["events"]
    assert isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("decode_path", ["auto", "graph"])
def test_on_cuda_the_engine_records_its_step_on_the_worker_and_answers(
        engine_folder: Path, decode_path: str) -> None:
    import os

    settings = settings_for(engine_folder, engine__device="cuda", engine__precision="bf16")
    engine = MossSpeechEngine(load_parts(settings), settings, decode_path=decode_path)
    warm_up(engine)
    assert engine.decode_path in (("compile", "graph") if decode_path == "auto" else ("graph",))
    assert engine.info.device.startswith("cuda") and not engine.info.warning
    from app.engine.moss_speech.device import expandable_segments_supported

    assert "expandable_segments" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or (
        torch.cuda.is_initialized()) or not expandable_segments_supported()
    built_on = engine.session.decode
    seen: dict[str, object] = {}

    def on_another_thread() -> None:  # as converse does: built here, used on the worker
        engine.prepare()  # records the graphs again on this thread
        seen["decode"] = engine.session.decode
        seen["audio"] = three_turns(engine)

    worker = threading.Thread(target=on_another_thread)
    worker.start()
    worker.join(300)
    decode = seen["decode"]
    assert decode is not built_on and decode.path == built_on.path  # type: ignore[union-attr]
    assert all(len(a) > 0 for a in seen["audio"])  # type: ignore[union-attr]
    engine.close()


@pytest.mark.gpu
@needs_cuda
def test_build_engine_on_cuda_names_its_decode_step(engine_folder: Path) -> None:
    engine = build_engine(settings_for(engine_folder, engine__device="cuda",
                                       engine__precision="bf16"))
    assert engine.decode_path in ("compile", "graph")
    assert engine.info.detail.endswith(f"decode step: {engine.decode_path}")
    engine.close()
