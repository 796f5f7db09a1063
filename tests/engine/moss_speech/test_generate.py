from __future__ import annotations

import threading

import pytest
import torch

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.decode_policy import CPU_COMPILE_REASON
from app.engine.moss_speech.generate import (
    AUDIO,
    TEXT,
    GenerationSession,
    RowSampler,
    generate_rows,
    initial_mode,
    next_mode,
    open_session,
    text_pass,
    warm_session,
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
        # (torch.allclose: torch.testing's first use costs seconds, in every mutant's run)
        assert torch.allclose(k_inc, k_new, rtol=1e-5, atol=1e-5), block
        assert torch.allclose(v_inc, v_new, rtol=1e-5, atol=1e-5), block


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


def test_a_prompt_and_reply_that_exactly_fill_the_kv_cache_run_to_the_last_row(
        tiny_model: MossSpeechModel) -> None:
    """The last sampled row is never forwarded, so L prompt rows and M new rows need L + M - 1."""
    prompt = torch.tensor([(1, APAD), (2, APAD), (MPAD, 7)])  # audio mode: no stop row early
    sampling = Sampling(temperature=0.0, max_new_rows=6, min_new_rows=6)
    capacity = len(prompt) + sampling.max_new_rows - 1
    session = GenerationSession(tiny_model, max_rows=capacity)
    session.prefill(prompt)
    rows = list(session.rows(sampling, seed=0))
    assert len(rows) == 6 and all(t == MPAD for t, _ in rows)
    assert len(session.history) == session.caches.length == capacity  # every cache row used
    # one row more than the cache holds is refused before anything is sampled
    session.prefill(torch.tensor([(1, APAD), *prompt.tolist()]))
    with pytest.raises(ValueError, match=f"4 prompt rows \\+ 6 new rows exceed the KV cache "
                                         f"\\({capacity} rows\\)"):
        next(session.rows(sampling, seed=0))
    assert len(session.history) == session.caches.length == 4


def test_a_prompt_that_exactly_fills_the_kv_cache_still_gets_its_one_row(
        tiny_model: MossSpeechModel) -> None:
    session = GenerationSession(tiny_model, max_rows=5)
    prompt = torch.tensor([(1, APAD)] * 4 + [(MPAD, 7)])
    assert session.prefill(prompt) == 0
    assert session.caches.length == 5
    one = Sampling(temperature=0.0, max_new_rows=1, min_new_rows=1)
    assert len(list(session.rows(one, seed=0))) == 1
    assert session.prefill(prompt) == 4  # the cached prompt; only its last row runs again
    with pytest.raises(ValueError, match="exceed the KV cache"):
        next(session.rows(Sampling(max_new_rows=2), seed=0))


def test_warming_runs_both_modes_and_leaves_the_session_empty(tokenizer: MossTokenizer) -> None:
    model = ScriptedModel({})
    session = GenerationSession(model, max_rows=256)
    warm_session(session, tokenizer)
    assert session.history == [] and session.caches.length == 0
    with pytest.raises(RuntimeError, match="prefill"):
        next(session.rows())  # nothing left to continue from
    speech_prompt = build_prompt(tokenizer, [Turn("system", "Warm up.")], "audio")
    text_prompt = build_prompt(tokenizer, [Turn("system", "Warm up.")], "text")
    # a spoken reply (text head off), then a text reply on the reused prefix (text head on),
    # each of 4 rows: a prefill and 3 forwarded rows
    assert model.calls == [(0, len(speech_prompt), False)] + [
        (len(speech_prompt) + i, 1, False) for i in range(3)] + [
        (len(text_prompt) - 1, 1, True)] + [(len(text_prompt) + i, 1, True) for i in range(3)]


def test_an_opened_session_has_the_capacity_and_says_which_decode_step_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="app.engine.moss_speech.generate"):
        session = open_session(ScriptedModel({}), 96, "auto")  # on a CPU: eager, and why
    assert session.max_rows == 96 and session.decode.path == "eager"
    assert f"compile skipped: {CPU_COMPILE_REASON}" in session.decode.summary
    [record] = caplog.records
    assert record.getMessage().startswith(f"decode step on cpu: {session.decode.summary}, ready in")


CPU = torch.device("cpu")


def two_candidates(size: int, best: int, second: int) -> torch.Tensor:
    """Logits [size] where ``best`` leads ``second`` by less than a 1.1 penalty takes away."""
    logits = torch.zeros(size)
    logits[best], logits[second] = 10.0, 9.5
    return logits


def test_the_repetition_penalty_covers_each_channels_prompt_and_reply_ids_only() -> None:
    sampling = Sampling(temperature=0.0, repetition_penalty=1.1, min_new_rows=0)
    history = torch.tensor([(1, APAD), (42, 7)])  # text 42 and audio 7 are in the prompt
    sampler = RowSampler(CFG, sampling, history, seed=0, device=CPU)
    first = sampler.sample(two_candidates(CFG.vocab_size, 42, 43),
                           two_candidates(CFG.audio_vocab_size, 7, 8))[1]
    assert first == (43, 8)  # the prompt's ids lost their lead; the runners-up were not seen
    second = sampler.sample(two_candidates(CFG.vocab_size, 43, 44),
                            two_candidates(CFG.audio_vocab_size, 8, 9))[1]
    assert second == (44, 9)  # the ids of the first row are history too, each in its channel


