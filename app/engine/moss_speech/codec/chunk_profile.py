"""How much host work one streaming chunk is: the operators it dispatches and, on CUDA, the
kernels it launches and the GPU time they take (torch.profiler).

Why: on an H200 a 5-code chunk (0.4 s of audio) took 315 ms in fp16 (BENCHMARKS.md, "Measured
on a GPU"), far more than the flow's arithmetic needs there. Eager PyTorch pays the Python and
dispatcher cost of every operator whatever its kernel takes; a chunk that dispatches some
19,000 operators (10 Euler steps × a 56-block estimator, counted on the CPU) spends most of its
time on the host. Where ``kernel_ms`` is far under ``chunk_ms`` the chunk is host-bound, and
fusing or capturing (CUDA graphs) is the lever, not a faster GPU.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

WARM_CHUNKS = 3  # chunks decoded before the one profiled (the first also builds voice state)


def profile_steady_chunk(codec: Any, voice: Any, chunk: int,
                         **stream_options: Any) -> dict[str, Any]:
    """A fresh stream of ``codec`` for ``voice`` (``stream_options`` as ``stream_decoder``
    takes them), ``WARM_CHUNKS`` chunks decoded, then the next one profiled
    (:func:`profile_chunk`); random codes, seeded."""
    warm = WARM_CHUNKS * chunk + 3
    codes = torch.randint(0, 16384, (warm + 2 * chunk + 3,),
                          generator=torch.Generator().manual_seed(2))
    with codec.stream_decoder(voice, chunk, max_codes=len(codes), **stream_options) as decoder:
        decoder.push(codes[:warm])
        return profile_chunk(decoder, codes[warm:], codec.device)


def profile_chunk(decoder: Any, codes: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """Push ``codes`` [N] one at a time into the stream ``decoder`` until one chunk is decoded,
    under the profiler: wall ms of that chunk, the operators it dispatched (top-level ``aten::``
    calls, the most frequent ones), and on CUDA the kernels launched and their summed time."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    before = decoder.steps
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for index in range(len(codes)):
            decoder.push(codes[index:index + 1])
            if decoder.steps > before:
                break
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        chunk_ms = (time.perf_counter() - started) * 1000
    if decoder.steps == before:
        raise ValueError(f"{len(codes)} codes did not complete a chunk")
    events = prof.events()
    top = [e.name for e in events if e.name.startswith("aten::")
           and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))]
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    return {"chunk_ms": round(chunk_ms, 1), "aten_ops": len(top),
            "most_frequent_ops": dict(Counter(top).most_common(8)),
            "cuda_kernels": len(kernels) if device.type == "cuda" else None,
            "cuda_kernel_ms": (round(sum(e.time_range.elapsed_us() for e in kernels) / 1000, 1)
                               if device.type == "cuda" else None)}
