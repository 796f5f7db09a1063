"""Which decode step to try, in which order: the selection policy, without torch.

The per-row decode step can run three ways (fastest first):

- ``compile``: ``torch.compile(mode="reduce-overhead")``, CUDA graphs of inductor's fused
  kernels. Inductor and Triton compile generated code at run time with the machine's C compiler
  and Python's headers; a frozen bundle carries neither, and on Windows Triton is not installed
  with torch at all.
- ``graph``: the static-shape step captured by hand with ``torch.cuda.CUDAGraph`` (no compiler).
- ``eager``: plain PyTorch, one host dispatch per op (~10 ms of host time per row for the
  40-layer model, BENCHMARKS.md).

``static`` (the graph path's eager twin: static buffers, no capture) is a diagnostic path that
is only tried on request. ``auto`` skips what cannot work here, with the reason; an explicit
request is always tried. Every path but eager is validated against eager at load time
(:mod:`.decode_step`), and ``eager`` is always last, so something always runs.

Torch-free so the doctor can show the plan without loading a model.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DecodePath = Literal["compile", "graph", "static", "eager"]
DECODE_PATHS: tuple[DecodePath, ...] = ("compile", "graph", "static", "eager")
DECODE_REQUESTS = ("auto", *DECODE_PATHS)

LABELS: dict[str, str] = {
    "compile": "torch.compile",
    "graph": "CUDA graphs",
    "static": "static-shape step",
    "eager": "eager",
}
FROZEN_REASON = ("this is the bundled app: torch.compile needs a C compiler and Python headers "
                 "that a bundle does not carry")
CPU_COMPILE_REASON = "opt-in on the CPU, where compiling takes minutes"


@dataclass(frozen=True)
class PlannedPath:
    """One entry of the plan: the path, and why it will not be tried (None: it will)."""

    path: DecodePath
    skipped: str | None = None


def is_frozen() -> bool:
    """True inside a PyInstaller bundle."""
    return bool(getattr(sys, "frozen", False))


def plan_decode_paths(device_type: str, requested: str = "auto", *, frozen: bool,
                      toolchain_problem: str | None) -> list[PlannedPath]:
    """The paths to try in order, eager last; skipped entries carry their reason."""
    if requested not in DECODE_REQUESTS:
        raise ValueError(f"unknown decode path {requested!r}; choose one of "
                         f"{', '.join(DECODE_REQUESTS)}")
    if requested == "eager":
        return [PlannedPath("eager")]
    if requested != "auto":
        path: DecodePath = requested  # type: ignore[assignment]
        skipped = "needs a CUDA device" if path == "graph" and device_type != "cuda" else None
        return [PlannedPath(path, skipped), PlannedPath("eager")]
    if device_type != "cuda":
        reason = CPU_COMPILE_REASON if device_type == "cpu" else f"not used on {device_type}"
        return [PlannedPath("compile", reason), PlannedPath("graph", "needs a CUDA device"),
                PlannedPath("eager")]
    compile_skip = FROZEN_REASON if frozen else toolchain_problem
    return [PlannedPath("compile", compile_skip), PlannedPath("graph"), PlannedPath("eager")]


def machine_plan(device_type: str, requested: str = "auto") -> list[PlannedPath]:
    """:func:`plan_decode_paths` for this process and machine."""
    frozen = is_frozen()
    problem = None if frozen else compiler_toolchain_problem(device_type)
    return plan_decode_paths(device_type, requested, frozen=frozen, toolchain_problem=problem)


def compiler_toolchain_problem(device_type: str, *, env: Mapping[str, str] | None = None,
                               find_spec: Callable[[str], object] | None = None,
                               include_dir: Path | None = None) -> str | None:
    """Why torch.compile cannot work on this machine, or None when its toolchain is present.

    CUDA: Triton, plus a C compiler and ``Python.h`` for the launcher Triton builds on first
    use (triton-windows ships TinyCC). CPU: a C++ compiler and ``Python.h``. A found toolchain
    is no promise; the compiled step is still validated against eager."""
    env = os.environ if env is None else env
    find_spec = importlib.util.find_spec if find_spec is None else find_spec
    include = Path(sysconfig.get_paths()["include"]) if include_dir is None else include_dir
    if device_type == "cuda":
        triton = find_spec("triton")
        if triton is None:
            return ("Triton is not installed (torch ships it on Linux only; on Windows it is "
                    "the separate triton-windows package)")
        compiler = _c_compiler(env, getattr(triton, "submodule_search_locations", None))
    else:
        compiler = _find_program(env, "CXX", ("c++", "g++", "clang++", "cl"))
    if compiler is None:
        kind = "C" if device_type == "cuda" else "C++"
        return f"no {kind} compiler found (set {'CC' if kind == 'C' else 'CXX'} or install one)"
    if not (include / "Python.h").is_file():
        return f"Python's headers are missing ({include / 'Python.h'})"
    return None


def _c_compiler(env: Mapping[str, str], triton_dirs: object) -> str | None:
    found = _find_program(env, "CC", ("cc", "gcc", "clang", "cl"))
    if found is None and isinstance(triton_dirs, list | tuple):
        for folder in triton_dirs:  # triton-windows bundles TinyCC
            tcc = Path(folder) / "runtime" / "tcc" / "tcc.exe"
            if tcc.is_file():
                return str(tcc)
    return found


def _find_program(env: Mapping[str, str], variable: str, names: tuple[str, ...]) -> str | None:
    path = env.get("PATH", os.defpath)
    named = env.get(variable)
    if named:
        return shutil.which(named, path=path) or (named if Path(named).is_file() else None)
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def describe_plan(plan: list[PlannedPath]) -> str:
    """One line: the paths in order, each skipped one with its reason."""
    parts = [LABELS[p.path] + (f" (skipped: {p.skipped})" if p.skipped else "") for p in plan]
    return " → ".join(parts)
