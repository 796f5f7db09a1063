"""End-to-end engine benchmark: the real ``MossSpeechEngine`` over several turns of a
conversation, driven as the voice loop drives it (feed while talking, respond, reply heard).

Per turn: engine TTFA (``respond`` called → first PCM out of the engine: the "turn handed to
the engine → first PCM" of DESIGN.md), its stage breakdown, the reply's real-time factor
(generation wall time ÷ reply audio duration), the encode-while-talking cost, and for barged-in
turns the cancel latency (cancel set from another thread at a random moment of the reply →
``respond`` ends). Random weights at tiny or full size; the tokenizer is the byte-level test
tokenizer with the real special ids (the model's vocab sizes are the real ones).
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from app.engine.base import ReplyAudio, ReplyDone, ReplyFailed, StageTimed, UserTurn
from app.engine.moss_speech.bench_lm import memory_refusal, size_config
from app.engine.moss_speech.build import codec_dtype, warm_up
from app.engine.moss_speech.codec import CodecConfig
from app.engine.moss_speech.codec.testing import build_random_codec, speech_like
from app.engine.moss_speech.device import DeviceChoice, configure_cuda_allocator
from app.engine.moss_speech.engine import MossSpeechEngine
from app.engine.moss_speech.parts import EngineParts
from app.engine.moss_speech.testing import tiny_tokenizer_json
from app.engine.moss_speech.tokenizer import load_tokenizer
from app.engine.moss_speech.weights import random_model
from app.engine.preflight import fit_problem, flow_cache_bytes, precision_problem
from app.paths import scratch_dir
from app.settings import Settings

FEED_SAMPLES = 320  # 20 ms pieces, like the voice loop


@dataclass(frozen=True)
class BenchOptions:
    size: str = "tiny"
    device: str = "cpu"
    precision: str = "bf16"
    turns: int = 5
    question_s: float = 2.0
    voice_s: float = 3.0
    max_new_rows: int = 60
    chunk_codes: int = 5
    first_hop: str = "aggressive"
    barge_in_every: int = 2  # every n-th turn is cancelled at a random moment of its reply
    decode_path: str = "auto"  # auto, compile, graph, static or eager (decode_policy.py)
    final: str = "causal"  # the codec's last step: "causal" (the engine's choice) or "reference"
    voice_prefix: bool = True  # keep the voice prompt's flow state between replies
    flow_cache_budget_mib: int = 1024  # settings.streaming (0 = no bound)
    seed: int = 0


def build(options: BenchOptions) -> MossSpeechEngine:
    """The engine on random weights (nothing is read from disk except the tiny tokenizer)."""
    device = torch.device(options.device)
    if device.type == "cuda":
        configure_cuda_allocator()
    config = size_config(options.size)
    model = random_model(config, device, options.precision)
    scratch = scratch_dir("moss-voice-e2e-")
    (scratch / "tokenizer.json").write_text(json.dumps(tiny_tokenizer_json()))
    tokenizer = load_tokenizer(scratch, config)
    codec_config = CodecConfig.full() if options.size == "full" else CodecConfig.tiny()
    codec = build_random_codec(codec_config, device, codec_dtype(device, options.precision),
                               chunks=(options.chunk_codes,), voice_cache_dir=scratch / "voices",
                               offline_flow=False)  # the engine only streams
    voice = codec.voice_from_samples(speech_like(options.voice_s, 24000, seed=3), 24000,
                                     source="bench-voice")
    settings = _settings(options)
    parts = EngineParts(model, tokenizer, codec, voice, DeviceChoice(device))
    engine = MossSpeechEngine(parts, settings, decode_path=options.decode_path)
    warm_up(engine)
    engine.set_reuse_voice_prefix(engine.reuse_voice_prefix and options.voice_prefix)
    engine.policy = replace(engine.policy, final=options.final)
    return engine


def _settings(options: BenchOptions) -> Settings:
    data = Settings().model_dump()
    data["engine"].update(kind="moss_speech", device=options.device, precision=options.precision)
    data["sampling"].update(max_new_rows=options.max_new_rows, min_new_rows=options.max_new_rows,
                            seed=options.seed)  # min = max: every reply has the same length
    data["streaming"].update(chunk_codes=options.chunk_codes, first_hop=options.first_hop,
                             flow_cache_budget_mib=options.flow_cache_budget_mib)
    data["transcript"]["text_branch"] = False  # measured separately (idle time)
    return Settings.model_validate(data)


def run_turn(engine: MossSpeechEngine, turn_id: int, pcm: np.ndarray,
             barge_in: tuple[int, float] | None) -> dict[str, Any]:
    """One turn as the voice loop drives it; returns its figures.

    ``barge_in`` = (k, delay_s): after the k-th audio chunk another thread sets the cancel
    ``delay_s`` later, so it lands in the middle of whatever step is running then."""
    started = time.perf_counter()
    for start in range(0, len(pcm), FEED_SAMPLES):
        engine.feed_user_audio(turn_id, pcm[start:start + FEED_SAMPLES])
    feed_s = time.perf_counter() - started
    cancel = threading.Event()
    cancelled_at: list[float] = []

    def barge_in_now() -> None:
        cancelled_at.append(time.perf_counter())
        cancel.set()

    timer = threading.Timer(barge_in[1], barge_in_now) if barge_in else None
    handed = time.perf_counter()
    first_pcm = None
    samples, chunks, stages, failed = 0, 0, {}, ""
    for event in engine.respond(UserTurn(turn_id, pcm), cancel):
        if isinstance(event, ReplyAudio):
            first_pcm = first_pcm or time.perf_counter()
            samples, chunks = samples + len(event.pcm), chunks + 1
            if timer is not None and barge_in and chunks == barge_in[0]:
                timer.start()
        elif isinstance(event, StageTimed):
            stages[event.stage] = round(event.duration_ms, 1)
        elif isinstance(event, ReplyFailed):
            failed = event.message
        elif isinstance(event, ReplyDone):
            break
    ended = time.perf_counter()
    if timer is not None:
        timer.cancel()
    engine.reply_heard(turn_id, samples, 24000)
    audio_s = samples / 24000
    figures: dict[str, Any] = {
        "turn": turn_id, "feed_ms_per_s": round(feed_s * 1000 / (len(pcm) / 16000), 1),
        "ttfa_ms": None if first_pcm is None else round((first_pcm - handed) * 1000, 1),
        "stages_ms": stages, "reply_audio_s": round(audio_s, 2), "chunks": chunks,
        "total_ms": round((ended - handed) * 1000, 1),
        "rtf": round((ended - handed) / audio_s, 3) if audio_s and not cancelled_at else None,
        "cancel_ms": round((ended - cancelled_at[0]) * 1000, 1) if cancelled_at else None,
        "prefill_reused_rows": getattr(engine.last_prefill, "reused_rows", None)}
    if failed:
        figures["failed"] = failed
    figures.update(_flow_figures(engine))
    return figures


def _flow_figures(engine: MossSpeechEngine) -> dict[str, Any]:
    """The reply's codec flow state: peak allocated (the voice prefix included), used MiB per
    second of voice prompt + reply, and the reply code where the budget was reached."""
    flow = engine.last_reply.flow if engine.last_reply is not None else None
    if flow is None:
        return {}
    rate = flow.used_nbytes_per_second()
    return {"flow_cache_mib": round(flow.peak_nbytes / 2**20, 1),
            "flow_used_mib_per_s": round(rate / 2**20, 1) if rate else None,
            "flow_bounded_from_code": flow.bounded_from_code}


def run_bench(options: BenchOptions) -> dict[str, Any]:
    refusal = (precision_problem(options.precision, options.device)
               or memory_refusal(options.size, options.precision, torch.device(options.device),
                                 4096 + 1280) or _vram_refusal(options))
    if refusal:
        return {"refused": refusal}
    started = time.perf_counter()
    engine = build(options)
    build_s = time.perf_counter() - started
    rng = random.Random(options.seed)
    turns: list[dict[str, Any]] = []
    for turn_id in range(1, options.turns + 1):
        pcm = speech_like(options.question_s, 16000, seed=turn_id)
        barge = options.barge_in_every and turn_id % options.barge_in_every == 0
        barge_in = None
        if barge and turns and turns[0]["chunks"] >= 3:  # after one of the first half of the
            first = turns[0]  # chunks, within half a chunk's time: always before the end
            per_chunk_s = (first["total_ms"] - first["ttfa_ms"]) / 1000 / (first["chunks"] - 1)
            barge_in = (rng.randint(1, first["chunks"] // 2), 0.5 * per_chunk_s * rng.random())
        turns.append(run_turn(engine, turn_id, pcm, barge_in))
    transcript_ms = _time_transcripts(engine)
    decode = engine.session.decode
    engine.close()
    return {"size": options.size, "device": options.device, "precision": options.precision,
            "decode_path": decode.path, "decode_notes": decode.notes,
            "decode_setup_ms": round(decode.setup_ms), "chunk_codes": options.chunk_codes,
            "first_hop": options.first_hop, "final": engine.policy.final,
            "voice_prefix": engine.policy.reuse_voice_prefix,
            "max_new_rows": options.max_new_rows,
            "flow_cache_budget_mib": options.flow_cache_budget_mib,
            "build_s": round(build_s, 2), "turns": turns, "summary": summarize(turns),
            "transcript_pass_ms": transcript_ms}


def _vram_refusal(options: BenchOptions) -> str | None:
    """The engine's own VRAM preflight (codec and flow cache included) on a GPU at full size."""
    device = torch.device(options.device)
    if options.size != "full" or device.type != "cuda":
        return None
    flow = flow_cache_bytes(options.flow_cache_budget_mib, options.max_new_rows, options.voice_s)
    return fit_problem(options.precision, torch.cuda.mem_get_info(device)[0], 4096,
                       flow_cache_bytes=flow)


