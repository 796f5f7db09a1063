"""Every fault of issue 17 against the stand-in server: each ends the turn with a message a
person can act on (or recovers by itself), and the conversation goes on."""

from __future__ import annotations

import logging
import socket
import threading

import httpx
import numpy as np
import pytest
from voice_helpers import speech

from app.engine.base import (
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    ReplyNotice,
    StageTimed,
    UserTurn,
)
from app.engine.factory import EngineUnavailableError, build_engine
from app.engine.remote.client import RemoteError
from app.engine.remote.standin import StandInServer
from tests.engine.remote.remote_helpers import (
    audio_of,
    make_engine,
    of,
    remote_settings,
    reply,
)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def failure(events: list) -> ReplyFailed:
    assert isinstance(events[-1], ReplyFailed), events[-1]
    assert events[-1].message and events[-1].advice
    return events[-1]


def answered(engine, server: StandInServer, turn_id: int) -> list:
    """One more turn that the server answers in full (the conversation went on)."""
    events = reply(engine, UserTurn(turn_id, speech("hello")))
    assert isinstance(events[-1], ReplyDone) and not events[-1].cancelled, events[-1]
    assert len(audio_of(events)) > 0
    return events


# ---- reaching the server --------------------------------------------------------------------


def test_connection_refused_says_the_server_is_not_running() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    failed = failure(reply(make_engine(url), UserTurn(1, speech("hello"))))
    assert failed.category == "remote"
    assert "connection refused" in failed.message and "is the MOSS-Speech server running" in (
        failed.message)
    assert "docs/remote-engine.md" in failed.advice
    with pytest.raises(EngineUnavailableError) as caught:
        build_engine(remote_settings(url))
    assert caught.value.category == "remote" and "connection refused" in str(caught.value)


def test_an_unknown_server_name_is_a_dns_failure() -> None:
    failed = failure(reply(make_engine("http://moss-server.invalid:8000"),
                           UserTurn(1, speech("hello"))))
    assert "'moss-server.invalid' cannot be found (DNS" in failed.message
    assert "IP address" in failed.advice


def test_https_to_a_plain_http_server_is_a_tls_failure(server: StandInServer) -> None:
    engine = make_engine(server.url.replace("http://", "https://"))
    failed = failure(reply(engine, UserTurn(1, speech("hello"))))
    assert "secure (TLS) connection" in failed.message and "http://" in failed.advice
    assert not server.records  # nothing reached the chat endpoint


def test_health_says_when_the_server_is_not_ready(server: StandInServer) -> None:
    server.faults.health_status = 503
    with pytest.raises(EngineUnavailableError) as caught:
        build_engine(remote_settings(server.url))
    assert "not ready yet" in str(caught.value) and "loading the model" in caught.value.action
    server.faults.health_status = 200
    engine = build_engine(remote_settings(server.url))
    assert engine.info.name == "MOSS-Speech server" and not engine.info.is_demo
    engine.close()
    with pytest.raises(EngineUnavailableError) as caught:
        build_engine(remote_settings(""))
    assert "no server address" in str(caught.value) and "Server address" in caught.value.action


# ---- the server refuses ---------------------------------------------------------------------


def test_401_and_403_say_what_is_wrong_with_the_key(server: StandInServer) -> None:
    server.faults.api_key = "s3cret-key"
    no_key = failure(reply(make_engine(server.url), UserTurn(1, speech("hello"))))
    assert "asks for an API key and none is set" in no_key.message and "401" in no_key.message
    assert "API key" in no_key.advice
    wrong = failure(reply(make_engine(server.url, key="nope"), UserTurn(1, speech("hello"))))
    assert "refused the API key (401" in wrong.message
    engine = make_engine(server.url, key="s3cret-key")
    answered(engine, server, 1)
    assert server.records[-1].headers["authorization"] == "Bearer s3cret-key"
    server.faults.forbidden = True
    denied = failure(reply(engine, UserTurn(2, speech("hello"))))
    assert "denied access (403 Forbidden: This key may not use this model)" in denied.message
    server.faults.forbidden = False
    answered(engine, server, 3)


def test_400_keeps_the_servers_message_and_the_refused_turn_out_of_the_history(
        server: StandInServer) -> None:
    engine = make_engine(server.url)
    answered(engine, server, 1)
    engine.reply_heard(1, 10**6, 24000)
    too_long = np.tile(speech("question"), 21)  # 31 s: the server takes 30 s a turn
    failed = failure(reply(engine, UserTurn(2, too_long)))
    assert failed.category == "input"
    assert "refused this turn (400): Invalid model request: audio turn[1] duration" in (
        failed.message) and "exceeds 30.0s" in failed.message
    engine.reply_heard(2, 0, 24000)
    answered(engine, server, 3)
    roles = [m["role"] for m in server.records[-1].body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # turn 2 never happened


def test_422_lists_the_fields_the_server_could_not_read(server: StandInServer) -> None:
    server.faults.reject = (422, [{"type": "missing", "loc": ["body", "messages"],
                                   "msg": "Field required"}])
    failed = failure(reply(make_engine(server.url), UserTurn(1, speech("hello"))))
    assert failed.category == "input" and "(422): messages: Field required" in failed.message
    # the stand-in's own validation answers as FastAPI does
    server.faults.reject = None
    response = httpx.post(f"{server.url}/v1/chat/completions", json={"stream": True})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "messages"]


