"""Scripted VAD frames into the turn controller (no audio, no threads), several per pump.

The pipeline hands the controller every frame scored since its last pump in one call, processed
at one time (``now_s``); how many depends on the device block size and on how busy the machine
is. ``Script`` does the same with ``frames_per_pump`` frames per call (default
``FRAMES_PER_PUMP``, which the controller tests run at 1 and at several, see
``frames_per_pump`` in their modules).
"""

from __future__ import annotations

from app.conversation import turns as t
from app.events import ConversationState
from app.vad.base import FRAME_S, SURE_PROBABILITY, VadFrame
from app.vad.sound import SoundBlock

# speech over the threshold but under the VAD's sure probability (a candidate becomes an onset
# after vad.min_speech_ms); SURE: a frame that counts towards a short word's onset
SPEECH, QUIET, SURE = 0.8, 0.05, SURE_PROBABILITY
# the end-of-turn model on, with round numbers (test_smart_endpoint.py, test_unsure_end.py)
SMART = {"smart_endpoint": True, "speculative_start": False, "smart_pause_ms": 120.0,
         "endpoint_silence_ms": 500.0, "smart_long_silence_ms": 1800.0,
         "smart_threshold": 0.85, "smart_unfinished_threshold": 0.2}
BLOCK_S = 0.01  # a sound block
FRAMES_PER_PUMP = 1


class Script:
    """Feeds per-frame probabilities into the controller and logs its actions by frame."""

    def __init__(self, frames_per_pump: int | None = None, **params: object) -> None:
        self.controller = t.TurnController(t.TurnParams(**params))  # type: ignore[arg-type]
        self.per_pump = frames_per_pump or FRAMES_PER_PUMP
        self.frame = 0
        self.log: list[tuple[int, t.Action]] = []
        self.guard = False  # the echo canceller's warm-up guard
        self.settled = True  # the echo canceller has converged (or there is no echo)
        self._pumped_at: dict[int, float] = {}  # frame count → time of the pump that took it
        self.sound = False  # what the sound gate says from now on (blocks go with the frames)
        self.echo_free = True  # no echo of the speaker can be in the sound (the gate says)
        self.power = 0.0  # the blocks' level (mean square) from now on; 0: none known
        self._blocks = 0  # sound blocks handed over so far

    @property
    def now(self) -> float:
        return self.frame * FRAME_S

    def frames(self, probability: float, count: int) -> Script:
        for first in range(0, count, self.per_pump):
            batch = [VadFrame((self.frame + i) * FRAME_S, (self.frame + i + 1) * FRAME_S,
                              probability) for i in range(min(self.per_pump, count - first))]
            self.frame += len(batch)
            for frame in batch:
                self._pumped_at[round(frame.end_s / FRAME_S)] = self.now
            self._keep(self.controller.on_frames(batch, self.now, echo_guard=self.guard,
                                                 echo_settled=self.settled,
                                                 sound=self._sound_until(self.now)))
        return self

    def blocks(self, sound: bool, count: int) -> Script:
        """Sound blocks alone (10 ms each), one per pump, before the next frame is complete;
        ``self.sound`` stays what the last one said."""
        self.sound = sound
        for _ in range(count):
            block = SoundBlock(self._blocks * BLOCK_S, (self._blocks + 1) * BLOCK_S, sound,
                               self.echo_free, self.power)
            self._blocks += 1
            self._keep(self.controller.on_frames([], block.end_s, echo_guard=self.guard,
                                                 echo_settled=self.settled, sound=[block]))
        return self

    def _sound_until(self, end_s: float) -> list[SoundBlock]:
        out = []
        while (self._blocks + 1) * BLOCK_S <= end_s + 1e-9:
            out.append(SoundBlock(self._blocks * BLOCK_S, (self._blocks + 1) * BLOCK_S,
                                  self.sound, self.echo_free, self.power))
            self._blocks += 1
        return out

    def call(self, method: str, *args: object) -> Script:
        self._keep(getattr(self.controller, method)(*args, self.now))
        return self

    def pumped_at(self, frame_end: int) -> float:
        """When the frame ending at ``frame_end * FRAME_S`` was processed."""
        return self._pumped_at[frame_end]

    def _keep(self, actions: list[t.Action]) -> None:
        self.log += [(self.frame, a) for a in actions]

    def of(self, kind: type) -> list:
        return [a for _, a in self.log if isinstance(a, kind)]

    def states(self) -> list[ConversationState]:
        return [a.state for a in self.of(t.StateSet)]

    def replying(self) -> Script:
        """Turn 1 spoken and answered; its reply is audible now."""
        return self.frames(SPEECH, 12).frames(QUIET, 17).call("reply_audible", 1).frames(
            QUIET, 5)
