"""Pre-flight checks against this machine: a CUDA device that exists, a precision the device
can run (the engine's own rule), named with the combinations that can run here. They import
torch, so commands call them from ``check(args)``, never while parsing."""

from __future__ import annotations

import logging

from app.cli.options import InputError


def check_device(option: str, device: str) -> None:
    """Refuse a CUDA device this machine does not have (imports torch)."""
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        build = ("this torch is a CPU-only build" if torch.version.cuda is None
                 else "torch finds no usable CUDA GPU")
        raise InputError(option, device, f"this machine has no CUDA device ({build}); use cpu")
    index = int(device.partition(":")[2] or 0)
    found = torch.cuda.device_count()
    if index >= found:
        raise InputError(option, device, f"this machine has {found} CUDA device(s): "
                         + ", ".join(f"cuda:{i}" for i in range(found)))


def check_precision(precision: str, device: str) -> None:
    """Refuse a precision the device cannot run, naming the combinations that can run here.

    The rule is the engine's own (app.engine.moss_speech.quantize.check_precision), so the
    refusal follows the engine when it learns a new combination.
    """
    problem = _precision_problem(precision, device)
    if problem:
        raise InputError("--precision", precision,
                         f"{problem} (with --device {device}); this machine can run: "
                         f"{runnable_combinations()}")


def _precision_problem(precision: str, device: str) -> str | None:
    import torch

    from app.engine.moss_speech.quantize import PrecisionError
    from app.engine.moss_speech.quantize import check_precision as engine_check

    pytree = logging.getLogger("torch.utils._pytree")  # torchao's import warns about torch
    level = pytree.level
    pytree.setLevel(logging.ERROR)
    try:
        engine_check(precision, torch.device(device))
    except PrecisionError as exc:
        return str(exc)
    finally:
        pytree.setLevel(level)
    return None


def runnable_combinations() -> str:
    """``--device X with a, b`` for each device here, e.g. "--device cpu with bf16, int8"."""
    import torch

    from app.engine.preflight import PRECISIONS

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    found = []
    for device in devices:
        ok = [p for p in PRECISIONS if _precision_problem(p, device) is None]
        if ok:
            found.append(f"--device {device} with {', '.join(ok)}")
    return "; ".join(found) or "none"
