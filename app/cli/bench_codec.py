"""Codec speed: encode ms per second of audio, voice prompt, offline decode, first-chunk and
per-chunk streaming decode ms versus chunk index (random weights, tiny or full size).

``--size full`` builds the published widths in memory (Whisper-VQ 16×1280, flow 512/256, HiFT
512; about 2.4 GB in float32) with random weights; the CAM++ model is the tiny stand-in either
way. ``--reference`` also times the reference protocol, which recomputes the flow over the
whole code prefix at every chunk. The cached stream reports its flow state per chunk (allocated
and used MiB; buffers are allocated once for the reply's codes) and, with
``--flow-cache-budget-mib``, the chunk from which it runs bounded. ``--count-ops`` profiles one
chunk after the first few (:mod:`app.engine.moss_speech.codec.chunk_profile`): the operators it
dispatches and, on CUDA, the kernels it launches and their GPU time.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from app.cli.bench_common import add_threads_and_json, apply_threads
from app.cli.machine_checks import check_device
from app.cli.options import DeviceName, Number, count, seconds

if TYPE_CHECKING:  # torch is imported only when the bench runs
    import torch

    from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--device", type=DeviceName(), default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="tokenizer and flow precision (HiFT always runs in float32)")
    parser.add_argument("--chunk", type=int, choices=(5, 25), default=5)
    parser.add_argument("--chunks", type=count(1, 10_000), default=12,
                        help="streaming steps to time")
    parser.add_argument("--voice-seconds", type=seconds(0, 60), default=3.0)
    parser.add_argument("--utterance-seconds", type=seconds(0, 600), default=10.0)
    parser.add_argument("--steps", type=count(1, 100), default=10,
                        help="Euler steps (the model uses 10)")
    parser.add_argument("--final", choices=("reference", "causal"), default="reference")
    parser.add_argument("--reuse-voice-prefix", action="store_true",
                        help="keep the voice prompt's flow state between replies")
    parser.add_argument("--reference", action="store_true",
                        help="also time the whole-prefix recompute of the reference protocol")
    parser.add_argument("--flow-cache-budget-mib",
                        type=Number(float, 0, 1_000_000, low_open=True, unit="MiB"), default=None,
                        help="bound the cached flow state (MiB); default: no bound")
    parser.add_argument("--repeat", type=count(1, 100), default=1,
                        help="run each measurement N times and keep the fastest (busy machines)")
    parser.add_argument("--stream-only", action="store_true",
                        help="time only the streaming decode (skip encode and offline decode)")
    parser.add_argument("--count-ops", action="store_true",
                        help="also profile one streaming chunk: operators dispatched (and on "
                        "CUDA kernels launched and their GPU time)")
    add_threads_and_json(parser)


def check(args: argparse.Namespace) -> None:
    """A device this machine has (every dtype runs on every device)."""
    check_device("--device", args.device)


def run(args: argparse.Namespace) -> int:
    import torch

    apply_threads(args)
    codec = _build(args)
    result: dict[str, Any] = {"size": args.size, "device": str(codec.device), "dtype": args.dtype,
                              "chunk": args.chunk, "steps": args.steps,
                              "threads": torch.get_num_threads(), "machine": platform.node()}
    result["repeat"] = args.repeat
    voice = _voice(codec, args.voice_seconds)
    result["voice_codes"] = len(voice.prompt_codes)
    n_codes = args.chunks * args.chunk + args.chunk + 3
    codes = torch.randint(0, 16384, (n_codes,), generator=torch.Generator().manual_seed(1))
    if not args.stream_only:
        result.update(_best(_time_encode(codec, args) for _ in range(args.repeat)))
        result["voice_ms"] = min(_timed(codec, lambda: _voice(codec, args.voice_seconds))[1]
                                 for _ in range(args.repeat))
        result["offline_decode_ms"] = min(_timed(codec, lambda: codec.decode(
            codes, voice, n_timesteps=args.steps))[1] for _ in range(args.repeat))
        result["offline_codes"] = n_codes
    result["stream"] = _best(_time_stream(codec, voice, codes, args, flow_cache=True)
                             for _ in range(args.repeat))
    if args.count_ops:
        from app.engine.moss_speech.codec.chunk_profile import profile_steady_chunk

        result["chunk_profile"] = profile_steady_chunk(codec, voice, args.chunk, final=args.final,
                                                       n_timesteps=args.steps)
    if args.reference:
        result["stream_reference"] = _best(
            _time_stream(codec, voice, codes, args, flow_cache=False)
            for _ in range(args.repeat))
    print(json.dumps(result, indent=2) if args.json else _format(result))
    return 0


def _best(runs: Any) -> dict[str, Any]:
    """Element-wise minimum of repeated measurements (numbers, and per-chunk lists)."""
    best: dict[str, Any] = {}
    for run_result in runs:
        for key, value in run_result.items():
            if key not in best or value is None:
                best[key] = value
            elif key == "chunks":
                best[key] = [{**a, "ms": min(a["ms"], b["ms"])} for a, b in zip(
                    best[key], value, strict=True)]
            elif isinstance(value, (int, float)) and key.endswith("ms"):
                best[key] = min(best[key], value)
    return best


def _build(args: argparse.Namespace) -> MossSpeechCodec:
    import torch

    from app.engine.moss_speech.codec import CodecConfig, load_codec
    from app.engine.moss_speech.codec.testing import build_random_codec, write_tiny_codec
    from app.paths import scratch_dir

    dtype = getattr(torch, args.dtype)
    scratch = scratch_dir("moss-voice-bench-")
    if args.size == "tiny":  # through the real folder layout and loader
        folder = write_tiny_codec(scratch / "codec")
        return load_codec(folder, args.device, dtype, voice_cache_dir=scratch / "voices",
                          streaming_chunks=(args.chunk,))
    return build_random_codec(CodecConfig.full(), args.device, dtype, chunks=(args.chunk,),
                              voice_cache_dir=scratch / "voices")


def _sync(codec: MossSpeechCodec) -> None:
    import torch

    if codec.device.type == "cuda":
        torch.cuda.synchronize(codec.device)


def _timed(codec: MossSpeechCodec, fn: Callable[[], Any]) -> tuple[Any, float]:
    _sync(codec)
    start = time.perf_counter()
    out = fn()
    _sync(codec)
    return out, round((time.perf_counter() - start) * 1000, 1)


def _voice(codec: MossSpeechCodec, seconds: float) -> VoiceConditioning:
    from app.engine.moss_speech.codec.testing import speech_like

    return codec.voice_from_samples(speech_like(seconds, 44100, seed=3), 44100)


def _time_encode(codec: MossSpeechCodec, args: argparse.Namespace) -> dict[str, Any]:
    from app.engine.moss_speech.codec.testing import speech_like

    audio = speech_like(args.utterance_seconds, 16000, seed=2)
    codec.encode(audio[:16000], 16000)  # warm-up
    _, whole_ms = _timed(codec, lambda: codec.encode(audio, 16000))
    stream = codec.stream_encoder()
    push_ms = []
    for start in range(0, len(audio), 1600):  # 100 ms of audio per push
        piece = audio[start:start + 1600]
        push_ms.append(_timed(codec, partial(stream.push, piece))[1])
    _, finish_ms = _timed(codec, stream.finish)
    return {"encode_ms_per_audio_s": round(whole_ms / args.utterance_seconds, 1),
            "encode_push_100ms_mean_ms": round(sum(push_ms) / len(push_ms), 1),
            "encode_push_100ms_max_ms": max(push_ms), "encode_finish_ms": finish_ms}


def _time_stream(codec: MossSpeechCodec, voice: VoiceConditioning, codes: torch.Tensor,
                 args: argparse.Namespace, flow_cache: bool) -> dict[str, Any]:
    reuse = args.reuse_voice_prefix and flow_cache
    budget = (None if args.flow_cache_budget_mib is None
              else int(args.flow_cache_budget_mib * 2 ** 20))
    bounds: dict[str, Any] = {"flow_cache_budget_bytes": budget, "max_codes": len(codes)}
    result: dict[str, Any] = {}
    if reuse:  # the first reply with a voice builds its prefix state; later replies reuse it
        codec.clear_caches()
        _, result["voice_prefix_ms"] = _timed(codec, lambda: codec.stream_decoder(
            voice, args.chunk, reuse_voice_prefix=True, n_timesteps=args.steps,
            **bounds).close())
        result["voice_prefix_mib"] = _mib(codec.cache_nbytes())
    _reset_peak(codec)
    decoder = codec.stream_decoder(voice, args.chunk, final=args.final, flow_cache=flow_cache,
                                   reuse_voice_prefix=reuse, n_timesteps=args.steps, **bounds)
    steps: list[dict[str, Any]] = []
    for index in range(len(codes)):
        before = decoder.steps
        _, ms = _timed(codec, partial(decoder.push, codes[index:index + 1]))
        if decoder.steps > before:
            steps.append({"chunk": len(steps), "ms": ms, **_flow_state(codec, decoder)})
    _, finish_ms = _timed(codec, decoder.finish)
    return {**result, "first_chunk_ms": steps[0]["ms"] if steps else None, "chunks": steps,
            "finish_ms": finish_ms, "audio_s_per_chunk": args.chunk * 0.08,
            **_flow_summary(codec, decoder, steps)}


def _mib(n_bytes: float) -> float:
    return round(n_bytes / 2 ** 20, 1)


def _reset_peak(codec: MossSpeechCodec) -> None:
    import torch

    if codec.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(codec.device)


def _flow_state(codec: MossSpeechCodec, decoder: Any) -> dict[str, Any]:
    """Flow state after a step: allocated (voice prefix counted once) and used MiB, and the
    voice prompt + reply codes it covers."""
    stream = decoder.flow_stream
    if stream is None:
        return {"cache_mib": 0.0, "used_mib": 0.0, "bounded": False}
    return {"cache_mib": _mib(codec.cache_nbytes(decoder)),
            "used_mib": _mib(stream.cache_used_nbytes()), "codes": stream.tokens_done,
            "bounded": stream.bounded}


def _flow_summary(codec: MossSpeechCodec, decoder: Any,
                  steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak allocated MiB, used MiB per second of voice prompt + reply (at the last step
    before any bound; 12.5 codes per second), and where the budget was reached."""
    import torch

    stats = decoder.flow_stats
    unbounded = [s for s in steps if not s["bounded"] and s.get("codes")]
    summary: dict[str, Any] = {
        "cache_peak_mib": _mib(stats.peak_nbytes), "bounded_from_code": stats.bounded_from_code,
        "used_mib_per_audio_s": round(unbounded[-1]["used_mib"] * 12.5 / unbounded[-1]["codes"],
                                      1) if unbounded else None}
    if codec.device.type == "cuda":
        summary["cuda_peak_allocated_mib"] = _mib(torch.cuda.max_memory_allocated(codec.device))
    return summary


