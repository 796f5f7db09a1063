"""Every precision/device pair either runs or is refused up front by one rule
(app.engine.preflight.precision_problem), and the allocator is only tuned where it can be."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.engine.preflight import PRECISIONS, precision_problem


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "npu", "auto"])
def test_every_pair_has_an_answer(precision: str, device: str) -> None:
    problem = precision_problem(precision, device)
    refused = precision == "int4" and device in ("cpu", "npu")
    assert (problem is not None) == refused
    if problem:
        assert "int4 needs a CUDA GPU" in problem and "int8 or bf16" in problem


def test_unknown_names_are_refused_by_name() -> None:
    assert "'fp8' is not one of bf16, int8, int4, fp32" in str(precision_problem("fp8", "cpu"))
    assert "'tpu'" in str(precision_problem("bf16", "tpu"))


@pytest.mark.parametrize("bench", ["engine", "engine-e2e"])
def test_benches_refuse_int4_on_the_cpu_in_one_line(bench: str) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "bench", bench, "--random-weights",
                           "--precision", "int4", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    said = (done.stdout + done.stderr).strip().splitlines()
    assert "Traceback" not in done.stderr and len(said) == 1  # the CLI's one-line refusal
    assert "int4 needs a CUDA GPU (its kernel is CUDA-only); on cpu choose int8 or bf16" in said[0]


def test_expandable_segments_are_left_alone_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.engine.moss_speech import device

    monkeypatch.delenv(device.ALLOC_CONF_ENV, raising=False)
    device.configure_cuda_allocator(platform="win32")
    assert device.ALLOC_CONF_ENV not in os.environ
    assert not device.expandable_segments_supported("win32")
    assert device.expandable_segments_supported("linux")
