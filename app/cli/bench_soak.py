"""Soak: a long conversation through the real pipeline; memory, threads, open files, latency
and compute per turn must stay flat (exit status 1 when a slope exceeds its bound).

Two runs on simulated devices and the virtual clock: the echo engine for ``--echo-turns``
(default 1,000) and MOSS-Speech on the tiny random checkpoint for ``--moss-turns`` (default
200; CPU, fp32, replies of at most 24 rows). Everything else is the app's default: silero VAD,
the echo canceller (automatic), speculative start, barge-in. The microphone repeats a cycle
made of the bundled sample's two sentences: the first is answered, the second starts 0.6 s into
that reply (a barge-in) and is answered in turn.

Engine compute takes no virtual time (``charge_compute=False``), so the conversation is the
same on an idle and on a busy machine: the response latency then measures the voice loop
itself (queues, clocks, the turn controller), and the compute is measured apart, as the
process's CPU time per turn (all threads: capture, VAD, canceller, engine), which a busy
machine hardly changes, unlike wall time.

At every turn (``TurnMeasured``) the bench records, after a garbage collection, the resident
memory, the OS threads, the Python threads, the open file descriptors, the response latency
and the CPU time since the previous turn. The first ``--warmup-turns`` are left out (lazy
imports, caches, the echo canceller's warm-up; the tiny engine's memory settles by turn ~15).
"start" and "end" are the medians of the first and the last fifth of the rest; the slope is the
Theil–Sen estimate (the median of the slopes between every pair of turns; consecutive turns
are averaged in pairs first), per 1,000 turns, with its 95 % confidence interval. A metric is
flat unless its slope exceeds the bound with 95 % confidence (a short run's noise alone does
not fail it); thread and file counts must also end where they started. Bounds per 1,000 turns
(``BOUNDS``): 16 MiB (a leak of one reply's audio per turn, ~200 KB, would be ~190 MiB), 0.5
threads or open files, 20 ms of latency, and 10 % of the starting CPU time per turn.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from app.cli.bench_common import markdown_table
from app.cli.options import InputError, OutputFile, count
from app.paths import scratch_dir

if TYPE_CHECKING:
    from app.engine.base import Engine
    from app.events import PipelineEvent
    from app.settings import Settings

# Allowed slope per 1,000 turns: a number in the metric's unit, or a string "N%" of its start.
BOUNDS: dict[str, float | str] = {"rss_mib": 16.0, "os_threads": 0.5, "py_threads": 0.5,
                                  "open_files": 0.5, "latency_ms": 20.0, "cpu_ms": "10%"}
UNITS = {"rss_mib": "MiB", "os_threads": "", "py_threads": "", "open_files": "",
         "latency_ms": "ms", "cpu_ms": "ms per turn"}
INTO_REPLY_S = 0.6  # the second sentence starts this long after the first reply is expected


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--echo-turns", type=count(0, 100_000), default=1000,
                        help="turns with the echo engine (0 = skip)")
    parser.add_argument("--moss-turns", type=count(0, 10_000), default=200,
                        help="turns with MOSS-Speech on the tiny random checkpoint (0 = skip)")
    parser.add_argument("--warmup-turns", type=count(0, 1000), default=20,
                        help="turns left out of the figures at the start of each run")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")


def check(args: argparse.Namespace) -> None:
    """Enough turns after the warm-up for a trend (10), and at least one run."""
    for option, turns in (("--echo-turns", args.echo_turns), ("--moss-turns", args.moss_turns)):
        if turns and turns < args.warmup_turns + 10:
            raise InputError(option, turns, f"0 (skip) or at least --warmup-turns + 10 = "
                             f"{args.warmup_turns + 10} turns, for a trend after the warm-up")
    if not args.echo_turns and not args.moss_turns:
        raise InputError("--echo-turns", 0, "at least one run needs turns")


@dataclass
class Samples:
    """One value per measured turn for each metric, and the turn counts."""

    values: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in BOUNDS})
    turns: int = 0
    barge_ins: int = 0
    unanswered: int = 0


def cycle_track() -> tuple[np.ndarray, int]:
    """One cycle of the microphone (16 kHz mono): a sentence, its reply, the other sentence
    talking over that reply, its reply; and the sample rate."""
    from app.audio.simulated import read_wav
    from app.cli.bench_voice_loop import place, split_sentences
    from app.conversation.demo import demo_sample

    pcm, rate = read_wav(demo_sample())
    a, b = split_sentences(pcm[:, 0], rate)[:2]
    la, lb = len(a) / rate, len(b) / rate
    reply_a = 0.5 + la + 0.53  # about when the echo of `a` becomes audible
    start_b = reply_a + INTO_REPLY_S
    track, _ = place([(0.5, a), (start_b, b)], start_b + 2 * lb + 2.0, rate)
    return track, rate


def process_figures() -> dict[str, float]:
    import psutil

    process = psutil.Process()
    cpu = process.cpu_times()
    cpu_s = cpu.user + cpu.system  # before the collection: its cost is the bench's, not a turn's
    gc.collect()
    return {"cpu_s": cpu_s, "rss_mib": process.memory_info().rss / 2**20,
            "os_threads": process.num_threads(),
            "py_threads": threading.active_count(),
            "open_files": process.num_fds() if hasattr(process, "num_fds")
            else len(process.open_files())}


def soak(settings: Settings, engine: Engine, turns: int) -> tuple[Samples, dict[str, Any]]:
    """Run the conversation until ``turns`` turns were measured (or the input ends)."""
    from app.audio.simulated import SimulatedMicrophone
    from app.conversation.simulation import Simulation, SimulationOptions
    from app.events import Shutdown, TurnMeasured

    track, rate = cycle_track()
    cycles = math.ceil(turns / 2 * 1.05) + 3  # the canceller's warm-up ducks a few barge-ins
    simulation = Simulation(settings, engine, SimulatedMicrophone(track, rate, repeat=cycles),
                            SimulationOptions(charge_compute=False, record_output=False))
    samples = Samples()
    last_cpu_s = [process_figures()["cpu_s"]]

    def watch(event: PipelineEvent) -> None:
        if not isinstance(event, TurnMeasured) or samples.turns >= turns:
            return
        record = event.record
        samples.turns += 1
        samples.barge_ins += record.barge_in is not None
        samples.unanswered += record.response_latency_ms is None
        figures = process_figures()
        figures["latency_ms"] = (record.response_latency_ms
                                 if record.response_latency_ms is not None else math.nan)
        figures["cpu_ms"] = (figures["cpu_s"] - last_cpu_s[0]) * 1000
        last_cpu_s[0] = figures.pop("cpu_s")
        for key, value in figures.items():
            samples.values[key].append(float(value))
        if samples.turns >= turns:
            simulation.pipeline.submit(Shutdown())

    started = time.perf_counter()
    result = simulation.run(watch, keep_events=False)
    return samples, {"simulated_s": round(result.simulated_s, 1),
                     "wall_s": round(time.perf_counter() - started, 1),
                     "underruns": result.underruns,
                     "false_interruptions": result.false_interruptions}


def trend(values: list[float], warmup: int) -> dict[str, float | None]:
    """Start and end (medians of the first and last fifth after warm-up), the Theil–Sen slope
    per 1,000 turns and its 95 % confidence interval; None where there are too few turns.

    Consecutive turns are averaged in pairs first: the two sentences of a cycle differ (one
    is a barge-in), and the zigzag would otherwise swamp a short run's slope.
    """
    kept = [(i, v) for i, v in enumerate(values) if i >= warmup]
    pairs = [(a[0] + 0.5, (a[1] + b[1]) / 2 if not math.isnan(a[1] + b[1])
              else (b[1] if math.isnan(a[1]) else a[1]))
             for a, b in zip(kept[::2], kept[1::2], strict=False)]
    points = [(x, y) for x, y in pairs if not math.isnan(y)]
    if len(points) < 5:
        return {"start": None, "end": None, "slope_per_1000": None, "slope_low": None,
                "slope_high": None}
    fifth = max(1, len(points) // 5)
    slope, low, high = theil_sen([x for x, _ in points], [y for _, y in points])
    return {"start": round(statistics.median(y for _, y in points[:fifth]), 2),
            "end": round(statistics.median(y for _, y in points[-fifth:]), 2),
            "slope_per_1000": round(slope * 1000, 2), "slope_low": round(low * 1000, 2),
            "slope_high": round(high * 1000, 2)}


def theil_sen(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """The median of the slopes between every pair of points (an odd slow turn does not move
    it, unlike a least-squares slope) and its 95 % confidence interval (Sen 1968, no ties)."""
    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    i, j = np.triu_indices(len(xs), k=1)
    slopes = np.sort((ys[j] - ys[i]) / (xs[j] - xs[i]))
    n, pairs = len(xs), len(slopes)
    spread = 1.959964 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    low = slopes[max(0, math.floor((pairs - spread) / 2))]
    high = slopes[min(pairs - 1, math.ceil((pairs + spread) / 2))]
    return float(np.median(slopes)), float(low), float(high)


COUNTS = ("os_threads", "py_threads", "open_files")  # may not grow at all


def judge(samples: Samples, warmup: int) -> dict[str, dict[str, Any]]:
    """Each metric's trend and bound per 1,000 turns. Flat unless the slope is above its bound
    with 95 % confidence (its interval lies above it); counts must also end where they began."""
    rows = {}
    for metric, bound in BOUNDS.items():
        figures: dict[str, Any] = trend(samples.values[metric], warmup)
        low, start = figures["slope_low"], figures["start"]
        limit = (float(bound.rstrip("%")) / 100 * abs(start) if isinstance(bound, str)
                 and start is not None else bound)
        flat = low is not None and isinstance(limit, float) and low <= limit
        if metric in COUNTS and flat:
            flat = figures["end"] <= figures["start"]
        figures.update(bound_per_1000=round(limit, 2) if isinstance(limit, float) else limit,
                       flat=flat)
        rows[metric] = figures
    return rows


def echo_run() -> tuple[Settings, Engine]:
    from app.engine.echo import EchoEngine
    from app.settings import Settings

    return Settings(), EchoEngine()


def moss_run() -> tuple[Settings, Engine]:
    from app.engine.factory import build_engine
    from app.engine.moss_speech.testing import tiny_engine_settings

    settings = tiny_engine_settings(scratch_dir("moss-voice-soak-"))
    return settings, build_engine(settings)


RUNS = {"echo": echo_run, "moss_speech_tiny": moss_run}


def run_soak(turns_by_run: dict[str, int], warmup: int) -> dict[str, Any]:
    """Every run with turns > 0: its counts, timings and judged metrics."""
    results: dict[str, Any] = {}
    for name, turns in turns_by_run.items():
        if turns <= 0:
            continue
        settings, engine = RUNS[name]()
        samples, timing = soak(settings, engine, turns)
        results[name] = {"turns": samples.turns, "barge_ins": samples.barge_ins,
                         "unanswered": samples.unanswered, **timing,
                         "metrics": judge(samples, warmup),
                         "per_turn": {k: [None if math.isnan(v) else round(v, 2) for v in values]
                                      for k, values in samples.values.items()}}
    return results


def all_flat(results: dict[str, Any]) -> bool:
    return all(row["flat"] for run in results.values() for row in run["metrics"].values())


def run(args: argparse.Namespace) -> int:
    results = run_soak({"echo": args.echo_turns, "moss_speech_tiny": args.moss_turns},
                       args.warmup_turns)
    for name, result in results.items():
        print(f"\n{name}: {result['turns']} turns ({result['barge_ins']} barge-ins, "
              f"{result['unanswered']} without a reply heard), {result['simulated_s']} s "
              f"simulated in {result['wall_s']} s, underruns {result['underruns']}, false "
              f"interruptions {result['false_interruptions']}")
        rows = {f"{metric} {UNITS[metric]}".strip(): {**row, "flat": "yes" if row["flat"]
                                                       else "NO"}
                for metric, row in result["metrics"].items()}
        for line in markdown_table("metric", ["start", "end", "slope_per_1000", "slope_low",
                                              "slope_high", "bound_per_1000", "flat"], rows):
            print(line)
    flat = all_flat(results)
    print(f"\nall flat: {'yes' if flat else 'NO'} (bounds per 1,000 turns: "
          + ", ".join(f"{k} {v}" for k, v in BOUNDS.items()) + ")")
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "bounds_per_1000": BOUNDS,
                                         "warmup_turns": args.warmup_turns,
                                         "date": time.strftime("%Y-%m-%d")}, indent=2) + "\n")
    return 0 if flat else 1
