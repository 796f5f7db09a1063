"""Engine end to end: TTFA (turn handed over → first PCM), RTF and barge-in cancel latency over
several turns of a conversation with the real MOSS-Speech engine on random weights.

Each turn is driven as the voice loop drives it: the question is fed in 20 ms pieces while
"spoken" (encode and prefill while talking), then ``respond`` streams the reply and
``reply_heard`` commits it (KV roll-back and re-encode); every ``--barge-in-every``-th turn is
cancelled from another thread at a random moment of its reply. ``--size full`` builds the
published shapes (9.1 B parameters + the full codec) and needs a GPU with room for them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli.bench_common import add_threads_and_json, apply_threads, run_facts
from app.cli.machine_checks import check_device, check_precision
from app.cli.options import (
    MISSING,
    DeviceName,
    InputError,
    count,
    seconds,
)
from app.engine.moss_speech.decode_policy import DECODE_REQUESTS


def add_decode_path_arguments(parser: argparse.ArgumentParser) -> None:
    """``--decode-path`` (and the older ``--compile``/``--no-compile`` spellings)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--decode-path", choices=DECODE_REQUESTS, default="auto",
                       help="the per-row decode step: auto (the app's policy: on CUDA compile, "
                       "then CUDA graphs, then eager; eager on the CPU) or one path, validated "
                       "against eager and replaced by eager if it fails")
    group.add_argument("--compile", dest="decode_path", action="store_const", const="compile",
                       help="same as --decode-path compile")
    group.add_argument("--no-compile", dest="decode_path", action="store_const", const="eager",
                       help="same as --decode-path eager")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--random-weights", action="store_true",
                        help="build random weights on the device (the only mode for now)")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--device", type=DeviceName(), default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--precision", choices=("bf16", "fp32", "int8", "int4"), default="bf16",
                        help="int4 needs CUDA; a combination this machine cannot run is refused "
                        "before anything is built")
    parser.add_argument("--turns", type=count(1, 10_000), default=5)
    parser.add_argument("--question-s", type=seconds(0, 60), default=2.0,
                        help="each user turn (s)")
    parser.add_argument("--voice-s", type=seconds(0, 60), default=3.0,
                        help="voice prompt length (s)")
    parser.add_argument("--max-new-rows", type=count(1, 40960), default=60,
                        help="reply length in rows (12.5 per second of speech)")
    parser.add_argument("--chunk", type=int, choices=(5, 25), default=5)
    parser.add_argument("--first-hop", choices=("aggressive", "aligned"), default="aggressive")
    parser.add_argument("--final", choices=("causal", "reference"), default="causal",
                        help="the codec stream's last step (the engine uses causal)")
    parser.add_argument("--no-voice-prefix", dest="voice_prefix", action="store_false",
                        help="recompute the voice prompt's flow state for every reply")
    parser.add_argument("--flow-cache-budget-mib", type=count(0, 1_000_000, unit="MiB"),
                        default=1024,
                        help="the codec's flow-cache budget (settings.streaming; 0 = no bound)")
    parser.add_argument("--barge-in-every", type=count(0, 10_000), default=2,
                        help="cancel every n-th reply at a random moment (0 = never)")
    add_decode_path_arguments(parser)
    add_threads_and_json(parser)


def check(args: argparse.Namespace) -> None:
    """Before anything is built: random weights, a device this machine has, a precision that
    device can run."""
    if not args.random_weights:
        raise InputError("--random-weights", MISSING,
                         "needed: this bench runs on random weights (checkpoint folders: use "
                         "converse)")
    check_device("--device", args.device)
    check_precision(args.precision, args.device)


def run(args: argparse.Namespace) -> int:
    import torch

    from app.engine.moss_speech.bench_e2e import BenchOptions, run_bench

    apply_threads(args)
    options = BenchOptions(size=args.size, device=args.device, precision=args.precision,
                           turns=args.turns, question_s=args.question_s, voice_s=args.voice_s,
                           max_new_rows=args.max_new_rows, chunk_codes=args.chunk,
                           first_hop=args.first_hop, barge_in_every=args.barge_in_every,
                           decode_path=args.decode_path, final=args.final,
                           voice_prefix=args.voice_prefix,
                           flow_cache_budget_mib=args.flow_cache_budget_mib)
    result = run_bench(options)
    if "refused" in result:
        print(f"bench engine-e2e: refused: {result['refused']}")
        return 3
    result.update(run_facts(rss_digits=None))
    if torch.device(args.device).type == "cuda":
        result["cuda_peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
    print(json.dumps(result) if args.json else _format(result))
    return 0


def _format(result: dict[str, Any]) -> str:
    notes = "; ".join(result["decode_notes"])
    lines = [f"engine e2e: size={result['size']} device={result['device']} "
             f"precision={result['precision']} decode={result['decode_path']} "
             f"chunk={result['chunk_codes']} first_hop={result['first_hop']} "
             f"final={result['final']} voice_prefix={result['voice_prefix']} "
             f"threads={result['threads']} build {result['build_s']} s"
             + (f" ({notes})" if notes else "")]
    for t in result["turns"]:
        stages = " ".join(f"{k}={v}" for k, v in t["stages_ms"].items())
        lines.append(f"turn {t['turn']}: TTFA {t['ttfa_ms']} ms ({stages}); reply "
                     f"{t['reply_audio_s']} s, RTF {t['rtf']}; cancel {t['cancel_ms']} ms; "
                     f"feed {t['feed_ms_per_s']} ms per s of speech; prefix reused "
                     f"{t['prefill_reused_rows']} rows; flow cache {t.get('flow_cache_mib')} MiB "
                     f"({t.get('flow_used_mib_per_s')} MiB/s used, bounded from code "
                     f"{t.get('flow_bounded_from_code')})")
    s = result["summary"]
    lines.append(f"median TTFA {s['ttfa_ms_median']} ms (after turn 1: "
                 f"{s['ttfa_ms_median_after_turn_1']} ms), median RTF {s['rtf_median']}, "
                 f"barge-in cancel median {s['cancel_ms_median']} ms / max {s['cancel_ms_max']} "
                 f"ms; transcript pass {result['transcript_pass_ms']} ms; peak RSS "
                 f"{result['peak_rss_mib']} MiB")
    cuda = result.get("cuda_peak_allocated_mib")
    lines.append(f"flow cache (budget {result['flow_cache_budget_mib']} MiB): peak "
                 f"{s['flow_cache_mib_max']} MiB, {s['flow_used_mib_per_s_median']} MiB per second "
                 f"of voice + reply" + (f"; CUDA peak allocated {cuda} MiB" if cuda else ""))
    return "\n".join(lines)
