"""Measured transient memory of the two widest working sets, at full size, on the CPU.

- ``prefill``: one full-size decoder layer (bf16) runs a 1,024-row prefill chunk over a cached
  prefix (the masked path), with SDPA forced to its unfused math kernel (``--math``: the
  fallback whose fp32 scores the issue names) or left to choose;
- ``whisper``: a whole 30 s segment through the full-size Whisper-VQ tokenizer (16 layers);
- ``head``: one row through the full-size text head quantised to int8 (151,680 × 4,096), as the
  loader builds it (a block of rows at a time) or, with ``--whole``, as torchao multiplies it
  (a bf16 copy of the whole weight).

Each runs in a fresh process (``python -m app.engine.moss_speech.transient_bench KIND ...``):
the peak resident memory is reset after the weights, caches and a warm-up are in place
(Linux ``/proc/self/clear_refs``), so peak − baseline is the working set of that one call.
The VRAM plan's bounds (app/engine/vram_parts.py) must cover these measurements; the GPU
report measures the same on CUDA with the allocator's own peak.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess  # nosec B404: runs this module again in a fresh process, fixed args
import sys
from pathlib import Path
from typing import Any, TypeVar

import torch

MEASURE_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}  # big blocks back to the OS when freed


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_extra_bytes(run: Any) -> int:
    """Peak resident memory above the current level while ``run()`` executes."""
    gc.collect()
    baseline = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    run()
    return (_status_kib("VmHWM") - baseline) * 1024


M = TypeVar("M", bound=torch.nn.Module)


def _random_(module: M, dtype: torch.dtype) -> M:
    module.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.02, generator=generator)
    module.to(dtype).eval().requires_grad_(False)
    return module


def measure_prefill(chunk_rows: int, prefix_rows: int, math_only: bool,
                    unbounded: bool = False) -> dict[str, Any]:
    from app.engine.moss_speech import layers
    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.layers import AttentionContext, DecoderLayer, rope_tables

    if unbounded:  # the attention as one call, as before the blocks (for comparison)
        layers.SCORE_BUDGET_BYTES = 1 << 60

    config = MossSpeechConfig.full()
    with torch.device("meta"):
        layer = DecoderLayer(config)
    layer = _random_(layer, torch.bfloat16)
    rows = prefix_rows + chunk_rows
    shape = (1, config.num_key_value_heads, rows, config.head_dim)
    kv = (torch.zeros(shape, dtype=torch.bfloat16), torch.zeros(shape, dtype=torch.bfloat16))
    positions = torch.arange(rows)
    cos, sin = rope_tables(positions, config.head_dim, config.rope_theta, torch.bfloat16)
    hidden = torch.randn(1, chunk_rows, config.hidden_size, dtype=torch.bfloat16)

    def forward(start: int, n: int) -> None:
        mask = positions[None, :start + n] <= positions[start:start + n, None]
        ctx = AttentionContext(cos[start:start + n], sin[start:start + n], start=start,
                               causal=False, mask=mask, prefix_causal=True)
        with torch.no_grad(), _backend(math_only):
            layer(hidden[:, :n], ctx, kv)

    forward(prefix_rows, 2)  # kernels, thread pools
    extra = peak_extra_bytes(lambda: forward(prefix_rows, chunk_rows))
    return {"kind": "prefill", "chunk_rows": chunk_rows, "kv_rows": rows,
            "sdpa": "math" if math_only else "default", "blocked": not unbounded,
            "peak_extra_bytes": extra}


def measure_whisper(seconds: float) -> dict[str, Any]:
    from app.engine.moss_speech.codec.config import CodecConfig
    from app.engine.moss_speech.codec.tokenizer import SpeechTokenizer
    from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder

    config = CodecConfig.full()
    with torch.device("meta"):
        encoder = WhisperVQEncoder(config.whisper)
    tokenizer = SpeechTokenizer(_random_(encoder, torch.bfloat16), config.front_end)
    pcm = torch.randn(int(seconds * 16000), generator=torch.Generator().manual_seed(0)) * 0.1
    tokenizer.encode(pcm[:16000].numpy(), 16000)  # kernels, thread pools, codebook table
    extra = peak_extra_bytes(lambda: tokenizer.encode(pcm.numpy(), 16000))
    return {"kind": "whisper", "seconds": seconds, "peak_extra_bytes": extra}


def measure_head(whole: bool) -> dict[str, Any]:
    from torch import nn

    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.quantize import quantize_linears
    from app.engine.preflight import DEQUANT_BUDGET_BYTES

    config = MossSpeechConfig.full()
    with torch.device("meta"):
        linear = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
    budget = 1 << 60 if whole else DEQUANT_BUDGET_BYTES
    head = quantize_linears(_random_(linear, torch.bfloat16), "int8",
                            dequant_budget_bytes=budget)
    gc.collect()
    row = torch.randn(1, 1, config.hidden_size, dtype=torch.bfloat16)
    with torch.no_grad():
        head(row)  # kernels, thread pools
        extra = peak_extra_bytes(lambda: head(row))
    return {"kind": "head", "int8_rows_per_block": getattr(head, "rows", config.vocab_size),
            "peak_extra_bytes": extra}


def _backend(math_only: bool) -> Any:
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH]) if math_only else nullcontext()


def run_measurement(args: list[str], timeout_s: float = 3600) -> dict[str, Any]:
    """One measurement in a fresh process (this module's main); its JSON result."""
    env = {**os.environ, **MEASURE_ENV}
    # this module with our own options, no shell: the measurement needs a fresh process
    done = subprocess.run([sys.executable, "-m", __name__, *args],  # nosec B603
                          capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"measurement {args} failed: {done.stderr.strip()[-500:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("prefill", "whisper", "head"))
    parser.add_argument("--chunk-rows", type=int, default=1024)
    parser.add_argument("--prefix-rows", type=int, default=4352)
    parser.add_argument("--math", action="store_true", help="SDPA's unfused math kernel only")
    parser.add_argument("--unbounded", action="store_true",
                        help="attention in one call (no query blocks), for comparison")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--whole", action="store_true",
                        help="head: torchao's product with the whole weight, for comparison")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if args.kind == "prefill":
        result = measure_prefill(args.chunk_rows, args.prefix_rows, args.math, args.unbounded)
    elif args.kind == "head":
        result = measure_head(args.whole)
    else:
        result = measure_whisper(args.seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
