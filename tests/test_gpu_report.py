"""``make gpu-report`` without a GPU: the one-line refusal, the report files from injected
measurements, and the sections that run on the CPU on the tiny checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from app.gpu_report import collect
from app.gpu_report.writer import format_markdown, write_report

REPO = Path(__file__).resolve().parent.parent

FAKE: dict[str, Any] = {
    "date": "2026-11-25", "command": "make gpu-report", "duration_s": 431.2, "errors": [
        "int4 compile: RuntimeError: inductor failed"],
    "environment": {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
                    "torch": "2.13.0+cu128", "torchao": "0.18.0"},
    "gpu_tests": {"passed": 9, "failed": 0, "skipped": 1, "errors": 0, "duration_s": 71.5,
                  "summary": "9 passed, 1 skipped in 71.50s"},
    "engine": {
        "bf16": {"build_s": 4.1,
                 "decode": {"graph": {"decode_path": "graph", "decode_rows_per_s": 151.2,
                                      "decode_ms_per_row": 6.61, "bandwidth_floor_ms": 5.02,
                                      "ratio_to_floor": 1.32, "realtime_factor_audio": 12.1,
                                      "prefill_ms": 88.0, "decode_setup_ms": 812.0,
                                      "decode_notes": []},
                            "compile": {"skipped": "80 s left of the budget"},
                            "eager": {"decode_path": "eager", "decode_rows_per_s": 41.0,
                                      "ratio_to_floor": 4.9, "decode_notes": []}},
                 "e2e": {"decode_path": "graph", "ttfa_ms_median": 212.5, "rtf_median": 0.31,
                         "turns": 2, "build_s": 1.2, "warmup_s": 3.4, "decode_setup_ms": 812.0},
                 "memory": {"peak_allocated_gib": 18.1, "peak_reserved_gib": 18.9,
                            "device_used_gib": 19.4, "plan_gib": 19.2, "within_plan": True,
                            "plan_default_gib": 19.72}},
        "int4": {"decode": {"compile": {"error": "RuntimeError: inductor failed"}}},
    },
    "codec": {"dtype": "float16", "chunk": 5, "first_chunk_ms": 61.0, "median_chunk_ms": 38.5,
              "chunk_ms": [61.0, 38.0, 39.0], "audio_ms_per_chunk": 400,
              "encode_ms_per_audio_s": 9.1,
              "profile": {"chunk_ms": 40.2, "aten_ops": 19875, "cuda_kernels": 9120,
                          "cuda_kernel_ms": 12.5, "most_frequent_ops": {"aten::linear": 3596}}},
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_exits_2_at_once_with_one_line(tmp_path: Path) -> None:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app", "gpu-report", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stdout.strip().splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith("gpu-report: no CUDA")
    assert not any(tmp_path.iterdir())  # nothing written
    assert time.perf_counter() - started < 60  # seconds, not minutes (a loaded 2-core box)


def test_the_writer_turns_measurements_into_json_and_tables(tmp_path: Path) -> None:
    json_path, md_path = write_report(FAKE, tmp_path / "gpu-report")
    data = json.loads(json_path.read_text())
    assert data["schema"] == 1 and data["engine"]["bf16"]["memory"]["within_plan"] is True
    text = md_path.read_text()
    assert text.startswith("# GPU report: NVIDIA H100 80GB HBM3")
    assert "| bf16 | graph | graph | 151.2 | 6.61 | 5.02 | 1.32 | 12.1 | 88.0 | 812.0 |" in text
    assert "| bf16 | compile | — |" in text and "80 s left of the budget" in text
    assert "| int4 | compile | — |" in text and "inductor failed" in text
    assert "| bf16 | graph | 212.5 | 0.31 | 2 | 1.2 | 3.4 | 812.0 | — |" in text
    assert "| bf16 | 18.1 | 18.9 | 19.4 | 19.2 | yes | 19.7 |" in text
    assert "Per chunk (ms): 61.0, 38.0, 39.0" in text
    assert ("One chunk profiled: 40.2 ms wall, 19875 operators dispatched, 9120 CUDA kernels "
            "taking 12.5 ms on the GPU (the GPU idles most of the chunk: bound by the host)"
            ) in text
    assert "## Problems" in text and "int4 compile" in text
    assert "| 9 | 0 | 1 | 0 | 71.5 | 9 passed, 1 skipped in 71.50s |" in text


def test_an_empty_report_still_renders() -> None:
    assert format_markdown({}).startswith("# GPU report: unknown GPU")


def test_a_failing_section_is_recorded_and_the_budget_counts_down() -> None:
    errors: list[str] = []

    def broken() -> dict[str, Any]:
        raise RuntimeError("CUDA error: out of memory\nmore text")

    assert collect.guarded(errors, "bf16 graph", broken) == {
        "error": "RuntimeError: CUDA error: out of memory"}
    assert errors == ["bf16 graph: RuntimeError: CUDA error: out of memory"]
    now = [100.0]
    budget = collect.Budget(540, clock=lambda: now[0])
    now[0] += 500
    assert budget.left_s == 40


def test_the_decode_and_engine_sections_run_on_the_tiny_model(tmp_path: Path) -> None:
    """The same code the report runs on a GPU, on the CPU: each decode path falls back to
    eager with its reason, compile is skipped for lack of budget, the engine answers."""
    from app.engine.moss_speech.codec import CodecConfig
    from app.engine.moss_speech.codec.testing import build_random_codec, speech_like
    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.weights import random_model

    model = random_model(MossSpeechConfig.tiny(), "cpu", "fp32")
    decode = collect.decode_paths(model, collect.Budget(60), "fp32", prompt_rows=24,
                                  decode_rows=6)
    assert decode["compile"]["skipped"].endswith(" s left of the budget")
    assert decode["graph"]["decode_path"] == "eager"
    assert "graph skipped: needs a CUDA device" in decode["graph"]["decode_notes"]
    assert decode["eager"]["decode_rows_per_s"] > 0 and decode["eager"]["ratio_to_floor"] > 0
    codec = build_random_codec(CodecConfig.tiny(), chunks=(5,), voice_cache_dir=tmp_path,
                               offline_flow=False)
    voice = codec.voice_from_samples(speech_like(2.0, 24000, seed=3), 24000)
    e2e = collect.engine_e2e(model, codec, voice, "fp32", tmp_path, turns=1, rows=12)
    assert e2e["turns"] == 1 and e2e["ttfa_ms_median"] > 0 and e2e["rtf_median"] > 0
    assert e2e["decode_path"] == "eager"
    streaming = collect.codec_streaming(codec, voice, chunks=2, utterance_s=1.0)
    assert len(streaming["chunk_ms"]) >= 2 and streaming["dtype"] == "float32"
    from app.engine.moss_speech.codec.chunk_profile import profile_steady_chunk

    profile = profile_steady_chunk(codec, voice, 5, final="causal",
                                   flow_cache_budget_bytes=1 << 30)  # as collect() asks
    assert profile["aten_ops"] > 100 and profile["chunk_ms"] > 0
    assert profile["cuda_kernels"] is None and profile["cuda_kernel_ms"] is None  # a CPU


def test_gpu_tests_cut_at_their_cap_count_the_progress_and_say_so(monkeypatch, tmp_path) -> None:
    """What the H200 run showed: pytest cut at the cap left 'F.F........' and the report said
    0 passed, 0 failed."""
    import subprocess

    from app.gpu_report import collect

    def cut(*_args, **kwargs):
        raise subprocess.TimeoutExpired("pytest", kwargs["timeout"],
                                        output="F..........F.........   [ 90%]\nF.s.")

    monkeypatch.setattr(collect.subprocess, "run", cut)
    result = collect.gpu_tests(collect.Budget(500.0), tmp_path)
    assert (result["passed"], result["failed"], result["skipped"]) == (21, 3, 1)
    assert result["returncode"] is None and result["summary"].startswith("timed out after")


@pytest.mark.parametrize(("left_s", "cap_s"), [(1000.0, 330.0), (200.0, 200.0), (10.0, 30.0)])
def test_the_gpu_tests_get_the_time_left_up_to_their_cap(monkeypatch, tmp_path, left_s: float,
                                                         cap_s: float) -> None:
    """They run last (the measurements leave them ``TESTS_RESERVE_S``): whatever is left, at
    most ``TESTS_CAP_S``, at least 30 s to report something."""
    timeouts: list[float] = []

    def run(*_args, **kwargs):
        timeouts.append(kwargs["timeout"])
        return subprocess.CompletedProcess([], 0, stdout="24 passed in 262.0s\n", stderr="")

    monkeypatch.setattr(collect.subprocess, "run", run)
    result = collect.gpu_tests(collect.Budget(left_s, clock=lambda: 0.0), tmp_path)
    assert timeouts == [pytest.approx(cap_s)]
    assert (result["passed"], result["returncode"]) == (24, 0)
    assert collect.TESTS_CAP_S == 330.0 and collect.TESTS_RESERVE_S == 280.0


@pytest.mark.parametrize("spare_s", [-1.0, 1.0])
def test_a_compile_runs_only_where_it_leaves_the_gpu_tests_their_time(monkeypatch,
                                                                      spare_s: float) -> None:
    """torch.compile of the decode step takes about 90 s: with less than it needs plus the
    tests' reserve left it is skipped, with a note; the other decode steps always run."""
    from app.engine.moss_speech import bench_lm

    measured: list[str] = []
    monkeypatch.setattr(bench_lm, "measure_model",
                        lambda _model, _prompt, _rows, path, bandwidth: measured.append(path)
                        or {"path": path})
    left_s = collect.COMPILE_NEEDS_S + 90 + collect.TESTS_RESERVE_S + spare_s
    results = collect.decode_paths(object(), collect.Budget(left_s, clock=lambda: 0.0), "bf16")
    compiled = spare_s > 0
    assert measured == (["graph", "compile", "eager"] if compiled else ["graph", "eager"])
    assert ("skipped" in results["compile"]) != compiled
