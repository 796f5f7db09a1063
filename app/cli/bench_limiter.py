"""Output limiter: what it does to speech and tones below and above its threshold, and its cost.

The bundled sample's speech (resampled to 48 kHz) scaled to several peak levels, and 440 Hz /
100 Hz tones at and above full scale, each processed in 10 ms blocks as the player does:
- below the threshold (-1 dBFS): the largest difference from the input (0 means bit for bit);
- above it: the output peak in dBFS, the samples limited, THD (harmonics 2-9) for the tones and,
  for speech, the correlation with the input (1 = the same waveform, only quieter);
- CPU: microseconds per 10 ms block on the fast path (nothing near full scale) and while
  limiting.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from app.cli.options import OutputFile

RATE = 48000
BLOCK = 480
SPEECH_PEAKS_DBFS = (-30.0, -6.0, -1.05, 0.0, 6.0, 20.0)
TONES = ((440.0, 0.0), (440.0, 6.0), (440.0, 12.0), (100.0, 6.0))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")


def limited(signal: np.ndarray) -> tuple[np.ndarray, int]:
    from app.audio.limiter import PeakLimiter

    limiter = PeakLimiter(RATE)
    out = signal.astype(np.float32).copy()
    for start in range(0, len(out), BLOCK):
        limiter.process(out[start:start + BLOCK])
    return out, limiter.limited_samples


def thd_pct(signal: np.ndarray, hz: float) -> float:
    steady = signal[RATE // 2:RATE // 2 + RATE] * np.hanning(RATE)
    spectrum = np.abs(np.fft.rfft(steady))
    k = int(hz)
    harmonics = [spectrum[h * k - 3:h * k + 4].max() for h in range(2, 10)]
    return round(float(np.sqrt(np.sum(np.square(harmonics)))
                       / spectrum[k - 3:k + 4].max() * 100), 3)


def peak_dbfs(signal: np.ndarray) -> float:
    return round(20 * float(np.log10(np.max(np.abs(signal)))), 2)


def speech_figures() -> dict[str, Any]:
    from app.audio.resample import resample
    from app.audio.simulated import read_wav
    from app.conversation.demo import demo_sample

    pcm, rate = read_wav(demo_sample())
    speech = resample(pcm[:, 0], rate, RATE)
    speech = speech / np.max(np.abs(speech))
    rows = {}
    for level in SPEECH_PEAKS_DBFS:
        source = (speech * 10 ** (level / 20)).astype(np.float32)
        out, count = limited(source)
        rows[f"speech peak {level:+g} dBFS"] = {
            "max_difference": round(float(np.max(np.abs(out - source))), 4), "out_peak_dbfs":
            peak_dbfs(out), "limited_pct": round(count / len(out) * 100, 2),
            "correlation": round(float(np.corrcoef(out, source)[0, 1]), 4), "thd_pct": None}
    return rows


def tone_figures() -> dict[str, Any]:
    rows = {}
    t = np.arange(2 * RATE) / RATE
    for hz, level in TONES:
        source = (10 ** (level / 20) * np.sin(2 * np.pi * hz * t)).astype(np.float32)
        out, count = limited(source)
        rows[f"{hz:g} Hz at {level:+g} dBFS"] = {
            "max_difference": round(float(np.max(np.abs(out - source))), 4),
            "out_peak_dbfs": peak_dbfs(out), "limited_pct": round(count / len(out) * 100, 2),
            "correlation": round(float(np.corrcoef(out, source)[0, 1]), 4),
            "thd_pct": thd_pct(out, hz)}
    return rows


def cost_us() -> dict[str, float]:
    from app.audio.limiter import PeakLimiter

    quiet = (0.3 * np.sin(np.arange(BLOCK) / 5)).astype(np.float32)
    loud = (2.0 * np.sin(np.arange(BLOCK) / 5)).astype(np.float32)
    figures = {}
    for name, block in (("fast_path_us_per_block", quiet), ("limiting_us_per_block", loud)):
        limiter, work = PeakLimiter(RATE), block.copy()
        started = time.perf_counter()
        for _ in range(5000):
            work[:] = block
            limiter.process(work)
        figures[name] = round((time.perf_counter() - started) / 5000 * 1e6, 1)
    return figures


def run(args: argparse.Namespace) -> int:
    from app.cli.bench_common import markdown_table

    rows = {**speech_figures(), **tone_figures()}
    costs = cost_us()
    for line in markdown_table("input", ["max_difference", "out_peak_dbfs", "limited_pct",
                                         "correlation", "thd_pct"], rows):
        print(line)
    print("cost per 10 ms block at 48 kHz: " + ", ".join(f"{k} {v}" for k, v in costs.items()))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "cost": costs}, indent=2) + "\n")
    return 0
