"""Speech → 12.5 Hz codes: whole-utterance encoding and encode-while-talking.

Audio is cut into 30 s segments encoded independently (contract §3.2). Within a segment the
network is causal, but Whisper's log-mel floor (max − 8 over the *whole* segment) is not: a
louder sound later can raise the floor of earlier frames. The incremental encoder therefore
keeps the raw log-mel, normalises with the running maximum, and when the maximum rises far
enough to change frames it has already used, it rewinds to the first affected token and
re-encodes from there. ``finish()`` always returns exactly the codes of a whole-utterance encode;
``revised_from`` tells the caller which already-returned codes changed (usually none).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from app.engine.moss_speech.codec import dsp
from app.engine.moss_speech.codec.config import FrontEndConfig
from app.engine.moss_speech.codec.whisper_vq import (
    MEL_FRAMES_PER_TOKEN,
    EncoderState,
    WhisperVQEncoder,
)


def as_mono_tensor(pcm: np.ndarray | torch.Tensor, what: str = "audio") -> torch.Tensor:
    """A float32 1-D waveform: channel 0 of [C, T] input (as the reference), checked finite."""
    tensor = torch.as_tensor(pcm)
    if tensor.ndim == 2:
        tensor = tensor[0]
    if tensor.ndim != 1:
        raise ValueError(f"{what} must be 1-D [T] or 2-D [C, T], got shape {tuple(tensor.shape)}")
    tensor = tensor.to(torch.float32)
    if tensor.numel() and not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{what} contains NaN or infinite samples")
    return tensor


class SpeechTokenizer:
    """Whisper front end + Whisper-VQ encoder; one instance per loaded codec."""

    def __init__(self, encoder: WhisperVQEncoder, front_end: FrontEndConfig) -> None:
        self.encoder = encoder
        self.front_end = front_end
        self.samples_per_token = front_end.hop_length * MEL_FRAMES_PER_TOKEN  # 1280
        self.segment_samples = front_end.segment_s * front_end.sample_rate_hz

    @property
    def device(self) -> torch.device:
        return self.encoder.codebook.weight.device

    def token_count(self, n_samples: int) -> int:
        """Codes for ``n_samples`` at 16 kHz: ceil per 30 s segment (1 s -> 13)."""
        full, rest = divmod(n_samples, self.segment_samples)
        per_full = math.ceil(self.segment_samples / self.samples_per_token)
        return full * per_full + math.ceil(rest / self.samples_per_token)

    def raw_log_mel(self, pcm_16k: torch.Tensor, mode: str = "center") -> torch.Tensor:
        fe = self.front_end
        return dsp.whisper_raw_log_mel(pcm_16k.to(self.device), fe.n_fft, fe.hop_length,
                                       fe.n_mels, mode)

    def encode(self, pcm: np.ndarray | torch.Tensor, sample_rate: int) -> torch.Tensor:
        """Codes of a whole utterance: int64 [n] on the CPU, values in [0, 16384)."""
        audio = as_mono_tensor(pcm)
        if sample_rate != self.front_end.sample_rate_hz:
            audio = dsp.resample(audio, sample_rate, self.front_end.sample_rate_hz)
        segments = list(torch.split(audio, self.segment_samples)) if audio.numel() else []
        # the reference encodes all segments as one batch padded to the longest (a multiple of
        # 1280 samples); the padding only matters for the reflection at the very end
        step = self.samples_per_token
        padded = math.ceil(max((len(s) for s in segments), default=0) / step) * step
        codes: list[torch.Tensor] = []
        for segment in segments:
            pcm_padded = torch.nn.functional.pad(segment, (0, padded - len(segment)))
            fe = self.front_end
            features = dsp.whisper_log_mel(pcm_padded.to(self.device), fe.n_fft, fe.hop_length,
                                           fe.n_mels)
            state = self.encoder.new_state()
            codes.append(self.encoder.step(state, features, math.ceil(len(segment) / step)))
        if not codes:
            return torch.zeros(0, dtype=torch.long)
        return torch.cat(codes).cpu()

    def stream(self) -> StreamEncoder:
        """An incremental encoder for audio that is still arriving (16 kHz only)."""
        return StreamEncoder(self)


class _Segment:
    """One ≤ 30 s segment being encoded: samples, raw log-mel frames and encoder state."""

    def __init__(self, tokenizer: SpeechTokenizer) -> None:
        self.tokenizer = tokenizer
        self.samples = torch.zeros(0)
        self.raw = torch.zeros(tokenizer.front_end.n_mels, 0, device=tokenizer.device)
        self.frame_min = torch.zeros(0, device=tokenizer.device)  # min over bins, per frame
        self.max_value = -math.inf
        self.used_floor = -math.inf  # the floor the encoded tokens were computed with
        self.state = tokenizer.encoder.new_state()
        self.codes: list[int] = []

    def append(self, samples: torch.Tensor) -> None:
        """Add samples and the log-mel frames whose 25 ms window they complete."""
        self.samples = torch.cat([self.samples, samples])
        fe = self.tokenizer.front_end
        done = self.raw.shape[1]
        start = done * fe.hop_length - fe.n_fft // 2  # first sample of frame `done`'s window
        if start < 0:  # the first frames see the reflected start
            new = self.tokenizer.raw_log_mel(self.samples, "growing")[:, done:]
        else:
            new = self.tokenizer.raw_log_mel(self.samples[start:], "slice")
        self._add_frames(new)

    def _add_frames(self, new: torch.Tensor) -> None:
        if new.shape[1] == 0:
            return
        self.raw = torch.cat([self.raw, new], dim=1)
        self.frame_min = torch.cat([self.frame_min, new.min(dim=0).values])
        self.max_value = max(self.max_value, float(new.max()))

    def fork(self) -> _Segment:
        """An independent copy: tensors are replaced (never written) on append, and both
        sides copy the shared encoder keys/values before their next write."""
        other = _Segment.__new__(_Segment)
        other.__dict__.update(self.__dict__)
        other.codes = list(self.codes)
        other.state = EncoderState(self.state.n_tokens, [cache.fork() for cache in self.state.kv])
        return other

    def close(self, padded_samples: int) -> None:
        """The segment is complete: recompute the frames near the end as the batch encode does
        (zero padding to ``padded_samples``, reflection at the padded end)."""
        padded = torch.nn.functional.pad(self.samples, (0, padded_samples - len(self.samples)))
        full = self.tokenizer.raw_log_mel(padded)
        keep = self.raw.shape[1]
        self.raw = torch.cat([self.raw, full[:, keep:]], dim=1)
        self.frame_min = torch.cat([self.frame_min, full[:, keep:].min(dim=0).values])
        self.max_value = float(self.raw.max()) if self.raw.numel() else -math.inf

    def encode_available(self, n_tokens: int) -> int | None:
        """Encode up to ``n_tokens`` tokens; returns the first re-encoded old token, if any."""
        encoder = self.tokenizer.encoder
        floor = self.max_value - dsp.WHISPER_DYNAMIC_RANGE
        revised_from = None
        if floor > self.used_floor and self.codes:
            used_frames = len(self.codes) * MEL_FRAMES_PER_TOKEN
            changed = torch.nonzero(self.frame_min[:used_frames] < floor)
            if changed.numel():
                revised_from = int(changed[0]) // MEL_FRAMES_PER_TOKEN
                encoder.truncate(self.state, revised_from)
                del self.codes[revised_from:]
        self.used_floor = max(self.used_floor, floor)
        if n_tokens > len(self.codes):
            features = dsp.whisper_normalise(self.raw, self.max_value)
            self.codes += encoder.step(self.state, features, n_tokens).tolist()
        return revised_from


class StreamEncoder:
    """Encode-while-talking: ``push(pcm_16k)`` returns the codes that became available;
    ``finish()`` returns all codes, equal to ``SpeechTokenizer.encode`` of the same audio.

    ``revised_from`` is the index of the first code that changed after it was returned by
    ``push`` (because a louder sound raised Whisper's floor), or None when none changed; the
    corrected values are in ``codes`` (``push`` only returns codes past what it returned before).
    Each push runs the encoder once over all its weights, so on a CPU push ≥ 0.5 s at a time.
    """

    def __init__(self, tokenizer: SpeechTokenizer) -> None:
        self.tokenizer = tokenizer
        self._done: list[int] = []  # codes of closed segments
        self._segment = _Segment(tokenizer)
        self._returned = 0
        self._closed_segments = 0
        self.revised_from: int | None = None
        self._finished = False

    @property
    def codes(self) -> torch.Tensor:
        """All codes so far (the last ones may still be revised until ``finish``)."""
        return torch.tensor(self._done + self._segment.codes, dtype=torch.long)

    def push(self, pcm_16k: np.ndarray | torch.Tensor) -> torch.Tensor:
        if self._finished:
            raise RuntimeError("push() after finish(); start a new stream_encoder()")
        audio = as_mono_tensor(pcm_16k, "pcm_16k")
        segment_samples = self.tokenizer.segment_samples
        while audio.numel():
            room = segment_samples - len(self._segment.samples)
            self._segment.append(audio[:room])
            audio = audio[room:]
            if len(self._segment.samples) == segment_samples:
                self._close_segment(segment_samples)
        complete_frames = self._segment.raw.shape[1]
        self._note(self._segment.encode_available(complete_frames // MEL_FRAMES_PER_TOKEN))
        return self._new_codes()

    def fork(self) -> StreamEncoder:
        """An independent copy of this encoder in its current state, cheap (shared buffers,
        copied on write): e.g. ``fork().finish()`` gives the codes of the audio so far while
        this encoder goes on taking audio (a speculative reply at a pause)."""
        if self._finished:
            raise RuntimeError("fork() after finish(); start a new stream_encoder()")
        other = StreamEncoder.__new__(StreamEncoder)
        other.__dict__.update(self.__dict__)
        other._done = list(self._done)
        other._segment = self._segment.fork()
        return other

    def finish(self) -> torch.Tensor:
        """Encode the rest (padding as the reference batch encode) and return every code."""
        if not self._finished:
            self._finished = True
            samples = len(self._segment.samples)
            if samples:
                step = self.tokenizer.samples_per_token
                padded = (self.tokenizer.segment_samples if self._closed_segments
                          else math.ceil(samples / step) * step)
                self._close_segment(padded, keep_open=True)
        return self.codes

    def _close_segment(self, padded_samples: int, keep_open: bool = False) -> None:
        segment = self._segment
        segment.close(padded_samples)
        n_tokens = math.ceil(len(segment.samples) / self.tokenizer.samples_per_token)
        self._note(segment.encode_available(n_tokens))
        if keep_open:
            return
        self._done += segment.codes
        self._closed_segments += 1
        self._segment = _Segment(self.tokenizer)

    def _note(self, revised_in_segment: int | None) -> None:
        if revised_in_segment is None:
            return
        index = len(self._done) + revised_in_segment
        if index < self._returned and (self.revised_from is None or index < self.revised_from):
            self.revised_from = index

    def _new_codes(self) -> torch.Tensor:
        codes = self._done + self._segment.codes
        new = codes[self._returned:]
        self._returned = len(codes)
        return torch.tensor(new, dtype=torch.long)
