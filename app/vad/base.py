"""Voice activity: a scorer gives each 32 ms frame a speech probability; one hysteresis state
machine (:class:`Segmenter`) turns probabilities into onsets, pauses and endpoints.

Scorers are swappable (silero ONNX in the app, energy or scripted ones in tests); the timing
rules live only here:
- a frame at or above ``threshold`` starts a *candidate* at its start time;
- frames at or above the lower ``threshold - 0.15`` keep speech going (hysteresis);
- a candidate becomes an *onset* once it has lasted ``min_speech_ms``, or once
  ``SURE_FRAMES`` of its frames scored ``SURE_PROBABILITY`` or more (a short word the model
  is sure of); two quiet frames running before that drop it (clicks, coughs). One is a dip:
  a distant talker in a reverberant room scored 0.32 for one frame inside a word, and the
  candidate dropped there lost the first 1.3 s of their turn;
- after an onset, a quiet frame starts a *pause*; speech at ``threshold`` again resumes it;
  a resumption one frame long (the next frame quiet again) was a blip in the pause, not
  speech: the pause goes on from where it was (rain drops score 0.5-0.56 for one frame in a
  pause; counting the silence from them ended turns 0.3-0.5 s late). So is one frame at the
  threshold trailed by ``BLIP_WEAK_FRAMES`` under it (a thunderclap 0.34 s into a pause
  scored 0.78 then 0.49, and the turn ended 991 ms after the words). Unless the caller says
  speech after that frame ``may_be_swallowed`` (a reply plays and the echo canceller works on
  its echo: it may take a person going on for echo), where one frame still resumes;
- a pause of ``endpoint_silence_ms`` after the end of the last voiced frame is the *endpoint*.
  A hangover of at most ``HANGOVER_FRAMES`` frames under ``threshold`` (but over the lower
  one) at the end of speech is the model's probability trailing off, not speech: the silence
  is counted from before it, so the hangover does not add to the endpoint silence. (A longer
  run of such frames is quiet speech, and counts.) Frames at ``threshold`` trail the end of
  speech too: given ``end_of_speech`` (where the level fell, :class:`app.vad.sound.SpeechEnd`)
  the silence counts from there.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.settings import VadSettings

SAMPLE_RATE_HZ = 16000
FRAME_SAMPLES = 512  # silero's frame at 16 kHz
FRAME_S = FRAME_SAMPLES / SAMPLE_RATE_HZ
HYSTERESIS = 0.15
HANGOVER_FRAMES = 2
BLIP_WEAK_FRAMES = 1  # frames under ``threshold`` that may trail a blip in a pause
# A candidate the model is sure of for this many frames is an onset before ``min_speech_ms``:
# one-word answers ("two", "six") often hold only 150-250 ms over the threshold, and 23 of 300
# digits spoken alone made no turn; clicks, rain drops and the corpus's thunder and noise burst
# never reach it (BENCHMARKS.md, "Turn-taking on real speech", twelfth session).
SURE_PROBABILITY = 0.9
SURE_FRAMES = 3

VadEvent = Literal["candidate", "onset", "dropped", "paused", "resumed", "endpoint"]


class SpeechScorer(ABC):
    """Speech probability of one ``FRAME_SAMPLES`` frame at 16 kHz (frames arrive in order)."""

    @abstractmethod
    def score(self, frame: np.ndarray) -> float:
        """``frame``: [512] float32 mono in [-1, 1]; returns a probability in [0, 1]."""

    def reset(self) -> None:  # noqa: B027
        """Forget the past (stateful scorers)."""


class VadState(str, enum.Enum):
    QUIET = "quiet"
    STARTING = "starting"  # a candidate, not yet min_speech_ms long
    SPEAKING = "speaking"
    STOPPING = "stopping"  # paused after an onset; endpoint pending


@dataclass(frozen=True)
class VadParams:
    threshold: float = 0.5
    min_speech_ms: float = 250.0
    endpoint_silence_ms: float = 500.0
    pre_roll_ms: float = 300.0

    @classmethod
    def from_settings(cls, vad: VadSettings) -> VadParams:
        return cls(vad.threshold, vad.min_speech_ms, vad.endpoint_silence_ms, vad.pre_roll_ms)

    @property
    def negative_threshold(self) -> float:
        return max(0.01, self.threshold - HYSTERESIS)


@dataclass(frozen=True)
class VadFrame:
    """One scored frame (``FRAME_S`` long); times in seconds on the input clock."""

    start_s: float
    end_s: float
    probability: float


@dataclass(frozen=True)
class VadUpdate:
    """The segmenter's view after one frame; times in seconds on the input clock."""

    start_s: float
    end_s: float
    probability: float
    state: VadState
    event: VadEvent | None = None
    onset_s: float | None = None  # start of the current candidate or utterance
    last_voiced_s: float | None = None  # end of its last voiced frame
    voiced_ms: float = 0.0  # onset → last voiced frame
    silence_ms: float = 0.0  # last voiced frame → end of this frame (while STOPPING)
    may_be_blip: bool = False  # resumed on one frame at the threshold: the next may take it back


