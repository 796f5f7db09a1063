"""Voice loop: response latency, app overhead, barge-in stop over scenarios; VAD and loop cost.

Scenarios are built from the two sentences of the bundled sample, placed at known times, so
latencies are also reported against the true end of speech (not only the VAD's view). The
engine is the echo demo (instant) except in the "slow_engine" scenarios, whose 500 ms first
chunk is real wall time charged to the virtual clock (with and without speculative start).
Push-to-talk and the slow engines are reported but left out of the overall medians, which are
the targets' "default settings" figures. Simulated devices: 10 ms blocks, 10 ms output latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.cli.bench_common import markdown_table, median_1, nearest
from app.cli.options import OutputFile, count, seconds

SILENCE_GAP_S = 0.3  # quieter stretches longer than this separate sentences of the sample
SCENARIOS = ("single_turn", "two_turns", "two_turns_noise_-45dBFS", "two_turns_48k_stereo",
             "barge_in", "barge_in_early", "push_to_talk", "slow_engine_500ms",
             "slow_engine_500ms_no_speculation")  # build_scenarios' names, in order


@dataclass
class Scenario:
    name: str
    pcm: np.ndarray  # [T, C]
    rate_hz: int
    speech: list[tuple[float, float]]  # true (start_s, end_s) of each placed sentence
    ptt: tuple[tuple[float, float], ...] = ()
    first_chunk_delay_ms: float = 0.0
    counts_for_targets: bool = True
    overrides: tuple[tuple[str, object], ...] = ()
    results: list[Any] = field(default_factory=list)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=count(1, 1000), default=3, help="runs per scenario")
    parser.add_argument("--idle-s", type=seconds(0, 3600), default=60.0,
                        help="seconds of always-listening idle input for the loop-cost figure")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")
    parser.add_argument("--only", action="append", metavar="SCENARIO", choices=SCENARIOS,
                        help="run only these scenarios (repeatable): " + ", ".join(SCENARIOS))


def split_sentences(pcm: np.ndarray, rate_hz: int) -> list[np.ndarray]:
    """Cut a recording at quiet stretches (10 ms windows under -45 dBFS for > 0.3 s)."""
    window = rate_hz // 100
    count = len(pcm) // window
    rms = np.sqrt(np.mean(np.square(pcm[: count * window].reshape(count, window)), axis=1))
    loud = 20 * np.log10(np.maximum(rms, 1e-10)) > -45.0
    sentences, start, quiet = [], None, 0
    for index, is_loud in enumerate(loud):
        if is_loud:
            start = index if start is None else start
            quiet = 0
        elif start is not None:
            quiet += 1
            if quiet * 0.01 > SILENCE_GAP_S:
                sentences.append(pcm[start * window:(index - quiet + 1) * window])
                start = None
    if start is not None:
        sentences.append(pcm[start * window:])
    return sentences


def place(parts: list[tuple[float, np.ndarray]], total_s: float,
          rate_hz: int = 16000) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Mono 16 kHz track with each sentence starting at its time; returns track and truth."""
    track = np.zeros(int(total_s * rate_hz), np.float32)
    truth = []
    for start_s, sentence in parts:
        start = int(start_s * rate_hz)
        track[start:start + len(sentence)] += sentence
        truth.append((start_s, start_s + len(sentence) / rate_hz))
    return track, truth


