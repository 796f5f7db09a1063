"""Is a person talking over the reply? Decided from the far-end reference, so it works while
the echo canceller is still warming up (issue 14).

Every 10 ms frame of microphone (before the canceller) and aligned far end:
- the far end's loudest frame over the last ``MAX_DELAY_S`` bounds what can be coming back now
  (an echo arrives at most that late);
- the echo return level (``erl``: microphone power over that bound) is learnt from frames with
  no person talking, as a max-hold that decays ``ERL_DECAY_DB_PER_S`` (a volume turned down);
  it is frozen while a person talks (``talking``: this detector's verdict, or the correlation
  detector's "sound that is no echo");
- a frame is *near end* when the microphone holds ``MARGIN_DB`` more than the loudest echo the
  far end could make, and more than the noise floor by the same margin; the verdict holds for
  ``HANGOVER_S`` (speech has dips).

Until the far end has played ``MAX_DELAY_S`` nothing is near end (the echo path is unknown).
Measured in ``bench turn-taking``: see docs/turn-taking.md.
"""

from __future__ import annotations

from collections import deque

import numpy as np

FRAME = 160  # 10 ms at 16 kHz
MAX_DELAY_S = 0.4
MARGIN_DB = 10.0
HANGOVER_S = 0.12
ERL_DECAY_DB_PER_S = 1.0
FAR_ACTIVE_POWER = 10 ** (-55 / 10)
FLOOR_RISE_DB_PER_S = 3.0


class NearEndDetector:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._far_powers: deque[float] = deque(maxlen=round(MAX_DELAY_S * 100))
        self._far_active_frames = 0
        self.erl = 0.0  # echo power / far-end bound, learnt (linear)
        self.floor = 1e-10  # microphone noise floor (power)
        self._hold = 0  # frames the near-end verdict still holds
        self.near_end = False

    @property
    def learnt(self) -> bool:
        return self._far_active_frames >= round(MAX_DELAY_S * 100)

    def update(self, near: np.ndarray, far: np.ndarray, talking: bool = False) -> None:
        """Whole 10 ms frames of microphone and of the far end aligned to it; ``talking``: a
        person is known to be talking (do not learn the echo level from these frames)."""
        count = len(near) // FRAME
        near_p = np.mean(np.square(near[:count * FRAME].reshape(count, FRAME),
                                   dtype=np.float64), axis=1)
        far_p = np.mean(np.square(far[:count * FRAME].reshape(count, FRAME),
                                  dtype=np.float64), axis=1)
        for mic, played in zip(near_p.tolist(), far_p.tolist(), strict=True):
            self._frame(mic, played, talking)

    def _frame(self, mic: float, played: float, talking: bool) -> None:
        self._far_powers.append(played)
        bound = max(self._far_powers)
        if played > FAR_ACTIVE_POWER:
            self._far_active_frames += 1
        self.floor = min(mic, self.floor * 10 ** (FLOOR_RISE_DB_PER_S / 1000))
        margin = 10 ** (MARGIN_DB / 10)
        loud = mic > margin * max(self.floor, 1e-10)
        if self.learnt and loud and bound > FAR_ACTIVE_POWER and mic > margin * self.erl * bound:
            self._hold = round(HANGOVER_S * 100)
        elif self._hold:
            self._hold -= 1
        self.near_end = self._hold > 0
        if bound > FAR_ACTIVE_POWER and not self.near_end and not talking:
            self.erl = max(self.erl * 10 ** (-ERL_DECAY_DB_PER_S / 1000), mic / bound)