def _time_transcripts(engine: MossSpeechEngine) -> float | None:
    """One user-turn transcript pass (greedy text rows over the last user turn)."""
    exchanges = engine.memory.exchanges
    if not exchanges or not exchanges[-1].user.is_audio:
        return None
    engine.transcriber.add(0, "user", list(exchanges[-1].user.codes))
    started = time.perf_counter()
    for _ in engine.transcriber.run(threading.Event()):
        pass
    return round((time.perf_counter() - started) * 1000, 1)


def summarize(turns: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str, rows: list[dict[str, Any]]) -> float | None:
        values = [t[key] for t in rows if t.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    later = turns[1:] or turns  # the first turn has no history to reuse
    cancels = [t["cancel_ms"] for t in turns if t["cancel_ms"] is not None]
    return {"ttfa_ms_median": median("ttfa_ms", turns),
            "ttfa_ms_median_after_turn_1": median("ttfa_ms", later),
            "rtf_median": median("rtf", turns), "feed_ms_per_s_median": median("feed_ms_per_s",
                                                                              turns),
            "cancel_ms_median": round(statistics.median(cancels), 1) if cancels else None,
            "cancel_ms_max": max(cancels) if cancels else None,
            "flow_cache_mib_max": max((t["flow_cache_mib"] for t in turns
                                       if "flow_cache_mib" in t), default=None),
            "flow_used_mib_per_s_median": median("flow_used_mib_per_s", turns)}