def _format(result: dict[str, Any]) -> str:
    lines = [f"codec bench: size={result['size']} device={result['device']} "
             f"dtype={result['dtype']} chunk={result['chunk']} steps={result['steps']} "
             f"threads={result['threads']} (best of {result['repeat']}); voice prompt "
             f"{result['voice_codes']} codes"]
    if "voice_ms" in result:
        lines += [f"encode: {result['encode_ms_per_audio_s']} ms per second of audio (whole); "
                  f"incremental 100 ms pushes: mean {result['encode_push_100ms_mean_ms']} ms, "
                  f"max {result['encode_push_100ms_max_ms']} ms, finish "
                  f"{result['encode_finish_ms']} ms",
                  f"voice prompt: {result['voice_ms']} ms",
                  f"offline decode of {result['offline_codes']} codes: "
                  f"{result['offline_decode_ms']} ms"]
    for key, title in (("stream", "streaming (cached flow)"),
                       ("stream_reference", "streaming (reference: whole-prefix recompute)")):
        if key not in result:
            continue
        stream = result[key]
        if "voice_prefix_ms" in stream:
            lines.append(f"voice prefix state: built once in {stream['voice_prefix_ms']} ms, "
                         f"holds {stream['voice_prefix_mib']} MiB while the voice is in use "
                         "(buffers sized for a whole reply, which fills them)")
        lines.append(f"{title}: first chunk {stream['first_chunk_ms']} ms, finish "
                     f"{stream['finish_ms']} ms; each chunk is "
                     f"{stream['audio_s_per_chunk']:.2f} s of audio")
        if stream["cache_peak_mib"]:
            cuda = (f", CUDA peak allocated {stream['cuda_peak_allocated_mib']} MiB"
                    if "cuda_peak_allocated_mib" in stream else "")
            lines.append(f"  flow state: {stream['used_mib_per_audio_s']} MiB per second of "
                         f"voice + reply, peak {stream['cache_peak_mib']} MiB allocated{cuda}; "
                         f"bounded from reply code {stream['bounded_from_code']}")
        lines.append("  chunk  ms       cache MiB  used MiB  bounded")
        lines += [f"  {s['chunk']:>5}  {s['ms']:>7}  {s['cache_mib']:>9}  {s['used_mib']:>8}"
                  f"  {'yes' if s['bounded'] else ''}" for s in stream["chunks"]]
    if "chunk_profile" in result:
        p = result["chunk_profile"]
        cuda = (f", {p['cuda_kernels']} CUDA kernels taking {p['cuda_kernel_ms']} ms"
                if p["cuda_kernels"] is not None else "")
        lines.append(f"one chunk profiled: {p['chunk_ms']} ms, {p['aten_ops']} operators "
                     f"dispatched{cuda}; most frequent: {p['most_frequent_ops']}")
    return "\n".join(lines)
