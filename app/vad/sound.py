"""Is there sound in the microphone, over the room's noise and over any echo the reply could
make? Decided every 10 ms on what the echo canceller hands the VAD: the first evidence of a
person talking over a reply, a frame or two before the VAD's 32 ms frames can say it is
speech (issue 14: duck at the first evidence, confirm with the VAD; a duck costs nothing if
it is restored).

A block is *sound* when its power is ``FLOOR_MARGIN_DB`` over the noise floor (the median of
the 30 ms-smoothed power over the last ``FLOOR_WINDOW_S``: a steady noise such as rain is no
sound however loud it is; measured on the corpus's rain, no run of two sound blocks in 20 s,
and the first two-block run 1-51 ms after the labelled onset of its six talkers) and
``ECHO_MARGIN_DB`` over the loudest echo of the speaker that can be in it now (``echo_power``,
from the echo canceller; 0 where there is none).

Where the words stopped (:class:`SpeechEnd`): silero's probability trails the end of speech by
one to three 32 ms frames (on the real-speech corpus the VAD's last voiced frame ended a median
54 ms after the labelled end, 117 ms at the p90), and that lag added to every endpoint silence.
At a pause the block levels say where the sound fell away: the end of the last block within
``END_RANGE_DB`` of the utterance's loudest and ``END_FLOOR_MARGIN_DB`` over the quietest 30 ms
of the last seconds. It may move the end back by at most ``END_MAX_SHIFT_S`` (the VAD heard
speech up to its frame; the level only says where in the trailing frames it stopped), and not at
all where no block stands clear of the floor (noise as loud as the words, or no levels), nor
past a dip where the sound comes back after the frame (two blocks running at the words' level:
a syllable the VAD scored under its threshold; in rain at 5 dB the end moved back over one,
and a sentence going on 339 ms later was cut in two).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from app.vad.base import SAMPLE_RATE_HZ

BLOCK_SAMPLES = 160  # 10 ms at 16 kHz
BLOCK_S = BLOCK_SAMPLES / SAMPLE_RATE_HZ
FLOOR_WINDOW_S = 0.5
FLOOR_MARGIN_DB = 12.0
ECHO_MARGIN_DB = 6.0
MIN_FLOOR_POWER = 1e-9  # -90 dBFS: digital silence is not a floor to be 12 dB over
_FLOOR_FACTOR = 10 ** (FLOOR_MARGIN_DB / 10)
_ECHO_FACTOR = 10 ** (ECHO_MARGIN_DB / 10)
# 35 dB under the loudest 10 ms: the trailing frames of the corpus's words lose the VAD's lag
# (turn ends 562 -> 546 ms median after the true end); 30 dB cut soft final consonants up to
# the 64 ms bound (BENCHMARKS.md, "Turn-taking on real speech", 2026-11-26, sixth session)
END_RANGE_DB = 35.0
END_FLOOR_MARGIN_DB = 10.0
END_MAX_SHIFT_S = 0.064  # two VAD frames
END_SOUND_ON_BLOCKS = 2  # running after the VAD's frame at the words' level: the words go on
END_HISTORY_BLOCKS = 100  # the last second: the utterance's loudest
END_FLOOR_WINDOW_S = 3.0  # the quietest 30 ms of this long is the room's floor
_END_FLOOR_FACTOR = 10 ** (END_FLOOR_MARGIN_DB / 10)
_END_RANGE_FACTOR = 10 ** (-END_RANGE_DB / 10)


@dataclass(frozen=True)
class SoundBlock:
    """10 ms of the microphone after the echo canceller; times on the input clock."""

    start_s: float
    end_s: float
    sound: bool
    echo_free: bool = True  # nothing the speaker played can be in it (no echo bound)
    power: float = 0.0  # mean square; 0 where unknown (or deaf)


class RecentPower:
    """The mean power of the last 30 ms (three blocks): what a floor is taken from, so that one
    block's dropout is no floor. Shared by the sound gate and :class:`SpeechEnd`."""

    def __init__(self) -> None:
        self._recent: deque[float] = deque(maxlen=3)

    def clear(self) -> None:
        self._recent.clear()

    def push(self, power: float) -> float:
        """One block's mean square; returns the mean over the last three."""
        self._recent.append(power)
        return float(np.mean(self._recent))


