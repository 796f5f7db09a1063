"""Does the microphone hear the speaker, and how late? (Online, from the signals themselves.)

Energy cannot tell an echo from a person talking over the reply; correlation can: an echo is the
far end filtered by the room, a person is not. Every 100 ms while the far end plays, the last
0.25 s of the microphone is matched against the far end at every lag from 0 to 0.4 s
(normalised cross-correlation, one FFT):
- peak ≥ ``ECHO_NCC`` at the same lag (± 2 ms) as the previous such peak: an echo vote
  (measured: 0.6–0.8 for echoes of speech through the simulated room at 0 to -20 dB, a few
  dips to 0.4 between words, always at the echo's delay). A single high peak is not enough:
  two different sentences in the same synthetic voice reached 0.63 at some lag, but never
  twice at the same one;
- peak < ``NO_ECHO_NCC``, or a microphone 45 dB below the far end: a no-echo vote (measured:
  ≤ 0.2 for a person talking over a reply, rarely up to 0.37, which then gives no vote);
- in between: no vote.

Verdicts are asymmetric, because taking an echo for silence makes the app interrupt itself,
while the other mistake only costs some double-talk quality: one echo vote says "echo" (two
once the verdict was "no echo"); "no echo" needs two votes in a row after the far end has played
long enough for any echo up to 0.4 s late to have shown (0.65 s), or twenty in a row (2 s of
playback) to overturn an "echo" verdict (a headset put on). ``prior`` (the acoustic check's
finding for the device pair) answers until the first verdict.

``sound_without_echo`` is the latest evaluation alone (0.1 s fresh): the microphone holds sound
that does not correlate with the far end (a person talking over the reply), which lets the
warm-up guard confirm a barge-in before the verdict. (A silent microphone does not count: the
echo may simply not have arrived yet.) While the canceller warms up, the caller asks for an
``urgent`` look every ``URGENT_EVERY`` samples (20 ms) instead of every 0.1 s, so a person
talking over the session's first reply is told from the echo sooner.
Urgent looks that cannot tell keep what the last look found; so does a regular look where the
microphone is rising and the rise alone (its last 40 ms) correlates under 0.5 with the far end
at every lag: over the whole window a person's onset and an echo's arrival both correlate at
0.3-0.5, over the rise's own frames an echo is an echo.

Sound that was no echo and now matches the far end at one lag (an urgent look, or a regular
one's first high peak) is *undecided*: a person's first syllable matching the reply's first
milliseconds by chance (0.57 for a German talker's first syllable over the start of a reply
in a synthetic voice) looks exactly like an echo 0.3 s late arriving. It is not sound without
echo (the canceller's output is used) and teaches no echo level; the next look tells: an echo
comes back at its lag, a chance match has gone from it (under ``MATCH_GONE_NCC``), and then it
is sound without echo again, 20 ms later instead of when the whole window stopped matching
(60 ms).
"""

from __future__ import annotations

import numpy as np

RATE_HZ = 16000
WINDOW = 4000  # 0.25 s of microphone per evaluation
MAX_LAG = 6400  # echo delays up to 0.4 s
EVALUATE_EVERY = 1600  # samples (0.1 s)
URGENT_EVERY = 320  # samples (20 ms)
FFT_SIZE = 1 << int(np.ceil(np.log2(WINDOW + MAX_LAG)))
ECHO_NCC = 0.5
SAME_LAG = 32  # samples (2 ms)
NO_ECHO_NCC = 0.25
MATCH_GONE_NCC = 0.25  # a match at one lag has gone where it fell under this (see ``undecided``)
SILENT_MIC_RATIO = 10 ** (-45 / 10)  # microphone energy vs far end: nothing comes back
FAR_ACTIVE_POWER = 10 ** (-55 / 10)  # mean square of an active far end (-55 dBFS)
NO_ECHO_VOTES = 2
OVERTURN_ECHO_VOTES = 20
OVERTURN_NO_ECHO_VOTES = 2
RISE_SAMPLES = 640  # a microphone rising over its last 40 ms ...
RISE_DB = 6.0  # ... this far over the window's median 10 ms power ...
NO_ECHO_RISE_NCC = 0.5  # ... that correlates under this with the far end at every lag
RISE_FFT_SIZE = 1 << int(np.ceil(np.log2(RISE_SAMPLES + MAX_LAG)))


