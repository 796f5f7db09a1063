"""Scripted VAD frames through a real Segmenter into the turn controller (no audio, no threads)."""

from __future__ import annotations

from app.conversation import turns as t
from app.events import ConversationState
from app.vad.base import FRAME_S, Segmenter, VadParams

SPEECH, QUIET = 0.9, 0.05


class Script:
    """Feeds per-frame probabilities into the controller and logs its actions by frame."""

    def __init__(self, **params: object) -> None:
        self.controller = t.TurnController(t.TurnParams(**params))  # type: ignore[arg-type]
        self.segmenter = Segmenter(VadParams())
        self.frame = 0
        self.log: list[tuple[int, t.Action]] = []
        self.guard = False  # the echo canceller's warm-up guard

    @property
    def now(self) -> float:
        return self.frame * FRAME_S

    def frames(self, probability: float, count: int) -> Script:
        for _ in range(count):
            update = self.segmenter.update(probability, self.now, self.now + FRAME_S)
            self.frame += 1
            self._keep(self.controller.on_vad(update, self.now, echo_guard=self.guard))
        return self

    def call(self, method: str, *args: object) -> Script:
        self._keep(getattr(self.controller, method)(*args, self.now))
        return self

    def _keep(self, actions: list[t.Action]) -> None:
        self.log += [(self.frame, a) for a in actions]
        if any(isinstance(a, t.VadRestarted) for a in actions):
            self.segmenter.reset()  # what the pipeline does

    def of(self, kind: type) -> list:
        return [a for _, a in self.log if isinstance(a, kind)]

    def states(self) -> list[ConversationState]:
        return [a.state for a in self.of(t.StateSet)]

    def replying(self) -> Script:
        """Turn 1 spoken and answered; its reply is audible now."""
        return self.frames(SPEECH, 12).frames(QUIET, 17).call("reply_audible", 1).frames(
            QUIET, 5)
