"""The measurements of ``make gpu-report`` on a CUDA machine (random full-size weights).

Order and budget (the whole run must end within 9 minutes on an H100): environment; per
precision (bf16, int8, int4) one full-size model is built and serves every measurement of that
precision: decode rows/s for the CUDA-graph, compiled and eager steps (``bench engine``'s
measure_model: 300-row prompt, ratio to the bandwidth floor), then the real engine on it with
the shared fp16 codec (two turns: TTFA, real-time factor, warm-up, capture) and the peak
allocated/reserved memory of the precision against the VRAM plan for the same settings; the
codec's streaming cost per chunk; last the GPU tests (``pytest -m gpu``) with the time left,
for which ``TESTS_RESERVE_S`` is kept: a torch.compile of the decode step (about 90 s) runs only
while it leaves that much. On an H200 (2026-11-27) the measurements took 255 s with one compile
and the 24 GPU tests 262 s; with the tests first and capped at 150 s they never all ran.
A section that fails or would overrun the budget is recorded as such; the rest still runs.
"""

from __future__ import annotations

import gc
import json
import platform
import re
import statistics
import subprocess  # nosec B404: nvidia-smi and pytest with fixed args, no shell
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from app.paths import scratch_dir

GIB = 1 << 30
PROMPT_ROWS, DECODE_ROWS = 300, 64
E2E_TURNS, E2E_ROWS, VOICE_S, QUESTION_S = 2, 60, 3.0, 2.0
TESTS_CAP_S = 330.0  # the GPU tests never run longer than this
TESTS_RESERVE_S = 280.0  # ... and the measurements leave them this much (262 s on an H200)
COMPILE_NEEDS_S = 150.0  # torch.compile of the 40-layer step is skipped with less time left


class Budget:
    """Seconds left of the run; sections ask before they start."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock, self.end = clock, clock() + seconds

    @property
    def left_s(self) -> float:
        return self.end - self.clock()


def guarded(errors: list[str], name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one section; an exception becomes {"error": ...} and a line in ``errors``."""
    try:
        return fn()
    except Exception as exc:  # a report records failures; it does not stop at the first
        message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        errors.append(f"{name}: {message}")
        return {"error": message}


def environment() -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    env: dict[str, Any] = {
        "gpu": props.name, "compute_capability": f"{props.major}.{props.minor}",
        "gpu_memory_gib": round(total / GIB, 2), "free_at_start_gib": round(free / GIB, 2),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
        "platform": platform.platform()}
    for module in ("torchao", "triton", "flash_attn"):
        try:
            env[module] = __import__(module).__version__
        except Exception:
            env[module] = None
    try:
        # the driver's own tool, found on PATH, fixed arguments, no shell
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",  # nosec B603 B607
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except Exception:
        env["driver"] = None
    return env


def gpu_tests(budget: Budget, root: Path) -> dict[str, Any]:
    cap = max(30.0, min(TESTS_CAP_S, budget.left_s))
    started = time.perf_counter()
    try:
        # this Python's pytest on the repository's tests, fixed arguments, no shell; a test
        # file that cannot be imported here (an environment without the GUI's packages) is
        # counted as an error and does not stop the GPU tests
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q",  # nosec B603
                               "-p", "no:cacheprovider", "--continue-on-collection-errors",
                               "tests"], cwd=root,
                              capture_output=True, text=True, timeout=cap)
        out, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired as exc:
        out, code = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (
            exc.stdout or ""), None
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    if code is None:  # cut at the cap: count what the progress line shows, and say so
        lines = (re.sub(r"\s*\[\s*\d+%\]$", "", line) for line in out.splitlines())
        progress = "".join(line for line in lines if re.fullmatch(r"[.FEsx]+", line))
        counts = {"passed": progress.count("."), "failed": progress.count("F"),
                  "skipped": progress.count("s"), "error": progress.count("E")}
        summary = f"timed out after {cap:.0f} s (tests not reached are not counted)"
    return {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0),
            "skipped": counts.get("skipped", 0), "errors": counts.get("error", 0),
            "returncode": code, "duration_s": round(time.perf_counter() - started, 1),
            "summary": summary or f"timed out after {cap:.0f} s"}


def shared_codec(device: torch.device, scratch: Path) -> tuple[Any, Any]:
    """The full-size random codec in the plan's accelerator dtype, and a 3 s voice."""
    from app.engine.moss_speech.build import codec_dtype
    from app.engine.moss_speech.codec import CodecConfig
    from app.engine.moss_speech.codec.testing import build_random_codec, speech_like

    codec = build_random_codec(CodecConfig.full(), device, codec_dtype(device, "bf16"),
                               chunks=(5,), voice_cache_dir=scratch / "voices",
                               offline_flow=False)  # as in the engine: streaming flow only
    voice = codec.voice_from_samples(speech_like(VOICE_S, 24000, seed=3), 24000,
                                     source="report-voice")
    return codec, voice


