"""GPU memory plan per precision for the published model at the current settings.

The same numbers as the engine's VRAM preflight and the model manager's "On this GPU" column
(app/engine/preflight.py), with every part shown: AR weights on the GPU, codec, KV cache, flow
cache, prefill and codec transients, runtime. The module sizes are recounted here on the meta
device (the real modules in the published layout) and must equal the plan's; ``fits`` compares
the total with ``--free-gib`` or, without it, with the free memory of the best CUDA GPU.
Exit 0, or 2 for a bad option. Nothing is written (the settings file is only read).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.cli.options import InputFile, Number

GIB = 1 << 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--free-gib", type=Number(float, 0.0, 65536.0, unit="GiB"), default=None,
                        metavar="N",
                        help="free GPU memory to plan for, in GiB (default: ask the GPU)")
    parser.add_argument("--settings", type=InputFile("settings file (TOML)"), default=None,
                        metavar="TOML",
                        help="settings file to plan for (default: the app's settings)")


def run(args: argparse.Namespace) -> int:
    settings, source = read_settings(args.settings)
    plan = build_plan(settings, source, args.free_gib)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0


def read_settings(path: Path | str | None) -> tuple[Any, str]:
    """The settings to plan for and where they came from; never writes (defaults if the file
    is missing or cannot be used)."""
    from pathlib import Path

    import tomllib

    from app.paths import settings_path
    from app.settings import Settings

    file = Path(path) if path else settings_path()
    if not file.is_file():
        return Settings(), f"defaults ({file} does not exist)"
    try:
        return Settings.model_validate(tomllib.loads(file.read_text("utf-8"))), str(file)
    except Exception as exc:  # TOML or validation errors: report them, plan for defaults
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Settings(), f"defaults ({file} cannot be used: {first})"


def build_plan(settings: Any, source: str, free_gib: float | None) -> dict[str, Any]:
    from app.engine import preflight
    from app.engine.moss_speech.census import codec_census, lm_census
    from app.engine.moss_speech.codec.config import CodecConfig
    from app.engine.moss_speech.config import MossSpeechConfig

    config = MossSpeechConfig.full()
    codec = codec_census(CodecConfig.full())
    if codec != preflight.CODEC_SIZES:
        raise RuntimeError(f"codec module sizes {codec} differ from the plan's")
    free, gpu = _free_bytes(free_gib)
    rows = settings.engine.context_max_rows
    precisions: dict[str, Any] = {}
    for precision in preflight.PRECISIONS:
        flow = preflight.flow_cache_bytes_for(settings, precision)
        need = preflight.estimate(precision, rows, config.dims(), flow, codec)
        if lm_census(config, precision) != (need.weights_bytes, need.host_bytes):
            raise RuntimeError(f"{precision}: AR module sizes differ from the plan's")
        precisions[precision] = {
            "total_gib": _gib(need.total_bytes),
            "parts_gib": {k: _gib(v) for k, v in need.parts_bytes().items()},
            "fits": None if free is None else need.fits(free),
            "host_gib": _gib(need.host_bytes), "codec_dtype": need.codec_dtype,
            "kv_rows": need.kv_rows}
    flow = preflight.flow_cache_bytes_for(settings)
    advice = preflight.recommend(free, rows, config.dims(), flow) if free is not None else None
    return {"model": "published MOSS-Speech + MOSS-Speech-Codec (module sizes counted on the "
                     "meta device)",
            "settings": {"source": source, "context_max_rows": rows,
                         "flow_cache_budget_mib": settings.streaming.flow_cache_budget_mib,
                         "max_new_rows": settings.sampling.max_new_rows,
                         "voice_seconds": round(preflight.voice_seconds(
                             settings.engine.voice_prompt), 1)},
            "gpu": gpu, "free_gib": None if free is None else _gib(free),
            "recommended": advice.precision if advice else None,
            "precisions": precisions}


def _free_bytes(free_gib: float | None) -> tuple[int | None, str | None]:
    if free_gib is not None:
        return int(free_gib * GIB), "given (--free-gib)"
    from app.engine.preflight import query_gpu_memory

    best = query_gpu_memory().best
    return (best.free_bytes, best.name) if best else (None, None)


def _gib(n_bytes: int) -> float:
    return round(n_bytes / GIB, 2)


def format_plan(plan: dict[str, Any]) -> str:
    parts = list(next(iter(plan["precisions"].values()))["parts_gib"])
    head = ["precision", "total", *parts, "fits", "host"]
    lines = [f"Memory plan (GiB), {plan['model']}",
             f"settings: {plan['settings']}",
             f"GPU: {plan['gpu'] or 'none found'}; free: {plan['free_gib']} GiB; "
             f"recommended: {plan['recommended']}", "", " | ".join(head)]
    for name, row in plan["precisions"].items():
        fits = "–" if row["fits"] is None else ("yes" if row["fits"] else "no")
        cells = [name, f"{row['total_gib']:.2f}",
                 *(f"{row['parts_gib'][p]:.2f}" for p in parts), fits, f"{row['host_gib']:.2f}"]
        lines.append(" | ".join(cells))
    return "\n".join(lines)