class EchoDetector:
    def __init__(self) -> None:
        self.prior: bool | None = None
        self.clear()

    def clear(self) -> None:
        """Forget everything heard (new devices, new alignment); the prior stays."""
        self._near = np.zeros(WINDOW + MAX_LAG, np.float32)
        self._far = np.zeros(WINDOW + MAX_LAG, np.float32)
        self._since_evaluation = 0
        self._since_urgent = 0
        self._far_active_samples = 0
        self._verdict: bool | None = None
        self._run_kind: bool | None = None  # the kind of the current run of votes ...
        self._run_length = 0  # ... and its length
        self.delay_ms: float | None = None  # from the latest echo vote
        self.last_ncc = 0.0
        self._peak_lag: int | None = None  # lag of the previous high peak
        self.sound_without_echo = False  # what the latest evaluation found
        # the lag at which a sound that was no echo matched the far end in a look that cast
        # no vote: a person's onset or an echo arriving (see ``undecided``)
        self._chance_lag: int | None = None
        self.told = 0  # looks that told echo from no echo (a silent microphone: no echo)

    @property
    def undecided(self) -> bool:
        """Sound that was no echo matched the far end at one lag in the latest look, one that
        cast no vote: the first syllable of a person talking over the reply (by chance) or an
        echo arriving; the next look tells (an echo keeps its lag, a chance match does not)."""
        return self._chance_lag is not None

    @property
    def echo_heard(self) -> bool | None:
        return self.prior if self._verdict is None else self._verdict

    def add(self, near: np.ndarray, far: np.ndarray, far_active_samples: int,
            urgent: bool = False) -> None:
        """The microphone and the aligned far end (same length, 16 kHz), and how many of these
        samples were far-active; ``urgent``: evaluate sooner (see the module docstring)."""
        count = min(len(near), len(self._near))
        self._near = np.concatenate([self._near[count:], near[-count:]])
        self._far = np.concatenate([self._far[count:], far[-count:]])
        self._far_active_samples += far_active_samples
        self._since_evaluation += len(near)
        regular = self._since_evaluation >= EVALUATE_EVERY
        if not (regular or (urgent and self._since_urgent + len(near) >= URGENT_EVERY)):
            self._since_urgent += len(near)
            return
        self._since_urgent = 0
        if regular:
            self._since_evaluation = 0
        far_power = float(np.mean(np.square(self._far[-WINDOW:])))
        if far_power < FAR_ACTIVE_POWER:
            self.sound_without_echo, self._chance_lag = False, None
            return
        vote = self._evaluate(far_power, regular)
        if vote is not None or self.last_ncc >= ECHO_NCC:  # it told echo from no echo
            self.told += 1
        if regular:  # urgent looks only say what the microphone holds now; they cast no vote
            self._vote(vote)

    def _evaluate(self, far_power: float, regular: bool = True) -> bool | None:
        near = self._near[-WINDOW:].astype(np.float64)
        near_norm = float(np.linalg.norm(near))
        was, self.sound_without_echo = self.sound_without_echo, False
        if near_norm**2 / WINDOW < far_power * SILENT_MIC_RATIO:
            self._chance_lag = None
            return False
        far = self._far.astype(np.float64)  # [MAX_LAG + WINDOW], ending with the mic window
        ncc = _ncc(near, far, FFT_SIZE)  # [MAX_LAG + 1]
        best = int(np.argmax(ncc))
        self.last_ncc = float(ncc[best])
        # The look after a match of sound that was no echo tells: an echo comes back at its
        # lag for as long as the far end plays (0.6-0.8, see above); a chance match is gone.
        chance = (self._chance_lag is not None
                  and _near_lag(ncc, self._chance_lag) < MATCH_GONE_NCC)
        self._chance_lag = None
        if self.last_ncc >= ECHO_NCC:
            if regular:
                previous, self._peak_lag = self._peak_lag, best
                if previous is not None and abs(previous - best) <= SAME_LAG:
                    self.delay_ms = (MAX_LAG - best) * 1000 / RATE_HZ
                    return True  # the second high peak at this lag: an echo vote
            self._chance_lag = best if was else None
            return None  # an urgent look, or the first high peak at this lag: no vote
        if regular:
            self._peak_lag = None
        no_echo = self.last_ncc < NO_ECHO_NCC
        # A look that cannot tell keeps what the last look found if it was urgent (urgent looks
        # may only find a person). A regular one does too where the microphone is rising and
        # the rise alone, matched over its own few frames, is no echo either: the window's
        # energy sits in those frames, so the whole window correlates at 0.3-0.5 for a
        # person's onset and for an echo's arrival alike (issue 14: the person's first 50-100
        # ms went to the not yet converged canceller, which swallowed them).
        keep = was and (not regular or self._rise_is_no_echo(near, far))
        self.sound_without_echo = no_echo or keep or chance
        return False if no_echo else None

    def _rise_is_no_echo(self, near: np.ndarray, far: np.ndarray) -> bool:
        if not _rising(near):
            return False
        rise = near[-RISE_SAMPLES:]
        _, ncc = _peak_ncc(rise, far[-(RISE_SAMPLES + MAX_LAG):], RISE_FFT_SIZE)
        return ncc < NO_ECHO_RISE_NCC

    def _vote(self, vote: bool | None) -> None:
        if vote is None:
            return
        if vote == self._run_kind:
            self._run_length += 1
        else:
            self._run_kind, self._run_length = vote, 1
        if vote:
            needed = OVERTURN_NO_ECHO_VOTES if self._verdict is False else 1
        elif self._verdict is True:
            needed = OVERTURN_ECHO_VOTES
        elif self._far_active_samples < WINDOW + MAX_LAG:
            return  # an echo up to 0.4 s late could not have shown yet
        else:
            needed = NO_ECHO_VOTES
        if self._run_length >= needed:
            self._verdict = vote


