"""The remote engine in the whole voice loop (simulated devices, real speech, silero VAD, the
stand-in server on loopback): a server slower than real time, and a barge-in whose heard part
reaches the next request."""

from __future__ import annotations

import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import SimulatedMicrophone
from app.conversation.simulation import SimulationOptions, run_simulation
from app.engine.remote.standin import StandInServer
from app.events import ErrorReported, ReplyFinished
from tests.engine.remote.remote_helpers import make_engine, remote_settings


def test_a_server_slower_than_real_time_makes_the_player_wait_not_crash(
        server: StandInServer) -> None:
    server.faults.realtime_factor = 1.5  # 400 ms of audio every 600 ms
    pcm = track([(0.5, speech("question"))], 0.5 + duration("question") + 5.0)
    # Paced by the wall clock, as the server is (on the virtual clock a loaded machine can
    # simulate slower than the server streams, and the reply would arrive "in time").
    result = run_simulation(remote_settings(server.url), make_engine(server.url),
                            SimulatedMicrophone(pcm, 16000), SimulationOptions(realtime=True))
    assert result.underruns > 0  # the player ran dry between deltas, and went on
    assert not [e for e in result.events if isinstance(e, ErrorReported)]
    [finished] = [e for e in result.events if isinstance(e, ReplyFinished)]
    assert not finished.interrupted
    assert finished.heard_ms == pytest.approx(duration("question") * 1000, abs=150)
    [record] = result.records
    assert {"upload", "server_first_byte", "first_audio"} <= set(record.stages_ms)


def test_a_barge_in_stops_the_server_and_the_next_request_carries_what_was_heard(
        server: StandInServer) -> None:
    # Slow enough that the simulated user cuts in long before the server is done (the virtual
    # clock charges the engine's waits, while the server keeps its own wall-clock pace).
    server.faults.realtime_factor = 8.0
    reply_start = 0.5 + duration("question") + 0.55
    pcm = track([(0.5, speech("question")), (reply_start + 0.6, speech("stop"))],
                reply_start + 0.6 + duration("stop") + 3.0)

    def answer_the_next_turn_at_once(event: object) -> None:
        if isinstance(event, ReplyFinished) and event.turn_id == 1:
            server.faults.realtime_factor = 0.0

    # a headset: no echo canceller warming up, whose guard would only duck the reply
    settings = remote_settings(server.url, values={"echo.mode": "headset"})
    result = run_simulation(settings, make_engine(server.url), SimulatedMicrophone(pcm, 16000),
                            SimulationOptions(), on_event=answer_the_next_turn_at_once)
    first, second = result.records
    assert first.barge_in is not None and second.response_latency_ms is not None
    records = server.wait_for_requests(2)
    assert records[0].aborted.wait(30) and records[0].chunks_sent < 4
    heard = [m for m in records[1].body["messages"] if m["role"] == "assistant"]
    assert len(heard) == 1  # the part of reply 1 the user heard before cutting in
    finished = [e for e in result.events if isinstance(e, ReplyFinished)]
    assert finished[0].interrupted and 0 < finished[0].heard_ms < duration("question") * 1000
