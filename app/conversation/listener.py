"""The input chain on the voice-loop thread: capture → 16 kHz → echo canceller → scored VAD
frames. (Segmenting the frames into speech is the turn controller's job: it restarts the
segmenter between two frames of the same pull when a decision needs a fresh onset.)

The 16 kHz stream is kept in a ring (``history``) that is both the UI's microphone waveform and
the source of turn audio (pre-roll included). Sample ``i`` of that stream is mapped to capture
time through an anchor refreshed on every pull (so device clock drift does not accumulate):
the newest 16 kHz sample is as old as the newest captured sample plus the resampler's
look-ahead and the echo canceller's latency.

Every 10 ms block of that stream also goes through the sound gate (:mod:`app.vad.sound`: over
the noise floor and over the loudest echo the canceller says may be in it): ``take_sound``
hands those blocks to the turn controller, the first evidence of a person talking over a
reply, a frame before the VAD can say it is speech.

Raw taps (the acoustic check) see the 16 kHz microphone before the echo canceller. While the
listener is *deaf* (half-duplex replies, the acoustic check) the VAD scores silence instead of
the microphone, so nothing heard then can start or confirm speech; the waveform and the history
still get the audio.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.audio.capture import CaptureBuffer
from app.audio.echo_canceller import EchoCanceller, PassThroughEchoCanceller
from app.audio.resample import StreamResampler
from app.audio.ringbuffer import RingBuffer
from app.vad.base import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE_HZ, SpeechScorer, VadFrame
from app.vad.sound import BLOCK_S, BLOCK_SAMPLES, SoundBlock, SoundGate


class Listener:
    def __init__(self, scorer: SpeechScorer | None,
                 echo_canceller: EchoCanceller | None = None, history_s: float = 30.0) -> None:
        self.scorer = scorer  # set before audio flows (the pipeline loads silero at start)
        self.echo_canceller = echo_canceller or PassThroughEchoCanceller()
        self.history = RingBuffer(int(history_s * SAMPLE_RATE_HZ), SAMPLE_RATE_HZ)
        self.capture = CaptureBuffer(SAMPLE_RATE_HZ)
        self._resampler = StreamResampler(SAMPLE_RATE_HZ, SAMPLE_RATE_HZ)
        self._anchor_index = 0  # a 16 kHz sample index ...
        self._anchor_s = 0.0  # ... and its capture time
        self._frame_start = 0  # 16 kHz index of the next VAD frame
        self._frame = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        self.first_sample_s: float | None = None
        self.raw_taps: list[Callable[[np.ndarray, float], None]] = []
        self._deaf_from_s: float | None = None  # frames starting in [from, until) are not heard
        self._deaf_until_s = float("inf")
        self._was_deaf = False
        self.sound_gate = SoundGate()
        self._block_start = 0  # 16 kHz index of the next sound block
        self._sound: list[SoundBlock] = []

    def configure_input(self, sample_rate_hz: int) -> None:
        """A (new) input device: fresh capture buffer and resampler; the 16 kHz stream goes on."""
        self.capture = CaptureBuffer(sample_rate_hz)
        self._resampler = StreamResampler(sample_rate_hz, SAMPLE_RATE_HZ)
        self.echo_canceller.reset()

    def time_at(self, index: int) -> float:
        """Capture time of 16 kHz sample ``index``."""
        return self._anchor_s + (index - self._anchor_index) / SAMPLE_RATE_HZ

    def index_at(self, t_s: float) -> int:
        """16 kHz sample index at capture time ``t_s`` (clamped to what the ring still holds)."""
        index = self._anchor_index + round((t_s - self._anchor_s) * SAMPLE_RATE_HZ)
        return min(max(index, self.history.oldest_index), self.history.total_written)

    def audio(self, start_index: int, end_index: int) -> np.ndarray:
        """16 kHz samples ``[start_index, end_index)`` (what the ring still holds)."""
        out = np.empty(max(0, end_index - start_index), dtype=np.float32)
        count = self.history.read_range(start_index, out)
        return out[:count]

    def set_deaf(self, from_s: float | None, until_s: float = float("inf")) -> None:
        """Do not hear frames that start in ``[from_s, until_s)`` (capture time); ``None``:
        hear everything again."""
        self._deaf_from_s, self._deaf_until_s = from_s, until_s

    def deaf_at(self, t_s: float) -> bool:
        return self._deaf_from_s is not None and self._deaf_from_s <= t_s < self._deaf_until_s

    def process(self) -> list[VadFrame]:
        """Pull new capture, extend the 16 kHz stream, and score every completed frame."""
        raw, end_s = self.capture.pull()
        if len(raw) == 0:
            return []
        if self.first_sample_s is None:
            self.first_sample_s = end_s - len(raw) / self.capture.sample_rate_hz
        pcm = self._resampler.process(raw)
        pcm_end_s = end_s - self._resampler.latency_s
        if len(pcm):
            pcm_start_s = pcm_end_s - len(pcm) / SAMPLE_RATE_HZ
            for tap in self.raw_taps:
                tap(pcm, pcm_start_s)
            self.history.write(self.echo_canceller.process(pcm, pcm_start_s))
        self._anchor_index = self.history.total_written
        self._anchor_s = pcm_end_s - self.echo_canceller.latency_s
        self._gate_blocks(self.echo_canceller.echo_power_bound)
        return self._score_frames()

    def take_sound(self) -> list[SoundBlock]:
        """The sound blocks completed since the last call, in capture order."""
        blocks, self._sound = self._sound, []
        return blocks

    def _gate_blocks(self, echo_power: float) -> None:
        block = np.empty(BLOCK_SAMPLES, np.float32)
        while self.history.total_written - self._block_start >= BLOCK_SAMPLES:
            start = max(self._block_start, self.history.oldest_index)
            self.history.read_range(start, block)
            start_s = self.time_at(start)
            deaf = self.deaf_at(start_s)
            power = 0.0 if deaf else float(np.mean(np.square(block, dtype=np.float64)))
            sound = self.sound_gate.block(power, echo_power)
            self._sound.append(SoundBlock(start_s, start_s + BLOCK_S,
                                          sound, echo_power <= 0.0, power))
            self._block_start = start + BLOCK_SAMPLES

    def _score_frames(self) -> list[VadFrame]:
        frames = []
        while self.history.total_written - self._frame_start >= FRAME_SAMPLES:
            if self._frame_start < self.history.oldest_index:  # fell a whole ring behind
                self._frame_start = self.history.oldest_index
                continue
            self.history.read_range(self._frame_start, self._frame)
            start_s = self.time_at(self._frame_start)
            assert self.scorer is not None, "the VAD model is loaded when the pipeline starts"
            deaf = self.deaf_at(start_s)
            if self._was_deaf and not deaf:
                self.scorer.reset()  # its memory holds the frames before the deaf stretch
            self._was_deaf = deaf
            probability = 0.0 if deaf else self.scorer.score(self._frame)
            frames.append(VadFrame(start_s, start_s + FRAME_S, probability))
            self._frame_start += FRAME_SAMPLES
        return frames


class TurnFeed:
    """The current user turn's 16 kHz audio: handed to the engine as it arrives (pre-roll
    first, in order) and kept whole for ``respond``."""

    def __init__(self, listener: Listener, feed: Callable[[int, np.ndarray], None]) -> None:
        self._listener = listener
        self._feed = feed
        self._next_index: int | None = None  # next 16 kHz sample to feed
        self._first_index = 0  # the 16 kHz sample the turn's audio starts at
        self._parts: list[np.ndarray] = []

    def begin(self, audio_from_s: float) -> None:
        self._next_index = self._first_index = self._listener.index_at(audio_from_s)
        self._parts = []

    def pump(self, turn_id: int | None) -> None:
        """Feed what arrived since the last call (nothing outside a turn)."""
        if self._next_index is None or turn_id is None:
            return
        end = self._listener.history.total_written
        if end <= self._next_index:
            return
        pcm = self._listener.audio(self._next_index, end)
        self._next_index = end
        if len(pcm):
            self._parts.append(pcm)
            self._feed(turn_id, pcm)

    def audio(self) -> np.ndarray:
        """Everything fed for this turn, [T] float32."""
        return np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)

    def audio_until(self, t_s: float, last_samples: int,
                    from_s: float | None = None) -> np.ndarray:
        """The turn's last ``last_samples`` fed so far up to capture time ``t_s``, none before
        capture time ``from_s``, [T] float32 (a copy; only the parts it needs are joined)."""
        fed = sum(len(part) for part in self._parts)
        end = min(fed, max(0, self._listener.index_at(t_s) - self._first_index))
        start = max(0, end - last_samples)
        if from_s is not None:
            start = min(end, max(start, self._listener.index_at(from_s) - self._first_index))
        picked, offset = [], 0  # offset: the turn index at which the part starts
        for part in self._parts:
            lo, hi = max(start, offset), min(end, offset + len(part))
            if lo < hi:
                picked.append(part[lo - offset:hi - offset])
            offset += len(part)
        return np.concatenate(picked) if picked else np.zeros(0, np.float32)

    def end(self) -> None:
        self._next_index, self._parts = None, []
