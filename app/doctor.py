"""What this machine has for MOSS Voice: Python, torch, GPUs, audio, models, display.

Never fails on a missing piece: everything missing is reported with what to do about it.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

from app import __version__, paths
from app.audio.probe import probe_audio
from app.display import display_status
from app.engine.folders import verify_codec_folder, verify_model_folder
from app.engine.remote import health_report
from app.settings_store import LoadedSettings, load_settings, settings_write_problem
from app.vad.smart_turn import end_of_turn_status


def torch_report() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Torch version and CUDA state, and one entry per GPU with total/free memory."""
    try:
        import torch
    except Exception as exc:  # a broken CUDA install can raise more than ImportError
        return {"installed": False, "error": f"{type(exc).__name__}: {exc}"}, []
    info: dict[str, Any] = {
        "installed": True,
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": False,
        "npu_available": False,
    }
    gpus: list[dict[str, Any]] = []
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        for index in range(torch.cuda.device_count() if info["cuda_available"] else 0):
            props = torch.cuda.get_device_properties(index)
            free, total = torch.cuda.mem_get_info(index)
            gpus.append({"index": index, "name": props.name, "total_bytes": int(total),
                         "free_bytes": int(free), "capability": f"{props.major}.{props.minor}"})
    except Exception as exc:
        info["error"] = f"CUDA query failed: {type(exc).__name__}: {exc}"
    info["npu_available"] = _npu_available()
    info["decode_step"] = decode_step_report("cuda" if info["cuda_available"] else "cpu")
    return info, gpus


def decode_step_report(device_type: str) -> dict[str, Any]:
    """The decode steps the engine would try here, in order, and why any is skipped (which one
    passes its check against eager at load time is in the log: "decode step on ...")."""
    from app.engine.moss_speech.decode_policy import describe_plan, is_frozen, machine_plan

    plan = machine_plan(device_type)
    return {"device": device_type, "frozen": is_frozen(), "summary": describe_plan(plan),
            "plan": [{"path": p.path, "skipped": p.skipped} for p in plan]}


def _npu_available() -> bool:
    try:
        import torch
        import torch_npu  # noqa: F401 - registers torch.npu

        return bool(torch.npu.is_available())  # type: ignore[attr-defined]
    except Exception:
        return False


def models_report(loaded: LoadedSettings) -> dict[str, Any]:
    from app.folder_integrity import integrity_summary
    from app.model_store import REPOS

    engine = loaded.settings.engine

    def folder(path: Path | None, verify: Any, kind: Any) -> dict[str, Any]:
        validated = {"validated_revision": REPOS[kind].revision}
        if path is None:
            return {"path": None, "configured": False, "ok": False, **validated,
                    "problems": ["not configured; choose or download it in the model manager"]}
        return {"configured": True, **verify(path).as_dict(), **validated,
                **integrity_summary(kind, path).as_dict()}

    voice = engine.voice_prompt
    return {
        "settings_file": str(loaded.path),
        "settings_issues": [str(issue) for issue in loaded.issues],
        "settings_write_problem": settings_write_problem(loaded.path),
        "engine": engine.kind,
        "model": folder(engine.model_dir, verify_model_folder, "model"),
        "codec": folder(engine.codec_dir, verify_codec_folder, "codec"),
        "voice_prompt": {"path": str(voice) if voice else None,
                         "exists": bool(voice and Path(voice).is_file())},
    }


def collect_report(loaded: LoadedSettings | None = None) -> dict[str, Any]:
    """The whole doctor report as plain JSON-able data. Only reads: a broken settings file is
    reported, never repaired or rewritten."""
    loaded = loaded or load_settings(repair=False)
    torch_info, gpus = torch_report()
    return {
        "app": {"version": __version__},
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "platform": platform.platform()},
        "torch": torch_info,
        "gpus": gpus,
        "audio": probe_audio(),
        "models": models_report(loaded),
        "remote": health_report(loaded.settings),  # the MOSS-Speech server's /health, if set
        "end_of_turn": end_of_turn_status(),
        "display": display_status().as_dict(),
        "paths": {"config": str(paths.config_dir()), "data": str(paths.data_dir()),
                  "models": str(paths.models_dir()), "logs": str(paths.log_dir()),
                  "cache": str(paths.cache_dir())},
    }


def format_report(report: dict[str, Any]) -> str:
    """Human-readable lines: one per topic, with what to do when something is missing."""
    ok, bad = "ok ", "-- "
    lines = [f"MOSS Voice {report['app']['version']} doctor",
             f"{ok}Python {report['python']['version']} ({report['python']['executable']})"]
    torch_info = report["torch"]
    if torch_info.get("installed"):
        cuda = "CUDA available" if torch_info["cuda_available"] else "no CUDA (CPU only)"
        lines.append(f"{ok}torch {torch_info['version']}: {cuda}")
    else:
        lines.append(f"{bad}torch not usable: {torch_info.get('error')}; run make setup")
    decode = torch_info.get("decode_step")
    if decode:
        lines.append(f"{ok}decode step ({decode['device']}): {decode['summary']}")
    for gpu in report["gpus"]:
        lines.append(f"{ok}GPU {gpu['index']}: {gpu['name']}, {gpu['free_bytes'] / 2**30:.1f} of "
                     f"{gpu['total_bytes'] / 2**30:.1f} GiB free")
    audio = report["audio"]
    if audio["available"]:
        lines.append(f"{ok}audio: {len(audio['inputs'])} input(s), "
                     f"{len(audio['outputs'])} output(s)")
    else:
        lines.append(f"{bad}audio: {audio['reason']}")
    models = report["models"]
    problem = models.get("settings_write_problem")
    for issue in models["settings_issues"]:
        repair = "" if problem else " (left as it is; the app repairs it when it starts, " \
            "keeping a backup)"
        lines.append(f"{bad}settings: {issue}{repair}")
    if problem:
        lines.append(f"{bad}settings: {problem}")
    lines.append(f"{ok}engine: {models['engine']} (settings: {models['settings_file']})")
    for kind in ("model", "codec"):
        entry = models[kind]
        mark = ok if entry["ok"] else bad
        where = entry["path"] or "not set"
        detail = "verified" if entry["ok"] else "; ".join(entry["problems"]) + (
            f". {entry['advice']}" if entry.get("advice") else "")
        lines.append(f"{mark}{kind} folder {where}: {detail}")
        if "revision" in entry:
            lines.append(f"    {entry['revision']['message']}")
            lines.append(f"    {entry['hashes']['message']}")
        else:
            lines.append(f"    this app is validated with revision {entry['validated_revision']}")
    for check in models.get("hash_checks", []):
        lines.append(f"{ok if check['ok'] else bad}SHA-256 check of the {check['kind']} folder: "
                     f"{check['message']}")
    remote = report.get("remote")
    if remote:
        detail = f"ready ({remote['status']})" if remote["ok"] else remote["problem"]
        lines.append(f"{ok if remote['ok'] else bad}server {remote['url'] or ''}: {detail}")
    turn_end = report["end_of_turn"]
    lines.append(f"{ok}end-of-turn model: {turn_end['path']}" if turn_end["available"]
                 else f"{bad}end-of-turn model: {turn_end['reason']}")
    display = report["display"]
    shown = display["reason"] if display["available"] else f"none ({display['reason']})"
    lines.append(f"{ok if display['available'] else bad}display: {shown}")
    lines.append(f"    settings, models, logs: {report['paths']['config']}, "
                 f"{report['paths']['models']}, {report['paths']['logs']}")
    return "\n".join(lines)