def decode_paths(model: Any, budget: Budget, precision: str, prompt_rows: int = PROMPT_ROWS,
                 decode_rows: int = DECODE_ROWS) -> dict[str, Any]:
    from app.engine.moss_speech.bench_lm import measure_model

    results: dict[str, Any] = {}
    for path in ("graph", "compile", "eager"):
        if path == "compile" and budget.left_s < COMPILE_NEEDS_S + 90 + TESTS_RESERVE_S:
            results[path] = {"skipped": f"{budget.left_s:.0f} s left of the budget"}
            continue
        errors: list[str] = []
        results[path] = guarded(errors, f"{precision} {path}", partial(
            measure_model, model, prompt_rows, decode_rows, path, bandwidth=True))
        torch.cuda.empty_cache()
    return results


def engine_e2e(model: Any, codec: Any, voice: Any, precision: str, scratch: Path,
               turns: int = E2E_TURNS, rows: int = E2E_ROWS) -> dict[str, Any]:
    """The real engine on this model and codec: build, warm up (the CUDA-graph step), two
    turns of 60 rows after a 2 s question."""
    from app.engine.moss_speech.bench_e2e import BenchOptions, _settings, run_turn, summarize
    from app.engine.moss_speech.build import warm_up
    from app.engine.moss_speech.codec.testing import speech_like
    from app.engine.moss_speech.device import DeviceChoice
    from app.engine.moss_speech.engine import MossSpeechEngine
    from app.engine.moss_speech.parts import EngineParts
    from app.engine.moss_speech.testing import tiny_tokenizer_json
    from app.engine.moss_speech.tokenizer import load_tokenizer

    (scratch / "tokenizer.json").write_text(json.dumps(tiny_tokenizer_json()))
    tokenizer = load_tokenizer(scratch, model.config)
    device = model.device
    path = "graph" if device.type == "cuda" else "eager"
    options = BenchOptions(size="full", device=device.type, precision=precision,
                           max_new_rows=rows, barge_in_every=0, decode_path=path)
    settings = _settings(options)
    started = time.perf_counter()
    engine = MossSpeechEngine(EngineParts(model, tokenizer, codec, voice, DeviceChoice(device)),
                              settings, decode_path=path)
    built = time.perf_counter()
    warm_up(engine)
    warmed = time.perf_counter()
    engine.policy = replace(engine.policy, final="causal")
    figures = [run_turn(engine, i, speech_like(QUESTION_S, 16000, seed=i), None)
               for i in range(1, turns + 1)]
    decode = engine.session.decode
    free_after = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    engine.close()
    summary = summarize(figures)
    return {"decode_path": decode.path, "decode_setup_ms": round(decode.setup_ms, 1),
            "build_s": round(built - started, 2), "warmup_s": round(warmed - built, 2),
            "turns": len(figures), "ttfa_ms_median": summary["ttfa_ms_median"],
            "rtf_median": summary["rtf_median"], "free_after_turns_bytes": free_after,
            "turn_figures": figures}


def memory_against_plan(precision: str, free_start: int,
                        free_after_turns: int | None) -> dict[str, Any]:
    """Peaks of the engine's build, warm-up and turns (the peak statistics are reset after
    the decode benchmarks), what the device lost while it ran (CUDA's own count: the
    allocator's slack and the libraries' workspaces included), and the plan for the settings
    measured (default context and budget, a 3 s voice, 60-row replies) and at the defaults."""
    from app.engine import preflight

    flow = preflight.flow_cache_bytes(1024, E2E_ROWS, VOICE_S)
    plan = preflight.estimate(precision, 4096, flow_cache_bytes=flow)
    reserved = torch.cuda.max_memory_reserved()
    used = None if free_after_turns is None else free_start - free_after_turns
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "peak_reserved_gib": round(reserved / GIB, 2),
            "device_used_gib": None if used is None else round(used / GIB, 2),
            "plan_gib": round(plan.total_bytes / GIB, 2),
            "plan_parts_gib": {k: round(v / GIB, 3) for k, v in plan.parts_bytes().items()},
            "within_plan": reserved <= plan.total_bytes,
            "plan_default_gib": round(preflight.estimate(precision, 4096).total_bytes / GIB, 2)}


