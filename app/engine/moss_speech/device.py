"""Where the model runs and in what precision: device choice, VRAM preflight, allocator settings,
out-of-memory detection and recovery.

``auto`` picks CUDA, then an Ascend NPU (when ``torch_npu`` is installed), else the CPU with a
warning that replies will be slow. On CUDA the caching allocator is switched to expandable
segments before CUDA starts where PyTorch supports them (Linux; contract pitfall 15: the
streaming codec reserved ~77 GiB with the default allocator), and the VRAM preflight
(:mod:`app.engine.preflight`) refuses a precision that cannot fit and names one that can,
before a byte of the model is loaded.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from dataclasses import dataclass

import torch

from app.engine import preflight
from app.engine.factory import EngineUnavailableError
from app.engine.moss_speech.errors import EngineInputError

log = logging.getLogger(__name__)

ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_SEGMENTS = "expandable_segments:True"
CPU_WARNING = ("MOSS-Speech runs on the CPU here: replies will be much slower than real time "
               "(seconds per second of speech).")
PRECISION_ACTION = "Choose another precision in Settings → Engine → Precision."


@dataclass(frozen=True)
class DeviceChoice:
    device: torch.device
    warning: str = ""  # shown once the engine is loaded


def npu_available() -> bool:
    """An Ascend NPU through the torch_npu plug-in (importing it registers ``torch.npu``)."""
    try:
        import torch_npu  # noqa: F401
    except Exception:  # not installed, or a broken CANN install
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


def choose_device(setting: str) -> DeviceChoice:
    """The device for ``settings.engine.device`` (auto, cuda, npu, cpu); raises
    EngineUnavailableError when an explicit choice is not available here. Choosing CUDA sets up
    the allocator before anything initialises CUDA (``torch.device("cuda")`` is the current
    device, so ``CUDA_VISIBLE_DEVICES`` picks the GPU)."""
    if setting == "auto":
        if torch.cuda.is_available():  # counts devices; CUDA itself is not initialised yet
            configure_cuda_allocator()
            return DeviceChoice(torch.device("cuda"))
        if npu_available():
            return DeviceChoice(torch.device("npu", 0))
        return DeviceChoice(torch.device("cpu"), CPU_WARNING)
    if setting == "cuda":
        if not torch.cuda.is_available():
            build = ("this torch is a CPU-only build" if torch.version.cuda is None
                     else "no usable CUDA GPU was found")
            raise EngineUnavailableError(
                f"the device is set to CUDA but {build}",
                action="Set Settings → Engine → Device to 'auto' or 'cpu', or install a CUDA "
                "build of torch (README, 'GPU installation').")
        configure_cuda_allocator()
        return DeviceChoice(torch.device("cuda"))
    if setting == "npu":
        if not npu_available():
            raise EngineUnavailableError(
                "the device is set to NPU but torch_npu is not installed or finds no NPU",
                action="Install torch_npu for your CANN version, or set the device to 'auto'.")
        return DeviceChoice(torch.device("npu", 0))
    if setting == "cpu":
        return DeviceChoice(torch.device("cpu"), CPU_WARNING)
    raise EngineUnavailableError(f"unknown device {setting!r}",
                                 action="Choose auto, cuda, npu or cpu.")


def expandable_segments_supported(platform: str = sys.platform) -> bool:
    """PyTorch implements expandable segments with CUDA virtual memory on Linux only; on
    Windows it warns that they are not supported and ignores the setting."""
    return platform.startswith("linux")


def configure_cuda_allocator(platform: str = sys.platform) -> None:
    """Expandable segments for the CUDA caching allocator, unless the user configured it.

    The environment variable only counts before CUDA initialises; if something (a GPU query)
    initialised it already, the allocator setting is changed at run time instead. Windows'
    allocator has no expandable segments (PyTorch warns and ignores the setting), so there the
    default allocator stays and the flow-cache budget is what bounds the codec's memory.
    """
    if ALLOC_CONF_ENV in os.environ:
        return
    if not expandable_segments_supported(platform):
        log.info("CUDA allocator: expandable segments do not exist on %s; the default "
                 "allocator is used (the flow-cache budget bounds the codec's memory)", platform)
        return
    if not torch.cuda.is_initialized():
        os.environ[ALLOC_CONF_ENV] = EXPANDABLE_SEGMENTS
        return
    try:
        torch.cuda.memory._set_allocator_settings(EXPANDABLE_SEGMENTS)
    except Exception as exc:  # a private API: never worth failing the build over
        log.warning("could not enable expandable CUDA segments (%s); long replies may "
                    "fragment GPU memory", exc)


def free_memory_bytes(device: torch.device) -> int | None:
    """Free accelerator memory in bytes, or None on the CPU (or when it cannot be read)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        if device.type == "npu":
            return int(torch.npu.mem_get_info(device)[0])  # type: ignore[attr-defined]
    except Exception as exc:
        log.warning("free memory of %s unknown (%s); skipping the VRAM preflight", device, exc)
    return None


