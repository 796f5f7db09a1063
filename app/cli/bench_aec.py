"""Echo cancellation: ERLE, double talk, warm-up leaks and CPU of both AEC libraries, then the
whole voice loop in a simulated room (self-interruptions over 20 replies, barge-in stop).

Part 1, the libraries alone (``pywebrtc-audio`` and livekit's ``AudioProcessingModule``, when
installed), on the same signals: four replies built from the bundled sample's two sentences,
their echo through the simulated room (:mod:`app.audio.simulated_echo`) at each delay and gain,
-60 dBFS microphone noise, the other sentence spoken alone in a pause (near end only) and over
the last reply (double talk). Figures:
- ``erle_db``: echo return loss enhancement over the echo-only frames of replies 2-3;
- ``warmup_vad_frames`` / ``vad_frames_after``: silero frames ≥ 0.5 on the output during the
  first reply / on echo-only frames afterwards (either starts a false barge-in);
- warm-up leaks: every available utterance played alone as the first reply to a fresh
  canceller (the bundled sentences, plus the test fixtures' espeak-ng utterances when run from
  a checkout): the longest run of silero frames ≥ 0.5 on the output, the earliest start and
  the latest end of any such run (the warm-up guard must cover them);
- double talk: ``dt_onset_frames`` (silero's onset on the output minus on the clean voice, in
  32 ms frames), ``dt_voiced_kept`` (voiced frames kept), ``dt_corr`` (correlation with the
  clean voice), ``dt_level_db``; near end alone: ``near_corr``, ``near_level_db``;
- ``cpu_ms_per_s``: process CPU time per second of 16 kHz audio (includes the dither/FFI).

Part 2, the app's canceller in the real pipeline (echo engine, simulated room, virtual clock):
20 replies per condition with nobody talking over them (a self-interruption is any reply
stopped; a self-answer any turn beyond the 20 spoken), and barge-ins over replies 3-5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.cli.bench_common import markdown_table, median_1, nearest
from app.cli.options import InputFolder, OutputFile, count

RATE = 16000
DELAYS_MS = (20, 60, 120)
GAINS_DB = (0, -6, -10)
FRAME = 512  # silero's frame
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "audio"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--library", action="append", choices=["pywebrtc-audio", "livekit"],
                        help="measure only this library (repeatable; default: both if installed)")
    parser.add_argument("--replies", type=count(1, 10_000), default=20,
                        help="replies per pipeline condition")
    parser.add_argument("--no-pipeline", action="store_true", help="only part 1")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")
    parser.add_argument("--speech-dir", type=InputFolder("folder of WAV files"),
                        default=FIXTURES,
                        help="more 16 kHz utterances (WAV) for the warm-up figures "
                             "(default: the test fixtures, when present)")


def _sentences() -> tuple[np.ndarray, np.ndarray]:
    from app.audio.simulated import read_wav
    from app.cli.bench_voice_loop import split_sentences
    from app.conversation.demo import demo_sample

    pcm, rate = read_wav(demo_sample())
    assert rate == RATE
    first, second = split_sentences(pcm[:, 0], rate)[:2]
    return first.copy(), second.copy()


def _room(far: np.ndarray, delay_ms: float, gain_db: float) -> np.ndarray:
    from app.audio.simulated_echo import SimulatedEcho, room_impulse_response

    echo = SimulatedEcho(delay_ms, gain_db)
    response = room_impulse_response(RATE, echo.rir_ms, echo.seed)
    wet = np.convolve(far, response)[:len(far)] * 10 ** (gain_db / 20)
    delay = round(delay_ms * RATE / 1000)
    return np.concatenate([np.zeros(delay), wet])[:len(far)].astype(np.float32)


class Signals:
    """Far end, echo-free voice, and where things are (sample ranges)."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        gap, pause = int(1.0 * RATE), int(2.5 * RATE)
        self.replies: list[tuple[int, int]] = []
        at = int(0.2 * RATE)
        for reply, silence in ((a, gap), (b, pause), (a, gap), (b, gap)):
            self.replies.append((at, at + len(reply)))
            at += len(reply) + silence
        self.far = np.zeros(at, np.float32)
        for (start, end), reply in zip(self.replies, (a, b, a, b), strict=True):
            self.far[start:end] = reply
        self.voice = np.zeros_like(self.far)
        alone = self.replies[1][1] + int(0.4 * RATE)  # the person alone, in the long pause
        self.alone = (alone, alone + len(a))
        over = self.replies[3][0] + int(0.5 * RATE)  # the person talking over the last reply
        length = min(len(a), len(self.far) - over)
        self.over = (over, over + length)
        self.voice[alone:alone + len(a)] = a
        self.voice[over:over + length] = a[:length]
        self.noise = np.random.default_rng(4).normal(0, 10 ** (-60 / 20), len(self.far))


