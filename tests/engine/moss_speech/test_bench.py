from __future__ import annotations

import json

import pytest
import torch

from app.cli import main
from app.engine.moss_speech.bench_lm import estimate_bytes, memory_refusal
from app.engine.moss_speech.config import MossSpeechConfig


def test_bench_engine_runs_on_the_tiny_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "engine", "--random-weights", "--size", "tiny", "--prompt-rows", "40",
                 "--decode-rows", "8", "--precision", "fp32", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["prefill_rows"] == 40 and result["prefill_ms"] > 0
    assert result["decode_rows_per_s"] > 0 and result["python_overhead_ms_per_row"] > 0
    assert result["overhead_layers"] == MossSpeechConfig.tiny().kv_layers
    assert result["peak_rss_mib"] > 0
    assert result["decode_path_requested"] == "auto" and result["decode_path"] == "eager"


def test_bench_engine_reports_the_decode_step_that_really_ran(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "engine", "--random-weights", "--size", "tiny", "--prompt-rows", "20",
            "--decode-rows", "4", "--precision", "fp32", "--json"]
    assert main([*base, "--decode-path", "graph"]) == 0
    graph = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert graph["decode_path_requested"] == "graph" and graph["decode_path"] == "eager"
    assert graph["decode_notes"] == ["graph skipped: needs a CUDA device"]
    assert graph["overhead_decode_path"] == "eager"
    assert main([*base, "--decode-path", "static"]) == 0
    static = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert static["decode_path"] == "static" and static["decode_setup_ms"] > 0


def test_full_size_memory_estimate_and_clean_refusal() -> None:
    full = MossSpeechConfig.full()
    bf16, int8 = estimate_bytes(full, "bf16", 400), estimate_bytes(full, "int8", 400)
    assert 18.0e9 < bf16 - 2 * 2**30 < 18.6e9  # ~18.2 GB of bf16 weights (contract §1.1)
    assert int8 < 0.8 * bf16
    cpu = torch.device("cpu")
    refusal = memory_refusal("full", "bf16", cpu, 400, available=18 * 2**30)
    assert refusal is not None and "needs about 19.0 GiB" in refusal
    assert "18.0 GiB is available to it" in refusal
    assert memory_refusal("full", "int8", cpu, 400, available=20 * 2**30) is None
    assert memory_refusal("tiny", "bf16", cpu, 400, available=0) is None
