"""The remote engine against the stand-in server on loopback: what it sends, what it plays, the
history it keeps, and how barge-in ends a reply."""

from __future__ import annotations

import base64
import io
import itertools
import threading

import numpy as np
import pytest
import soundfile
from voice_helpers import speech

from app.audio.resample import resample
from app.engine.base import (
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    ReplyText,
    StageTimed,
    UserTurn,
)
from app.engine.echo import EchoEngine
from app.engine.remote.standin import StandInServer
from tests.engine.remote.remote_helpers import audio_of, make_engine, of, reply


def local_echo(pcm: np.ndarray) -> np.ndarray:
    return audio_of(list(EchoEngine().respond(UserTurn(0, pcm), threading.Event())))


def wav_of(message: dict) -> tuple[np.ndarray, int]:
    [part] = message["content"]
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "wav"
    pcm, rate = soundfile.read(io.BytesIO(base64.b64decode(part["input_audio"]["data"])),
                               dtype="float32")
    return pcm, rate


def test_a_turn_plays_the_servers_audio_as_it_streams_with_the_remote_stages(
        server: StandInServer) -> None:
    engine = make_engine(server.url, values={"sampling.seed": 7})
    engine.check_health()
    clip = speech("question")
    events = reply(engine, UserTurn(1, clip))
    assert isinstance(events[-1], ReplyDone) and not events[-1].cancelled
    stages = [e.stage for e in of(events, StageTimed)]
    assert stages == ["upload", "server_first_byte", "first_audio"]
    first_audio = next(i for i, e in enumerate(events) if isinstance(e, ReplyAudio))
    assert all(isinstance(e, StageTimed) for e in events[:first_audio])
    assert all(e.duration_ms >= 0 for e in of(events, StageTimed))
    expected = local_echo(clip)  # the stand-in's audio is the echo engine's
    played = audio_of(events)
    assert len(played) == len(expected) and np.max(np.abs(played - expected)) < 2e-3
    assert all(e.sample_rate_hz == 24000 for e in of(events, ReplyAudio))
    assert len(of(events, ReplyAudio)) == int(np.ceil(len(expected) / 9600))  # 400 ms deltas
    assert engine.last_finish_reason == "stop" and engine.last_usage is not None
    assert engine.last_usage.completion_tokens > 0
    [record] = server.records
    body = record.body
    assert body["stream"] is True and body["modalities"] == ["audio"]
    assert body["audio"] == {"format": "pcm"} and body["model"] == "moss-speech"
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.6, 0.95, 20)
    assert (body["repetition_penalty"], body["max_tokens"], body["seed"]) == (1.1, 500, 7)
    system, user = body["messages"]
    assert system["role"] == "system" and "spoken" in system["content"]
    pcm, rate = wav_of(user)
    assert user["role"] == "user" and rate == 16000
    np.testing.assert_allclose(pcm, clip, atol=1 / 16000)
    engine.close()


