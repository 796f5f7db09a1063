"""Streaming decode with a chunk-trained flow (contract §3.7).

Protocol (as the reference ``CosyVoice2Model.tts(stream=True)``): the first hop ends on a chunk
boundary counted from the start of the voice prompt, later hops are one chunk; a step runs when
the hop and 3 lookahead codes are available; HiFT re-vocodes the last 8 mel frames of the
previous step with the same source samples and the overlapping 3840 output samples are
cross-faded with a Hamming window, so the last 3840 samples of each step are held back until the
next one. ``finish`` decodes the rest. Every code yields exactly 1920 samples in the end.

Cost: with ``flow_cache`` (default) each step computes only the new chunk, reusing the
keys/values of earlier chunks (chunk-causal attention makes this exact); only its attention over
those cached keys grows with prompt + reply. Without it each step recomputes the whole prefix
like the reference. The cache holds ~4.4 MiB per mel frame at full size in float32;
``flow_cache_budget_bytes`` bounds it: a reply that reaches the bound goes on in the bounded mode
of flow_stream.py (same audio, no seam; each later step recomputes the frames since the bound).
``final="reference"`` ends with one full-context pass over all codes as the reference does (its
cost grows with the reply); ``final="causal"`` ends with one more chunk-causal step instead
(flat cost with the cache; the chunk-trained flow was trained with chunk masks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from app.engine.moss_speech.codec.flow import Flow, check_codes
from app.engine.moss_speech.codec.flow_stream import FlowStream
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.voice import VoiceConditioning

MEL_CACHE_FRAMES = 8  # mel frames re-vocoded at each seam
MIN_FIRST_HOP = 3  # codes: 1920·hop samples must exceed the 3840 held back for the fade

FirstHop = Literal["aligned", "aggressive"]
FinalPass = Literal["reference", "causal"]
CODES_PER_SECOND = 12.5


@dataclass
class FlowStats:
    """The cached flow state of one reply (kept after the decoder closes)."""

    peak_nbytes: int = 0  # allocated, at most (a borrowed voice prefix included)
    used_nbytes: int = 0  # keys/values of the positions held, after the last step
    codes: int = 0  # voice prompt + reply codes whose mel was produced
    bounded_from_code: int | None = None  # the reply code where the budget was reached

    def used_nbytes_per_second(self) -> float | None:
        """Bytes held per second of voice prompt + reply audio (until the budget is reached)."""
        return self.used_nbytes * CODES_PER_SECOND / self.codes if self.codes else None


class StreamDecoder:
    """``push(codes)`` -> new 24 kHz samples; ``finish()`` -> the rest. A context manager."""

    def __init__(self, flow: Flow, hift: HiFTGenerator, voice: VoiceConditioning, *,
                 first_hop: FirstHop = "aligned", final: FinalPass = "reference",
                 flow_cache: bool = True, seed: int = 0, n_timesteps: int | None = None,
                 prefix: FlowStream | None = None, flow_cache_budget_bytes: int | None = None,
                 max_codes: int | None = None) -> None:
        if first_hop not in ("aligned", "aggressive") or final not in ("reference", "causal"):
            raise ValueError(f"unknown first_hop {first_hop!r} or final {final!r}")
        self.flow, self.hift, self.voice = flow, hift, voice
        self.chunk = flow.chunk
        self.lookahead = flow.config.encoder.pre_lookahead_len
        self.first_hop, self.final, self.flow_cache = first_hop, final, flow_cache
        self.n_timesteps = n_timesteps
        self.samples_per_frame = hift.config.samples_per_frame
        self.overlap = MEL_CACHE_FRAMES * self.samples_per_frame  # 3840 samples
        self.window = torch.from_numpy(np.hamming(2 * self.overlap))  # float64
        device = hift.conv_pre.weight.device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.codes = torch.zeros(0, dtype=torch.long)
        self.cursor = 0  # reply codes whose mel has been produced
        self.steps = 0
        self.finished = False
        self.flow_stats = FlowStats()
        self._flow_stream: FlowStream | None = None
        if flow_cache:
            self._flow_stream = FlowStream(
                flow, voice.prompt_codes, voice.prompt_mel, voice.xvector, n_timesteps,
                prefix=prefix, budget_bytes=flow_cache_budget_bytes, max_codes=max_codes)
        self._mel_cache: torch.Tensor | None = None
        self._source_cache: torch.Tensor | None = None
        self._speech_cache: torch.Tensor | None = None

    def __enter__(self) -> StreamDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the caches (the decoder cannot be used afterwards)."""
        if self._flow_stream is not None:
            self._flow_stream.close()
        self._flow_stream = None
        self._mel_cache = self._source_cache = self._speech_cache = None
        self.finished = True

    @property
    def flow_stream(self) -> FlowStream | None:
        """The cached flow state (None without ``flow_cache`` or once closed)."""
        return self._flow_stream

    def cache_nbytes(self) -> int:
        """Bytes allocated for the flow state of this reply (a borrowed voice prefix included)."""
        return self._flow_stream.cache_nbytes() if self._flow_stream is not None else 0

    def _note_flow_state(self) -> None:
        stream, stats = self._flow_stream, self.flow_stats
        if stream is None:
            return
        stats.peak_nbytes = max(stats.peak_nbytes, stream.cache_nbytes())
        stats.used_nbytes, stats.codes = stream.cache_used_nbytes(), stream.tokens_done
        if stream.frozen_tokens is not None and stats.bounded_from_code is None:
            stats.bounded_from_code = max(0, stream.frozen_tokens - len(self.voice.prompt_codes))

    def next_hop(self) -> int:
        """Codes the next step will turn into audio."""
        if self.cursor:
            return self.chunk
        pad = (-len(self.voice.prompt_codes)) % self.chunk
        if self.first_hop == "aggressive" and pad >= MIN_FIRST_HOP:
            return pad
        return pad + self.chunk

    def push(self, codes: torch.Tensor | np.ndarray | list[int]) -> np.ndarray:
        """Add reply codes; returns the samples that became final (possibly none)."""
        if self.finished:
            raise RuntimeError("push() after finish() or close(); start a new stream_decoder()")
        new = torch.as_tensor(codes, dtype=torch.long).reshape(-1)
        check_codes(new)
        self.codes = torch.cat([self.codes, new])
        pieces = []
        while len(self.codes) - self.cursor >= self.next_hop() + self.lookahead:
            pieces.append(self._step(self.cursor + self.next_hop()))
        return self._emit(pieces)

    def finish(self) -> np.ndarray:
        """Decode the remaining codes; afterwards the decoder is closed."""
        if self.finished:
            raise RuntimeError("finish() called twice; start a new stream_decoder()")
        pieces = []
        if len(self.codes):
            if self.final == "causal" and self._flow_stream is not None:
                mel = self._flow_stream.advance(self.codes, len(self.codes), finalize=True)
                self._note_flow_state()
            else:  # a whole pass: full context ("reference"), or chunk-causal without a cache
                mel = self.flow.inference(self.codes, self.voice.prompt_codes,
                                          self.voice.prompt_mel, self.voice.xvector,
                                          streaming=self.final == "causal", finalize=True,
                                          n_timesteps=self.n_timesteps)
                mel = mel[:, :, self.cursor * self.flow.config.token_mel_ratio:]
            pieces.append(self._vocode(mel, final=True))
        out = self._emit(pieces)
        self.close()
        return out

    def _step(self, end: int) -> torch.Tensor:
        """One non-final step: mel for codes [cursor, end) and its audio minus the overlap."""
        known = self.codes[:end + self.lookahead]
        if self._flow_stream is not None:
            mel = self._flow_stream.advance(known, end, finalize=False)
            self._note_flow_state()
        else:  # the reference: recompute the flow over the whole prefix
            mel = self.flow.inference(known, self.voice.prompt_codes, self.voice.prompt_mel,
                                      self.voice.xvector, streaming=True, finalize=False,
                                      n_timesteps=self.n_timesteps)
            mel = mel[:, :, self.cursor * self.flow.config.token_mel_ratio:]
        self.cursor = end
        self.steps += 1
        return self._vocode(mel, final=False)

    @torch.inference_mode()
    def _vocode(self, mel: torch.Tensor, final: bool) -> torch.Tensor:
        if self._mel_cache is not None:
            mel = torch.cat([self._mel_cache, mel], dim=2)
        speech, source = self.hift.inference(mel, self.generator, self._source_cache)
        speech = speech.float().cpu()
        if self._speech_cache is not None:
            overlap = self.overlap
            faded = (speech[:, :overlap].double() * self.window[:overlap]
                     + self._speech_cache.double() * self.window[overlap:])
            speech[:, :overlap] = faded.float()
        if not final:
            self._mel_cache = mel[:, :, -MEL_CACHE_FRAMES:]
            self._source_cache = source[:, :, -self.overlap:]
            self._speech_cache = speech[:, -self.overlap:]
            speech = speech[:, :-self.overlap]
        return speech[0]

    def _emit(self, pieces: list[torch.Tensor]) -> np.ndarray:
        out = torch.cat(pieces).numpy() if pieces else np.zeros(0, dtype=np.float32)
        return out.astype(np.float32, copy=False)
