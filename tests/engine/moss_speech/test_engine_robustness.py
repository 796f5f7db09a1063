"""The MOSS-Speech engine when things go wrong or go on for long: failed turns, out of memory,
bad settings and folders, devices, the context bound over many turns, memory over a soak."""

from __future__ import annotations

import gc
import shutil
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from app.conversation.clock import WallClock
from app.conversation.engine_worker import EngineWorker, WorkerEvent
from app.engine.base import ReplyAudio, ReplyDone, ReplyFailed, UserTurn
from app.engine.factory import EngineUnavailableError, build_engine
from app.engine.moss_speech import device as dev
from app.engine.moss_speech.parts import EngineInputError
from app.engine.moss_speech.testing import tiny_engine_reply, write_tiny_voice
from app.engine.preflight import GIB
from tests.engine.moss_speech.engine_helpers import (
    audio_of,
    make_engine,
    question,
    respond,
    settings_for,
    talk,
)


class Replies:
    """Worker events, with a way to wait for the end of each reply."""

    def __init__(self) -> None:
        self.events: list[WorkerEvent] = []
        self.ended = threading.Semaphore(0)

    def __call__(self, item: WorkerEvent) -> None:
        self.events.append(item)
        if isinstance(item.event, ReplyDone | ReplyFailed):
            self.ended.release()

    def wait(self) -> None:
        assert self.ended.acquire(timeout=60), "the reply did not end"

    def of(self, seq: int) -> list:
        return [e.event for e in self.events if e.seq == seq]


def run_turns_on_the_worker(engine, turns: int) -> Replies:
    replies = Replies()
    worker = EngineWorker(engine, WallClock(), replies)
    worker.start()
    try:
        for seq in range(1, turns + 1):
            pcm = question(1.0, seed=seq)
            worker.feed(seq, pcm)
            worker.respond(UserTurn(seq, pcm), seq)
            replies.wait()
            heard = sum(len(e.pcm) for e in replies.of(seq) if isinstance(e, ReplyAudio))
            worker.heard(seq, heard, 24000)
    finally:
        worker.stop()
    return replies


