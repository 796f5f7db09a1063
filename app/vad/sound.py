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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

BLOCK_SAMPLES = 160  # 10 ms at 16 kHz
FLOOR_WINDOW_S = 0.5
FLOOR_MARGIN_DB = 12.0
ECHO_MARGIN_DB = 6.0
MIN_FLOOR_POWER = 1e-9  # -90 dBFS: digital silence is not a floor to be 12 dB over


@dataclass(frozen=True)
class SoundBlock:
    """10 ms of the microphone after the echo canceller; times on the input clock."""

    start_s: float
    end_s: float
    sound: bool
    echo_free: bool = True  # nothing the speaker played can be in it (no echo bound)


class SoundGate:
    """Pure and stateful: blocks in capture order."""

    def __init__(self) -> None:
        self._recent: deque[float] = deque(maxlen=3)  # powers of the last 30 ms
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
        self._recent.append(power)
        self._smoothed.append(float(np.mean(self._recent)))
        return bool(power > floor * 10 ** (FLOOR_MARGIN_DB / 10)
                    and power > echo_power * 10 ** (ECHO_MARGIN_DB / 10))