def build_scenarios(a: np.ndarray, b: np.ndarray) -> list[Scenario]:
    from app.audio.resample import resample

    la, lb = len(a) / 16000, len(b) / 16000
    reply_a = 0.5 + la + 0.53  # about when the echo of `a` becomes audible
    out = []
    track, truth = place([(0.5, a)], 0.5 + la + 3.0)
    out.append(Scenario("single_turn", track[:, None], 16000, truth))
    track, truth = place([(0.5, a), (reply_a + la + 1.0, b)], reply_a + la + lb + 4.0)
    out.append(Scenario("two_turns", track[:, None], 16000, truth))
    rng = np.random.default_rng(7)
    noisy = track + rng.normal(0, 10 ** (-45 / 20), len(track)).astype(np.float32)
    out.append(Scenario("two_turns_noise_-45dBFS", noisy[:, None], 16000, truth))
    stereo = resample(track, 16000, 48000)
    out.append(Scenario("two_turns_48k_stereo", np.stack([stereo, 0.8 * stereo], 1), 48000,
                        truth))
    for name, into_reply in (("barge_in", 0.6), ("barge_in_early", 0.15)):
        track, truth = place([(0.5, a), (reply_a + into_reply, b)],
                             reply_a + into_reply + lb + 3.5)
        out.append(Scenario(name, track[:, None], 16000, truth))
    b_start = reply_a + 0.2 + 0.6
    track, truth = place([(0.5, a), (b_start, b)], b_start + lb + 3.5)
    ptt = ((0.3, 0.5 + la + 0.2), (b_start - 0.2, b_start + lb + 0.2))
    out.append(Scenario("push_to_talk", track[:, None], 16000, truth, ptt,
                        counts_for_targets=False))
    track, truth = place([(0.5, a)], 0.5 + la + 3.5)
    out.append(Scenario("slow_engine_500ms", track[:, None], 16000, truth,
                        first_chunk_delay_ms=500.0, counts_for_targets=False))
    out.append(Scenario("slow_engine_500ms_no_speculation", track[:, None], 16000, truth,
                        first_chunk_delay_ms=500.0, counts_for_targets=False,
                        overrides=(("engine.speculative_start", False),)))
    return out


def _truth_end(record: Any, speech: list[tuple[float, float]]) -> float | None:
    """True end of the sentence a turn belongs to (the one its onset falls in or nearest)."""
    if not speech:
        return None
    return nearest(speech, record.user_onset_s, at=lambda s: s[0])[1]


def run_scenarios(scenarios: list[Scenario], repeat: int) -> None:
    from app.audio.simulated import SimulatedMicrophone
    from app.conversation.simulation import SimulationOptions, run_simulation
    from app.engine.echo import EchoEngine
    from app.settings import Settings

    for scenario in scenarios:
        settings = Settings()
        if scenario.ptt:
            settings = settings.with_value("turn.mode", "push_to_talk")
        for key, value in scenario.overrides:
            settings = settings.with_value(key, value)
        for _ in range(repeat):
            engine = EchoEngine(first_chunk_delay_ms=scenario.first_chunk_delay_ms)
            mic = SimulatedMicrophone(scenario.pcm, scenario.rate_hz)
            options = SimulationOptions(push_to_talk=scenario.ptt, record_output=False)
            scenario.results.append(run_simulation(settings, engine, mic, options))


def scenario_figures(scenario: Scenario) -> dict[str, Any]:
    records = [r for result in scenario.results for r in result.records]
    latencies = [r.response_latency_ms for r in records if r.response_latency_ms is not None]
    from_truth = [(r.first_audible_s - end) * 1000 for r in records
                  if r.first_audible_s is not None
                  and (end := _truth_end(r, scenario.speech)) is not None]
    reaction = [(r.first_audible_s - r.endpoint_s) * 1000 for r in records
                if r.first_audible_s is not None]
    stops = [r.barge_in.stop_latency_ms for r in records if r.barge_in]
    stops_truth = [(r.barge_in.silent_s
                    - nearest(scenario.speech, r.barge_in.onset_s, at=lambda s: s[0])[0])
                   * 1000 for r in records if r.barge_in]
    runs = scenario.results
    return {
        "turns_per_run": len(records) / max(1, len(runs)),
        "response_latency_ms": median_1(latencies),
        "app_overhead_ms": None if scenario.ptt else median_1([x - 500.0 for x in latencies]),
        "response_from_true_end_ms": median_1(from_truth),
        "endpoint_to_audible_ms": median_1(reaction),
        "barge_in_stop_ms": median_1(stops),
        "barge_in_stop_from_true_onset_ms": None if scenario.ptt else median_1(stops_truth),
        "speed_x_realtime": round(sum(r.simulated_s for r in runs)
                                  / max(1e-9, sum(r.wall_s for r in runs)), 1),
        "_latencies": latencies, "_stops": stops,
    }


