"""Precision parity: a fp16/bf16 codec against fp32, quantised LM heads against bf16.

``--what codec``: Whisper-VQ id agreement, streaming-flow mel cosine and streamed waveform SNR
of a random codec (tiny or full size) in ``--dtype`` against the same weights in float32.
``--what heads``: logit cosine, top-1 and top-5 agreement of int8/int4 LM heads against bf16,
on full-size-shaped random heads (151680 × 4096 and 16512 × 4096) or the tiny checkpoint's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli.bench_common import add_threads_and_json, apply_threads
from app.cli.options import count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--what", choices=("codec", "heads"), default="codec")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16",
                        help="codec: the precision compared with float32")
    parser.add_argument("--seeds", type=count(1, 100), default=1,
                        help="codec: random codecs to measure")
    parser.add_argument("--codes", type=count(1, 1000), default=30,
                        help="codec: reply codes streamed")
    parser.add_argument("--states", type=count(1, 100_000), default=64,
                        help="heads: hidden states")
    add_threads_and_json(parser)


def run(args: argparse.Namespace) -> int:
    apply_threads(args)
    results = _codec(args) if args.what == "codec" else _heads(args)
    for result in results:
        print(json.dumps(result) if args.json else
              "  ".join(f"{k}={v}" for k, v in result.items()))
    return 0


def _codec(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from app.engine.moss_speech.codec import CodecConfig
    from app.engine.moss_speech.codec.parity import measure

    config = CodecConfig.full() if args.size == "full" else CodecConfig.tiny()
    return [{"size": args.size, "seed": seed,
             **measure(config, getattr(torch, args.dtype), seed=seed, n_codes=args.codes)}
            for seed in range(args.seeds)]


def _heads(args: argparse.Namespace) -> list[dict[str, Any]]:
    from app.engine.moss_speech.head_parity import head_parity, random_head, random_states

    hidden = 4096 if args.size == "full" else 64
    results = []
    for vocab in (151680, 16512):
        head = random_head(vocab, hidden, std=0.02 if args.size == "full" else 0.5)
        states = random_states(args.states, hidden)
        for precision in ("int8", "int4"):
            results.append({"size": args.size, **head_parity(head, states, precision)})
        del head
    return results
