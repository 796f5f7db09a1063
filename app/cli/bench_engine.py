"""AR model speed: prefill of a 300-row prompt, decode rows/s, Python overhead per row, memory.

``--random-weights`` builds the model on the device without a checkpoint: ``--size tiny`` is the
test model, ``--size full`` has the published shapes (9.1 B parameters) and also prints the
ratio of the measured row time to the memory-bandwidth floor (weight bytes read per row ÷
measured device bandwidth). The Python overhead per row is the decode time of a model with the
same layer count but near-zero FLOPs (hidden 32, small vocabularies): what is left is dispatch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli.bench_common import add_threads_and_json, apply_threads, run_facts
from app.cli.bench_engine_e2e import add_decode_path_arguments
from app.cli.machine_checks import check_device, check_precision
from app.cli.options import (
    MISSING,
    DeviceName,
    InputError,
    InputFolder,
    count,
)

SIZES = ("tiny", "full")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--random-weights", action="store_true",
                        help="build random weights on the device (no checkpoint needed)")
    parser.add_argument("--model-dir", type=InputFolder("model folder"),
                        help="load this checkpoint folder instead")
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--device", type=DeviceName(), default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--precision", choices=("bf16", "fp32", "int8", "int4"), default="bf16",
                        help="int4 needs CUDA; a combination this machine cannot run is refused "
                        "before anything is built")
    parser.add_argument("--prompt-rows", type=count(1, 40960), default=300)
    parser.add_argument("--decode-rows", type=count(1, 40960), default=64)
    add_decode_path_arguments(parser)
    parser.add_argument("--cpp-wrapper", action="store_true",
                        help="with --decode-path compile on CPU: inductor's C++ wrapper (no "
                        "Python between kernels; compiling takes minutes)")
    parser.add_argument("--overhead-only", action="store_true",
                        help="only the Python overhead per row (no large model is built)")
    add_threads_and_json(parser)


def check(args: argparse.Namespace) -> None:
    """Before anything is built: a model source, a device this machine has, a precision that
    device can run, and --cpp-wrapper only where it means something."""
    if not args.overhead_only:
        if not args.random_weights and args.model_dir is None:
            raise InputError("--random-weights", MISSING,
                             "pass --random-weights or --model-dir PATH (or --overhead-only)")
        if args.random_weights and args.model_dir is not None:
            raise InputError("--model-dir", args.model_dir,
                             "--random-weights and --model-dir exclude each other")
    check_device("--device", args.device)
    if args.cpp_wrapper and (args.decode_path != "compile" or args.device != "cpu"):
        raise InputError("--cpp-wrapper", MISSING,
                         "goes with --decode-path compile on --device cpu")
    if not args.overhead_only:
        check_precision(args.precision, args.device)


def run(args: argparse.Namespace) -> int:
    import torch

    from app.engine.moss_speech import bench_lm

    apply_threads(args)
    if args.cpp_wrapper:
        import torch._inductor.config as inductor_config

        inductor_config.cpp_wrapper = True
    if args.overhead_only:
        overhead = bench_lm.python_overhead(bench_lm.size_config(args.size),
                                            torch.device(args.device), args.decode_path)
        return _print(overhead, args)
    refusal = bench_lm.memory_refusal(args.size, args.precision, torch.device(args.device),
                                      args.prompt_rows + args.decode_rows)
    if args.random_weights and refusal:
        print(f"bench engine: refused: {refusal}")
        return 3
    result: dict[str, Any] = bench_lm.run_bench(
        size=args.size, device=args.device, precision=args.precision, model_dir=args.model_dir,
        prompt_rows=args.prompt_rows, decode_rows=args.decode_rows, decode_path=args.decode_path)
    return _print(result, args)


def _print(result: dict[str, Any], args: argparse.Namespace) -> int:
    facts = run_facts(rss_digits=1)
    for key in ("threads", "peak_rss_mib", "date"):  # the order this output always had
        result[key] = facts[key]
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0
