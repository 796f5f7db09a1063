"""REPORT.json and the human summary of a simulated conversation (``converse``, the demo).

REPORT.json is ``{"turns": [...], "summary": {...}}``: one object per turn (see
:mod:`app.conversation.metrics` for each field) and the medians. The schema is documented in
docs/report-schema.md (``summary.failures``, ``failed_turns``, ``input_peak_dbfs`` and
``no_speech_detected`` included: ``converse`` exits 1 when ``failures`` is not empty).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.conversation.metrics import record_to_dict
from app.conversation.simulation import SimulationResult
from app.events import DeviceLost, ErrorReported, ReplyFinished, TurnRecord

# ErrorReported categories that warn (the run still worked): e.g. a model running on the CPU.
# "bad_audio": the microphone sent NaN/Inf samples, heard as silence.
WARNINGS = frozenset({"slow_device", "bad_audio"})


def build_report(result: SimulationResult, realtime: bool, input_peak_dbfs: float | None = None,
                 input_warnings: Sequence[str] = ()) -> dict[str, Any]:
    summary = result.summary()
    failures = [e for e in result.events
                if isinstance(e, ErrorReported) and e.category not in WARNINGS]
    summary.update({
        "engine": result.engine_info.name,
        "engine_is_demo": result.engine_info.is_demo,
        "endpoint_silence_ms": result.endpoint_silence_ms,
        "input_s": round(result.input_duration_s, 3),
        "simulated_s": round(result.simulated_s, 3),
        "wall_s": round(result.wall_s, 3),
        "realtime": realtime,
        "underruns": result.underruns,
        "replies_interrupted": sum(1 for e in result.events
                                   if isinstance(e, ReplyFinished) and e.interrupted),
        "echo": result.echo,
        "errors": [e.message for e in failures],
        "warnings": [*input_warnings, *(e.message for e in result.events
                                        if isinstance(e, ErrorReported)
                                        and e.category in WARNINGS)],
        "failures": [{"turn_id": e.turn_id, "category": e.category, "message": e.message}
                     for e in failures],
        "failed_turns": sorted({e.turn_id for e in failures if e.turn_id is not None}),
        "input_peak_dbfs": (round(input_peak_dbfs, 1) if input_peak_dbfs is not None
                            and math.isfinite(input_peak_dbfs) else None),
        "no_speech_detected": not result.records,
        "device_events": [
            {"direction": e.direction, "lost": e.device_name, "now_using": e.fallback_name,
             "t_s": round(e.t_s, 6)}
            for e in result.events if isinstance(e, DeviceLost)],
    })
    return {"turns": [record_to_dict(r) for r in result.records], "summary": summary}


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"


def _turn_line(record: TurnRecord) -> str:
    line = (f"turn {record.turn_id}: you spoke {record.user_onset_s:.2f}–{record.user_end_s:.2f}"
            f" s; ")
    if record.first_audible_s is None:
        line += "no reply was heard"
    else:
        line += (f"reply audible at {record.first_audible_s:.2f} s, response latency "
                 f"{_ms(record.response_latency_ms)}")
    if record.barge_in is not None:
        line += (f"; you cut in at {record.barge_in.onset_s:.2f} s and playback was silent "
                 f"{_ms(record.barge_in.stop_latency_ms)} later")
    return line


def no_speech_text(input_peak_dbfs: float | None) -> str:
    """The hint for a run without a single turn, with the input's level."""
    if input_peak_dbfs is None:
        return "no speech detected"
    if not math.isfinite(input_peak_dbfs):
        return "no speech detected (the input is digital silence: every sample is 0)"
    hint = ("; the recording is very quiet: is the right file or microphone used?"
            if input_peak_dbfs < -40 else "")
    return f"no speech detected (input peak {input_peak_dbfs:.0f} dBFS){hint}"


def format_summary(result: SimulationResult, input_name: str,
                   input_peak_dbfs: float | None = None) -> str:
    info = result.engine_info
    demo = " (no model loaded)" if info.is_demo else ""
    speed = result.simulated_s / result.wall_s if result.wall_s > 0 else float("inf")
    summary = result.summary()
    lines = [f"{info.name}{demo}: {summary['turns']} turn(s) from {input_name} "
             f"({result.input_duration_s:.1f} s of input), simulated {result.simulated_s:.1f} s "
             f"in {result.wall_s:.2f} s ({speed:.0f}× real time)"]
    lines += [_turn_line(r) for r in result.records]
    if not result.records:
        lines.append(no_speech_text(input_peak_dbfs))
    lines.append(
        f"median response latency {_ms(summary['response_latency_ms_median'])}, app overhead "
        f"{_ms(summary['app_overhead_ms_median'])} (beyond the "
        f"{result.endpoint_silence_ms:.0f} ms endpoint silence), barge-in stop "
        f"{_ms(summary['barge_in_stop_ms_median'])}, false interruptions "
        f"{summary['false_interruptions']}")
    echo = result.echo
    if echo:
        erle = echo.get("erle_db")
        # Without an echo the canceller passes the microphone through: an ERLE means nothing.
        result_text = (", no echo heard" if echo.get("echo_heard") is False
                       else f", ERLE {erle:.0f} dB" if erle is not None else "")
        lines.append(f"echo: {echo.get('mode')}" + (
            f", {echo['canceller']}{result_text}" if echo.get("canceller") else ""))
    lines += [f"{'warning' if e.category in WARNINGS else 'error'}: {e.message} {e.action}"
              .rstrip() for e in result.events if isinstance(e, ErrorReported)]
    lines += [f"device: {e.direction} '{e.device_name}' lost, now using "
              f"{e.fallback_name or 'nothing'}" for e in result.events
              if isinstance(e, DeviceLost)]
    return "\n".join(lines)
