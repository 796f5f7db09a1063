"""Semantic end of turn in the turn controller (issue 23; see :mod:`app.conversation.turns`).

At a pause of ``smart_pause_ms`` the controller asks the end-of-turn model once
(``EndpointQuery``); the pipeline runs it off the voice loop and hands the verdict back
(``endpoint_verdict``). Three answers:
- *finished* (at or above ``smart_threshold``): the turn ends now, early, where a person
  going on over the reply would be heard (barge-in on, and the echo canceller settled), and
  not on a 10 ms block well over the pause's level (the next word may be starting). While
  AEC3 warms up (a session's first reply) it swallows speech over a reply, so a person going
  on after a pause could go unnoticed: the turn then ends at ``smart_warmup_silence_ms`` of
  silence, past the pauses inside a sentence and still before silence alone would end it;
  speech over that early reply must last as long as a barge-in to take it back (the first
  reply's echo through the cold canceller is speech to the VAD for a frame or two); without
  barge-in silence decides, as without the model. The end can still be
  taken back: the VAD is not restarted, and speech that goes on before the pause reaches
  ``endpoint_silence_ms`` (where silence alone would have ended the turn) *resumes* the same
  turn (``TurnResumed``: the pipeline withdraws the reply, which may have started, and the
  turn's audio goes on whole). So the model makes answers come sooner, but never cuts a turn
  that silence alone would have kept whole. While the echo canceller is warming up
  (``echo_guard``) speech during the reply only ducks it until the guard is over, as for a
  barge-in;
- *not finished*, confidently (under ``smart_unfinished_threshold``): the turn waits for the
  next words up to ``smart_long_silence_ms`` (the segmenter's own endpoint);
- anything in between (unsure): silence ends the turn at ``endpoint_silence_ms``, but speech
  that begins before its reply is heard (and within ``smart_long_silence_ms``) still resumes
  it, as after an early end: a thinking pause is not split only because the answer was not
  audible yet. Once the reply is heard, speech may be its echo or an answer to it: a barge-in;
- no verdict yet: silence decides at ``endpoint_silence_ms``, as without the model.
"""

from __future__ import annotations

from dataclasses import replace

from app.conversation.barge_in import CONFIDENT_PROBABILITY, DIP_TOLERANCE_S
from app.conversation.turn_actions import Action, EndpointQuery, FalseInterruption, TurnResumed
from app.conversation.turn_state import Closing, TurnState
from app.vad.base import VadState, VadUpdate
from app.vad.sound import SoundBlock