def _probabilities(pcm: np.ndarray) -> np.ndarray:
    from app.vad.silero import SileroScorer

    scorer = SileroScorer()
    return np.array([scorer.score(pcm[i:i + FRAME].astype(np.float32))
                     for i in range(0, len(pcm) - FRAME + 1, FRAME)])


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12))


def _level_db(x: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10((np.sum(x**2) + 1e-12) / (np.sum(y**2) + 1e-12)))


def _frames(span: tuple[int, int]) -> slice:
    return slice(span[0] // FRAME, span[1] // FRAME)


def measure_library(name: str, signals: Signals, delay_ms: float, gain_db: float,
                    voice_probabilities: np.ndarray) -> dict[str, float]:
    from app.audio.aec_kernels import FRAME_SAMPLES, KERNELS

    kernel = KERNELS[name]()
    echo = _room(signals.far, delay_ms, gain_db)
    mic = (echo + signals.voice + signals.noise).astype(np.float32)
    count = len(mic) // FRAME_SAMPLES * FRAME_SAMPLES
    out = np.zeros(len(mic), np.float32)
    started = time.process_time()
    for i in range(0, count, FRAME_SAMPLES):
        out[i:i + FRAME_SAMPLES] = kernel.process(mic[i:i + FRAME_SAMPLES],
                                                  signals.far[i:i + FRAME_SAMPLES])
    cpu_s = time.process_time() - started
    lag = kernel.latency_samples
    out = np.concatenate([out[lag:], np.zeros(lag, np.float32)])  # back on the mic's timeline
    probabilities = _probabilities(out)
    first, second, third = signals.replies[:3]
    echo_only = np.concatenate([np.arange(*second), np.arange(*third)])
    after = np.concatenate([np.arange(*_frames(second).indices(len(probabilities))),
                            np.arange(*_frames(third).indices(len(probabilities)))])
    over, alone = signals.over, signals.alone
    voiced = voice_probabilities[_frames(over)] >= 0.5
    kept = probabilities[_frames(over)] >= 0.5
    return {
        "erle_db": round(_level_db(mic[echo_only], out[echo_only]), 1),
        "warmup_vad_frames": int(np.sum(probabilities[_frames(first)] >= 0.5)),
        "vad_frames_after": int(np.sum(probabilities[after] >= 0.5)),
        "dt_onset_frames": int(np.argmax(kept) - np.argmax(voiced)) if kept.any() else 99,
        "dt_voiced_kept": round(float(np.sum(kept & voiced)) / max(1, int(np.sum(voiced))), 2),
        "dt_corr": round(_corr(out[slice(*over)], signals.voice[slice(*over)]), 2),
        "dt_level_db": round(_level_db(out[slice(*over)], signals.voice[slice(*over)]), 1),
        "near_corr": round(_corr(out[slice(*alone)], signals.voice[slice(*alone)]), 2),
        "near_level_db": round(_level_db(out[slice(*alone)], signals.voice[slice(*alone)]), 1),
        "cpu_ms_per_s": round(cpu_s / (count / RATE) * 1000, 1),
    }


def _available(names: list[str]) -> list[str]:
    from app.audio.aec_kernels import KERNELS

    found = []
    for name in names:
        try:
            KERNELS[name]()
        except ImportError as exc:
            print(f"{name}: not installed ({exc}); skipped")
            continue
        found.append(name)
    return found


def _runs(flags: np.ndarray) -> tuple[int, int | None, int | None]:
    """(longest run of True, first True index, one past the last True index)."""
    longest = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    hits = np.flatnonzero(flags)
    return longest, (int(hits[0]) if len(hits) else None), (
        int(hits[-1]) + 1 if len(hits) else None)


def warmup_leaks(names: list[str], utterances: dict[str, np.ndarray]) -> dict[str, Any]:
    """Each utterance as the first reply of a fresh canceller, echo only."""
    from app.audio.aec_kernels import FRAME_SAMPLES, KERNELS

    results: dict[str, Any] = {}
    noise = np.random.default_rng(5)
    for name in names:
        runs = []
        for utterance in utterances.values():
            far = np.concatenate([utterance, np.zeros(RATE // 2, np.float32)])
            for delay in DELAYS_MS:
                for gain in GAINS_DB:
                    mic = (_room(far, delay, gain)
                           + noise.normal(0, 10 ** (-60 / 20), len(far))).astype(np.float32)
                    kernel = KERNELS[name]()
                    count = len(far) // FRAME_SAMPLES * FRAME_SAMPLES
                    out = np.concatenate([kernel.process(mic[:count], far[:count])
                                          [kernel.latency_samples:], np.zeros(1, np.float32)])
                    runs.append(_runs(_probabilities(out) >= 0.5))
        leaks = [run for run in runs if run[0] > 0]
        frame_ms = FRAME * 1000 // RATE
        results[name] = {
            "first_replies": len(runs), "with_leak": len(leaks),
            "longest_leak_ms": max((r[0] for r in leaks), default=0) * frame_ms,
            "earliest_leak_start_ms": min((r[1] * frame_ms for r in leaks if r[1] is not None),
                                          default=None),
            "latest_leak_end_ms": max((r[2] * frame_ms for r in leaks if r[2] is not None),
                                      default=None)}
    return results


def _utterances(a: np.ndarray, b: np.ndarray, folder: Path | None) -> dict[str, np.ndarray]:
    from app.audio.simulated import read_wav

    found = {"sample sentence 1": a, "sample sentence 2": b}
    for path in sorted(folder.glob("*.wav")) if folder and folder.is_dir() else []:
        pcm, rate = read_wav(path)
        if rate == RATE:
            found[path.stem] = pcm[:, 0].copy()
    return found


def part_libraries(names: list[str], a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    signals = Signals(a, b)
    voice_probabilities = _probabilities(signals.voice + signals.noise)
    results: dict[str, Any] = {}
    for name in names:
        rows = {f"{d} ms, {g} dB": measure_library(name, signals, d, g, voice_probabilities)
                for d in DELAYS_MS for g in GAINS_DB}
        keys = next(iter(rows.values())).keys()
        mean = {k: round(statistics.fmean(r[k] for r in rows.values()), 2) for k in keys}
        worst = {"erle_db": min(r["erle_db"] for r in rows.values()),
                 "warmup_vad_frames": max(r["warmup_vad_frames"] for r in rows.values()),
                 "vad_frames_after": max(r["vad_frames_after"] for r in rows.values()),
                 "dt_onset_frames": max(r["dt_onset_frames"] for r in rows.values()),
                 "cpu_ms_per_s": max(r["cpu_ms_per_s"] for r in rows.values())}
        results[name] = {"conditions": rows, "mean": mean, "worst": worst}
    return results


def replies_track(a: np.ndarray, b: np.ndarray, replies: int) -> tuple[np.ndarray, int]:
    """The person says ``replies`` sentences, each answered (echo engine) before the next."""
    parts, at = [], 0.5
    for index in range(replies):
        sentence = (a, b)[index % 2]
        parts.append((at, sentence))
        at += 2 * len(sentence) / RATE + 0.6 + 1.2
    track = np.zeros(int((at + 1.0) * RATE), np.float32)
    for start, sentence in parts:
        track[int(start * RATE):int(start * RATE) + len(sentence)] += sentence
    return track, replies


def barge_in_track(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Two plain turns, then three sentences each talked over 0.6 s into its reply."""
    parts, truth, at = [], [], 0.5
    for index in range(2):
        sentence = (a, b)[index % 2]
        parts.append((at, sentence))
        at += 2 * len(sentence) / RATE + 0.6 + 1.2
    for _ in range(3):
        parts.append((at, a))
        over = at + len(a) / RATE + 0.53 + 0.6
        parts.append((over, b))
        truth.append(over)
        at = over + 2 * len(b) / RATE + 0.6 + 1.5
    track = np.zeros(int((at + 1.0) * RATE), np.float32)
    for start, sentence in parts:
        track[int(start * RATE):int(start * RATE) + len(sentence)] += sentence
    return track, truth


def _simulate(track: np.ndarray, mode: str, kernel_name: str, delay_ms: float | None,
              gain_db: float) -> tuple[Any, float]:
    from app.audio.aec import AecStage
    from app.audio.aec_kernels import KERNELS
    from app.audio.simulated import SimulatedMicrophone
    from app.audio.simulated_echo import SimulatedEcho
    from app.conversation.simulation import SimulationOptions, run_simulation
    from app.engine.echo import EchoEngine
    from app.settings import Settings

    class TimedStage(AecStage):
        cpu_s = 0.0

        def process(self, mic: np.ndarray, adc_time_s: float) -> np.ndarray:
            started = time.process_time()
            try:
                return super().process(mic, adc_time_s)
            finally:
                TimedStage.cpu_s += time.process_time() - started

    TimedStage.cpu_s = 0.0
    settings = (Settings().with_value("echo.mode", mode)
                .with_value("engine.speculative_start", False))
    echo = SimulatedEcho(delay_ms, gain_db) if delay_ms is not None else None
    result = run_simulation(
        settings, EchoEngine(chunk_delay_ms=20), SimulatedMicrophone(track, RATE),
        SimulationOptions(charge_compute=False, record_output=False, echo=echo),
        echo_canceller=TimedStage("headset", kernel_factory=KERNELS[kernel_name]))
    return result, TimedStage.cpu_s / result.simulated_s * 1000


def part_pipeline(kernel_name: str, a: np.ndarray, b: np.ndarray,
                  replies: int) -> dict[str, Any]:
    from app.events import ReplyFinished, UserSpeechStarted

    track, spoken = replies_track(a, b, replies)
    rows: dict[str, Any] = {}
    conditions = [(d, g, "automatic") for d in DELAYS_MS for g in GAINS_DB]
    conditions.append((60, -6, "headset"))  # no canceller: what the problem looks like
    for delay, gain, mode in conditions:
        result, stage_ms = _simulate(track, mode, kernel_name, delay, gain)
        turns = sum(isinstance(e, UserSpeechStarted) for e in result.events)
        stopped = sum(isinstance(e, ReplyFinished) and e.interrupted for e in result.events)
        rows[f"{delay} ms, {gain} dB, {mode}"] = {
            "replies_heard": sum(isinstance(e, ReplyFinished) for e in result.events),
            "self_interruptions": stopped, "self_answers": max(0, turns - spoken),
            "false_interruptions": result.false_interruptions,
            "erle_db": result.echo.get("erle_db"),
            "stage_cpu_ms_per_s": round(stage_ms, 2)}
    barge_track, truth = barge_in_track(a, b)
    barge: dict[str, Any] = {}
    rooms: list[tuple[float | None, float]] = [(None, 0.0)]
    rooms += [(float(d), float(g)) for d in DELAYS_MS for g in (0, -10)]
    for room_delay, room_gain in rooms:
        result, _ = _simulate(barge_track, "automatic", kernel_name, room_delay, room_gain)
        records = [r.barge_in for r in result.records if r.barge_in is not None]
        from_truth = [(r.silent_s - nearest(truth, r.onset_s)) * 1000 for r in records]
        name = "no echo" if room_delay is None else f"{room_delay:.0f} ms, {room_gain:.0f} dB"
        barge[name] = {
            "barge_ins": f"{len(records)}/{len(truth)}",
            "stop_ms_median": median_1([r.stop_latency_ms for r in records]),
            "stop_from_true_onset_ms_median": median_1(from_truth),
            "false_interruptions": result.false_interruptions}
    return {"replies": rows, "barge_in": barge}


def _table(rows: dict[str, dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    for line in markdown_table("condition", list(next(iter(rows.values())).keys()), rows):
        print(line)


def run(args: argparse.Namespace) -> int:
    from app.audio.aec_kernels import default_kernel

    a, b = _sentences()
    names = _available(args.library or ["pywebrtc-audio", "livekit"])
    figures: dict[str, Any] = {"libraries": part_libraries(names, a, b)}
    for name, result in figures["libraries"].items():
        _table(result["conditions"], f"{name}: per condition (delay, gain)")
        _table({"mean": result["mean"], "worst": {**dict.fromkeys(result["mean"]),
                                                   **result["worst"]}}, f"{name}: summary")
    utterances = _utterances(a, b, args.speech_dir)
    figures["warmup"] = warmup_leaks(names, utterances)
    _table(figures["warmup"], f"warm-up leaks: {len(utterances)} utterances × "
                              f"{len(DELAYS_MS) * len(GAINS_DB)} rooms as first replies")
    kept = default_kernel().name
    if not args.no_pipeline:
        for name in names if args.library else [kept]:
            pipeline = part_pipeline(name, a, b, args.replies)
            figures.setdefault("pipeline", {})[name] = pipeline
            _table(pipeline["replies"], f"pipeline with {name}: {args.replies} replies")
            _table(pipeline["barge_in"], f"pipeline with {name}: barge-ins (3 per condition)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0
