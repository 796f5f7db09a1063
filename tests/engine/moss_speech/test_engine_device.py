"""The engine's compiled decode step: the fall-back when compiling fails, and the CUDA path
(opt-in: needs a GPU)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from app.engine.base import ReplyDone, UserTurn
from app.engine.moss_speech import generate
from app.engine.moss_speech.build import build_engine, load_parts, warm_up
from app.engine.moss_speech.engine import MossSpeechEngine
from tests.engine.moss_speech.engine_helpers import audio_of, question, settings_for, talk

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_decode_step_that_fails_to_compile_falls_back_to_eager(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken_compiler(model):
        def step(*args, **kwargs):
            raise RuntimeError("inductor: no C++ compiler found")
        return step

    monkeypatch.setattr(generate, "_compile_decode", broken_compiler)
    settings = settings_for(engine_folder)
    engine = MossSpeechEngine(load_parts(settings), settings, compile=True)
    warm_up(engine)
    assert engine.compile is False and "using the eager step" in caplog.text
    events = talk(engine, 1, question(1.0))
    assert isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0


@pytest.mark.gpu
@needs_cuda
def test_on_cuda_the_engine_compiles_at_load_and_answers(engine_folder: Path) -> None:
    import os

    engine = build_engine(settings_for(engine_folder, engine__device="cuda",
                                       engine__precision="bf16"))
    assert engine.compile and engine.info.device.startswith("cuda") and not engine.info.warning
    assert "expandable_segments" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") or (
        torch.cuda.is_initialized())
    pcm = question(1.0)
    events: list = []

    def on_another_thread() -> None:  # as converse does: built here, used on the worker
        engine.prepare()  # records the CUDA graphs again on this thread
        events.extend(engine.respond(UserTurn(1, pcm), threading.Event()))

    worker = threading.Thread(target=on_another_thread)
    worker.start()
    worker.join(300)
    assert engine.compile and isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0
    engine.close()