def test_the_history_carries_what_the_user_heard_and_drops_what_was_never_confirmed(
        server: StandInServer) -> None:
    engine = make_engine(server.url)
    hello, question, sea = speech("hello"), speech("question"), speech("sea")
    reply(engine, UserTurn(1, hello))
    engine.reply_heard(1, 12000, 24000)  # half a second of the reply was heard
    reply(engine, UserTurn(2, question))
    engine.reply_heard(2, 0, 48000)  # interrupted before anything was audible
    reply(engine, UserTurn(3, sea[: len(sea) // 2], speculative=True))  # the user went on
    reply(engine, UserTurn(3, sea))
    messages = [r.body["messages"] for r in server.wait_for_requests(4)]
    roles = [[m["role"] for m in turn] for turn in messages]
    assert roles[1] == ["system", "user", "assistant", "user"]
    assert roles[2] == roles[3] == ["system", "user", "assistant", "user", "user"]
    heard, rate = wav_of(messages[1][2])
    assert rate == 16000 and len(heard) == pytest.approx(8000, abs=2)  # 0.5 s, sent at 16 kHz
    expected = resample(local_echo(hello)[:12000], 24000, 16000)
    assert float(np.dot(heard, expected) / np.linalg.norm(heard) / np.linalg.norm(expected)) > 0.99
    assert len(wav_of(messages[3][-1])[0]) == len(sea)  # the whole turn, not the speculation
    engine.reply_heard(3, 10**6, 24000)
    engine.reset()
    reply(engine, UserTurn(4, hello))
    assert [m["role"] for m in server.wait_for_requests(5)[4].body["messages"]] == [
        "system", "user"]


def test_old_exchanges_leave_the_request_before_it_outgrows_the_servers_context() -> None:
    with StandInServer(context_rows=260) as server:  # about 12 s of conversation
        engine = make_engine(server.url, remote_context_rows=260)
        clip = speech("question")  # ~1.6 s: with its echo, ~56 rows an exchange
        for turn_id in range(1, 8):
            events = reply(engine, UserTurn(turn_id, clip))
            assert isinstance(events[-1], ReplyDone), events[-1]
            engine.reply_heard(turn_id, 10**6, 24000)
        counts = [len(r.body["messages"]) for r in server.records]
        assert all(r.status == 200 for r in server.records)
        assert counts == [2, 4, 6, 8, 8, 8, 8]  # the system turn, 3 exchanges, the new turn
        assert engine.history.dropped > 0 and len(engine.history.exchanges) <= 4
    # without the cut, the stand-in refuses such a request with the server's message
    with StandInServer(context_rows=260) as server:
        engine = make_engine(server.url, remote_context_rows=10_000)
        for turn_id in range(1, 8):
            events = reply(engine, UserTurn(turn_id, clip))
            engine.reply_heard(turn_id, 10**6, 24000)
        failed = of(events, ReplyFailed)
        assert failed and "exceeds the context limit 260" in failed[0].message


def test_barge_in_closes_the_stream_at_once_and_the_server_aborts_the_request(
        server: StandInServer) -> None:
    server.faults.realtime_factor = 3.0  # one 400 ms delta every 1.2 s: still streaming
    engine = make_engine(server.url)
    cancel = threading.Event()
    events = engine.respond(UserTurn(1, speech("question")), cancel)
    got = []
    for event in events:
        got.append(event)
        if isinstance(event, ReplyAudio):
            cancel.set()  # the voice loop sets it on barge-in
            break
    rest = list(events)
    assert rest == [ReplyDone(1, cancelled=True)]
    [record] = server.records
    assert record.aborted.wait(30) and not record.completed.is_set()
    assert record.chunks_sent < int(np.ceil(len(local_echo(speech("question"))) / 9600))
    engine.reply_heard(1, len(got[-1].pcm), 24000)  # the first delta was heard
    reply(engine, UserTurn(2, speech("stop")))
    messages = server.wait_for_requests(2)[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert len(wav_of(messages[2])[0]) == pytest.approx(len(got[-1].pcm) * 2 / 3, abs=2)


def test_cancel_before_the_first_audio_aborts_the_request(server: StandInServer) -> None:
    server.faults.first_audio_delay_s = 60.0  # the server is "thinking"
    engine = make_engine(server.url)
    cancel = threading.Event()
    events = engine.respond(UserTurn(1, speech("hello")), cancel)
    first = next(events)
    assert isinstance(first, StageTimed) and first.stage == "upload"  # the headers are in
    cancel.set()
    assert list(events)[-1] == ReplyDone(1, cancelled=True)
    assert server.wait_for_requests(1)[0].aborted.wait(30)


def test_text_deltas_reach_the_transcript_as_the_whole_text_so_far(
        server: StandInServer) -> None:
    server.faults.text_deltas = True
    server.faults.role_chunk_alone = True
    engine = make_engine(server.url)
    events = reply(engine, UserTurn(1, speech("question")))
    texts = of(events, ReplyText)
    assert len(texts) >= 2 and all(t.role == "assistant" for t in texts)
    assert all(b.text.startswith(a.text) for a, b in itertools.pairwise(texts))
    assert texts[-1].final and not any(t.final for t in texts[:-1])
    assert len(audio_of(events)) == len(local_echo(speech("question")))


def test_text_replies_ask_for_text_and_keep_it_in_the_history(server: StandInServer) -> None:
    engine = make_engine(server.url, output_modality="text")
    events = reply(engine, UserTurn(1, speech("hello")))
    assert not of(events, ReplyAudio) and of(events, ReplyText)[-1].final
    engine.reply_heard(1, 0, 24000)
    reply(engine, UserTurn(2, np.zeros(0, np.float32), text="and now?"))
    first, second = (r.body for r in server.wait_for_requests(2))
    assert first["modalities"] == ["text"] and "audio" not in first
    assert "text" in first["messages"][0]["content"]  # the text system prompt
    assistant, user = second["messages"][2:]
    assert assistant == {"role": "assistant",
                         "content": of(events, ReplyText)[-1].text.strip()}
    assert user == {"role": "user", "content": "and now?"}