def check_fits(free_bytes: int | None, precision: str, context_rows: int,
               dims: preflight.ModelDims | None, extra_rows: int = 0,
               flow_cache_bytes: int | None = None) -> None:
    """Refuse a precision that cannot fit ``free_bytes`` of accelerator memory, naming one
    that can (None: not an accelerator, nothing to check).

    ``context_rows`` + ``extra_rows`` (the transcript pass's own cache) size the KV term,
    ``flow_cache_bytes`` the codec's streaming state (None: the default settings'); ``dims``
    are the checked config's (None: the published model's)."""
    if free_bytes is None:
        return
    problem = preflight.fit_problem(precision, free_bytes, context_rows + extra_rows,
                                    dims or preflight.ModelDims(),
                                    flow_cache_bytes)
    if problem:
        raise EngineUnavailableError(problem, category="out_of_memory",
                                     action="Or close other programs that use the GPU, or "
                                     "lower Settings → Engine → Context max rows or Settings → "
                                     "Streaming → Flow cache budget.")


def refuse_growth(device: torch.device, growth_bytes: int, what: str, advice: str) -> None:
    """Refuse a live change whose extra GPU memory is not free (the preflight counted the old
    setting), before anything changes: an EngineInputError (category out_of_memory)."""
    free = free_memory_bytes(device)
    if (growth_bytes > 0 and free is not None
            and growth_bytes > free - preflight.WORKING_MARGIN_BYTES):
        raise EngineInputError(f"{what} would need {preflight.gib(growth_bytes)} more GPU "
                               f"memory, but only {preflight.gib(free)} is free.", advice,
                               "out_of_memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/NPU out-of-memory errors (torch raises OutOfMemoryError; some paths a RuntimeError)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def out_of_memory_advice(device: torch.device, precision: str, context_rows: int,
                         dims: preflight.ModelDims | None,
                         flow_cache_bytes: int | None = None) -> str:
    """What to do after an out-of-memory turn, with the precision that fits if one does."""
    free = free_memory_bytes(device)
    base = "The conversation so far is kept and the next turn can try again."
    if free is None:
        return base + " Close other programs, or shorten replies (Sampling → Max new rows)."
    advice = preflight.recommend(free, context_rows, dims or preflight.ModelDims(),
                                 flow_cache_bytes)
    if advice.precision and advice.precision != precision:
        return (f"{base} {advice.message} Choose {advice.precision} in Settings → Engine → "
                "Precision.")
    return (f"{base} Lower Settings → Streaming → Flow cache budget, Settings → Engine → "
            "Context max rows or Sampling → Max new rows, or close other programs that use "
            "the GPU.")


def release_memory(device: torch.device) -> None:
    """Return cached blocks to the device after an out-of-memory error (or on close)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "npu":
        torch.npu.empty_cache()  # type: ignore[attr-defined]


def set_deterministic(device: torch.device, deterministic: bool) -> None:
    """With a fixed seed, make cuDNN deterministic: its default algorithms let the streaming
    codec drift by ~1.5e-4 between runs (contract §3.7). cuDNN's autotuner stays off either way:
    the codec's shapes change every chunk, and each new shape would be tuned again."""
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = deterministic
        torch.backends.cudnn.benchmark = False
