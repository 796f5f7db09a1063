"""The MOSS-Speech engine on tiny random checkpoints: streaming replies, encode-while-talking,
speculative start, barge-in with heard-only history and KV roll-back, transcripts."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from app.engine.base import ReplyAudio, ReplyDone, ReplyText, UserTurn
from app.engine.moss_speech.codec.codec import OUTPUT_SAMPLE_RATE_HZ
from app.engine.moss_speech.generate import generate_rows
from app.engine.moss_speech.prompt import Turn
from app.engine.moss_speech.reply import reply_codes
from tests.engine.moss_speech.engine_helpers import (
    audio_of,
    feed,
    make_engine,
    question,
    respond,
    stages_of,
    talk,
    transcripts,
)

SAMPLES_PER_CODE = 1920


def test_a_spoken_turn_gets_a_streamed_spoken_reply_with_every_engine_stage(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    pcm = question(1.5)
    feed(engine, 1, pcm)
    events = respond(engine, UserTurn(1, pcm))
    audio = [e for e in events if isinstance(e, ReplyAudio)]
    assert isinstance(events[-1], ReplyDone) and not events[-1].cancelled
    assert len(audio) >= 3  # streamed in chunks, not one block at the end
    assert all(e.sample_rate_hz == OUTPUT_SAMPLE_RATE_HZ for e in audio)
    record = engine.last_reply
    assert record is not None and record.finished
    assert len(record.codes) == 23  # 24 rows, the last one dropped (contract §1.8)
    assert len(audio_of(events)) == SAMPLES_PER_CODE * len(record.codes)
    assert np.isfinite(audio_of(events)).all() and np.abs(audio_of(events)).max() > 0
    stages = stages_of(events)
    assert list(stages) == ["encode", "prefill", "first_row", "first_chunk"]
    assert all(ms >= 0 for ms in stages.values())
    # the first chunk came after the aggressive first hop (+3 look-ahead codes), not at the end
    first = events.index(audio[0])
    rows_before_first_chunk = engine.policy.chunk_codes + 3 + 1
    assert sum(isinstance(e, ReplyAudio) for e in events[first:]) == len(audio)
    assert len(audio[0].pcm) <= rows_before_first_chunk * SAMPLES_PER_CODE


def test_the_user_turn_is_encoded_while_talking_and_only_its_end_is_prefilled(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    pcm = question(2.0)
    feed(engine, 1, pcm)
    prefilled_while_talking = len(engine.session.history)
    respond(engine, UserTurn(1, pcm))
    stat = engine.last_prefill
    assert stat is not None
    # everything prefilled while the user talked is reused (the final padding of the encoder
    # may still change the last code)
    assert prefilled_while_talking - 2 <= stat.reused_rows <= prefilled_while_talking
    assert stat.total_rows - stat.reused_rows <= 24  # closing rows + the last few codes
    user = engine.memory.user_rows(Turn("user", tuple(engine.codec.encode(pcm, 16000).tolist())))
    assert engine.session.history[:prefilled_while_talking] == (
        engine.memory.history_rows() + user)[:prefilled_while_talking]


def test_codes_revised_after_an_early_prefill_are_prefilled_again(engine_folder: Path) -> None:
    """A loud sound late in the turn raises Whisper's floor and revises codes that were already
    prefilled: the final prompt must hold the revised codes, not the early ones."""
    engine = make_engine(engine_folder)
    pcm = question(2.4, seed=8)
    pcm[:16000] *= 1e-3  # a quiet first second...
    pcm[32000:32400] *= 30.0  # ...then a loud click after it was prefilled
    feed(engine, 1, pcm[:24000])
    early = list(engine.session.history)
    feed(engine, 1, pcm[24000:])
    respond(engine, UserTurn(1, pcm))
    codes = tuple(engine.codec.encode(pcm, 16000).tolist())
    prompt = (engine.memory.history_rows() + engine.memory.user_rows(Turn("user", codes))
              + engine.memory.assistant_prefix())
    assert engine.session.history[:len(prompt)] == prompt
    assert early != prompt[:len(early)]  # the early rows really were revised


def test_replies_continue_from_the_rolled_back_cache_exactly_as_a_fresh_generation(
        engine_folder: Path) -> None:
    """Turn 2 runs on a cache rolled back after turn 1 and extended incrementally; its rows
    must equal a fresh generation over the same prompt (no stale keys/values anywhere)."""
    engine = make_engine(engine_folder, sampling__temperature=0.0)
    talk(engine, 1, question(1.0, seed=1))
    second = question(1.2, seed=2)
    respond_events = talk(engine, 2, second, heard_samples=0)
    assert isinstance(respond_events[-1], ReplyDone)
    user_codes = tuple(engine.codec.encode(second, 16000).tolist())
    first_exchange = engine.memory.exchanges[0]
    prompt = (engine.memory.history_rows()[:-len(engine.memory.exchanges[1].rows)]
              + engine.memory.user_rows(Turn("user", user_codes))
              + engine.memory.assistant_prefix())
    assert engine.memory.exchanges[1].user.content == user_codes
    assert first_exchange.assistant is not None
    offline = list(generate_rows(engine.model, torch.tensor(prompt), engine.sampling, seed=0))
    assert engine.last_reply is not None
    assert engine.last_reply.codes == reply_codes(offline, engine.model.config)


def test_barge_in_stops_within_one_row_and_history_keeps_only_what_was_heard(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder, sampling__max_new_rows=40)
    pcm = question(1.0)
    feed(engine, 1, pcm)
    cancel = threading.Event()
    rows_at_cancel: list[int] = []

    def barge_in(event: object) -> None:
        if isinstance(event, ReplyAudio) and not cancel.is_set():
            cancel.set()  # the first chunk reached the speaker, then the user talked
            rows_at_cancel.append(engine.last_reply.rows)  # type: ignore[union-attr]

    events = respond(engine, UserTurn(1, pcm), cancel, barge_in)
    assert isinstance(events[-1], ReplyDone) and events[-1].cancelled
    record = engine.last_reply
    assert record is not None and not record.finished
    assert record.rows - rows_at_cancel[0] <= 1  # honoured within one AR row
    assert len(record.codes) < 39
    prompt_rows = engine.last_prefill.total_rows  # type: ignore[union-attr]
    heard = audio_of(events)[: len(audio_of(events)) // 2]  # half of the first chunk was heard
    engine.reply_heard(1, len(heard), 24000)
    [exchange] = engine.memory.exchanges
    assert exchange.assistant is not None  # the heard audio, re-encoded like the reference
    assert exchange.assistant.content == tuple(engine.codec.encode(heard, 24000).tolist())
    # the cache was rolled back to the shared prefix (the prompt), not rebuilt
    assert engine.last_prefill.reused_rows == prompt_rows  # type: ignore[union-attr]
    assert engine.session.history == engine.memory.history_rows()


def test_a_reply_nobody_heard_keeps_the_user_turn_and_no_assistant_turn(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    talk(engine, 1, question(1.0), heard_samples=0)
    [exchange] = engine.memory.exchanges
    assert exchange.assistant is None and exchange.user.is_audio
    assert engine.session.history == engine.memory.history_rows()


def test_a_dropped_speculative_reply_leaves_nothing_and_the_confirmed_turn_reuses_the_feed(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    pcm = question(2.0, seed=4)
    pause_at = 16000
    feed(engine, 1, pcm[:pause_at])
    speculative = respond(engine, UserTurn(1, pcm[:pause_at], speculative=True))
    assert len(audio_of(speculative)) > 0  # the reply was under way at the pause...
    feed(engine, 1, pcm[pause_at:])  # ...but the user went on: the final turn replaces it
    events = respond(engine, UserTurn(1, pcm))
    assert isinstance(events[-1], ReplyDone)
    engine.reply_heard(1, len(audio_of(events)), 24000)
    [exchange] = engine.memory.exchanges
    assert exchange.user.content == tuple(engine.codec.encode(pcm, 16000).tolist())
    assert engine.session.history == engine.memory.history_rows()
    assert [(j.turn_id, j.role) for j in engine.transcriber.jobs] == [(1, "user"),
                                                                    (1, "assistant")]
    assert engine.transcriber.jobs[0].codes == exchange.user.content


def test_a_confirmed_speculative_reply_is_the_answer(engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    pcm = question(1.0, seed=5)
    feed(engine, 1, pcm)
    events = respond(engine, UserTurn(1, pcm, speculative=True))
    feed(engine, 1, np.zeros(4800, np.float32))  # the rest of the pause, until the endpoint
    engine.reply_heard(1, len(audio_of(events)), 24000)  # the endpoint confirmed it
    [exchange] = engine.memory.exchanges
    assert exchange.user.content == tuple(engine.codec.encode(pcm, 16000).tolist())
    assert exchange.assistant is not None
    assert engine.session.history == engine.memory.history_rows()


def test_audio_of_a_turn_never_answered_is_dropped_when_the_next_turn_starts(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    feed(engine, 1, question(1.0, seed=6))  # muted mid-turn: no respond follows
    second = question(1.0, seed=7)
    talk(engine, 2, second)
    [exchange] = engine.memory.exchanges
    assert exchange.user.content == tuple(engine.codec.encode(second, 16000).tolist())


def test_transcripts_of_both_sides_come_from_text_passes_in_idle_time(
        engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    events = talk(engine, 1, question(1.0))
    assert not any(isinstance(e, ReplyText) for e in events)  # speech replies carry no text
    assert engine.has_idle_work()
    conversation_rows = list(engine.session.history)
    texts = transcripts(engine)
    assert [(t.turn_id, t.role, t.final) for t in texts] == [(1, "user", True),
                                                             (1, "assistant", True)]
    assert not engine.has_idle_work()
    assert engine.session.history == conversation_rows  # the conversation cache is untouched


def test_a_preempted_transcript_pass_stays_queued_and_continues_where_it_stopped(
        engine_folder: Path) -> None:
    steady = make_engine(engine_folder)
    talk(steady, 1, question(1.0))
    uninterrupted = list(steady.idle_work(threading.Event()))
    reference_texts = [(t.role, t.text) for t in uninterrupted if isinstance(t, ReplyText)]
    assert [role for role, _ in reference_texts] == ["user", "assistant"]

    engine = make_engine(engine_folder)
    talk(engine, 1, question(1.0))
    texts, steps, preemptions = [], 0, 0
    while engine.has_idle_work():
        cancel = threading.Event()
        for item in engine.idle_work(cancel):
            steps += 1
            if isinstance(item, ReplyText):
                texts.append((item.role, item.text))
            elif steps % 3 == 0:  # a command arrives every third step
                cancel.set()
                preemptions += 1
    assert preemptions >= 5
    assert texts == reference_texts  # the same text as an uninterrupted pass...
    assert steps <= len(uninterrupted) + preemptions  # ...without redoing the rows already done


def test_transcripts_off_queue_nothing(engine_folder: Path) -> None:
    engine = make_engine(engine_folder, transcript__text_branch=False)
    talk(engine, 1, question(1.0))
    assert not engine.has_idle_work() and transcripts(engine) == []


def test_text_output_mode_answers_in_text(engine_folder: Path) -> None:
    engine = make_engine(engine_folder, engine__output_modality="text",
                         engine__voice_prompt=None)
    events = talk(engine, 1, question(1.0))
    texts = [e for e in events if isinstance(e, ReplyText)]
    assert not any(isinstance(e, ReplyAudio) for e in events)
    assert texts and texts[-1].final and texts[-1].role == "assistant"
    assert all(not t.final for t in texts[:-1])
    assert engine.session.history[-1] != (engine.tokenizer.config.sosp_token_id, 512)
    [exchange] = engine.memory.exchanges
    if texts[-1].text.strip():
        assert exchange.assistant == Turn("assistant", texts[-1].text.strip())


def test_a_typed_turn_is_answered(engine_folder: Path) -> None:
    engine = make_engine(engine_folder)
    events = respond(engine, UserTurn(1, np.zeros(0, np.float32), text="What time is it?"))
    assert len(audio_of(events)) > 0
    engine.reply_heard(1, len(audio_of(events)), 24000)
    assert engine.memory.exchanges[0].user == Turn("user", "What time is it?")


@pytest.mark.parametrize("first_hop", ["aggressive", "aligned"])
def test_the_first_chunk_policy_comes_from_the_settings(engine_folder: Path,
                                                        first_hop: str) -> None:
    engine = make_engine(engine_folder, streaming__first_hop=first_hop)
    events = talk(engine, 1, question(1.0))
    first = next(e for e in events if isinstance(e, ReplyAudio))
    voice_codes = len(engine.voice.prompt_codes)  # type: ignore[union-attr]
    pad = (-voice_codes) % 5
    hop = pad if first_hop == "aggressive" and pad >= 3 else pad + 5
    assert len(first.pcm) == hop * SAMPLES_PER_CODE - 3840  # the cross-fade tail is held back
