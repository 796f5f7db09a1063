"""Per-turn latency records on the input's clock, their summary, and JSON-lines export.

Definitions (DESIGN.md "Latency"); all ``_s`` values are seconds from the first input sample:
- ``user_onset_s``: start of the first voiced VAD frame of the turn (push-to-talk: the first
  voiced frame while the key is held, or the start of speech within the pre-roll before the
  press); ``user_end_s``: end of the last voiced frame;
- ``endpoint_s``: when the turn was declared over (VAD endpoint, or push-to-talk release);
- ``engine_first_audio_s``: when the engine's first audio chunk was available (with speculative
  start this can come before the endpoint);
- ``first_audible_s``: DAC time of the first reply sample;
- ``response_latency_ms`` = first audible − user end;
- ``stages_ms``: ``endpoint_wait`` (endpoint − user end), the engine's own stages, and
  ``output_buffer`` (first audible − max(engine first audio, endpoint));
- ``barge_in`` (the reply was audible and the user interrupted it): speech ``onset_s``,
  ``detected_s``, playback ``silent_s`` at the speaker, ``stop_latency_ms`` = silent − onset;
- ``user_audio_from_s``: the first sample of the turn's audio handed to the engine (the
  pre-roll before the onset included): after the true onset means words were lost.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from app.events import BargeInRecord, EndpointDecision, TurnMeasured, TurnRecord

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    onset_s: float
    audio_from_s: float | None = None
    user_end_s: float | None = None
    endpoint_s: float | None = None
    engine_first_audio_s: float | None = None
    first_audible_s: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
    barge_in: tuple[float, float] | None = None  # (onset_s, detected_s)
    decision: EndpointDecision | None = None
    model_ms: float | None = None
    resumed: int = 0  # early ends taken back because the person went on


class TurnMetrics:
    """Collects the timestamps of each turn; ``finished`` turns them into a TurnRecord."""

    def __init__(self, keep_last: int = 256) -> None:
        self.origin_s = 0.0  # clock time of the first input sample
        self.records: deque[TurnRecord] = deque(maxlen=keep_last)
        self.false_interruptions = 0  # this session (see FalseInterruptionDetected)
        self.replies_withdrawn = 0  # this session: early ends taken back (TurnResumed)
        self._pending: dict[int, _Pending] = {}

    def started(self, turn_id: int, onset_s: float, audio_from_s: float | None = None) -> None:
        self._pending[turn_id] = _Pending(onset_s, audio_from_s)

    def ended(self, turn_id: int, user_end_s: float, endpoint_s: float, by: str = "silence",
              probability: float | None = None, waited_for_canceller: bool = False) -> None:
        if pending := self._pending.get(turn_id):
            pending.user_end_s, pending.endpoint_s = user_end_s, endpoint_s
            pending.decision = EndpointDecision(by, round((endpoint_s - user_end_s) * 1000, 3),
                                                probability, pending.model_ms, pending.resumed,
                                                waited_for_canceller)

    def resumed(self, turn_id: int) -> tuple[float, float]:
        """The turn goes on after an early end: what its end and reply set is forgotten;
        returns its (onset, audio start)."""
        self.replies_withdrawn += 1
        pending = self._pending.get(turn_id)
        if pending is None:
            return 0.0, 0.0
        fresh = _Pending(pending.onset_s, pending.audio_from_s, model_ms=pending.model_ms,
                         resumed=pending.resumed + 1)
        self._pending[turn_id] = fresh
        return fresh.onset_s, (fresh.audio_from_s if fresh.audio_from_s is not None
                               else fresh.onset_s)

    def endpoint_model(self, turn_id: int, cost_ms: float) -> None:
        """The end-of-turn model answered for this turn, at this CPU cost."""
        if pending := self._pending.get(turn_id):
            pending.model_ms = round(cost_ms, 3)

    def engine_audio(self, turn_id: int, ready_s: float) -> None:
        pending = self._pending.get(turn_id)
        if pending and pending.engine_first_audio_s is None:
            pending.engine_first_audio_s = ready_s

    def stage(self, turn_id: int, name: str, duration_ms: float) -> None:
        if pending := self._pending.get(turn_id):
            pending.stages_ms[name] = duration_ms

    def audible(self, turn_id: int, t_s: float) -> None:
        pending = self._pending.get(turn_id)
        if pending and pending.first_audible_s is None:
            pending.first_audible_s = t_s

    def interrupted(self, turn_id: int, onset_s: float, detected_s: float) -> None:
        if pending := self._pending.get(turn_id):
            pending.barge_in = (onset_s, detected_s)

    def abandoned(self, turn_id: int) -> None:
        self._pending.pop(turn_id, None)

    def finished(self, turn_id: int, heard_ms: float, silent_s: float) -> TurnRecord | None:
        """The reply is over (played out, failed or silenced at ``silent_s``)."""
        pending = self._pending.pop(turn_id, None)
        if pending is None or pending.user_end_s is None or pending.endpoint_s is None:
            return None
        record = self._record(turn_id, pending, heard_ms, silent_s)
        self.records.append(record)
        log.info("turn %d measured: response latency %s ms, heard %.0f ms%s", turn_id,
                 "–" if record.response_latency_ms is None else f"{record.response_latency_ms:.0f}",
                 heard_ms, "" if record.barge_in is None else
                 f", barge-in stop {record.barge_in.stop_latency_ms:.0f} ms")
        return record

    def _record(self, turn_id: int, p: _Pending, heard_ms: float, silent_s: float) -> TurnRecord:
        assert p.user_end_s is not None and p.endpoint_s is not None
        o = self.origin_s
        stages = {"endpoint_wait": (p.endpoint_s - p.user_end_s) * 1000, **p.stages_ms}
        latency = None
        if p.first_audible_s is not None:
            latency = (p.first_audible_s - p.user_end_s) * 1000
            if p.engine_first_audio_s is not None:
                ready = max(p.engine_first_audio_s, p.endpoint_s)
                stages["output_buffer"] = (p.first_audible_s - ready) * 1000
        barge_in = None
        if p.barge_in is not None and p.first_audible_s is not None:
            onset, detected = p.barge_in
            barge_in = BargeInRecord(onset - o, detected - o, silent_s - o,
                                     (silent_s - onset) * 1000)
        return TurnRecord(
            turn_id=turn_id, user_onset_s=p.onset_s - o, user_end_s=p.user_end_s - o,
            endpoint_s=p.endpoint_s - o,
            engine_first_audio_s=_shift(p.engine_first_audio_s, o),
            first_audible_s=_shift(p.first_audible_s, o), response_latency_ms=latency,
            stages_ms=stages, heard_ms=heard_ms, barge_in=barge_in,
            user_audio_from_s=_shift(p.audio_from_s, o), endpoint_decision=p.decision)


def _shift(value: float | None, origin: float) -> float | None:
    return None if value is None else value - origin


def _round(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _round(v, k) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 6 if key.endswith("_s") else 3)
    return value


def record_to_dict(record: TurnRecord) -> dict[str, Any]:
    """A TurnRecord as the JSON object of the report's ``turns`` list."""
    data = _round(asdict(record))
    data["stages_ms"] = {k: round(v, 3) for k, v in record.stages_ms.items()}
    return data


