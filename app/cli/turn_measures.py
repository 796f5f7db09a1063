"""What ``bench turn-taking`` measures in one simulated conversation, against the truth.

All times are seconds on the input's timeline; delays are milliseconds from the true onset or
end of the utterance they belong to.
- onset detection delay: first reaction of the app (state USER_SPEAKING or INTERRUPTED) − true
  onset;
- at the speaker, for a barge-in: the reply's gain is measured sample-exactly against what the
  engine sent (2 ms windows where the reply has sound): ``to_-20dB`` is the first window after
  which the reply never again plays louder than 20 dB under its own level, ``to_silence`` the
  last non-zero output sample of that reply;
- turn audio start: first sample of the turn's audio (``user_audio_from_s``) − true onset
  (≤ 0: no word lost);
- turn end: the endpoint − true end of speech;
- missed / split turns: an utterance meant as a turn got no turn / more than one; false turns:
  turns that start in no utterance;
- false interruptions: the pipeline's own count; self-interruptions: a reply stopped (or its
  reply interrupted) while nobody was talking;
- replies withdrawn: the end-of-turn model ended a turn early, its reply started, and the
  person went on (the turn resumed); ``withdrawn_heard_ms``: how much of each such reply
  reached the speaker before it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.cli.turn_corpus import TurnScenario, Utterance
from app.conversation.simulation import SimulationResult
from app.events import (
    ConversationState,
    ReplyFinished,
    StateChanged,
    UserSpeechStarted,
    UserTurnEnded,
)

WINDOW_S = 0.002
SOUND_FLOOR = 10 ** (-55 / 20)  # reply windows quieter than this carry no gain information
MATCH_BEFORE_S = 0.3  # a turn may start this long before the true onset (pre-roll, noise)
# A reply that plays to its end within this of a barge-in's onset fell silent as soon as a
# stop would have had to (the silence target): the person heard it end, not go on.
ENDED_IN_TIME_S = 0.15


@dataclass
class Turn:
    turn_id: int
    onset_s: float
    audio_from_s: float | None
    endpoint_s: float | None = None


@dataclass
class Figures:
    detection_ms: list[float] = field(default_factory=list)
    to_20db_ms: list[float] = field(default_factory=list)
    to_silence_ms: list[float] = field(default_factory=list)
    audio_start_ms: list[float] = field(default_factory=list)
    turn_end_ms: list[float] = field(default_factory=list)
    # where the app took the words to end (the turn's ``user_end_s``), after the true end
    speech_end_ms: list[float] = field(default_factory=list)
    missed: int = 0
    split: int = 0
    false_turns: int = 0
    false_interruptions: int = 0
    self_interruptions: int = 0
    replies: int = 0
    barge_ins: int = 0
    stops_missed: int = 0
    barge_ins_unplayed: int = 0  # no reply audible at the onset: nothing to stop
    reply_after_end_ms: list[float] = field(default_factory=list)  # complete turns
    hesitations: int = 0
    hesitations_kept: int = 0  # stayed one turn
    decision_cpu_ms: list[float] = field(default_factory=list)
    cpu_pct_of_core: list[float] = field(default_factory=list)
    replies_withdrawn: int = 0
    withdrawn_heard_ms: list[float] = field(default_factory=list)

    def merge(self, other: Figures) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


def turns_of(result: SimulationResult) -> list[Turn]:
    turns: dict[int, Turn] = {}
    for event in result.events:
        if isinstance(event, UserSpeechStarted):
            turns[event.turn_id] = Turn(event.turn_id, event.t_s, event.audio_from_s)
        elif isinstance(event, UserTurnEnded) and event.turn_id in turns:
            turns[event.turn_id].endpoint_s = event.t_s
    return list(turns.values())


def detections(result: SimulationResult) -> list[float]:
    reacting = (ConversationState.USER_SPEAKING, ConversationState.INTERRUPTED)
    return [e.t_s for e in result.events if isinstance(e, StateChanged) and e.state in reacting]


def match(utterance: Utterance, turns: list[Turn]) -> list[Turn]:
    return [t for t in turns
            if utterance.start_s - MATCH_BEFORE_S <= t.onset_s <= utterance.end_s]


def measure(scenario: TurnScenario, result: SimulationResult,
            replies: dict[int, np.ndarray]) -> Figures:
    figures = Figures(false_interruptions=result.false_interruptions)
    turns = turns_of(result)
    reactions = detections(result)
    for utterance in scenario.utterances:
        if utterance.kind == "ignored":
            continue
        matched = match(utterance, turns)
        figures.missed += not matched
        figures.split += max(0, len(matched) - 1)
        later = [t for t in reactions if t >= utterance.start_s - MATCH_BEFORE_S]
        if later and matched:
            figures.detection_ms.append((later[0] - utterance.start_s) * 1000)
        if matched and matched[0].audio_from_s is not None:
            figures.audio_start_ms.append((matched[0].audio_from_s - utterance.start_s) * 1000)
        if matched and matched[-1].endpoint_s is not None:
            figures.turn_end_ms.append((matched[-1].endpoint_s - utterance.end_s) * 1000)
        record = next((r for r in result.records
                       if matched and r.turn_id == matched[-1].turn_id), None)
        if record is not None:
            figures.speech_end_ms.append((record.user_end_s - utterance.end_s) * 1000)
        if utterance.hesitation_s:
            figures.hesitations += 1
            figures.hesitations_kept += len(matched) == 1
        if (utterance.kind == "turn" and not utterance.hesitation_s and record is not None
                and record.first_audible_s):
            figures.reply_after_end_ms.append((record.first_audible_s - utterance.end_s) * 1000)
    spoken = [u for u in scenario.utterances if u.kind != "ignored"]
    figures.false_turns = sum(1 for t in turns if not any(t in match(u, turns) for u in spoken))
    withdrawn = withdrawals(result)
    figures.withdrawn_heard_ms = [heard for heard, _ in withdrawn]
    figures.replies_withdrawn = len(withdrawn)
    figures.self_interruptions += sum(1 for _, at in withdrawn if not _talking(scenario, at))
    decisions = [getattr(r, "endpoint_decision", None) for r in result.records]
    figures.decision_cpu_ms = [d.model_ms for d in decisions
                               if d is not None and d.model_ms is not None]
    _stops(scenario, result, replies, figures)
    return figures


def withdrawals(result: SimulationResult) -> list[tuple[float, float]]:
    """Turns that went on after an early end (``UserSpeechStarted`` again for the same turn):
    how much of the withdrawn reply was played (ms; its ``ReplyFinished`` comes just before or
    just after) and when the turn resumed (s): the state turning to USER_SPEAKING that comes
    with it (just after; the state before it may be the turn's own start, long before). A
    resumption while nobody talked is a self-interruption."""
    started: set[int] = set()
    heard: dict[int, float] = {}  # turn → heard ms of its reply since its last end
    waiting: dict[int, int] = {}  # turn → index in ``out`` still missing its heard ms
    out: list[list[float]] = []
    resuming: int | None = None  # index in ``out`` still missing its time
    speaking_s = 0.0
    for event in result.events:
        if isinstance(event, StateChanged) and event.state == ConversationState.USER_SPEAKING:
            speaking_s = event.t_s
            if resuming is not None:
                out[resuming][1], resuming = speaking_s, None
        elif isinstance(event, UserTurnEnded):
            heard.pop(event.turn_id, None)
        elif isinstance(event, ReplyFinished):
            if event.turn_id in waiting:
                out[waiting.pop(event.turn_id)][0] = event.heard_ms
            else:
                heard[event.turn_id] = event.heard_ms
        elif isinstance(event, UserSpeechStarted):
            if event.turn_id in started:
                if event.turn_id not in heard:  # its reply's end is still to come
                    waiting[event.turn_id] = len(out)
                resuming = len(out)
                out.append([heard.pop(event.turn_id, 0.0), speaking_s])
            started.add(event.turn_id)
    return [(a, b) for a, b in out]


def _talking(scenario: TurnScenario, t_s: float) -> bool:
    return any(u.start_s - 0.1 <= t_s <= u.end_s + 0.1 for u in scenario.utterances)


def _stops(scenario: TurnScenario, result: SimulationResult, replies: dict[int, np.ndarray],
           figures: Figures) -> None:
    records = {r.turn_id: r for r in result.records}
    figures.replies = sum(1 for r in records.values() if r.first_audible_s is not None)
    for record in records.values():
        if record.barge_in is not None and not _talking(scenario, record.barge_in.onset_s):
            figures.self_interruptions += 1
    for utterance in scenario.utterances:
        if utterance.kind != "barge_in":
            continue
        figures.barge_ins += 1
        playing = [r for r in records.values() if r.first_audible_s is not None
                   and r.first_audible_s <= utterance.start_s
                   <= r.first_audible_s + r.heard_ms / 1000 + 0.05]
        if not playing:  # the reply had ended or not begun: the talk is a turn, not a stop
            figures.barge_ins_unplayed += 1  # (what went wrong before it is counted there)
            continue
        if playing[0].turn_id not in replies:
            figures.stops_missed += 1
            continue
        record = playing[0]
        later = [r.first_audible_s for r in records.values()
                 if r.first_audible_s is not None and r.first_audible_s > utterance.start_s]
        output = result.output[:round(min(later, default=1e9) * result.output_rate_hz)]
        times = reply_gain_times(output, result.output_rate_hz, replies[record.turn_id],
                                 record.first_audible_s or 0.0, utterance.start_s)
        if times is None:  # played to its end: a stop missed, unless the end came as soon
            end_s = (record.first_audible_s or 0.0) + record.heard_ms / 1000
            if end_s - utterance.start_s > ENDED_IN_TIME_S:
                figures.stops_missed += 1
                continue
            times = (max(end_s, utterance.start_s),) * 2
        down_s, silent_s = times
        if silent_s > utterance.end_s + 0.3:  # stopped later, by something else
            figures.stops_missed += 1
            continue
        figures.to_20db_ms.append((down_s - utterance.start_s) * 1000)
        figures.to_silence_ms.append((silent_s - utterance.start_s) * 1000)


def reply_gain_times(output: np.ndarray, rate_hz: int, reply_24k: np.ndarray,
                     audible_s: float, onset_s: float) -> tuple[float, float] | None:
    """(time 20 dB down, time silent) of a reply interrupted after ``onset_s``; None if it
    played on to its end."""
    import soxr

    expected = soxr.resample(reply_24k, 24000, rate_hz).astype(np.float64)
    start = round(audible_s * rate_hz)
    lag = _align(output, expected, start, rate_hz)
    begin = start + lag
    played = output[begin:begin + len(expected)].astype(np.float64)
    nonzero = np.flatnonzero(np.abs(played) > 1e-7)
    if len(nonzero) == 0:
        return None
    silent_s = (begin + nonzero[-1] + 1) / rate_hz
    if silent_s >= (begin + len(expected)) / rate_hz - 0.005:
        return None  # played to its end: not stopped
    window = max(1, int(WINDOW_S * rate_hz))
    first = max(0, (round(onset_s * rate_hz) - begin) // window)
    count = len(played) // window
    loud_after = first * window
    for index in range(first, count):
        part = slice(index * window, (index + 1) * window)
        reference = expected[part]
        energy = float(reference @ reference)
        if energy < window * SOUND_FLOOR**2:
            continue
        gain = float(played[part] @ reference) / energy
        if abs(gain) > 0.1:  # louder than -20 dB
            loud_after = (index + 1) * window
    quiet = [i for i in range(loud_after // window, count)
             if float(expected[i * window:(i + 1) * window] @ expected[i * window:(i + 1) * window])
             >= window * SOUND_FLOOR**2]
    down = quiet[0] * window if quiet else loud_after
    return min((begin + down) / rate_hz, silent_s), silent_s


def _align(output: np.ndarray, expected: np.ndarray, start: int, rate_hz: int) -> int:
    """Lag (samples, ±5 ms) that best lines the played reply up with what the engine sent."""
    span = min(len(expected), int(0.3 * rate_hz))
    reach = int(0.005 * rate_hz)
    reference = expected[:span]
    best, best_lag = -np.inf, 0
    for lag in range(-reach, reach + 1):
        a = start + lag
        if a < 0 or a + span > len(output):
            continue
        score = float(output[a:a + span] @ reference)
        if score > best:
            best, best_lag = score, lag
    return best_lag


def summarise(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "p90": None, "max": None}
    ordered = np.sort(np.asarray(values))
    return {"median": round(float(np.median(ordered)), 1),
            "p90": round(float(np.percentile(ordered, 90)), 1),
            "max": round(float(ordered[-1]), 1)}
