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
  far end could make; the verdict holds for ``HANGOVER_S`` (speech has dips). The room's noise
  is in that bound wherever an echo level is learnt (from the microphone, noise and all);
  where the correlation finds no echo in the microphone's sound, none is learnt, and that
  finding alone counts as a person over the reply (:mod:`app.audio.aec`). (A
  check against a noise floor of its own never acted: that floor started at -100 dBFS and
  rose 3 dB/s, so during a warm-up, the only time the verdict is used, it stood under any
  room; made to act, it cost turns on the corpus: BENCHMARKS.md, seventh session.)

Until the far end has played ``MAX_DELAY_S`` (an echo that late must have shown) the echo
return level is not known yet: a conservative ``DEFAULT_ERL_DB`` stands in for it (an echo as
loud as the far end itself), so a person clearly over everything the speaker plays is heard
from the first reply on.

``echo_bound``: the loudest echo power that can be in the microphone now (``raw``) or in the
canceller's output (its residual, learnt the same way, ``DEFAULT_ERL_DB`` until then); the
sound gate (:mod:`app.vad.sound`) wants sound well over it.

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
DEFAULT_ERL_DB = 0.0  # until learnt: the echo may be as loud as the far end
SILENT_POWER = 1e-10  # -100 dBFS: a person is at least 10 dB over it
RESIDUAL_DECAY_DB_PER_S = 3.0  # the canceller's residual falls as it converges


class NearEndDetector:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._far_powers: deque[float] = deque(maxlen=round(MAX_DELAY_S * 100))
        self._far_active_frames = 0
        self.erl = 0.0  # echo power / far-end bound, learnt (linear)
        self.residual = 0.0  # the canceller's output / far-end bound, learnt (linear)
        self._hold = 0  # frames the near-end verdict still holds
        self.near_end = False

    @property
    def learnt(self) -> bool:
        return self._far_active_frames >= round(MAX_DELAY_S * 100)

    @property
    def far_bound(self) -> float:
        """The loudest far-end frame power that can still be coming back."""
        return max(self._far_powers, default=0.0)

    def echo_bound(self, raw: bool, observed: bool = False) -> float:
        """The loudest echo power in the microphone (``raw``) or in the canceller's output;
        ``observed``: what came back so far is all there is (correlation found the
        microphone's sound to be no echo), no conservative default."""
        ratio = self.erl if raw else self.residual
        return (ratio if observed else self._until_learnt(ratio)) * self.far_bound

    def _until_learnt(self, ratio: float) -> float:
        """A learnt echo ratio, or at least the conservative default while it is not learnt."""
        return ratio if self.learnt else max(ratio, 10 ** (DEFAULT_ERL_DB / 10))

    def update(self, near: np.ndarray, far: np.ndarray, talking: bool = False,
               out: np.ndarray | None = None) -> None:
        """Whole 10 ms frames of microphone and of the far end aligned to it (and of the
        canceller's output, ``out``); ``talking``: a person is known to be talking (do not
        learn the echo level from these frames)."""
        count = len(near) // FRAME
        near_p = _powers(near, count)
        far_p = _powers(far, count)
        out_p = _powers(out, count) if out is not None else near_p
        for mic, played, left in zip(near_p.tolist(), far_p.tolist(), out_p.tolist(),
                                     strict=True):
            self._frame(mic, played, talking)
            self._learn_residual(left, played, talking)

    def _learn_residual(self, left: float, played: float, talking: bool) -> None:
        bound = self.far_bound
        if bound > FAR_ACTIVE_POWER and not self.near_end and not talking:
            decay = 10 ** (-RESIDUAL_DECAY_DB_PER_S / 1000)
            self.residual = max(self.residual * decay, left / bound)

    def _frame(self, mic: float, played: float, talking: bool) -> None:
        self._far_powers.append(played)
        bound = max(self._far_powers)
        if played > FAR_ACTIVE_POWER:
            self._far_active_frames += 1
        margin = 10 ** (MARGIN_DB / 10)
        echo = self._until_learnt(self.erl) * bound
        if bound > FAR_ACTIVE_POWER and mic > margin * max(echo, SILENT_POWER):
            self._hold = round(HANGOVER_S * 100)
        elif self._hold:
            self._hold -= 1
        self.near_end = self._hold > 0
        if bound > FAR_ACTIVE_POWER and not self.near_end and not talking:
            self.erl = max(self.erl * 10 ** (-ERL_DECAY_DB_PER_S / 1000), mic / bound)


def _powers(pcm: np.ndarray, count: int) -> np.ndarray:
    """Mean square of each of the first ``count`` 10 ms frames, [count]."""
    return np.mean(np.square(pcm[:count * FRAME].reshape(count, FRAME), dtype=np.float64), axis=1)
