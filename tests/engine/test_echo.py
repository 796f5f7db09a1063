from __future__ import annotations

import threading

import numpy as np
import soxr
from voice_helpers import speech, track

from app.engine.base import ReplyAudio, ReplyDone, ReplyText, StageTimed, UserTurn
from app.engine.echo import EchoEngine, trim_silence


def test_it_is_labelled_as_a_demo() -> None:
    info = EchoEngine().info
    assert info.is_demo and info.name == "Echo demo" and "No model loaded" in info.detail


def test_reply_is_the_trimmed_utterance_at_24_khz_in_chunks() -> None:
    clip = speech("hello")
    pcm = track([(0.8, clip)], 0.8 + len(clip) / 16000 + 0.7)
    events = list(EchoEngine(chunk_ms=40).respond(UserTurn(3, pcm), threading.Event()))
    audio = [e for e in events if isinstance(e, ReplyAudio)]
    assert all(e.sample_rate_hz == 24000 and len(e.pcm) <= 960 for e in audio)
    reply = np.concatenate([e.pcm for e in audio])
    expected = soxr.resample(clip, 16000, 24000)
    assert abs(len(reply) - len(expected)) < 0.12 * 24000  # silence trimmed, short margins
    correlation = np.correlate(reply, expected, mode="valid" if len(reply) >= len(expected)
                               else "full").max()
    assert correlation > 0.9 * float(np.dot(expected, expected))
    kinds = [type(e) for e in events]
    assert kinds[0] is StageTimed and kinds[-2:] == [ReplyText, ReplyDone]
    assert events[-1] == ReplyDone(3)


def test_cancel_is_honoured_within_one_chunk() -> None:
    cancel = threading.Event()
    events = EchoEngine().respond(UserTurn(1, speech("question")), cancel)
    first = [next(events), next(events)]
    assert isinstance(first[1], ReplyAudio)
    cancel.set()
    assert next(events) == ReplyDone(1, cancelled=True)


def test_a_cancel_during_the_artificial_delay_ends_it_at_once() -> None:
    cancel = threading.Event()
    cancel.set()  # a real wait would take 10 s; cancel.wait returns immediately
    events = list(EchoEngine(first_chunk_delay_ms=10_000).respond(
        UserTurn(1, speech("stop")), cancel))
    assert events == [ReplyDone(1, cancelled=True)]


def test_silence_gives_an_empty_reply_and_typed_text_is_echoed() -> None:
    events = list(EchoEngine().respond(UserTurn(1, np.zeros(16000, np.float32)),
                                       threading.Event()))
    assert not [e for e in events if isinstance(e, ReplyAudio)] and events[-1] == ReplyDone(1)
    events = list(EchoEngine().respond(UserTurn(2, np.zeros(0, np.float32), text="hi"),
                                       threading.Event()))
    assert events[0] == ReplyText(2, "(echo demo) hi", final=True)


def test_trim_keeps_the_speech_and_a_short_margin() -> None:
    clip = speech("sea")
    trimmed = trim_silence(track([(1.0, clip)], 3.0), 16000)
    assert len(clip) <= len(trimmed) <= len(clip) + 0.1 * 16000 + 320
