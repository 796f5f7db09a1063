"""Semantic end of turn in the turn controller (issue 23; see :mod:`app.conversation.turns`).

At a pause of ``smart_pause_ms`` the controller asks the end-of-turn model once
(``EndpointQuery``); the pipeline runs it off the voice loop and hands the verdict back
(``endpoint_verdict``). Finished (at or above ``smart_threshold``) ends the turn now;
otherwise the segmenter's own endpoint (``smart_long_silence_ms``) or the next words decide. No
verdict by ``endpoint_silence_ms``: silence decides, as without the model.
"""

from __future__ import annotations

from app.conversation.turn_actions import Action, EndpointQuery
from app.conversation.turn_state import TurnState
from app.vad.base import VadUpdate


class EndOfTurnPolicy(TurnState):
    def endpoint_verdict(self, turn_id: int, pause: int, probability: float,
                         now_s: float) -> list[Action]:
        """The end-of-turn model's answer to ``EndpointQuery(turn_id, pause)``: finished (at
        or above the threshold) ends the turn now if the pause is still going on."""
        if turn_id == self._user_turn and pause == self._pause and self._paused:
            self._verdict = probability
            if probability >= self.params.smart_threshold:
                self._end_turn(self._last_voiced_s, now_s, "model")
                self._restart_vad()  # the segmenter's own endpoint is still to come
        return self._flush(now_s)

    def _smart_pause(self, update: VadUpdate, now_s: float) -> bool:
        """Ask the model once per pause; end by silence if it has not answered by the short
        silence (True: the turn ended)."""
        assert self._user_turn is not None
        silence = update.silence_ms + 1e-6
        if self._asked_pause != self._pause and silence >= self.params.smart_pause_ms:
            self._asked_pause = self._pause
            self._actions.append(EndpointQuery(self._user_turn, self._pause, now_s))
        elif self._verdict is None and silence >= self.params.endpoint_silence_ms:
            self._end_turn(self._last_voiced_s, now_s)  # the model is late: silence decides
            self._restart_vad()
            return True
        return False
