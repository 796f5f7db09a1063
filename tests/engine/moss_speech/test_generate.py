from __future__ import annotations

import threading

import pytest
import torch

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.generate import (
    AUDIO,
    TEXT,
    GenerationSession,
    generate_rows,
    initial_mode,
    next_mode,
    text_pass,
)
from app.engine.moss_speech.kv_cache import KVCaches
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.prompt import Turn, build_prompt
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.testing import offline_rows
from app.engine.moss_speech.tokenizer import MossTokenizer

CFG = MossSpeechConfig.tiny()
PAD, IM_END, SOSP, MPAD, EOSP, APAD = 151643, 151645, 151646, 151667, 16384, 512
GREEDY = Sampling(temperature=0.0, repetition_penalty=1.0, min_new_rows=0, max_new_rows=20)


def test_initial_mode_from_the_last_prompt_row() -> None:
    assert initial_mode((SOSP, APAD), CFG) == TEXT  # audio-reply prompts start in text mode
    assert initial_mode((MPAD, 7), CFG) == AUDIO
    assert initial_mode((MPAD, APAD), CFG) == TEXT  # the text rule is applied last and wins
    assert initial_mode((42, 7), CFG) == TEXT


def test_transitions_apply_sosp_then_eosp_in_the_same_step() -> None:
    assert next_mode(TEXT, (SOSP, APAD), CFG) == AUDIO
    assert next_mode(AUDIO, (MPAD, EOSP), CFG) == TEXT
    assert next_mode(AUDIO, (MPAD, 5), CFG) == AUDIO
    assert next_mode(TEXT, (42, EOSP), CFG) == TEXT
    assert next_mode(TEXT, (SOSP, EOSP), CFG) == TEXT  # switched to audio, then straight back
    assert next_mode(AUDIO, (SOSP, 5), CFG) == AUDIO  # sosp only matters in text mode


class ScriptedModel:
    """Stands in for MossSpeechModel: the logits for position p pick ``script[p]``."""

    def __init__(self, script: dict[int, tuple[int, int]], default: tuple[int, int] = (42, 7)):
        self.config, self.device, self.dtype = CFG, torch.device("cpu"), torch.float32
        self.embed_device = self.device
        self.script, self.default = script, default
        self.calls: list[tuple[int, int, bool]] = []  # (start, rows, text_head)

    def new_caches(self, max_rows: int) -> KVCaches:
        return KVCaches(CFG, max_rows, "cpu", torch.float32)

    def check_grid(self, grid: torch.Tensor) -> None:
        pass

    def forward_rows(self, rows, caches, start, text_head=True):
        caches.length = start + rows.shape[1]
        self.calls.append((start, rows.shape[1], text_head))
        text_id, audio_id = self.script.get(caches.length, self.default)
        text = torch.zeros(1, CFG.vocab_size)
        text[0, text_id] = 10.0
        audio = torch.zeros(1, CFG.audio_vocab_size)
        audio[0, audio_id] = 10.0
        return (text if text_head else None), audio


def run(model, prompt, sampling=GREEDY, **kwargs) -> list[tuple[int, int]]:
    session = GenerationSession(model, max_rows=64)
    session.prefill(torch.tensor(prompt))
    return list(session.rows(sampling, **kwargs))


def test_audio_reply_overwrites_text_skips_the_text_head_and_keeps_the_stop_row() -> None:
    prompt = [(1, APAD), (2, APAD), (SOSP, APAD)]
    model = ScriptedModel({3: (42, 100), 4: (43, 101), 5: (44, EOSP), 6: (IM_END, 9)})
    rows = run(model, prompt)
    assert rows == [(MPAD, 100), (MPAD, 101), (MPAD, EOSP), (IM_END, 9)]
    # prefill + three forwarded rows; the text head only for the step after eosp
    assert model.calls == [(0, 3, False), (3, 1, False), (4, 1, False), (5, 1, True)]


def test_same_step_sosp_and_eosp_leave_text_mode() -> None:
    both = run(ScriptedModel({1: (SOSP, EOSP), 2: (42, 5), 3: (PAD, 0)}), [(1, APAD)])
    assert both == [(SOSP, EOSP), (42, 5), (PAD, 0)]  # not overwritten: still text mode
    only_sosp = run(ScriptedModel({1: (SOSP, 3), 2: (42, 5), 3: (PAD, EOSP), 4: (PAD, 0)}),
                    [(1, APAD)])
    assert only_sosp == [(SOSP, 3), (MPAD, 5), (MPAD, EOSP), (PAD, 0)]


def test_eosp_and_im_end_are_masked_during_the_first_rows() -> None:
    sampling = Sampling(temperature=0.0, repetition_penalty=1.0, min_new_rows=3, max_new_rows=8)
    script = {p: (MPAD, EOSP) for p in range(1, 10)}
    rows = run(ScriptedModel(script), [(MPAD, 1)], sampling)  # audio mode from the start
    assert [a == EOSP for _, a in rows[:3]] == [False, False, True]  # steps 1, 2 masked
    script = {p: (IM_END, 0) for p in range(1, 10)}
    rows = run(ScriptedModel(script), [(1, APAD)], sampling)
    assert [t for t, _ in rows] == [0, 0, 0, IM_END]  # steps 1..3 masked
    assert all(a < EOSP + 1 for _, a in rows)


