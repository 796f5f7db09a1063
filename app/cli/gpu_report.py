"""Measure this CUDA machine (GPU tests, decode and codec speed, TTFA/RTF, memory vs the plan).

Writes gpu-report/report.json and gpu-report/report.md: the environment, ``pytest -m gpu``,
full-size random-weight decode rows/s for bf16/int8/int4 × CUDA graph/torch.compile/eager with
the ratio to the bandwidth floor, the engine's TTFA and real-time factor, warm-up and graph
capture times, codec streaming per chunk, and peak allocated/reserved memory per precision
against the VRAM plan. Within 9 minutes on an H100 (``--budget-s``). Without CUDA it exits 2 at
once with one line; 1 when a section failed (the report says which), else 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.options import OutputFolder, seconds

REPO = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=OutputFolder("report folder"), default=Path("gpu-report"),
                        help="folder for report.json and report.md (default: gpu-report)")
    parser.add_argument("--budget-s", type=seconds(0.0, 86400.0), default=540.0,
                        help="time budget in seconds; later sections are skipped past it")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")


def cuda_problem() -> str | None:
    """Why this machine cannot run the report, or None (imports torch: ~1 s)."""
    try:
        import torch
    except Exception as exc:  # a broken install can raise more than ImportError
        return f"torch cannot be imported ({type(exc).__name__}: {exc})"
    if torch.version.cuda is None:
        return (f"no CUDA: this torch ({torch.__version__}) is a CPU-only build; run it on a "
                "machine with an NVIDIA GPU and a CUDA build of torch")
    if not torch.cuda.is_available():
        return "no CUDA: torch has CUDA but finds no usable GPU (driver or CUDA_VISIBLE_DEVICES)"
    return None


def run(args: argparse.Namespace) -> int:
    problem = cuda_problem()
    if problem:
        print(f"gpu-report: {problem}")
        return 2
    from app.gpu_report.collect import collect
    from app.gpu_report.writer import write_report

    report = collect(REPO, args.budget_s, run_tests=not args.skip_tests,
                     log=lambda line: print(f"gpu-report: {line}", flush=True))
    json_path, md_path = write_report(report, args.out)
    print(f"gpu-report: wrote {json_path} and {md_path} in {report['duration_s']} s"
          + (f"; {len(report['errors'])} section(s) failed" if report["errors"] else ""))
    return 1 if report["errors"] else 0
