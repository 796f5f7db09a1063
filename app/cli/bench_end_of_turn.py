"""End-of-turn model: what one decision costs (features + smart-turn v3.2), per thread count.

Each decision is what the voice loop asks at a pause: the last 8 s of a turn of real speech
(three corpus sentences back to back, so the window is full) → Whisper log-mel features →
the ONNX model. Per onnxruntime thread count: the features' CPU time, the model's wall time,
the calling thread's CPU time (what the simulations charge on the virtual clock) and the whole
process's CPU time over the model call (all of onnxruntime's threads). Medians and p90 over
``--decisions`` after two warm-up calls.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.cli.options import OutputFile, count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decisions", type=count(1, 10000), default=40,
                        help="decisions measured per thread count")
    parser.add_argument("--threads", type=count(1, 64), action="append",
                        help="onnxruntime threads (repeatable; default 1 and 2)")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures as JSON")


def window() -> np.ndarray:
    """8 s of real speech, [128000] float32 at 16 kHz."""
    from app.cli.turn_corpus import load_corpus
    from app.vad.smart_turn import WINDOW_SAMPLES

    corpus = load_corpus()
    speech = np.concatenate([corpus[name].pcm for name in
                             ("en_f_slt_a0009", "de_m_was_der_mensch", "en_m_a0001")])
    return speech[-WINDOW_SAMPLES:]


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 1),
            "p90": round(float(np.percentile(values, 90)), 1)}


def measure(model_path: Path, threads: int, decisions: int, pcm: np.ndarray) -> dict[str, Any]:
    from app.vad.smart_turn import SmartTurnModel, log_mel_features

    model = SmartTurnModel(model_path, threads=threads)
    features_ms, wall_ms, thread_ms, process_ms = [], [], [], []
    for index in range(decisions + 2):
        started = time.thread_time()
        features = log_mel_features(pcm)[None]  # [1, 80, 800]
        features_cpu = time.thread_time() - started
        wall, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
        model.run(features)
        if index < 2:
            continue
        features_ms.append(features_cpu * 1000)
        wall_ms.append((time.perf_counter() - wall) * 1000)
        thread_ms.append((time.thread_time() - thread) * 1000)
        process_ms.append((time.process_time() - process) * 1000)
    return {"threads": threads, "decisions": decisions, "features_cpu_ms": _stats(features_ms),
            "model_wall_ms": _stats(wall_ms), "model_calling_thread_cpu_ms": _stats(thread_ms),
            "model_process_cpu_ms": _stats(process_ms)}


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from app.vad.smart_turn import SmartTurnUnavailableError, smart_turn_model_path

    try:
        model_path = smart_turn_model_path()
    except SmartTurnUnavailableError as exc:  # this machine cannot run it: one line, exit 2
        print(f"moss-voice bench end-of-turn: {exc}", file=sys.stderr)
        return 2
    pcm = window()
    rows = [measure(model_path, threads, args.decisions, pcm)
            for threads in (args.threads or [1, 2])]
    print(f"end-of-turn decision cost ({os.cpu_count()} CPUs; ms, median / p90)")
    print("| threads | features CPU | model wall | model, calling thread CPU "
          "| model, all threads CPU |")
    print("|---|---|---|---|---|")
    for row in rows:
        cells = [f"{row[k]['median']} / {row[k]['p90']}" for k in
                 ("features_cpu_ms", "model_wall_ms", "model_calling_thread_cpu_ms",
                  "model_process_cpu_ms")]
        print(f"| {row['threads']} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2),
                             encoding="utf-8")
    return 0