def test_max_new_rows_and_cancel_between_rows() -> None:
    rows = run(ScriptedModel({}), [(1, APAD)], GREEDY)
    assert len(rows) == GREEDY.max_new_rows
    cancel = threading.Event()
    session = GenerationSession(ScriptedModel({}), max_rows=64)
    session.prefill(torch.tensor([(1, APAD)]))
    got = []
    for row in session.rows(GREEDY, cancel=cancel):
        got.append(row)
        if len(got) == 3:
            cancel.set()  # e.g. barge-in while row 3 is being played
    assert len(got) == 3
    assert len(session.history) == 3  # prompt + 2 forwarded rows; row 3 never ran


@pytest.fixture(scope="module")
def chat_prompt(tokenizer: MossTokenizer) -> torch.Tensor:
    return build_prompt(tokenizer, [Turn("system", "Hi"), Turn("user", (5, 6, 7))], "text")


def test_streaming_equals_offline_reference_through_mode_switches(
        switchy_model: MossSpeechModel, chat_prompt: torch.Tensor) -> None:
    sampling = Sampling(max_new_rows=24, min_new_rows=2)
    modes_seen = set()
    for seed in (1, 3):
        streamed = list(generate_rows(switchy_model, chat_prompt, sampling, seed=seed))
        assert streamed == offline_rows(switchy_model, chat_prompt, sampling, seed)
        modes_seen |= {AUDIO if t == MPAD else TEXT for t, _ in streamed}
        modes_seen |= {"sosp"} if any(t == SOSP for t, _ in streamed) else set()
    assert modes_seen == {TEXT, AUDIO, "sosp"}, "the check must cover both modes and a switch"


def test_seed_reproduces_and_different_seeds_differ(tiny_model: MossSpeechModel,
                                                    chat_prompt: torch.Tensor) -> None:
    sampling = Sampling(max_new_rows=12)
    first = list(generate_rows(tiny_model, chat_prompt, sampling, seed=7))
    assert first == list(generate_rows(tiny_model, chat_prompt, sampling, seed=7))
    assert first != list(generate_rows(tiny_model, chat_prompt, sampling, seed=8))


def test_incremental_prefill_equals_fresh_prefill(tiny_model: MossSpeechModel,
                                                  tokenizer: MossTokenizer) -> None:
    sampling = Sampling(max_new_rows=10)
    turns = [Turn("system", "Hi"), Turn("user", "Hello")]
    session = GenerationSession(tiny_model, max_rows=256)
    assert session.prefill(build_prompt(tokenizer, turns, "audio")) == 0
    reply = list(session.rows(sampling, seed=1))
    assert len(reply) == 10
    longer = build_prompt(tokenizer, [*turns, Turn("assistant", tuple(range(8))),
                                      Turn("user", "More")], "audio")
    reused = session.prefill(longer)
    assert reused > len(build_prompt(tokenizer, turns, "audio")) - 3
    incremental = list(session.rows(sampling, seed=2))
    fresh = GenerationSession(tiny_model, max_rows=256)
    fresh.prefill(longer)
    assert incremental == list(fresh.rows(sampling, seed=2))
    for block in ("shared", "text", "audio"):
        k_inc, v_inc = session.caches.rows_view(block, 0)
        k_new, v_new = fresh.caches.rows_view(block, 0)
        torch.testing.assert_close(k_inc, k_new, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v_inc, v_new, rtol=1e-5, atol=1e-5)


def test_truncate_rolls_back_and_text_pass_reuses_the_conversation(
        tiny_model: MossSpeechModel, tokenizer: MossTokenizer) -> None:
    turns = [Turn("system", "Hi"), Turn("user", (1, 2, 3))]
    session = GenerationSession(tiny_model, max_rows=256)
    speech_prompt = build_prompt(tokenizer, turns, "audio")
    session.prefill(speech_prompt)
    list(session.rows(Sampling(max_new_rows=5), seed=0))
    session.truncate(10)
    assert len(session.history) == session.caches.length == 10
    with pytest.raises(RuntimeError, match="prefill"):
        next(session.rows())
    text_prompt = build_prompt(tokenizer, turns, "text")  # same rows minus the final sosp
    rows = text_pass(session, text_prompt, max_new_rows=6)
    assert 1 <= len(rows) <= 6 and all(t != MPAD for t, _ in rows)
    assert session.prefill(speech_prompt) == len(text_prompt)  # only the sosp row is new


def test_prompt_longer_than_the_cache_is_refused(tiny_model: MossSpeechModel) -> None:
    session = GenerationSession(tiny_model, max_rows=8)
    with pytest.raises(ValueError, match="the KV cache holds 8"):
        session.prefill(torch.tensor([(1, APAD)] * 9))
    session.prefill(torch.tensor([(1, APAD)] * 4))
    with pytest.raises(ValueError, match="exceed the KV cache"):
        next(session.rows(Sampling(max_new_rows=10)))
