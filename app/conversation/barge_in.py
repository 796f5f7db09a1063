"""Barge-in: what speech during a reply does (part of the turn controller, see
:mod:`app.conversation.turns`). Pure: decisions depend on frame times only.

While a reply is pending or playing, a speech candidate ducks the reply; once it has lasted
``barge_in_min_speech_ms`` the reply is interrupted (player fade-out and engine cancel, done by
the pipeline at once) and the state is INTERRUPTED until the VAD confirms the onset, which
starts the new turn with its pre-roll.

The duck comes at the first voiced frame; if the speech is not confirmed (a cough, a door, or a
burst of echo the canceller let through) the volume comes back and the reply carries on. Every
such duck-and-restore, and every barge-in that stopped a reply but then turned out not to be
speech (no onset followed), is a *false interruption*. While the echo canceller is still
warming up (``echo_guard``) speech during a reply only ducks it: it is confirmed once the
guard is over, if the person is still talking. Speech that stops for less than
``DIP_TOLERANCE_S`` and goes on is one utterance: a dip keeps the duck and the first onset.
"""

from __future__ import annotations

from app.conversation.turn_actions import FalseInterruption
from app.conversation.turn_state import TurnState
from app.vad.base import VadState, VadUpdate

DIP_TOLERANCE_S = 0.15  # speech that stops for less than this and goes on is one utterance


class BargeInPolicy(TurnState):
    def _idle_vad(self, update: VadUpdate, now_s: float, echo_guard: bool) -> None:
        voiced = update.onset_s is not None and update.state in (VadState.STARTING,
                                                                 VadState.SPEAKING)
        if not voiced:
            pending = self._interrupted or (self._reply_turn is not None and self._ducked)
            if pending and self._dip_over(update):
                self._not_confirmed(update, now_s)
            return
        onset = self._episode_onset(update)
        if self._reply_turn is not None:
            if not self.params.barge_in:
                return
            self._set_duck(self._reply_audible)
            spoken_ms = (self._episode_end_s - onset) * 1000
            if not echo_guard and spoken_ms + 1e-6 >= self.params.barge_in_min_speech_ms:
                self._interrupted_turn = self._reply_turn or 0
                self._interrupt(onset, now_s, "speech")
                self._interrupted = True
        confirmed = update.event == "onset" or (self._interrupted
                                                and update.state == VadState.SPEAKING)
        if confirmed and self._reply_turn is None:
            self._interrupted = False
            self._start_turn(onset, onset - self.params.pre_roll_ms / 1000)
            self._last_voiced_s = update.last_voiced_s or update.end_s

    def _episode_onset(self, update: VadUpdate) -> float:
        """Onset of the speech this voiced frame belongs to: speech that starts again within
        ``DIP_TOLERANCE_S`` of earlier speech continues it (a dip in the VAD's probability
        must not move the turn's start, or the turn's audio would miss the first words)."""
        assert update.onset_s is not None
        start = update.onset_s
        if (self._episode_start_s is not None
                and start - self._episode_end_s <= DIP_TOLERANCE_S + 1e-9):
            start = min(start, self._episode_start_s)
        self._episode_start_s = start
        self._episode_end_s = max(update.last_voiced_s or update.end_s, start)
        return start

    def _dip_over(self, update: VadUpdate) -> bool:
        return (self._episode_start_s is None
                or update.end_s - self._episode_end_s >= DIP_TOLERANCE_S - 1e-9)

    def _not_confirmed(self, update: VadUpdate, now_s: float) -> None:
        """Speech that ducked or stopped a reply ended before it was confirmed."""
        onset = self._episode_start_s if self._episode_start_s is not None else update.start_s
        if self._ducked and self._reply_turn is not None:
            self._actions.append(FalseInterruption(self._reply_turn, onset, now_s, False))
            if update.state == VadState.STOPPING:
                self._restart_vad()  # what was heard needs a fresh onset to count
        elif self._interrupted:
            self._actions.append(FalseInterruption(self._interrupted_turn, onset, now_s, True))
        self._set_duck(False)
        self._interrupted = False
        self._episode_start_s = None
