"""Remote engine: what the HTTP/SSE path adds to first audio and to the barge-in stop.

Against the stand-in MOSS-Speech server on loopback (its replies are the echo engine's, so both
sides do the same audio work), compared with the local echo engine, on the two sentences of
the bundled sample (real speech) taken in turn:

- first audio: ``respond()`` called → first ``ReplyAudio`` out of the engine. The remote side
  pays the request (audio as base64 WAV in JSON), the server's checks and decoding, and the SSE
  parse. Two regimes: single turns (no history, ~100 KiB requests) and a conversation whose
  history grows (every reply heard in full) up to the 512-row budget (~1 MiB requests, all of
  it decoded again by the server at every turn, as sglang-omni does: it keeps no state). The
  remote stages (upload, server first byte, first audio) split the time. Target: overhead of
  the medians ≤ 15 ms.
- barge-in stop: ``cancel`` set mid-reply → the engine's reply over (``ReplyDone(cancelled)``),
  i.e. the engine thread free for the next turn; the server paces its audio at real time so the
  reply is still streaming. Also when the server saw the connection close (its request
  aborted). Target: overhead ≤ 5 ms. (What the person hears stop is the player's flush, which
  is the same for every engine: ``bench voice-loop`` measures it.)

Needs the dev extra (starlette, sse-starlette, uvicorn) for the stand-in.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.cli.bench_common import markdown_table, median_1
from app.engine.base import Engine, ReplyAudio, ReplyDone, UserTurn


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from app.cli.options import OutputFile, count

    parser.add_argument("--turns", type=count(1, 100_000), default=60,
                        help="first-audio turns per engine")
    parser.add_argument("--barge-ins", type=count(1, 100_000), default=30,
                        help="barge-ins per engine")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")


def first_audio_ms(engine: Engine, turn: UserTurn) -> float:
    started = time.perf_counter()
    first = None
    for event in engine.respond(turn, threading.Event()):
        if first is None and isinstance(event, ReplyAudio):
            first = (time.perf_counter() - started) * 1000
    if first is None:
        raise RuntimeError(f"turn {turn.turn_id}: no audio came back")
    return first


def stop_ms(engine: Engine, turn: UserTurn) -> tuple[float, float]:
    """(cancel → reply over, ms; cancel set at, perf_counter)."""
    cancel = threading.Event()
    events = engine.respond(turn, cancel)
    for event in events:
        if isinstance(event, ReplyAudio):
            break
    started = time.perf_counter()
    cancel.set()
    rest = list(events)
    ended = time.perf_counter()
    if rest[-1:] != [ReplyDone(turn.turn_id, cancelled=True)]:
        raise RuntimeError(f"turn {turn.turn_id} did not end as cancelled: {rest[-1:]}")
    return (ended - started) * 1000, started


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {"median": median_1(values), "p90": round(ordered[int(0.9 * (len(values) - 1))], 1),
            "n": len(values)}


def run(args: argparse.Namespace) -> int:
    try:
        from app.engine.remote.standin import StandInServer
    except ImportError as exc:
        print(f"bench remote: the stand-in server needs the dev extra ({exc.name} is missing): "
              "pip install -e '.[dev]'")
        return 2
    figures = measure(StandInServer, args.turns, args.barge_ins)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def turns_from_sample() -> list[np.ndarray]:
    from app.audio.simulated import read_wav
    from app.cli.bench_voice_loop import split_sentences
    from app.conversation.demo import demo_sample

    pcm, rate = read_wav(demo_sample())
    return split_sentences(pcm[:, 0].astype(np.float32), rate)[:2]


def first_audio_runs(remote: Any, echo: Engine, sentences: list[np.ndarray], turns: int,
                     server: Any, regime: str) -> dict[str, Any]:
    """First audio of both engines, turn by turn (interleaved, so load hits both alike)."""
    from app.engine.base import StageTimed

    times: dict[str, list[float]] = {"echo": [], "remote": []}
    stages: dict[str, list[float]] = {}
    sizes = []
    remote.reset()
    for turn_id in range(1, turns + 4):  # 3 warm-up turns (imports, the connection)
        turn = UserTurn(turn_id, sentences[turn_id % len(sentences)])
        echo_ms = first_audio_ms(echo, turn)
        started = time.perf_counter()
        remote_ms, timed = None, {}
        for event in remote.respond(turn, threading.Event()):
            if isinstance(event, StageTimed):
                timed[event.stage] = event.duration_ms
            elif remote_ms is None and isinstance(event, ReplyAudio):
                remote_ms = (time.perf_counter() - started) * 1000
        if regime == "conversation":
            remote.reply_heard(turn_id, 10**7, 24000)
        else:
            remote.reset()
        if turn_id > 3 and remote_ms is not None:
            times["echo"].append(echo_ms)
            times["remote"].append(remote_ms)
            for stage, ms in timed.items():
                stages.setdefault(stage, []).append(ms)
            sizes.append(len(json.dumps(server.records[-1].body)))
    return {"echo_ms": summary(times["echo"]), "remote_ms": summary(times["remote"]),
            "overhead_ms": round(statistics.median(times["remote"])
                                 - statistics.median(times["echo"]), 1),
            "stages_ms": {k: median_1(v) for k, v in stages.items()},
            "request_kib": round(statistics.median(sizes) / 1024, 1)}


def measure(server_type: Callable[[], Any], turns: int, barge_ins: int) -> dict[str, Any]:
    from app.engine.echo import EchoEngine
    from app.engine.remote.engine import RemoteEngine
    from app.settings import Settings

    sentences = turns_from_sample()
    with server_type() as server:
        settings = Settings().with_values({"engine.kind": "remote",
                                           "engine.remote_url": server.url})
        remote, echo = RemoteEngine(settings), EchoEngine()
        remote.check_health()
        first = {regime: first_audio_runs(remote, echo, sentences, turns, server, regime)
                 for regime in ("single_turn", "conversation")}
        server.faults.realtime_factor = 1.0  # the reply is still streaming when cancelled
        echo = EchoEngine(chunk_delay_ms=40.0)
        stops: dict[str, list[float]] = {"echo": [], "remote": []}
        aborts = []
        for index in range(barge_ins + 2):
            turn = UserTurn(1000 + index, sentences[index % len(sentences)])
            echo_stop, _ = stop_ms(echo, turn)
            remote_stop, cancelled_at = stop_ms(remote, turn)
            record = server.records[-1]
            if not record.aborted.wait(30) or record.aborted_s is None:
                raise RuntimeError("the stand-in never saw the request aborted")
            remote.reply_heard(turn.turn_id, 4800, 24000)
            if index >= 2:
                stops["echo"].append(echo_stop)
                stops["remote"].append(remote_stop)
                aborts.append((record.aborted_s - cancelled_at) * 1000)
        remote.close()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "first_audio": first,
        "barge_in_stop_ms": {k: summary(v) for k, v in stops.items()},
        "barge_in_stop_overhead_ms": round(statistics.median(stops["remote"])
                                           - statistics.median(stops["echo"]), 2),
        "server_abort_ms": summary(aborts),
    }


def report(figures: dict[str, Any]) -> str:
    rows: dict[str, dict[str, Any]] = {}
    for regime, runs in figures["first_audio"].items():
        stages = runs["stages_ms"]
        rows[f"first audio, {regime.replace('_', ' ')} (ms)"] = {
            "echo (local)": runs["echo_ms"]["median"],
            "remote (loopback)": runs["remote_ms"]["median"],
            "overhead": runs["overhead_ms"], "target": "≤ 15",
            "remote stages: upload / server first byte / first audio": (
                f"{stages.get('upload')} / {stages.get('server_first_byte')} / "
                f"{stages.get('first_audio')}"),
            "request (KiB)": runs["request_kib"]}
    rows.update({
        "barge-in stop (ms)": {"echo (local)": figures["barge_in_stop_ms"]["echo"]["median"],
                               "remote (loopback)":
                                   figures["barge_in_stop_ms"]["remote"]["median"],
                               "overhead": figures["barge_in_stop_overhead_ms"],
                               "target": "≤ 5",
                               "remote stages: upload / server first byte / first audio": None,
                               "request (KiB)": None},
    })
    columns = ["echo (local)", "remote (loopback)", "overhead", "target",
               "remote stages: upload / server first byte / first audio", "request (KiB)"]
    lines = markdown_table("median", columns, rows)
    stop = figures["barge_in_stop_ms"]
    lines += [""]
    for regime, runs in figures["first_audio"].items():
        lines.append(f"first audio p90, {regime.replace('_', ' ')}: echo "
                     f"{runs['echo_ms']['p90']} ms, remote {runs['remote_ms']['p90']} ms "
                     f"({runs['remote_ms']['n']} turns)")
    lines += [f"barge-in stop p90: echo {stop['echo']['p90']} ms, remote "
              f"{stop['remote']['p90']} ms ({stop['remote']['n']} barge-ins); the server saw "
              f"the request aborted {figures['server_abort_ms']['median']} ms after the "
              f"cancel (median; p90 {figures['server_abort_ms']['p90']} ms)"]
    return "\n".join(lines)
