"""Reply playback: a jitter buffer feeding the output callback, with click-free stop.

- Playback of a reply starts once ``start_threshold_ms`` of audio is buffered (or the reply is
  complete), so a bursty engine does not stutter; after an underrun it re-buffers the same way.
- ``flush`` (barge-in) fades out over ``fade_ms`` (≤ 10 ms, raised cosine) and stops; it is
  thread-safe and takes effect in the next output callback.
- The heard position is the number of reply samples written to the device (fade included);
  every notice carries the DAC time, so "heard" means "reached the DAC by then".
- Ducking lowers the gain with a short ramp while a possible barge-in is being confirmed.
- Whatever an engine returns, the device gets finite samples below full scale: NaN/Inf samples
  become silence when enqueued (counted, warned once per reply), and a peak limiter
  (:mod:`app.audio.limiter`, exact below -1 dBFS) is the last stage of every block, after
  anything mixed in (``fill``'s ``mix``).

The output callback calls :meth:`Player.fill`; notices go to ``notify`` from that thread, after
the lock is released, and must not block.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.audio.audio_file import finite_or_silence
from app.audio.limiter import PeakLimiter

log = logging.getLogger(__name__)
NoticeKind = Literal["audible", "played_out", "silenced"]
MAX_FADE_MS = 10.0


@dataclass(frozen=True)
class PlaybackNotice:
    kind: NoticeKind
    turn_id: int
    t_s: float  # DAC time: first audible sample, end of the last sample, or end of the fade
    heard_samples: int  # samples of this reply that reached the DAC (device rate)
    sample_rate_hz: int
    underruns: int = 0


class _Reply:
    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self.chunks: deque[np.ndarray] = deque()
        self.offset = 0  # read position inside chunks[0]
        self.buffered = 0
        self.ended = False
        self.started = False
        self.flushing = False
        self.fade_total = 0
        self.fade_done = 0
        self.heard = 0
        self.audible_sent = False
        self.underruns = 0
        self.non_finite = 0  # NaN/Inf samples the engine sent, played as silence


class Player:
    """One reply at a time, at the output device's sample rate."""

    def __init__(self, sample_rate_hz: int, start_threshold_ms: float,
                 notify: Callable[[PlaybackNotice], None], fade_ms: float = 8.0,
                 duck_gain: float = 0.25, duck_ramp_ms: float = 10.0) -> None:
        if not 0 < fade_ms <= MAX_FADE_MS:
            raise ValueError(f"fade_ms must be in (0, {MAX_FADE_MS}]")
        self.sample_rate_hz = int(sample_rate_hz)
        self._notify = notify
        self._lock = threading.Lock()
        self._reply: _Reply | None = None
        self._start_frames = 0
        self.set_start_threshold_ms(start_threshold_ms)
        self._fade_frames = max(1, round(fade_ms * self.sample_rate_hz / 1000))
        self._duck_gain = float(duck_gain)
        self._gain = 1.0
        self._gain_target = 1.0
        self._gain_step = 1.0 / max(1.0, duck_ramp_ms * self.sample_rate_hz / 1000)
        self.underruns = 0  # total, all replies
        self.non_finite_samples = 0  # total NaN/Inf samples replaced by silence, all replies
        self.limiter = PeakLimiter(self.sample_rate_hz)

    # ---- control (any thread) ---------------------------------------------------------------

    def set_start_threshold_ms(self, start_threshold_ms: float) -> None:
        self._start_frames = round(max(0.0, start_threshold_ms) * self.sample_rate_hz / 1000)

    def begin_reply(self, turn_id: int) -> None:
        """Start a new reply (drops any earlier one that was not flushed)."""
        with self._lock:
            self._reply = _Reply(turn_id)
            self._gain = self._gain_target = 1.0

    def enqueue(self, turn_id: int, pcm: np.ndarray) -> None:
        """Append reply audio (device rate, mono float32); ignored after a flush or end."""
        if len(pcm) == 0:
            return
        pcm, bad = finite_or_silence(np.asarray(pcm, dtype=np.float32))
        with self._lock:
            reply = self._reply
            if reply is None or reply.turn_id != turn_id or reply.flushing or reply.ended:
                return
            reply.chunks.append(pcm)
            reply.buffered += len(pcm)
            first_bad = bad and not reply.non_finite
            reply.non_finite += bad
            self.non_finite_samples += bad
        if first_bad:
            log.warning("reply %d: the engine sent samples that are not numbers (NaN or "
                        "infinite); they are played as silence", turn_id)

    def end_reply(self, turn_id: int) -> None:
        """No more audio will come for this reply; it ends when the buffer has played."""
        with self._lock:
            if self._reply is not None and self._reply.turn_id == turn_id:
                self._reply.ended = True

    def set_ducked(self, ducked: bool, silent: bool = False) -> None:
        """Duck the reply to the duck gain, or with ``silent`` to nothing (it plays on unheard
        and comes back as it was if the duck is lifted)."""
        with self._lock:
            self._gain_target = (0.0 if silent else self._duck_gain) if ducked else 1.0

    def flush(self, now_s: float) -> None:
        """Fade out and stop the current reply (barge-in). Thread-safe.

        If nothing is audible yet, the reply is silenced at once at ``now_s``; otherwise the
        fade runs in the next output callback and the notice carries its DAC end time.
        """
        notice = None
        with self._lock:
            reply = self._reply
            if reply is None or reply.flushing:
                return
            if reply.started and reply.buffered > 0:
                reply.flushing = True
                reply.fade_total = min(self._fade_frames, reply.buffered)
            else:
                notice = self._finish(reply, "silenced", now_s)
        if notice:
            self._notify(notice)

    def drop(self, now_s: float) -> None:
        """End the reply without a device (the output vanished and none is left)."""
        with self._lock:
            reply = self._reply
            notice = self._finish(reply, "silenced", now_s) if reply else None
        if notice:
            self._notify(notice)

    @property
    def active_turn_id(self) -> int | None:
        reply = self._reply
        return reply.turn_id if reply is not None else None

    # ---- output callback -------------------------------------------------------------------

    def fill(self, out: np.ndarray, dac_time_s: float,
             mix: Callable[[np.ndarray], None] | None = None) -> None:
        """Write the next block into ``out`` (mono float32, zeroed first); ``mix`` may add to
        it (test tones) before the limiter, which always comes last."""
        out.fill(0.0)
        notices: list[PlaybackNotice] = []
        with self._lock:
            reply = self._reply
            if reply is not None:
                if reply.flushing:
                    self._fill_fade(reply, out, dac_time_s, notices)
                else:
                    self._fill_play(reply, out, dac_time_s, notices)
        if mix is not None:
            mix(out)
        self.limiter.process(out)
        for notice in notices:
            self._notify(notice)

    def _fill_play(self, reply: _Reply, out: np.ndarray, dac_time_s: float,
                   notices: list[PlaybackNotice]) -> None:
        if not reply.started:
            if reply.buffered >= max(1, self._start_frames) or (reply.ended and reply.buffered):
                reply.started = True
            elif reply.ended:
                notices.append(self._finish(reply, "played_out", dac_time_s))
                return
            else:
                return
        count = self._take(reply, out)
        self._apply_gain(out[:count])
        if count and not reply.audible_sent:
            reply.audible_sent = True
            notices.append(self._notice(reply, "audible", dac_time_s))
        reply.heard += count
        if count < len(out):
            if reply.ended:
                end_s = dac_time_s + count / self.sample_rate_hz
                notices.append(self._finish(reply, "played_out", end_s))
            else:
                reply.underruns += 1
                self.underruns += 1
                reply.started = False  # re-buffer up to the start threshold

    def _fill_fade(self, reply: _Reply, out: np.ndarray, dac_time_s: float,
                   notices: list[PlaybackNotice]) -> None:
        wanted = min(len(out), reply.fade_total - reply.fade_done)
        count = self._take(reply, out[:wanted])
        self._apply_gain(out[:count])
        k = np.arange(reply.fade_done + 1, reply.fade_done + count + 1, dtype=np.float32)
        out[:count] *= 0.5 * (1.0 + np.cos(np.pi * k / reply.fade_total))
        reply.fade_done += count
        reply.heard += count
        if reply.fade_done >= reply.fade_total or reply.buffered == 0:
            end_s = dac_time_s + count / self.sample_rate_hz
            notices.append(self._finish(reply, "silenced", end_s))

    def _take(self, reply: _Reply, out: np.ndarray) -> int:
        """Move up to len(out) buffered samples into out; return how many."""
        written = 0
        while written < len(out) and reply.chunks:
            chunk = reply.chunks[0]
            count = min(len(out) - written, len(chunk) - reply.offset)
            out[written:written + count] = chunk[reply.offset:reply.offset + count]
            written += count
            reply.offset += count
            if reply.offset >= len(chunk):
                reply.chunks.popleft()
                reply.offset = 0
        reply.buffered -= written
        return written

    def _apply_gain(self, block: np.ndarray) -> None:
        if self._gain == self._gain_target:
            if self._gain != 1.0:
                block *= self._gain
            return
        direction = 1.0 if self._gain_target > self._gain else -1.0
        ramp = self._gain + direction * self._gain_step * np.arange(1, len(block) + 1)
        ramp = np.minimum(ramp, self._gain_target) if direction > 0 else np.maximum(
            ramp, self._gain_target)
        block *= ramp.astype(np.float32)
        if len(ramp):
            self._gain = float(ramp[-1])

    def _notice(self, reply: _Reply, kind: NoticeKind, t_s: float) -> PlaybackNotice:
        return PlaybackNotice(kind, reply.turn_id, t_s, reply.heard, self.sample_rate_hz,
                              reply.underruns)

    def _finish(self, reply: _Reply, kind: NoticeKind, t_s: float) -> PlaybackNotice:
        self._reply = None
        self._gain = self._gain_target = 1.0
        return self._notice(reply, kind, t_s)