def precision_section(precision: str, codec: Any, voice: Any, budget: Budget,
                      scratch: Path, errors: list[str], free_start: int) -> dict[str, Any]:
    """``free_start``: free device memory before the codec and any model (after CUDA
    started), so the device's count covers everything the engine holds."""
    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.weights import random_model

    torch.cuda.empty_cache()
    started = time.perf_counter()
    model = random_model(MossSpeechConfig.full(), "cuda", precision)
    section: dict[str, Any] = {"build_s": round(time.perf_counter() - started, 2)}
    section["decode"] = decode_paths(model, budget, precision)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()  # the engine's peaks, not the benchmarks' sessions
    section["e2e"] = e2e = guarded(errors, f"{precision} engine", partial(
        engine_e2e, model, codec, voice, precision, scratch))
    section["memory"] = memory_against_plan(precision, free_start,
                                            e2e.get("free_after_turns_bytes"))
    del model  # before the next precision is built
    torch.cuda.empty_cache()
    return section


def codec_streaming(codec: Any, voice: Any, chunks: int = 12,
                    utterance_s: float = 10.0) -> dict[str, Any]:
    """Encode speed, and the time of each 5-code streaming step (cached flow, 1 GiB budget)."""
    from app.engine.moss_speech.codec.testing import speech_like

    def sync() -> None:
        if codec.device.type == "cuda":
            torch.cuda.synchronize(codec.device)

    def timed(fn: Callable[[], Any]) -> float:
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return round((time.perf_counter() - start) * 1000, 1)

    audio = speech_like(utterance_s, 16000, seed=2)
    codec.encode(audio[:16000], 16000)
    encode_ms = timed(lambda: codec.encode(audio, 16000))
    codes = torch.randint(0, 16384, (chunks * 5 + 8,), generator=torch.Generator().manual_seed(1))
    steps: list[float] = []
    with codec.stream_decoder(voice, 5, final="causal", max_codes=len(codes),
                              flow_cache_budget_bytes=1 << 30) as decoder:
        for i in range(len(codes)):
            before = decoder.steps
            ms = timed(partial(decoder.push, codes[i:i + 1]))
            if decoder.steps > before:
                steps.append(ms)
        finish = timed(decoder.finish)
    return {"dtype": str(codec.tokenizer.encoder.codebook.weight.dtype).removeprefix("torch."),
            "chunk": 5, "first_chunk_ms": steps[0] if steps else None,
            "median_chunk_ms": round(statistics.median(steps[1:] or steps), 1) if steps else None,
            "chunk_ms": steps, "finish_ms": finish, "audio_ms_per_chunk": 400,
            "encode_ms_per_audio_s": round(encode_ms / utterance_s, 1)}


def collect(root: Path, budget_s: float, run_tests: bool = True,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every section in order; returns the report (the writer turns it into files)."""
    from app.engine.moss_speech.codec.chunk_profile import profile_steady_chunk
    from app.engine.moss_speech.device import configure_cuda_allocator

    configure_cuda_allocator()
    budget, started = Budget(budget_s), time.perf_counter()
    errors: list[str] = []
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "command": "make gpu-report",
                              "budget_s": budget_s, "errors": errors}
    log("environment")
    report["environment"] = guarded(errors, "environment", environment)
    scratch = scratch_dir("moss-voice-gpu-report-")
    torch.cuda.empty_cache()
    free_start = torch.cuda.mem_get_info()[0]
    log("codec (full size, random weights)")
    codec, voice = shared_codec(torch.device("cuda"), scratch)
    report["engine"] = {}
    for precision in ("bf16", "int8", "int4"):
        log(f"{precision}: build, decode paths, engine, memory ({budget.left_s:.0f} s left)")
        report["engine"][precision] = guarded(errors, precision, partial(
            precision_section, precision, codec, voice, budget, scratch, errors, free_start))
    log("codec streaming per chunk")
    report["codec"] = guarded(errors, "codec", lambda: codec_streaming(codec, voice))
    log("codec: one chunk profiled (host- or GPU-bound)")
    report["codec"]["profile"] = guarded(errors, "codec profile", lambda: profile_steady_chunk(
        codec, voice, 5, final="causal", flow_cache_budget_bytes=1 << 30))
    if run_tests:
        del codec, voice  # the tests' own models need the memory more
        torch.cuda.empty_cache()
        log(f"GPU tests (pytest -m gpu, {budget.left_s:.0f} s left)")
        report["gpu_tests"] = guarded(errors, "gpu tests", lambda: gpu_tests(budget, root))
    report["duration_s"] = round(time.perf_counter() - started, 1)
    return report
