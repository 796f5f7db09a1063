"""Streaming one reply: AR rows → codes → codec stream decoder → PCM events, or text events.

Each row is yielded by the generation session as soon as it is sampled; codes become audio as
soon as the stream decoder has a hop of them (chunk-5 with the aggressive first hop by default:
the first audio after 3–8 codes). Cancellation is checked after every row and every codec
chunk, so a barge-in stops the reply within one AR row plus one codec chunk.

Codec choices (justified in docs/engine.md and docs/codec.md, measured in BENCHMARKS.md):
``final="causal"`` ends the stream with one more cached chunk step instead of the reference's
full-context pass, whose cost grows with the reply (it would delay the last words of a long
answer); ``reuse_voice_prefix`` keeps the voice prompt's flow state between replies, halving
the first chunk, when memory allows. ``flow_cache_budget_bytes`` (settings.streaming) bounds the
codec's streaming state; a reply that reaches it sounds the same, its later chunks cost more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from app.engine.base import EngineEvent, ReplyAudio, ReplyText, StageTimed
from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.codec.codec import OUTPUT_SAMPLE_RATE_HZ
from app.engine.moss_speech.codec.streaming import FlowStats, StreamDecoder
from app.engine.moss_speech.generate import GenerationSession
from app.engine.moss_speech.reply import ReplyStream
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.tokenizer import MossTokenizer
from app.engine.preflight import MIB
from app.settings import Settings


@dataclass(frozen=True)
class StreamPolicy:
    """How reply codes become audio (settings.streaming plus the engine's memory choice)."""

    chunk_codes: int = 5
    first_hop: str = "aggressive"
    final: str = "causal"
    reuse_voice_prefix: bool = True
    flow_cache_budget_bytes: int | None = None  # None: no bound
    max_codes: int | None = None  # the longest reply (sampling.max_new_rows)

    @classmethod
    def from_settings(cls, settings: Settings, reuse_voice_prefix: bool) -> StreamPolicy:
        """The engine's policy: the chunk-causal final step, the flow-cache budget (0: none)."""
        budget_mib = settings.streaming.flow_cache_budget_mib
        return cls(settings.streaming.chunk_codes, settings.streaming.first_hop, "causal",
                   reuse_voice_prefix, budget_mib * MIB if budget_mib else None,
                   settings.sampling.max_new_rows)

    def open(self, codec: MossSpeechCodec, voice: VoiceConditioning,
             seed: int = 0) -> StreamDecoder:
        """The codec's stream decoder for one reply under this policy."""
        return codec.stream_decoder(
            voice, self.chunk_codes, first_hop=self.first_hop,  # type: ignore[arg-type]
            final=self.final, seed=seed,  # type: ignore[arg-type]
            reuse_voice_prefix=self.reuse_voice_prefix,
            flow_cache_budget_bytes=self.flow_cache_budget_bytes, max_codes=self.max_codes)


@dataclass
class ReplyRecord:
    """What one reply produced, kept until the voice loop says how much was heard."""

    pcm: list[np.ndarray] = field(default_factory=list)  # 24 kHz pieces as yielded
    codes: list[int] = field(default_factory=list)
    text: str = ""
    rows: int = 0
    finished: bool = False  # ran to its end (not cancelled)
    flow: FlowStats | None = None  # the codec's cached flow state (spoken replies)

    def heard_pcm(self, heard_samples: int) -> np.ndarray:
        audio = np.concatenate(self.pcm) if self.pcm else np.zeros(0, np.float32)
        return audio[:max(0, heard_samples)]


class _Stages:
    """first_row (generation start → first row) and first_chunk (first row → first output)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self.started = time.perf_counter()
        self.first_row_at: float | None = None
        self.first_output = False

    def row(self) -> StageTimed | None:
        if self.first_row_at is not None:
            return None
        self.first_row_at = time.perf_counter()
        return StageTimed(self.turn_id, "first_row", (self.first_row_at - self.started) * 1000)

    def output(self) -> StageTimed | None:
        if self.first_output:
            return None
        self.first_output = True
        since = self.first_row_at if self.first_row_at is not None else self.started
        return StageTimed(self.turn_id, "first_chunk", (time.perf_counter() - since) * 1000)


def speak(session: GenerationSession, codec: MossSpeechCodec, voice: VoiceConditioning,
          sampling: Sampling, seed: int | None, policy: StreamPolicy, cancel: threading.Event,
          turn_id: int, record: ReplyRecord) -> Iterator[EngineEvent]:
    """Generate a spoken reply on a prefilled session; yields stage timings and audio."""
    stages = _Stages(turn_id)
    stream = ReplyStream(session.config, codes=record.codes)  # the stream fills record.codes
    decoder = policy.open(codec, voice, seed or 0)
    try:
        for timed, codes, _ in _released(session, sampling, seed, cancel, stages, stream, record):
            if timed is not None:
                yield timed
            if codes:
                pcm = decoder.push(codes)
                if len(pcm):
                    yield from _audio(stages, record, turn_id, pcm)
            if cancel.is_set():
                return
        pcm = decoder.finish()
        if len(pcm):
            yield from _audio(stages, record, turn_id, pcm)
        record.finished = True
    finally:
        record.flow = decoder.flow_stats
        decoder.close()


def _released(session: GenerationSession, sampling: Sampling, seed: int | None,
              cancel: threading.Event, stages: _Stages, stream: ReplyStream,
              record: ReplyRecord) -> Iterator[tuple[StageTimed | None, list[int], list[int]]]:
    """Per sampled row: its first-row timing (the first row only), then the codes and text ids
    the row releases; counts the row in ``record``."""
    for row in session.rows(sampling, cancel=cancel, seed=seed):
        record.rows += 1
        timed = stages.row()
        codes, text_ids = stream.push(row)
        yield timed, codes, text_ids


def _audio(stages: _Stages, record: ReplyRecord, turn_id: int,
           pcm: np.ndarray) -> Iterator[EngineEvent]:
    if (timed := stages.output()) is not None:
        yield timed
    record.pcm.append(pcm)
    yield ReplyAudio(turn_id, pcm, OUTPUT_SAMPLE_RATE_HZ)


def write(session: GenerationSession, tokenizer: MossTokenizer, sampling: Sampling,
          seed: int | None, cancel: threading.Event, turn_id: int,
          record: ReplyRecord) -> Iterator[EngineEvent]:
    """Generate a text reply (output modality "text"); each ReplyText holds the text so far."""
    stages, stream = _Stages(turn_id), ReplyStream(session.config)
    for timed, _, text_ids in _released(session, sampling, seed, cancel, stages, stream, record):
        if timed is not None:
            yield timed
        if text_ids:
            text = tokenizer.decode(stream.text_ids)
            if text != record.text:
                if (timed := stages.output()) is not None:
                    yield timed
                record.text = text
                yield ReplyText(turn_id, text, "assistant", final=False)
        if cancel.is_set():
            break
    record.finished = not cancel.is_set()
    yield ReplyText(turn_id, record.text, "assistant", final=True)