class EndOfTurnPolicy(TurnState):
    _resume_heard_s: float | None = None  # speech going on, heard while the guard holds
    _echo_settled = True  # as of the latest frames (see ``TurnController.on_frames``)

    def endpoint_verdict(self, turn_id: int, pause: int, probability: float,
                         now_s: float) -> list[Action]:
        """The end-of-turn model's answer to ``EndpointQuery(turn_id, pause)``: finished (at
        or above the threshold) ends the turn now if the pause is still going on and the
        canceller has settled (otherwise at the warm-up silence, see ``_smart_pause``)."""
        if turn_id == self._user_turn and pause == self._pause and self._paused:
            self._verdict = probability
            if self._finished() and self._echo_settled and not self._resuming():
                self._end_early(now_s, False)
        return self._flush(now_s)

    def _end_early(self, now_s: float, waited: bool) -> None:
        """End the turn on the model's verdict; speech going on may still take it back.
        ``waited``: at the warm-up silence (the canceller not settled), not at the verdict."""
        self._end_open(now_s, self.params.endpoint_silence_ms, waited=waited, unsure=False)

    def _smart_pause(self, update: VadUpdate, now_s: float) -> bool:
        """Ask the model once per pause; end by silence at the short silence unless the model
        is confident the turn is not finished (True: the turn ended)."""
        assert self._user_turn is not None
        silence = update.silence_ms + 1e-6
        if self._asked_pause != self._pause and silence >= self.params.smart_pause_ms:
            self._asked_pause = self._pause
            self._actions.append(EndpointQuery(
                self._user_turn, self._pause, now_s, self._heard_end_s(),
                self._onset_s - self.params.pre_roll_ms / 1000))
            return False
        return self._end_if_due(silence, now_s)

    def _heard_end_s(self) -> float:
        """What the model hears: up to the VAD's last voiced frame (the silence counts from
        where the level fell, up to 64 ms sooner), which its scores were measured on."""
        heard = self._segmenter.heard_end_s
        assert heard is not None  # set as the pause began
        return heard

    def _end_if_due(self, silence_ms: float, now_s: float) -> bool:
        """Ends the paused turn if ``silence_ms`` (tolerance added) calls for it, at a frame or
        a sound block: early at the warm-up silence on the model's "finished", else at the
        endpoint silence unless the model said "not yet"; neither while sound is coming back
        (the segmenter's own endpoint waits for it too; True: the turn ended)."""
        if (self._finished() and not self._resuming()
                and (self._echo_settled or silence_ms >= self.params.smart_warmup_silence_ms)):
            self._end_early(now_s, not self._echo_settled)
            return True
        if (silence_ms >= self.params.endpoint_silence_ms
                and not (self.params.smart and self._waits_for_more())
                and not self._resuming()):
            if self._unsure():  # not split only because the answer was not audible yet
                self._end_open(now_s, self.params.smart_long_silence_ms, waited=False,
                               unsure=True)
            else:
                self._end_turn(self._last_voiced_s, now_s)
                self._restart_vad()
            return True
        return False

    def _resuming(self) -> bool:
        """Sound is coming back in the pause (the latest 10 ms block well over the pause's
        level): the turn does not end on it. An early reply would start over the person's next
        word, where a canceller still warming up swallows it (a sentence going on after a
        350-400 ms pause was split in two); and a person going on after a thinking pause as
        long as the endpoint silence was split at the first block of their next word. The end
        waits for a block or a frame: the VAD says speech, or it was none."""
        return self._turn_sound_returns(self._last_voiced_s)

    def _unsure(self) -> bool:
        """The model answered for this pause, between "not finished" and "finished"."""
        return self.params.smart and self.params.barge_in and self._verdict is not None

    def _end_open(self, now_s: float, window_ms: float, *, waited: bool, unsure: bool) -> None:
        """End the turn by the model's verdict (or by silence when ``unsure``), keeping it open:
        speech that begins within ``window_ms`` of its last word resumes it (the reply is
        withdrawn). An unsure end's window also closes once its reply is heard
        (``_closing_heard_reply``): a thinking pause the model was unsure of is not split in
        two only because the answer was not audible yet."""
        assert self._user_turn is not None
        closing = Closing(self._user_turn, self._onset_s, self._pause,
                          self._last_voiced_s + window_ms / 1000, until_reply=unsure)
        self._end_turn(self._last_voiced_s, now_s, "silence" if unsure else "model", waited,
                       resumable=True)
        self._closing = closing

    def _finished(self) -> bool:
        """The model said "finished" for this pause, and someone going on over an early reply
        would be heard (and resume the turn)."""
        return (self.params.barge_in and self._verdict is not None
                and self._verdict >= self.params.smart_threshold)

    def _sound_endpoint(self, block: SoundBlock, now_s: float) -> None:
        """The endpoint silence reached between two VAD frames: with no sound in the
        microphone since the last frame, the turn ends at the 10 ms block instead of at the
        end of the next 32 ms frame (issue 14: turn ends 593-630 ms after the true end with a
        500 ms endpoint; the frame's length was up to 32 ms of it)."""
        if block.sound:
            self._sound_since_frame = True
            return
        silence_ms = (block.end_s - self._last_voiced_s) * 1000 + 1e-6
        if self._user_turn is None or not self._paused or self._sound_since_frame:
            return
        self._end_if_due(silence_ms, now_s)

    def _waits_for_more(self) -> bool:
        """The model said "not finished" with confidence: wait up to the long silence."""
        return (self._verdict is not None
                and self._verdict < self.params.smart_unfinished_threshold)

    # ---- after an early end ----------------------------------------------------------------

    def _closing_vad(self, update: VadUpdate, now_s: float, echo_guard: bool) -> bool:
        """A frame while a turn the model ended may still resume; False: not taken here (the
        turn resumed with it, or the early end stands now), the frame goes on as usual. The
        window closes where silence alone would have ended the turn, counted from the turn's
        last word: a burst of the reply's echo heard meanwhile does not keep it open, so a
        barge-in after it is a barge-in, not the turn going on."""
        closing = self._closing
        assert closing is not None
        if update.state == VadState.SPEAKING:  # the same utterance goes on ...
            if self._resume_heard_s is None and update.start_s >= closing.until_s - 1e-9:
                self.finish_closing(now_s)  # ... or speech too late for it: a fresh onset
                return True
            to_confirm = self._to_confirm(closing, echo_guard)
            if not (to_confirm or self._resume_heard_s is not None
                    or self._convincingly_going_on(update)):
                return True  # the reply's echo, as it would be for a barge-in
            if to_confirm:  # duck until trusted or confirmed
                if self._resume_heard_s is None:
                    self._resume_heard_s = update.start_s
                self._set_duck(self._reply_audible)
                heard_ms = (update.end_s - self._resume_heard_s) * 1000 + 1e-6
                if echo_guard or heard_ms < self.params.barge_in_min_speech_ms:
                    return True
            self._resume(closing, update, now_s)
            return False
        if update.state == VadState.STOPPING:
            if (self._resume_heard_s is not None
                    and update.silence_ms + 1e-6 >= DIP_TOLERANCE_S * 1000):
                self._resume_not_confirmed(closing, now_s)
            if self._resume_heard_s is not None:  # going on, or echo: the dip decides
                if update.silence_ms + 1e-6 < self.params.endpoint_silence_ms:
                    return True
            elif update.end_s < closing.until_s - 1e-9:
                return True
        self.finish_closing(now_s)
        return False

    def _closing_heard_reply(self, now_s: float) -> None:
        """The reply to an unsure end is audible: from now on speech may be its echo or an
        answer to it (a barge-in, a new turn), and no longer goes on with the turn."""
        closing = self._closing
        if closing is not None and closing.until_reply and closing.turn_id == self._reply_turn:
            self._closing = replace(closing, until_s=min(closing.until_s, now_s))

    def _to_confirm(self, closing: Closing, echo_guard: bool) -> bool:
        """Speech heard while the early reply plays may be its echo: under the guard, or
        while the canceller has not settled (an early end at the warm-up silence), where a
        burst of the first reply's echo through the cold canceller took the turn back. Where
        no echo can be in it, it may be a blip (a rain drop scored 0.51 for one frame and
        withdrew the reply): it must go on as long as a barge-in too. (With an echo in it, a
        settled canceller may take the person going on for echo after their first frame: that
        frame resumes the turn.)"""
        if self._reply_turn != closing.turn_id:
            return False
        return echo_guard or (self._reply_audible
                              and (not self._echo_settled or self._echo_free_now))

    def _convincingly_going_on(self, update: VadUpdate) -> bool:
        """Over an early reply that may hold its own echo, one frame takes the end back only
        on what a barge-in needs to stop a reply (``barge_in._convincing``): the VAD sure of it
        or sound over the echo bound. The settled canceller's residue of a reply scored 0.54
        for one frame and withdrew it with nobody talking (RT60 0.8 s, 0.5 m room); a person
        going on scored 0.80 there before the canceller took them for echo."""
        if self._reply_turn is None or not self._reply_audible or self._echo_free_now:
            return True
        return (update.probability >= CONFIDENT_PROBABILITY
                or self._sound_heard_from(update.start_s))

    def _resume(self, closing: Closing, update: VadUpdate, now_s: float) -> None:
        """Speech went on: the early end is taken back and the turn continues."""
        resumed_s = update.start_s if self._resume_heard_s is None else self._resume_heard_s
        self._closing, self._resume_heard_s = None, None
        if self._reply_turn == closing.turn_id:
            self._reply_turn, self._reply_audible = None, False
        self._ducked = False  # the pipeline withdraws the reply: no swell back up first
        self._user_turn, self._onset_s = closing.turn_id, closing.onset_s
        self._last_voiced_s = update.last_voiced_s or update.end_s
        self._pause = max(self._pause, closing.pause)
        self._paused = self._speculating = False
        self._verdict = None
        self._actions.append(TurnResumed(closing.turn_id, resumed_s, now_s))

    def _resume_not_confirmed(self, closing: Closing, now_s: float) -> None:
        """What went on under the guard stopped: it was echo (or a cough); the reply stays."""
        assert self._resume_heard_s is not None
        if self._ducked and self._reply_turn == closing.turn_id:
            self._actions.append(FalseInterruption(closing.turn_id, self._resume_heard_s,
                                                   now_s, False))
        self._set_duck(False)
        self._resume_heard_s = None

    def finish_closing(self, now_s: float) -> None:
        """The early end stands (the pause reached the silence endpoint, or the person did
        something else): speech from now on needs a fresh onset."""
        if self._closing is None:
            return
        if self._resume_heard_s is not None:
            self._resume_not_confirmed(self._closing, now_s)
        self._closing = None
        self._restart_vad()
