"""The decode-step selection policy (torch-free): which paths are tried, in which order, and
why one is skipped."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.engine.moss_speech.decode_policy import (
    CPU_COMPILE_REASON,
    FROZEN_REASON,
    PlannedPath,
    compiler_toolchain_problem,
    describe_plan,
    machine_plan,
    plan_decode_paths,
)


def tried(plan: list[PlannedPath]) -> list[str]:
    return [p.path for p in plan if p.skipped is None]


def test_on_cuda_auto_tries_compile_then_captured_graphs_then_eager() -> None:
    plan = plan_decode_paths("cuda", frozen=False, toolchain_problem=None)
    assert tried(plan) == ["compile", "graph", "eager"] and plan[-1] == PlannedPath("eager")


def test_the_bundle_never_compiles_and_uses_captured_graphs() -> None:
    plan = plan_decode_paths("cuda", frozen=True, toolchain_problem=None)
    assert plan[0] == PlannedPath("compile", FROZEN_REASON)
    assert tried(plan) == ["graph", "eager"]


def test_a_missing_toolchain_skips_compile_with_its_reason() -> None:
    problem = "Triton is not installed"
    plan = plan_decode_paths("cuda", frozen=False, toolchain_problem=problem)
    assert plan[0].skipped == problem and tried(plan) == ["graph", "eager"]
    assert "skipped: Triton is not installed" in describe_plan(plan)


def test_off_cuda_auto_is_eager_and_explicit_requests_are_tried_before_eager() -> None:
    cpu = plan_decode_paths("cpu", frozen=False, toolchain_problem=None)
    assert tried(cpu) == ["eager"] and cpu[0].skipped == CPU_COMPILE_REASON
    assert tried(plan_decode_paths("npu", frozen=False, toolchain_problem=None)) == ["eager"]
    explicit = {path: plan_decode_paths("cpu", path, frozen=True, toolchain_problem="none")
                for path in ("compile", "static", "graph", "eager")}
    assert tried(explicit["compile"]) == ["compile", "eager"]  # asked for: tried, validated
    assert tried(explicit["static"]) == ["static", "eager"]
    assert explicit["graph"][0].skipped == "needs a CUDA device"
    assert explicit["eager"] == [PlannedPath("eager")]
    assert tried(plan_decode_paths("cuda", "graph", frozen=False,
                                   toolchain_problem=None)) == ["graph", "eager"]
    with pytest.raises(ValueError, match="unknown decode path 'fast'"):
        plan_decode_paths("cuda", "fast", frozen=False, toolchain_problem=None)


def test_a_frozen_process_skips_compile_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert machine_plan("cuda")[0] == PlannedPath("compile", FROZEN_REASON)
    monkeypatch.delattr(sys, "frozen")
    assert machine_plan("cuda")[0].skipped != FROZEN_REASON


def executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_toolchain_probe_names_what_is_missing(tmp_path: Path) -> None:
    bare, tools, headers = tmp_path / "bare", tmp_path / "bin", tmp_path / "include"
    bare.mkdir()
    headers.mkdir()
    triton = SimpleNamespace(submodule_search_locations=[str(tmp_path / "triton")])

    def probe(device: str, path: Path, spec: object = triton, **env: str) -> str | None:
        return compiler_toolchain_problem(device, env={"PATH": str(path), **env},
                                          find_spec=lambda name: spec, include_dir=headers)

    assert "Triton is not installed" in str(probe("cuda", bare, spec=None))
    assert probe("cuda", bare) == "no C compiler found (set CC or install one)"
    assert probe("cpu", bare) == "no C++ compiler found (set CXX or install one)"
    executable(tools, "gcc")
    assert "Python's headers are missing" in str(probe("cuda", tools))
    (headers / "Python.h").write_text("")
    assert probe("cuda", tools) is None
    assert probe("cuda", bare, CC=str(tools / "gcc")) is None
    assert probe("cuda", bare, CC=str(tools / "missing-cc")) is not None
    executable(tmp_path / "triton" / "runtime" / "tcc", "tcc.exe")  # triton-windows' TinyCC
    assert probe("cuda", bare) is None
    assert probe("cpu", bare) is not None and probe("cpu", bare, CXX="gcc",
                                                    PATH=str(tools)) is None