class Segmenter:
    """The hysteresis state machine; pure, one call per frame."""

    def __init__(self, params: VadParams | None = None,
                 end_of_speech: Callable[[float], float] | None = None,
                 sound_returns: Callable[[float], bool] | None = None) -> None:
        """``end_of_speech``: given the end of the last voiced frame at a pause, where the
        speech itself stopped (:class:`app.vad.sound.SpeechEnd`); the silence counts from there
        (never later than that frame, never before the onset). ``sound_returns``: given where
        the pause's silence counts from, whether sound is coming back now (no endpoint yet)."""
        self.params = params or VadParams()
        self._end_of_speech = end_of_speech
        self._sound_returns = sound_returns
        self.heard_end_s: float | None = None  # the last voiced frame's end at this pause
        self.state = VadState.QUIET
        self._onset_s: float | None = None
        self._last_voiced_s: float | None = None
        self._last_strong_s: float | None = None  # end of the last frame at ``threshold``
        self._weak_frames = 0  # voiced frames under ``threshold`` since then
        self._dipped = False  # a candidate's latest frame was quiet
        self._sure_frames = 0  # a candidate's frames at ``SURE_PROBABILITY`` or more
        self._paused_from_s: float | None = None  # a pause's last voiced end, while it may
        # still go on (the utterance resumed on a single frame so far)

    def reset(self) -> None:
        self.heard_end_s = None
        self.state = VadState.QUIET
        self._onset_s = self._last_voiced_s = self._last_strong_s = None
        self._weak_frames = 0
        self._paused_from_s = None

    def begin(self, onset_s: float, last_voiced_s: float) -> None:
        """Take speech found by other evidence (a weakly voiced word within sound that
        stopped a reply) as an utterance that began at ``onset_s``."""
        self.state = VadState.SPEAKING
        self._onset_s, self._last_voiced_s = onset_s, last_voiced_s
        self._last_strong_s, self._weak_frames = last_voiced_s, 0
        self._paused_from_s = None

    def step(self, frame: VadFrame, may_be_swallowed: bool = False) -> VadUpdate:
        return self.update(frame.probability, frame.start_s, frame.end_s, may_be_swallowed)

    def update(self, probability: float, start_s: float, end_s: float,
               may_be_swallowed: bool = False) -> VadUpdate:
        """One frame; ``may_be_swallowed``: speech after it may not show (see the module
        docstring: a one-frame resumption is then no blip)."""
        event = self._step(probability, start_s, end_s, may_be_swallowed)
        onset, last = self._onset_s, self._last_voiced_s
        voiced_ms = (last - onset) * 1000 if onset is not None and last is not None else 0.0
        pausing = event == "endpoint" or self.state == VadState.STOPPING
        silence_ms = (end_s - last) * 1000 if pausing and last is not None else 0.0
        update = VadUpdate(start_s, end_s, probability, self.state, event, onset, last,
                           voiced_ms, silence_ms,
                           self.state == VadState.SPEAKING and self._paused_from_s is not None)
        if self.state == VadState.QUIET:
            self._onset_s = self._last_voiced_s = None
        return update

    def _step(self, p: float, start_s: float, end_s: float,
              may_be_swallowed: bool) -> VadEvent | None:
        params = self.params
        voiced = p >= params.negative_threshold
        if self.state == VadState.QUIET:
            if p < params.threshold:
                return None
            self._onset_s, self._last_voiced_s = start_s, end_s
            self._last_strong_s, self._weak_frames = end_s, 0
            self._dipped = False
            self._sure_frames = int(p >= SURE_PROBABILITY)
            self.state = VadState.STARTING
            return self._confirm_onset(end_s) or "candidate"
        if self.state == VadState.STARTING:
            if not voiced:
                if not self._dipped:
                    self._dipped = True
                    return None
                self.state = VadState.QUIET
                return "dropped"
            self._dipped = False
            self._sure_frames += p >= SURE_PROBABILITY
            self._voiced(p, end_s)
            return self._confirm_onset(end_s)
        if self.state == VadState.SPEAKING:
            blip_from_s, self._paused_from_s = self._paused_from_s, None
            if voiced:
                if (blip_from_s is not None and p < params.threshold
                        and self._weak_frames < BLIP_WEAK_FRAMES):
                    self._paused_from_s = blip_from_s  # still one frame at the threshold
                self._voiced(p, end_s)
                return None
            self.state = VadState.STOPPING
            if blip_from_s is not None:  # one frame of "speech" in a pause: the pause goes on
                self._last_voiced_s = blip_from_s
                return self._endpoint_if_due(end_s) or "paused"
            if 0 < self._weak_frames <= HANGOVER_FRAMES:  # the probability trailing off
                self._last_voiced_s = self._last_strong_s
            self._pause_from_end_of_speech()
            return self._endpoint_if_due(end_s) or "paused"
        # STOPPING
        if p >= params.threshold:
            self._paused_from_s = None if may_be_swallowed else self._last_voiced_s
            self._voiced(p, end_s)
            self.state = VadState.SPEAKING
            return "resumed"
        return self._endpoint_if_due(end_s)

    def _pause_from_end_of_speech(self) -> None:
        assert self._last_voiced_s is not None and self._onset_s is not None
        self.heard_end_s = self._last_voiced_s
        if self._end_of_speech is not None:
            end_s = min(self._end_of_speech(self._last_voiced_s), self._last_voiced_s)
            self._last_voiced_s = max(end_s, self._onset_s)

    def _voiced(self, p: float, end_s: float) -> None:
        self._last_voiced_s = end_s
        if p >= self.params.threshold:
            self._last_strong_s, self._weak_frames = end_s, 0
        else:
            self._weak_frames += 1

    def _confirm_onset(self, end_s: float) -> VadEvent | None:
        assert self._onset_s is not None
        if ((end_s - self._onset_s) * 1000 + 1e-6 >= self.params.min_speech_ms
                or self._sure_frames >= SURE_FRAMES):
            self.state = VadState.SPEAKING
            return "onset"
        return None

    def _endpoint_if_due(self, end_s: float) -> VadEvent | None:
        assert self._last_voiced_s is not None
        if ((end_s - self._last_voiced_s) * 1000 + 1e-6 >= self.params.endpoint_silence_ms
                and not (self._sound_returns and self._sound_returns(self._last_voiced_s))):
            self.state = VadState.QUIET
            return "endpoint"
        return None