def test_an_engine_exception_mid_reply_fails_the_turn_and_the_next_turn_works(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(engine_folder)
    real_decoder = engine.codec.stream_decoder
    calls = []

    def decoder_that_breaks_once(*args, **kwargs):
        decoder = real_decoder(*args, **kwargs)
        if not calls:
            calls.append(1)
            decoder.push = lambda codes: (_ for _ in ()).throw(RuntimeError("flow exploded"))
        return decoder

    monkeypatch.setattr(engine.codec, "stream_decoder", decoder_that_breaks_once)
    replies = run_turns_on_the_worker(engine, 2)
    failed = replies.of(1)[-1]
    assert isinstance(failed, ReplyFailed) and failed.category == "engine"
    assert "flow exploded" in failed.message and failed.advice
    assert isinstance(replies.of(2)[-1], ReplyDone)
    assert any(isinstance(e, ReplyAudio) for e in replies.of(2))
    assert [len(x.user.content) > 0 for x in engine.memory.exchanges] == [True]  # turn 2 only


def test_out_of_memory_in_a_turn_is_reported_with_advice_and_the_next_turn_works(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(engine_folder)
    real_forward = engine.model.forward_rows
    state = {"armed": True}

    def forward_out_of_memory(*args, **kwargs):
        if state["armed"] and args[0].shape[1] == 1:  # a decode step, mid-reply
            state["armed"] = False
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(*args, **kwargs)

    state["armed"] = False
    monkeypatch.setattr(engine.model, "forward_rows", forward_out_of_memory)
    talk(engine, 1, question(1.0, seed=1))  # a turn in history before the failure
    history_before = engine.memory.history_rows()
    state["armed"] = True
    events = respond(engine, UserTurn(2, question(1.0, seed=2)))
    failed = events[-1]
    assert isinstance(failed, ReplyFailed) and failed.category == "out_of_memory"
    assert "out of memory" in failed.message and "conversation so far is kept" in failed.advice
    assert engine.codec.cache_nbytes() == 0  # the codec's state was released
    engine.reply_heard(2, 0, 24000)  # the voice loop still reports the failed reply
    assert engine.memory.history_rows() == history_before  # kept, and nothing half-added
    events = talk(engine, 3, question(1.0, seed=3))
    assert isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0
    assert len(engine.memory.exchanges) == 2


@pytest.mark.slow
def test_the_context_bound_holds_over_50_turns_and_the_unchanged_prefix_is_reused(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder, engine__context_max_rows=256,
                         engine__system_prompt="Be brief.", sampling__max_new_rows=12,
                         transcript__text_branch=False)
    system_rows = engine.memory.history_rows()
    reused_fully = 0
    for turn_id in range(1, 51):
        before = engine.memory.history_rows()
        dropped_before = engine.memory.dropped
        talk(engine, turn_id, question(0.8, seed=turn_id))
        stat = engine.last_prefill
        assert len(engine.session.history) <= engine.capacity == 256
        assert engine.memory.history_rows()[:len(system_rows)] == system_rows
        assert engine.session.history == engine.memory.history_rows()
        if engine.memory.dropped == dropped_before:
            reused_fully += 1  # nothing left the context: the old history was not recomputed
            assert stat.reused_rows >= len(before)
    assert engine.memory.dropped >= 20  # the oldest turns did leave the context...
    assert 0 < len(engine.memory.exchanges) <= 6
    assert reused_fully >= 25  # ...in batches, so most turns reuse the whole cached prefix


def test_a_turn_that_cannot_fit_the_context_fails_with_advice(engine_folder: Path) -> None:
    engine = make_engine(engine_folder, engine__context_max_rows=256,
                         sampling__max_new_rows=200)
    events = respond(engine, UserTurn(1, question(3.0)))
    failed = events[-1]
    assert isinstance(failed, ReplyFailed) and failed.category == "input"
    assert "256" in failed.message and "Context max rows" in failed.advice


def test_the_voice_prompt_is_required_for_speech_and_checked(engine_folder: Path,
                                                              tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailableError) as missing:
        build_engine(settings_for(engine_folder, engine__voice_prompt=None))
    assert missing.value.category == "voice_prompt" and "Voice prompt" in missing.value.action
    not_audio = tmp_path / "voice.wav"
    not_audio.write_text("not audio")
    with pytest.raises(EngineUnavailableError) as bad:
        build_engine(settings_for(engine_folder, engine__voice_prompt=str(not_audio)))
    assert bad.value.category == "voice_prompt" and "voice.wav" in str(bad.value)


def test_a_new_voice_applies_live_and_a_bad_one_is_refused_keeping_the_old(
        engine_folder: Path, tmp_path: Path) -> None:
    settings = settings_for(engine_folder)
    engine = build_engine(settings)
    old_voice = engine.voice
    other = write_tiny_voice(tmp_path / "other.wav", seconds=1.5)
    engine.apply_settings(settings.with_value("engine.voice_prompt", other))
    assert engine.voice is not old_voice and engine.voice.source == "other.wav"
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF")
    with pytest.raises(EngineInputError) as refused:
        engine.apply_settings(settings.with_value("engine.voice_prompt", broken)
                              .with_value("sampling.temperature", 1.5))
    assert refused.value.category == "voice_prompt"
    assert engine.voice.source == "other.wav" and engine.sampling.temperature == 0.6


def test_sampling_prompt_modality_and_context_apply_live(engine_folder: Path) -> None:
    settings = settings_for(engine_folder)
    engine = build_engine(settings)
    talk(engine, 1, question(1.0))
    changed = (settings.with_value("sampling.top_k", 5)
               .with_value("engine.system_prompt", "Answer like a pirate.")
               .with_value("engine.context_max_rows", 512)
               .with_value("streaming.chunk_codes", 25)
               .with_value("sampling.max_new_rows", 40))
    engine.apply_settings(changed)
    assert engine.sampling.top_k == 5 and engine.capacity == 512
    assert sorted(engine.codec._flows) == [25]  # the 5-code flow no longer takes memory
    assert engine.session.max_rows == 512 and len(engine.memory.exchanges) == 1  # history kept
    events = talk(engine, 2, question(1.0, seed=2))
    assert isinstance(events[-1], ReplyDone)
    first = next(e for e in events if isinstance(e, ReplyAudio))
    pad = (-len(engine.voice.prompt_codes)) % 25  # type: ignore[union-attr]
    hop = pad if pad >= 3 else pad + 25  # the aggressive first hop on the 25-code grid
    assert len(first.pcm) == hop * 1920 - 3840
    assert engine.session.history == engine.memory.history_rows()
    text = engine.tokenizer.decode(t for t, _ in engine.memory.history_rows()[:40])
    assert "pirate" in text


def test_a_broken_model_folder_is_one_model_invalid_error(engine_folder: Path,
                                                          tmp_path: Path) -> None:
    broken = tmp_path / "model"
    shutil.copytree(engine_folder / "model", broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(EngineUnavailableError) as raised:
        build_engine(settings_for(engine_folder, engine__model_dir=str(broken)))
    assert raised.value.category == "model_invalid"
    assert "model.safetensors" in str(raised.value) and "model manager" in raised.value.action


@pytest.mark.parametrize(("device", "precision", "wanted"), [
    ("cuda", "bf16", "CUDA"), ("npu", "bf16", "NPU"), ("cpu", "int4", "int4 needs a CUDA GPU")])
def test_devices_and_precisions_that_cannot_run_here_are_refused_clearly(
        engine_folder: Path, device: str, precision: str, wanted: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(EngineUnavailableError) as raised:
        build_engine(settings_for(engine_folder, engine__device=device,
                                  engine__precision=precision))
    assert wanted in str(raised.value) and raised.value.action


def test_auto_falls_back_to_the_cpu_with_a_warning(engine_folder: Path) -> None:
    if torch.cuda.is_available() or dev.npu_available():
        pytest.skip("an accelerator is present")
    engine = make_engine(engine_folder, engine__device="auto")
    assert engine.info.device == "cpu" and "slow" in engine.info.warning
    assert not engine.info.is_demo and engine.info.name == "MOSS-Speech"


def test_the_vram_preflight_refuses_what_cannot_fit_and_names_what_can() -> None:
    dev.check_fits(None, "bf16", 4096, None)  # the CPU: nothing to check
    dev.check_fits(40 * GIB, "bf16", 4096, None)  # fits
    with pytest.raises(EngineUnavailableError) as raised:
        dev.check_fits(19 * GIB, "bf16", 4096, None)
    assert raised.value.category == "out_of_memory"
    assert "bf16 needs about" in str(raised.value) and "Choose int8" in str(raised.value)
    with pytest.raises(EngineUnavailableError, match="Even int4"):
        dev.check_fits(4 * GIB, "bf16", 4096, None)


def test_the_self_test_reply_on_tiny_checkpoints(engine_folder: Path) -> None:
    reply = tiny_engine_reply(engine_folder)
    assert reply.audio_samples > 0 and reply.audio_samples % 1920 == 0
    assert set(reply.stages_ms) == {"encode", "prefill", "first_row", "first_chunk"}
    assert set(reply.transcripts) == {"user", "assistant"}


@pytest.mark.slow
def test_a_200_turn_soak_keeps_memory_flat(engine_folder: Path) -> None:
    engine = make_engine(engine_folder, engine__context_max_rows=512, sampling__max_new_rows=8,
                         transcript__text_branch=False)
    process = psutil.Process()
    samples: list[tuple[int, int]] = []
    for turn_id in range(1, 201):
        pcm = question(0.6, seed=turn_id % 7)
        if turn_id % 5 == 0:  # every fifth reply is barged in on after its first chunk
            cancel = threading.Event()
            events = respond(engine, UserTurn(turn_id, pcm), cancel,
                             lambda e, c=cancel: isinstance(e, ReplyAudio) and c.set())
            engine.reply_heard(turn_id, len(audio_of(events)) // 2, 24000)
        else:
            talk(engine, turn_id, pcm)
        if turn_id % 25 == 0:
            gc.collect()
            samples.append((process.memory_info().rss, len(gc.get_objects())))
    assert len(engine.memory.exchanges) < 40 and engine.memory.dropped > 150
    assert len(engine.session.history) <= 512
    rss = [r for r, _ in samples]
    objects = [n for _, n in samples]
    # after the warm-up turns neither the process nor the Python heap keeps growing
    assert max(rss[2:]) - rss[1] < 40 * 2**20, [r // 2**20 for r in rss]
    assert max(objects[2:]) - objects[1] < 5000, objects
    assert np.isfinite(rss).all()