def _median(values: Iterable[float]) -> float | None:
    values = list(values)
    return round(statistics.median(values), 3) if values else None


def summarize(records: Iterable[TurnRecord], endpoint_silence_ms: float,
              false_interruptions: int = 0, replies_withdrawn: int = 0) -> dict[str, Any]:
    """The report's ``summary``: medians over the turns that have the figure, and the counts
    of false interruptions (speech during a reply that was not confirmed) and of replies
    withdrawn (the end-of-turn model ended a turn early and the person went on)."""
    records = list(records)
    latencies = [r.response_latency_ms for r in records if r.response_latency_ms is not None]
    stops = [r.barge_in.stop_latency_ms for r in records if r.barge_in is not None]
    return {
        "turns": len(records),
        "response_latency_ms_median": _median(latencies),
        "app_overhead_ms_median": _median(x - endpoint_silence_ms for x in latencies),
        "barge_in_stop_ms_median": _median(stops),
        "false_interruptions": false_interruptions,
        "replies_withdrawn": replies_withdrawn,
    }


class JsonLinesWriter:
    """Appends one JSON object per finished turn (for long sessions and live monitoring)."""

    def __init__(self, path: Path | str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, record: TurnRecord) -> None:
        self._file.write(json.dumps(record_to_dict(record)) + "\n")
        self._file.flush()

    def on_event(self, event: object) -> None:
        """A pipeline subscriber: writes every TurnMeasured record."""
        if isinstance(event, TurnMeasured) and not self._file.closed:
            self.write(event.record)

    def close(self) -> None:
        self._file.close()