def test_a_full_queue_is_asked_again_with_backoff_and_the_person_is_told(
        server: StandInServer) -> None:
    server.faults.busy_responses = 2
    events = reply(make_engine(server.url), UserTurn(1, speech("hello")))
    notices = of(events, ReplyNotice)
    assert [n.category for n in notices] == ["server_busy", "server_busy"]
    assert "queue is full (HTTP 503)" in notices[0].message
    assert "try 2 of 4" in notices[0].message
    assert isinstance(events[-1], ReplyDone) and len(audio_of(events)) > 0
    assert "busy_wait" in [e.stage for e in of(events, StageTimed)]
    assert [r.status for r in server.records] == [503, 503, 200]
    server.faults.busy_responses = 5
    failed = failure(reply(make_engine(server.url, remote_busy_retries=1),
                           UserTurn(2, speech("hello"))))
    assert "stayed busy (queue full) through 2 tries" in failed.message


def test_a_cancel_during_the_busy_wait_ends_the_reply_at_once(server: StandInServer) -> None:
    server.faults.busy_responses = 1
    engine = make_engine(server.url)
    engine.busy_backoff_s = 600.0
    cancel = threading.Event()
    events = engine.respond(UserTurn(1, speech("hello")), cancel)
    assert isinstance(next(events), ReplyNotice)
    cancel.set()
    assert list(events) == [ReplyDone(1, cancelled=True)]


# ---- the stream goes wrong ------------------------------------------------------------------


def test_a_stalled_stream_is_stopped_after_the_stall_timeout(server: StandInServer) -> None:
    server.faults.stall_after_chunks = 1
    engine = make_engine(server.url, remote_stall_timeout_s=0.2)
    events = reply(engine, UserTurn(1, speech("question")))
    failed = failure(events)
    assert "sent nothing for 0.2 s in the middle of a reply" in failed.message
    assert "stall timeout" in failed.advice and len(of(events, ReplyAudio)) == 1
    assert server.records[0].aborted.wait(30)  # the connection was closed
    engine.reply_heard(1, 10**6, 24000)
    server.faults.stall_after_chunks = None
    answered(engine, server, 2)


def test_a_reply_that_never_starts_is_stopped_after_the_first_audio_timeout(
        server: StandInServer) -> None:
    server.faults.first_audio_delay_s = 60.0
    engine = make_engine(server.url, remote_first_audio_timeout_s=0.3)
    failed = failure(reply(engine, UserTurn(1, speech("hello"))))
    assert "did not start a reply within 0.3 s" in failed.message
    assert server.wait_for_requests(1)[0].aborted.wait(30)


def test_a_disconnect_mid_stream_keeps_what_was_heard(server: StandInServer) -> None:
    server.faults.disconnect_after_chunks = 2
    engine = make_engine(server.url)
    events = reply(engine, UserTurn(1, speech("question")))
    failed = failure(events)
    assert failed.category == "remote" and "lost mid-reply" in failed.message
    assert len(of(events, ReplyAudio)) == 2
    engine.reply_heard(1, 10**6, 24000)
    server.faults.disconnect_after_chunks = None
    answered(engine, server, 2)
    assert [m["role"] for m in server.records[-1].body["messages"]] == [
        "system", "user", "assistant", "user"]


def test_the_in_stream_error_object_ends_the_reply_with_the_servers_message(
        server: StandInServer) -> None:
    server.faults.error_after_chunks = 1
    events = reply(make_engine(server.url), UserTurn(1, speech("question")))
    failed = failure(events)
    assert ("failed during the reply: Generation failed during streaming. (stream_error)"
            in failed.message)
    assert len(of(events, ReplyAudio)) == 1


def test_malformed_and_unknown_lines_are_skipped(server: StandInServer) -> None:
    clean = audio_of(answered(make_engine(server.url), server, 1))
    server.faults.malformed_lines = True
    events = answered(make_engine(server.url), server, 2)
    np.testing.assert_array_equal(audio_of(events), clean)


def test_odd_length_audio_deltas_keep_every_sample_in_place(server: StandInServer) -> None:
    clean = audio_of(answered(make_engine(server.url), server, 1))
    server.faults.odd_audio_bytes = True
    events = answered(make_engine(server.url), server, 2)
    np.testing.assert_array_equal(audio_of(events), clean)


# ---- the key stays secret ----------------------------------------------------------------------


def test_the_api_key_never_reaches_a_log(server: StandInServer,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.faults.api_key = "k3y-that-must-not-leak"
    engine = make_engine(server.url, key="k3y-that-must-not-leak")
    engine.check_health()
    answered(engine, server, 1)
    failure(reply(make_engine(server.url, key="wrong-k3y-also-secret"),
                  UserTurn(2, speech("hello"))))
    with pytest.raises(RemoteError):
        make_engine(server.url, key="wrong-k3y-also-secret").check_health()
    assert caplog.records  # httpx and httpcore did log at debug level
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "k3y-that-must-not-leak" not in text and "wrong-k3y-also-secret" not in text


def test_a_server_that_cannot_be_reached_at_start_is_one_banner_with_what_to_do() -> None:
    from app.conversation.engine_switch import swap_events
    from app.conversation.engine_worker import EngineSwapped
    from app.engine.echo import EchoEngine
    from app.events import ErrorReported

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineUnavailableError) as caught:
        build_engine(remote_settings(url))
    error = caught.value
    swapped = EngineSwapped(EchoEngine().info, str(error), error.category, error.action)
    [banner] = [e for e in swap_events(swapped, remote_settings(url))
                if isinstance(e, ErrorReported)]
    assert banner.category == "remote"
    assert banner.message.endswith("is the MOSS-Speech server running?")
    assert "Start the server" in banner.action and "echo demo answers meanwhile" in banner.action