def _ncc(near: np.ndarray, far: np.ndarray, fft_size: int) -> np.ndarray:
    """The normalised cross-correlation of ``near`` [W] with ``far`` [MAX_LAG + W] (which ends
    with ``near``'s last sample) at every lag k into ``far``: [MAX_LAG + 1] (the echo delay is
    MAX_LAG - k)."""
    width = len(near)
    spectrum = np.fft.rfft(far, fft_size) * np.conj(np.fft.rfft(near, fft_size))
    corr = np.fft.irfft(spectrum, fft_size)[:MAX_LAG + 1]  # corr[k] = near · far[k:k+W]
    energy = np.concatenate([[0.0], np.cumsum(far**2)])
    far_norms = np.sqrt(np.maximum(energy[width:] - energy[:MAX_LAG + 1], 0.0))
    return np.abs(corr) / (float(np.linalg.norm(near)) * far_norms + 1e-9)


def _peak_ncc(near: np.ndarray, far: np.ndarray, fft_size: int) -> tuple[int, float]:
    """The lag (into ``far``) and value of the largest normalised cross-correlation (``_ncc``)."""
    ncc = _ncc(near, far, fft_size)
    best = int(np.argmax(ncc))
    return best, float(ncc[best])


def _near_lag(ncc: np.ndarray, lag: int) -> float:
    """The largest of ``ncc`` within ``SAME_LAG`` of ``lag`` (where an echo's peak stays)."""
    return float(np.max(ncc[max(0, lag - SAME_LAG):lag + SAME_LAG + 1]))


def _rising(near: np.ndarray) -> bool:
    """The window's ([WINDOW] float64) last ``RISE_SAMPLES`` are ``RISE_DB`` over its median
    10 ms power: an onset."""
    powers = np.mean(np.square(near.reshape(-1, 160)), axis=1)  # [25]
    recent = powers[-RISE_SAMPLES // 160:]
    return bool(np.mean(recent) > np.median(powers) * 10 ** (RISE_DB / 10))