def test_while_im_end_is_masked_the_next_best_text_id_is_chosen() -> None:
    sampling = Sampling(temperature=0.0, repetition_penalty=1.0, min_new_rows=2)
    sampler = RowSampler(CFG, sampling, torch.tensor([(1, APAD)]), seed=0, device=CPU)
    text = torch.zeros(CFG.vocab_size)
    text[IM_END], text[42] = 10.0, 5.0
    rows = [sampler.sample(text.clone(), torch.zeros(CFG.audio_vocab_size))[1][0]
            for _ in range(3)]
    assert rows == [42, 42, IM_END] and sampler.finished


def test_text_mode_without_text_logits_is_refused() -> None:
    sampler = RowSampler(CFG, GREEDY, torch.tensor([(1, APAD)]), seed=0, device=CPU)
    with pytest.raises(ValueError, match=r"^text logits are needed in text mode$"):
        sampler.sample(None, torch.zeros(CFG.audio_vocab_size))


def test_a_fresh_session_refuses_to_generate_before_a_prefill() -> None:
    session = GenerationSession(ScriptedModel({}), max_rows=16)
    with pytest.raises(RuntimeError, match=r"^prefill\(\) a prompt before generating rows$"):
        next(session.rows(GREEDY))


def test_the_history_holds_the_prompt_and_every_forwarded_row() -> None:
    prompt = [(1, APAD), (2, APAD)]
    session = GenerationSession(ScriptedModel({3: (43, 5), 4: (44, 6)}), max_rows=64)
    session.prefill(torch.tensor(prompt))
    rows = list(session.rows(Sampling(temperature=0.0, repetition_penalty=1.0, min_new_rows=0,
                                      max_new_rows=4)))
    assert session.history == prompt + rows[:-1]  # the last row is yielded, not forwarded


def test_any_integer_grid_is_a_prompt(tiny_model: MossSpeechModel) -> None:
    rows = [(1, APAD), (2, APAD), (SOSP, APAD)]
    expected = run(tiny_model, rows)
    for grid in (torch.tensor(rows, dtype=torch.int32), rows, torch.tensor(rows).flatten()):
        session = GenerationSession(tiny_model, max_rows=64)
        session.prefill(grid)
        assert list(session.rows(GREEDY)) == expected


def test_long_prompts_are_prefilled_in_chunks_of_1024_rows() -> None:
    model = ScriptedModel({})
    session = GenerationSession(model, max_rows=2100)
    session.prefill(torch.tensor([(1, APAD)] * 2050))
    assert model.calls == [(0, 1024, False), (1024, 1024, False), (2048, 2, True)]


def test_the_decode_path_is_the_one_asked_for_when_it_validates(
        tiny_model: MossSpeechModel) -> None:
    assert GenerationSession(tiny_model, max_rows=32).decode.path == "eager"
    static = GenerationSession(tiny_model, max_rows=32, decode_path="static")
    assert static.decode.path == "static" and static.caches.length == 0
    auto = GenerationSession(tiny_model, max_rows=32, decode_path="auto")  # on a CPU
    assert auto.decode.path == "eager"
    assert f"compile skipped: {CPU_COMPILE_REASON}" in auto.decode.notes


def test_one_shot_generation_and_text_passes_stop_when_cancelled() -> None:
    cancel = threading.Event()
    cancel.set()
    assert list(generate_rows(ScriptedModel({}), torch.tensor([(1, APAD)]), GREEDY,
                              cancel=cancel)) == []
    session = GenerationSession(ScriptedModel({}), max_rows=300)
    assert text_pass(session, torch.tensor([(1, APAD)]), cancel=cancel) == []
    grid = [(1, APAD), (2, APAD)]
    assert list(generate_rows(ScriptedModel({}), grid, GREEDY)) == run(ScriptedModel({}), grid)


def test_a_text_pass_is_greedy_unpenalised_may_end_at_once_and_stops_at_256_rows() -> None:
    class Repeating(ScriptedModel):  # 42 leads 43 at every step, by less than a penalty
        def forward_rows(self, rows, caches, start, text_head=True):
            text, audio = super().forward_rows(rows, caches, start, text_head)
            if text is not None:
                text[0, 43] = 9.5
            return text, audio

    session = GenerationSession(Repeating({}), max_rows=512)
    rows = text_pass(session, torch.tensor([(1, APAD)]))
    assert len(rows) == 256 and {t for t, _ in rows} == {42}
    session = GenerationSession(ScriptedModel({1: (IM_END, 0)}), max_rows=300)
    assert text_pass(session, torch.tensor([(1, APAD)])) == [(IM_END, 0)]


def test_a_row_sampler_keeps_its_state_on_the_device_it_is_given() -> None:
    history = torch.tensor([(1, APAD), (MPAD, 7)])  # audio mode: the text id is modality_pad
    with torch.device("meta"):  # another default device, as while a model is being built
        sampler = RowSampler(CFG, GREEDY, history, seed=0, device=CPU)
    assert {sampler.text.seen.device, sampler.audio.seen.device} == {CPU}
    row_t, row = sampler.sample(None, two_candidates(CFG.audio_vocab_size, 7, 8))
    assert row_t.device == CPU and row == (MPAD, 7)