class SoundGate:
    """Pure and stateful: blocks in capture order."""

    def __init__(self) -> None:
        self._recent = RecentPower()
        self._smoothed: deque[float] = deque(maxlen=round(FLOOR_WINDOW_S * 100))

    def reset(self) -> None:
        self._recent.clear()
        self._smoothed.clear()

    @property
    def floor_power(self) -> float:
        if not self._smoothed:
            return MIN_FLOOR_POWER
        return max(float(np.median(self._smoothed)), MIN_FLOOR_POWER)

    def block(self, power: float, echo_power: float = 0.0) -> bool:
        """``power``: mean square of the block; ``echo_power``: the loudest echo it may hold."""
        floor = self.floor_power  # from the blocks before this one
        self._smoothed.append(self._recent.push(power))
        return bool(power > floor * _FLOOR_FACTOR and power > echo_power * _ECHO_FACTOR)


class SpeechEnd:
    """Block levels in capture order; ``end`` refines where speech stopped at a pause. Pure."""

    def __init__(self) -> None:
        self._recent = RecentPower()
        self._smoothed: deque[float] = deque(maxlen=round(END_FLOOR_WINDOW_S * 100))
        self._blocks: deque[tuple[float, float]] = deque(maxlen=END_HISTORY_BLOCKS)

    def add(self, block: SoundBlock) -> None:
        """A block with no level (0: deaf, as in half-duplex over a reply) says nothing of the
        room's floor: counted there, it set the floor at digital silence and a quiet tail after
        the words was taken for speech (half-duplex turn ends 64 ms later than elsewhere)."""
        if block.power > 0.0:
            self._smoothed.append(self._recent.push(block.power))
        self._blocks.append((block.end_s, block.power))

    def resuming(self, pause_from_s: float) -> bool:
        """The latest block is sound over the pause since ``pause_from_s`` (the words' end):
        ``FLOOR_MARGIN_DB`` over the pause's median level, as the sound gate's blocks are over
        the room's; a frame or two before the VAD can say it is speech. False with fewer than
        three pause blocks to compare."""
        pause = [power for end_s, power in self._blocks if end_s > pause_from_s + 1e-9]
        if len(pause) < 4:
            return False
        floor = max(float(np.median(pause[:-1])), MIN_FLOOR_POWER)
        return pause[-1] > floor * _FLOOR_FACTOR

    def end(self, last_voiced_s: float) -> float:
        """Where speech stopped, given the end of the VAD's last voiced frame: never later,
        at most ``END_MAX_SHIFT_S`` sooner, and not past a dip the sound comes back from."""
        if not self._smoothed:
            return last_voiced_s  # no level known
        floor = max(min(self._smoothed), MIN_FLOOR_POWER)
        peak = max(power for _, power in self._blocks)
        if peak < floor * _END_FLOOR_FACTOR:
            return last_voiced_s  # nothing stands clear of the floor: the level cannot tell
        threshold = max(floor * _END_FLOOR_FACTOR, peak * _END_RANGE_FACTOR)
        goes_on = self._sound_goes_on(last_voiced_s, threshold)
        earliest_s = last_voiced_s - END_MAX_SHIFT_S
        for end_s, power in reversed(self._blocks):
            if end_s > last_voiced_s + 1e-9:
                continue
            if end_s <= earliest_s + 1e-9:
                break
            if power >= threshold or goes_on:  # the sound has not fallen away: no further back
                return end_s
        return earliest_s

    def _sound_goes_on(self, last_voiced_s: float, threshold: float) -> bool:
        """``END_SOUND_ON_BLOCKS`` blocks running, wholly after the VAD's last voiced frame, are
        at the words' level: a syllable the VAD scored under its threshold, not the words
        falling away (a rain drop is one block)."""
        run = 0
        for end_s, power in self._blocks:
            if end_s - BLOCK_S > last_voiced_s - 1e-9:
                run = run + 1 if power >= threshold else 0
                if run >= END_SOUND_ON_BLOCKS:
                    return True
        return False
