"""``MossSpeechCodec``: the one object the engine uses for speech ↔ codes.

    codec = load_codec(folder)
    codes = codec.encode(pcm, 16000)                # LongTensor [n], 12.5 codes/s
    enc = codec.stream_encoder(); enc.push(pcm_16k); codes = enc.finish()
    voice = codec.voice("voice.wav")                # cached by file content
    pcm_24k = codec.decode(codes, voice)            # float32 numpy, 1920 samples per code
    with codec.stream_decoder(voice, chunk=5) as dec:
        out = dec.push(new_codes) ...; tail = dec.finish()

Not thread-safe: like every model object it belongs to the engine worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from app.engine.moss_speech.codec.config import CodecConfig
from app.engine.moss_speech.codec.flow import Flow, check_codes
from app.engine.moss_speech.codec.flow_stream import FlowStream, StreamCapacity
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.streaming import FinalPass, FirstHop, StreamDecoder
from app.engine.moss_speech.codec.tokenizer import SpeechTokenizer, StreamEncoder
from app.engine.moss_speech.codec.voice import (
    SpeakerEmbedder,
    VoiceCache,
    VoiceConditioning,
    VoiceFileError,
    check_voice_file,
    compute_voice,
    read_voice_file,
)
from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder

OUTPUT_SAMPLE_RATE_HZ = 24000
INPUT_SAMPLE_RATE_HZ = 16000


class MossSpeechCodec:
    """Whisper-VQ tokenizer, voice conditioning, flow decoders and HiFT of one codec."""

    sample_rate_hz = OUTPUT_SAMPLE_RATE_HZ
    input_sample_rate_hz = INPUT_SAMPLE_RATE_HZ

    def __init__(self, config: CodecConfig, encoder: WhisperVQEncoder, hift: HiFTGenerator,
                 speaker: SpeakerEmbedder, *, flow_loader: Callable[[int], Flow],
                 fingerprint: str, voice_cache_dir: Path | None = None) -> None:
        self.config = config
        self.tokenizer = SpeechTokenizer(encoder, config.front_end)
        self.hift = hift
        self.speaker = speaker
        self._flow_loader = flow_loader
        self._flows: dict[int, Flow] = {}
        # (voice, chunk, steps, capacity) -> flow state after the reply-independent prompt
        # chunks, in buffers allocated for a whole reply
        self._prefix: tuple[VoiceConditioning, int, int | None, StreamCapacity,
                            FlowStream | None] | None = None
        if voice_cache_dir is None:
            from app.paths import cache_dir

            voice_cache_dir = cache_dir() / "voices"
        self.voice_cache = VoiceCache(voice_cache_dir, fingerprint)

    @property
    def device(self) -> torch.device:
        return self.hift.conv_pre.weight.device

    @property
    def samples_per_code(self) -> int:
        return self.config.samples_per_code

    def flow(self, chunk: int = 0) -> Flow:
        """The offline flow (chunk 0, flow.pt) or a chunk-trained one, loaded on first use."""
        if chunk not in self._flows:
            self._flows[chunk] = self._flow_loader(chunk)
        return self._flows[chunk]

    def release_flows(self, keep: int) -> None:
        """Drop every loaded flow but the ``keep``-code one (a changed chunk setting leaves the
        old checkpoint unused; a later use loads it again)."""
        if self._prefix is not None and self._prefix[1] != keep:
            self._prefix = None
        for chunk in [c for c in self._flows if c != keep]:
            del self._flows[chunk]

    # -- speech -> codes ----------------------------------------------------------------------

    def encode(self, pcm: np.ndarray | torch.Tensor, sample_rate: int) -> torch.Tensor:
        """Codes of a whole utterance ([T] or [C, T] at any rate; channel 0 is used)."""
        return self.tokenizer.encode(pcm, sample_rate)

    def stream_encoder(self) -> StreamEncoder:
        """Encode while the user talks: ``push(pcm_16k)`` / ``finish()``."""
        return self.tokenizer.stream()

    def token_count(self, n_samples_16k: int) -> int:
        return self.tokenizer.token_count(n_samples_16k)

    # -- voice --------------------------------------------------------------------------------

    def voice(self, path: Path | str) -> VoiceConditioning:
        """Voice conditioning of a WAV/FLAC file; raises VoiceFileError for unusable files."""
        path = Path(path)
        check_voice_file(path)  # size, rate, channels and length from the header first
        try:
            key = self.voice_cache.key_of_file(path)
        except OSError as exc:
            raise VoiceFileError(f"Voice file {path.name} cannot be read "
                                 f"({exc.strerror or exc}).") from exc
        cached = self.voice_cache.get(key, path.name)
        if cached is not None:
            return cached
        samples, rate = read_voice_file(path)
        voice = self.voice_from_samples(samples, rate, source=path.name, cache_key=key)
        self.voice_cache.put(key, voice)
        return voice

    def voice_from_samples(self, samples: np.ndarray, rate: int, source: str = "",
                           cache_key: str = "") -> VoiceConditioning:
        """Voice conditioning of samples [C, T] or [T] (not cached)."""
        samples = np.atleast_2d(np.asarray(samples, dtype=np.float32))
        return compute_voice(samples, rate, self.tokenizer.encode, self.speaker,
                             self.config.flow.mel_bins, source, cache_key)

    # -- codes -> speech ----------------------------------------------------------------------

    def decode(self, codes: torch.Tensor | np.ndarray | list[int], voice: VoiceConditioning,
               *, seed: int = 0, n_timesteps: int | None = None) -> np.ndarray:
        """Offline decode with flow.pt: float32 [1920·n] at 24 kHz. The HiFT noise comes from
        a generator seeded with ``seed`` (the global RNG is not used)."""
        codes = torch.as_tensor(codes, dtype=torch.long).reshape(-1)
        check_codes(codes)
        if codes.numel() == 0:
            return np.zeros(0, dtype=np.float32)
        flow = self.flow(0)
        mel = flow.inference(codes, voice.prompt_codes, voice.prompt_mel, voice.xvector,
                             streaming=False, finalize=True, n_timesteps=n_timesteps)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        speech, _ = self.hift.inference(mel, generator)
        return speech[0].float().cpu().numpy()

    def stream_decoder(self, voice: VoiceConditioning, chunk: int = 5, *,
                       first_hop: FirstHop = "aligned", final: FinalPass = "reference",
                       flow_cache: bool = True, reuse_voice_prefix: bool = False,
                       seed: int = 0, n_timesteps: int | None = None,
                       flow_cache_budget_bytes: int | None = None,
                       max_codes: int | None = None) -> StreamDecoder:
        """Streaming decode with flow-chunk-``chunk``.pt (5 or 25); see streaming.py.

        ``flow_cache_budget_bytes`` bounds the flow state of a reply (None: no bound); a reply
        that reaches it goes on with the same audio, each later chunk costing more time.
        ``max_codes`` (the longest reply) lets its buffers be allocated once.
        ``reuse_voice_prefix`` keeps the flow state of the voice prompt between replies, so the
        first chunk only computes the prompt's last chunk and the reply (lower first-audio
        latency); that state lives in the buffers the replies then fill, so with a budget it
        holds the budget while the voice is in use (see ``cache_nbytes``; ``clear_caches``
        drops it)."""
        if chunk <= 0:
            raise ValueError("chunk must be a positive number of codes (5 or 25)")
        bounds = {"budget_bytes": flow_cache_budget_bytes, "max_codes": max_codes}
        prefix = self._voice_prefix(voice, chunk, n_timesteps, **bounds) if (
            reuse_voice_prefix and flow_cache) else None
        return StreamDecoder(self.flow(chunk), self.hift, voice, first_hop=first_hop,
                             final=final, flow_cache=flow_cache, seed=seed,
                             n_timesteps=n_timesteps, prefix=prefix,
                             flow_cache_budget_bytes=flow_cache_budget_bytes,
                             max_codes=max_codes)

    def _voice_prefix(self, voice: VoiceConditioning, chunk: int, n_timesteps: int | None,
                      budget_bytes: int | None, max_codes: int | None) -> FlowStream | None:
        flow = self.flow(chunk)
        capacity = StreamCapacity.plan(flow, len(voice.prompt_codes),
                                       n_timesteps or flow.config.n_timesteps, budget_bytes,
                                       max_codes)
        entry = self._prefix
        if entry is None or entry[0] is not voice or entry[1:4] != (chunk, n_timesteps,
                                                                    capacity):
            self._prefix = None  # free the old state before building the new one
            prefix = FlowStream.voice_prefix(flow, voice.prompt_codes, voice.prompt_mel,
                                             voice.xvector, n_timesteps,
                                             budget_bytes=budget_bytes, max_codes=max_codes)
            self._prefix = entry = (voice, chunk, n_timesteps, capacity, prefix)
        return entry[4]

    def cache_nbytes(self, *decoders: StreamDecoder) -> int:
        """Bytes held between replies (the voice-prefix flow state), plus those of
        ``decoders`` (buffers they share with it count once)."""
        found = dict(self._prefix[4].buffers()) if self._prefix and self._prefix[4] else {}
        for decoder in decoders:
            if decoder.flow_stream is not None:
                found.update(decoder.flow_stream.buffers())
        return sum(found.values())

    def clear_caches(self) -> None:
        """Drop state kept between replies (e.g. before a memory-hungry step)."""
        self._prefix = None