def vad_cost(sample: np.ndarray) -> dict[str, float]:
    """Silero per 32 ms frame, and segmenter + turn controller per frame (same probabilities)."""
    from app.conversation.turns import TurnController
    from app.vad.base import FRAME_S, FRAME_SAMPLES, VadFrame
    from app.vad.silero import SileroScorer

    frames = [sample[i:i + FRAME_SAMPLES] for i in range(0, len(sample) - FRAME_SAMPLES,
                                                          FRAME_SAMPLES)]
    frames = (frames * (3000 // len(frames) + 1))[:3000]
    scorer = SileroScorer()
    times, probabilities = [], []
    for frame in frames:
        started = time.perf_counter()
        probabilities.append(scorer.score(frame))
        times.append((time.perf_counter() - started) * 1000)
    controller = TurnController()
    started = time.perf_counter()
    for index, probability in enumerate(probabilities):
        scored = VadFrame(index * FRAME_S, (index + 1) * FRAME_S, probability)
        controller.on_frames([scored], scored.end_s)
    control_ms = (time.perf_counter() - started) * 1000 / len(probabilities)
    ordered = sorted(times)
    return {"frames": len(frames), "silero_ms_mean": round(statistics.fmean(times), 4),
            "silero_ms_p50": round(ordered[len(ordered) // 2], 4),
            "silero_ms_p99": round(ordered[int(len(ordered) * 0.99)], 4),
            "controller_ms_mean": round(control_ms, 4),
            "vad_and_controller_pct_of_core": round(
                (statistics.fmean(times) + control_ms) / (FRAME_S * 1000) * 100, 2)}


def loop_cost(idle_s: float) -> dict[str, float]:
    """Whole voice loop in always-listening on 48 kHz stereo room noise, as % of one core."""
    from app.audio.simulated import SimulatedMicrophone
    from app.conversation.simulation import SimulationOptions, run_simulation
    from app.engine.echo import EchoEngine
    from app.settings import Settings

    rng = np.random.default_rng(3)
    noise = rng.normal(0, 10 ** (-50 / 20), (int(idle_s * 48000), 2)).astype(np.float32)
    started = time.process_time()
    result = run_simulation(Settings(), EchoEngine(), SimulatedMicrophone(noise, 48000),
                            SimulationOptions(settle_s=0.0, record_output=False))
    cpu_s = time.process_time() - started
    return {"input_s": idle_s, "cpu_s": round(cpu_s, 3),
            "loop_pct_of_core": round(cpu_s / result.simulated_s * 100, 2),
            "turns": len(result.records)}


def run(args: argparse.Namespace) -> int:
    from app import paths
    from app.audio.simulated import read_wav
    from app.conversation.demo import DEMO_SAMPLE

    pcm, rate = read_wav(paths.resource(*DEMO_SAMPLE))
    sentences = split_sentences(pcm[:, 0], rate)
    scenarios = [s for s in build_scenarios(sentences[0], sentences[1])
                 if not args.only or s.name in args.only]
    run_scenarios(scenarios, args.repeat)
    figures = {s.name: scenario_figures(s) for s in scenarios}
    counted = [figures[s.name] for s in scenarios if s.counts_for_targets]
    latencies = [x for f in counted for x in f["_latencies"]]
    stops = [x for f in counted for x in f["_stops"]]
    overall = {"response_latency_ms_median": median_1(latencies),
               "app_overhead_ms_median": median_1([x - 500.0 for x in latencies]),
               "barge_in_stop_ms_median": median_1(stops)}
    costs = {"vad": vad_cost(pcm[:, 0]), "loop": loop_cost(args.idle_s)}
    _print(figures, overall, costs, print)
    if args.json:
        clean = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                 for k, v in figures.items()}
        args.json.write_text(json.dumps({"scenarios": clean, "overall": overall, **costs},
                                        indent=2) + "\n")
    return 0


def _print(figures: dict[str, dict[str, Any]], overall: dict[str, Any],
           costs: dict[str, dict[str, float]], out: Callable[[str], None]) -> None:
    def cell(value: Any) -> str:
        return "—" if value is None else f"{value}"

    columns = ("turns_per_run", "response_latency_ms", "app_overhead_ms",
               "response_from_true_end_ms", "endpoint_to_audible_ms", "barge_in_stop_ms",
               "barge_in_stop_from_true_onset_ms", "speed_x_realtime")
    for line in markdown_table("scenario", columns, figures):
        out(line)
    out("overall (echo engine, default settings): " + ", ".join(
        f"{k} {cell(v)}" for k, v in overall.items()))
    out("VAD: " + ", ".join(f"{k} {v}" for k, v in costs["vad"].items()))
    out("loop: " + ", ".join(f"{k} {v}" for k, v in costs["loop"].items()))
