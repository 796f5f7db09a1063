"""gpu-report/report.json and report.md from the collected measurements (torch-free).

The JSON is what was measured, as collected (``collect.py``); the Markdown is the same in
tables a person reads: environment, GPU tests, decode rows/s per precision and decode path with
the ratio to the bandwidth floor, codec streaming per chunk (one chunk profiled), engine TTFA
and real-time factor, warm-up and capture times, and peak memory per precision against the VRAM
plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SCHEMA = 1
PRECISIONS = ("bf16", "int8", "int4")
DECODE_PATHS = ("graph", "compile", "eager")


def write_report(report: Mapping[str, Any], out_dir: Path | str) -> tuple[Path, Path]:
    """Write report.json and report.md into ``out_dir``; returns their paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "report.json", folder / "report.md"
    json_path.write_text(json.dumps({"schema": SCHEMA, **report}, indent=2, default=str) + "\n",
                         encoding="utf-8")
    md_path.write_text(format_markdown(report), encoding="utf-8")
    return json_path, md_path


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value).replace("|", "/").replace("\n", " ")


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def format_markdown(report: Mapping[str, Any]) -> str:
    env = report.get("environment", {})
    lines = [f"# GPU report: {env.get('gpu', 'unknown GPU')}", "",
             f"Date {report.get('date', '—')}, `{report.get('command', 'make gpu-report')}`, "
             f"{_cell(report.get('duration_s'))} s. Random full-size weights (no checkpoint).", ""]
    lines += _environment(env) + _tests(report.get("gpu_tests", {}))
    lines += _decode(report.get("engine", {})) + _engine(report.get("engine", {}))
    lines += _memory(report.get("engine", {})) + _codec(report.get("codec", {}))
    errors = report.get("errors") or []
    if errors:
        lines += ["## Problems", ""] + [f"- {e}" for e in errors] + [""]
    return "\n".join(lines) + "\n"


def _environment(env: Mapping[str, Any]) -> list[str]:
    rows = [(k, v) for k, v in env.items()]
    return ["## Environment", "", *table(("item", "value"), rows), ""]


def _tests(tests: Mapping[str, Any]) -> list[str]:
    if not tests:
        return []
    return ["## GPU tests (`pytest -m gpu`)", "",
            *table(("passed", "failed", "skipped", "errors", "seconds", "summary"),
                   [(tests.get("passed"), tests.get("failed"), tests.get("skipped"),
                     tests.get("errors"), tests.get("duration_s"), tests.get("summary"))]), ""]


def _decode(engine: Mapping[str, Any]) -> list[str]:
    rows = []
    for precision in PRECISIONS:
        decode = engine.get(precision, {}).get("decode", {})
        for path in DECODE_PATHS:
            d = decode.get(path)
            if d is None:
                continue
            rows.append((precision, path, d.get("decode_path"), d.get("decode_rows_per_s"),
                         d.get("decode_ms_per_row"), d.get("bandwidth_floor_ms"),
                         d.get("ratio_to_floor"), d.get("realtime_factor_audio"),
                         d.get("prefill_ms"), d.get("decode_setup_ms"),
                         d.get("skipped") or d.get("error") or "; ".join(
                             d.get("decode_notes") or [])))
    if not rows:
        return []
    head = ("precision", "requested", "ran", "rows/s", "ms/row", "floor ms", "× floor",
            "× real time", "prefill 300 rows ms", "setup ms", "notes")
    return ["## AR decode (full size, 300-row prompt, audio mode)", "",
            "`× floor`: measured row time ÷ (weight bytes read per row ÷ measured copy "
            "bandwidth); `× real time`: rows/s ÷ 12.5.", "", *table(head, rows), ""]


def _engine(engine: Mapping[str, Any]) -> list[str]:
    rows = []
    for precision in PRECISIONS:
        e2e = engine.get(precision, {}).get("e2e")
        if not e2e:
            continue
        rows.append((precision, e2e.get("decode_path"), e2e.get("ttfa_ms_median"),
                     e2e.get("rtf_median"), e2e.get("turns"), e2e.get("build_s"),
                     e2e.get("warmup_s"), e2e.get("decode_setup_ms"),
                     e2e.get("error") or e2e.get("skipped")))
    if not rows:
        return []
    head = ("precision", "decode step", "TTFA ms (median)", "RTF (median)", "turns",
            "engine build s", "warm-up s", "capture + validation ms", "notes")
    return ["## Engine end to end", "", *table(head, rows), ""]


def _memory(engine: Mapping[str, Any]) -> list[str]:
    rows = []
    for precision in PRECISIONS:
        mem = engine.get(precision, {}).get("memory")
        if not mem:
            continue
        rows.append((precision, mem.get("peak_allocated_gib"), mem.get("peak_reserved_gib"),
                     mem.get("device_used_gib"), mem.get("plan_gib"), mem.get("within_plan"),
                     mem.get("plan_default_gib")))
    if not rows:
        return []
    head = ("precision", "peak allocated GiB", "peak reserved GiB", "device used GiB",
            "plan at the bench settings GiB", "reserved ≤ plan", "plan at defaults GiB")
    return ["## Peak memory against the plan", "", *table(head, rows), ""]


def _codec(codec: Mapping[str, Any]) -> list[str]:
    if not codec:
        return []
    lines = ["## Codec streaming (full size)", "",
             *table(("dtype", "chunk codes", "first chunk ms", "median chunk ms",
                     "audio ms per chunk", "encode ms per audio s", "notes"),
                    [(codec.get("dtype"), codec.get("chunk"), codec.get("first_chunk_ms"),
                      codec.get("median_chunk_ms"), codec.get("audio_ms_per_chunk"),
                      codec.get("encode_ms_per_audio_s"),
                      codec.get("error") or codec.get("skipped"))]), ""]
    chunks = codec.get("chunk_ms") or []
    if chunks:
        lines += ["Per chunk (ms): " + ", ".join(_cell(c) for c in chunks), ""]
    profile = codec.get("profile") or {}
    if profile.get("error"):
        lines += [f"One chunk profiled: {profile['error']}", ""]
    elif profile:
        lines += [f"One chunk profiled: {_cell(profile.get('chunk_ms'))} ms wall, "
                  f"{_cell(profile.get('aten_ops'))} operators dispatched, "
                  f"{_cell(profile.get('cuda_kernels'))} CUDA kernels taking "
                  f"{_cell(profile.get('cuda_kernel_ms'))} ms on the GPU{_bound(profile)}", ""]
    return lines


def _bound(profile: Mapping[str, Any]) -> str:
    """Host- or GPU-bound: the GPU busy for under half the chunk's wall time is the former."""
    wall, gpu = profile.get("chunk_ms"), profile.get("cuda_kernel_ms")
    if not wall or gpu is None:
        return ""
    return (" (the GPU idles most of the chunk: bound by the host)" if gpu < wall / 2
            else " (bound by the GPU)")
