"""Memory: the VRAM plan's transient bounds against what the code really takes at full size.

Runs one full-size decoder layer over a 1,024-row prefill chunk after a cached prefix (SDPA's
default kernel and its unfused math fallback; with ``--unbounded`` also the attention in one
call, as before it was split into blocks) and, with ``--whisper``, a whole 30 s segment
through the full-size Whisper-VQ tokenizer, and one row through the int8 text head (in blocks of
rows as the loader builds it; with ``--unbounded`` also torchao's whole-weight product), each in
a fresh process on the CPU (peak resident memory above the level before the call). Prints each
with the plan's bound for it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli.bench_common import add_threads_and_json
from app.cli.options import InputError, count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chunk-rows", type=count(1, 40960), default=1024,
                        help="rows of the prefill chunk (the engine's: 1,024)")
    parser.add_argument("--context-rows", type=count(256, 40960), default=4096,
                        help="the context bound (the transcript pass's 1,280 rows are added)")
    parser.add_argument("--unbounded", action="store_true",
                        help="also the attention in one call (no query blocks) and the int8 "
                        "head's product with its whole weight, for comparison")
    parser.add_argument("--whisper", action="store_true",
                        help="also a 30 s Whisper-VQ segment (slow on a CPU)")
    add_threads_and_json(parser)


def check(args: argparse.Namespace) -> None:
    """The chunk must fit the context (before any process starts)."""
    if args.chunk_rows > args.context_rows:
        raise InputError("--chunk-rows", args.chunk_rows,
                         f"at most --context-rows ({args.context_rows})")


def run(args: argparse.Namespace) -> int:
    from app.engine import preflight
    from app.engine.moss_speech.transient_bench import run_measurement

    rows = args.context_rows + preflight.TRANSCRIPT_KV_ROWS
    prefix = str(rows - args.chunk_rows)
    bound = preflight.prefill_transient_bytes(preflight.ModelDims(), rows, "bf16",
                                              args.chunk_rows)
    cases = [["--math"], []] + ([["--math", "--unbounded"]] if args.unbounded else [])
    results: list[dict[str, Any]] = []
    for extra in cases:
        result = run_measurement(["prefill", "--chunk-rows", str(args.chunk_rows),
                                  "--prefix-rows", prefix, *extra])
        results.append({**result, "plan_bound_bytes": bound})
    dims = preflight.ModelDims()
    # one block of the bf16 copy, and the row's logits (the prefill part counts those)
    head_bound = preflight.dequant_transient_bytes(dims, "int8") + 2 * dims.vocab_size * 4
    for extra in [[]] + ([["--whole"]] if args.unbounded else []):
        results.append({**run_measurement(["head", *extra]), "plan_bound_bytes": head_bound})
    if args.whisper:
        result = run_measurement(["whisper", "--seconds", "30"])
        results.append({**result, "plan_bound_bytes":
                        preflight.CODEC_SIZES.transient_bytes("fp16")})
    for result in results:
        result["within_bound"] = result["peak_extra_bytes"] <= result["plan_bound_bytes"]
        print(json.dumps(result) if args.json else
              "  ".join(f"{k}={v}" for k, v in result.items()))
    return 0
