"""The MOSS-Speech engine in the whole voice loop (simulated devices, silero VAD, real speech
fixtures): the headless ``converse`` command, barge-in with heard-only history, transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import SimulatedMicrophone, read_wav, write_wav
from app.cli import main
from app.conversation.simulation import SimulationOptions, run_simulation
from app.engine.base import STAGES
from app.events import ErrorReported, TranscriptUpdated
from tests.engine.moss_speech.engine_helpers import make_engine, settings_for


def test_a_wav_question_through_converse_gets_a_spoken_reply_and_a_complete_record(
        engine_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    question = tmp_path / "question.wav"
    write_wav(question, track([(0.3, speech("question"))], 0.3 + duration("question") + 1.0),
              16000)
    out, report_path = tmp_path / "out.wav", tmp_path / "report.json"
    code = main(["converse", "--engine", "moss_speech", "--model-dir",
                 str(engine_folder / "model"), "--codec-dir", str(engine_folder / "codec"),
                 "--voice", str(engine_folder / "voice.wav"), "--input", str(question),
                 "--output", str(out), "--report", str(report_path),
                 "--set", 'engine.precision="fp32"', "--set", "sampling.max_new_rows=30"])
    assert code == 0
    report = json.loads(report_path.read_text())
    [turn] = report["turns"]
    assert set(turn["stages_ms"]) == set(STAGES)  # endpoint wait … output buffer, all there
    assert turn["response_latency_ms"] is not None and turn["heard_ms"] > 2000
    summary = report["summary"]
    assert summary["engine"] == "MOSS-Speech" and summary["engine_is_demo"] is False
    assert summary["errors"] == [] and "CPU" in summary["warnings"][0]
    played, rate = read_wav(out)
    start = int(turn["first_audible_s"] * rate)
    assert np.abs(played[:start - rate // 100]).max() == 0.0  # silent before the reply...
    assert np.abs(played[start:start + rate]).max() > 1e-4  # ...then the reply is heard
    assert "MOSS-Speech: 1 turn(s)" in capsys.readouterr().out


def test_converse_without_a_voice_says_what_to_do(engine_folder: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    question = tmp_path / "q.wav"
    write_wav(question, speech("hello"), 16000)
    code = main(["converse", "--engine", "moss_speech", "--model-dir",
                 str(engine_folder / "model"), "--codec-dir", str(engine_folder / "codec"),
                 "--input", str(question)])
    assert code == 2
    error = capsys.readouterr().err
    assert "no voice prompt is set" in error and "--voice FILE" in error
    assert "Settings" not in error  # command-line advice on the command line (issue 13.7)


def test_barge_in_through_the_voice_loop_keeps_the_heard_part_and_transcripts_arrive(
        engine_folder: Path) -> None:
    settings = settings_for(engine_folder, sampling__max_new_rows=60)
    engine = make_engine(engine_folder, sampling__max_new_rows=60)
    reply_start = 0.5 + duration("hello") + 0.6
    pcm = track([(0.5, speech("hello")), (reply_start + 1.2, speech("stop"))],
                reply_start + 1.2 + duration("stop") + 2.0)
    result = run_simulation(settings, engine, SimulatedMicrophone(pcm, 16000),
                            SimulationOptions(charge_compute=False))
    first, second = result.records
    assert first.barge_in is not None and second.barge_in is None
    assert 300 < first.heard_ms < 59 * 80  # cut off: less than the whole reply was heard
    assert not [e for e in result.events if isinstance(e, ErrorReported)
                and e.category != "slow_device"]
    exchange = engine.memory.exchanges[0]
    assert exchange.assistant is not None
    heard_codes = len(exchange.assistant.content)
    assert abs(heard_codes - first.heard_ms / 80) <= 2  # 12.5 codes per heard second
    assert len(engine.memory.exchanges) == 2
    updates = {(e.turn_id, e.role) for e in result.events
               if isinstance(e, TranscriptUpdated) and e.final}
    assert {(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")} <= updates
