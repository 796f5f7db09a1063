"""The turn controller: a pure state machine that decides who has the floor.

No Qt, no torch, no threads, no clock of its own: every input carries its time, every decision
comes back as a list of actions the pipeline carries out. The state shown to the person is
derived from the facts below (``ConversationState``).

The controller owns the VAD segmenter and steps it one scored frame at a time: when a decision
needs a fresh onset (the VAD *restarts*) the restart applies from the very next frame, also
when several frames arrive in one pump. Decisions depend on the frames' times only; ``now_s``
(when a batch is processed) only stamps the actions, so any batching of the same frames gives
the same turns.

Always-listening: a VAD onset starts a user turn (audio from ``onset - pre_roll``); a pause of
``speculative_pause_ms`` may start a speculative reply; the VAD endpoint ends the turn.
Push-to-talk: the turn runs from press to release (pre-roll before the press included); a press
with no voiced frame at all starts nothing.

Without barge-in (disabled, or echo mode half-duplex) speech during a reply is ignored, and the
VAD restarts when the reply ends, so only a fresh onset starts the next turn.

A user turn longer than ``max_user_turn_s`` ends as if the endpoint had been reached (a stuck
VAD or a television cannot hold the floor forever): the VAD restarts with the next frame, and
speech that goes on needs a fresh onset (then it counts as any other speech, e.g. a barge-in).
In push-to-talk the key must be pressed again.

Barge-in (when enabled and echo mode is not half-duplex): while a reply is pending or playing,
a speech candidate ducks the reply; once it has lasted ``barge_in_min_speech_ms`` the reply is
interrupted (player fade-out and engine cancel, done by the pipeline at once) and the state is
INTERRUPTED until the VAD confirms the onset, which starts the new turn with its pre-roll. A
push-to-talk press during a reply is a barge-in too, and so is the Stop button.

Speakers (issue 8): the duck comes at the first voiced frame; if the speech is not confirmed (a
cough, a door, or a burst of echo the canceller let through) the volume comes back and the reply
carries on. Every such duck-and-restore, and every barge-in that stopped a reply but then turned
out not to be speech (no onset followed), is a *false interruption* (``FalseInterruption``;
the pipeline counts them per session). While the echo canceller is still warming up
(``echo_guard`` on ``on_vad``) speech during a reply only ducks it: it is confirmed once the
guard is over, if the person is still talking.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from app import events as ev
from app.conversation.turn_actions import (  # also used by the pipeline as t.StateSet, ...
    Action,
    DuckSet,
    EndpointQuery,
    FalseInterruption,
    ReplyInterrupted,
    SpeculationCancelled,
    SpeculationStarted,
    StateSet,
    TurnAbandoned,
    TurnEnded,
    TurnStarted,
)
from app.conversation.turn_params import TurnParams
from app.events import ConversationState
from app.settings import ListenMode
from app.vad.base import Segmenter, VadFrame, VadParams, VadState, VadUpdate

State = ConversationState
DIP_TOLERANCE_S = 0.15  # speech that stops for less than this and goes on is one utterance


TURN_COMMANDS = (ev.PressToTalk, ev.ReleaseToTalk, ev.StopReply, ev.SetMuted, ev.SetListenMode)



class TurnController:
    def __init__(self, params: TurnParams | None = None, vad: VadParams | None = None) -> None:
        self.params = params or TurnParams()
        self._vad = vad or VadParams()
        self._segmenter = Segmenter(self._segmenter_params())
        self.state = State.IDLE if self.params.mode == "push_to_talk" else State.LISTENING
        self.muted = False  # by the person or the app
        self._user_muted = self._paused_by_app = False
        self._next_turn_id = 1
        self._user_turn: int | None = None
        self._onset_s = 0.0
        self._last_voiced_s = 0.0
        self._paused = False
        self._speculating = False
        self._pressed = False
        self._press_s = 0.0
        self._reply_turn: int | None = None
        self._reply_audible = False
        self._interrupted = False  # barge-in detected, new turn not confirmed yet
        self._interrupted_turn = 0  # ... the reply it stopped
        self._ducked = False
        self._pause = 0  # pauses in the current turn
        self._asked_pause = -1  # the pause the end-of-turn model was asked about
        self._verdict: float | None = None  # its answer for the current pause
        self._episode_start_s: float | None = None  # the speech now heard began here ...
        self._episode_end_s = 0.0  # ... and was last voiced here
        self._actions: list[Action] = []

    @property
    def user_turn_id(self) -> int | None:
        return self._user_turn

    @property
    def vad_params(self) -> VadParams:
        return self._segmenter.params

    def _segmenter_params(self) -> VadParams:
        """With the end-of-turn model the segmenter's own endpoint is the long silence; the
        short one is the controller's (when the model has not answered)."""
        if self.params.smart:
            return replace(self._vad, endpoint_silence_ms=self.params.smart_long_silence_ms)
        return self._vad

    @property
    def vad_state(self) -> VadState:
        return self._segmenter.state

    def update_params(self, params: TurnParams, now_s: float,
                      vad: VadParams | None = None) -> list[Action]:
        self._vad = vad or self._vad
        if params.mode != self.params.mode:
            actions = self.set_mode(params.mode, now_s, params)
        else:
            self.params = params
            actions = self._flush(now_s)
        self._segmenter.params = self._segmenter_params()
        return actions

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

    # ---- inputs ----------------------------------------------------------------------------

    def on_command(self, command: object, now_s: float) -> list[Action]:
        """One of the person's turn-taking commands (``TURN_COMMANDS``)."""
        if isinstance(command, ev.PressToTalk):
            return self.press(now_s)
        if isinstance(command, ev.ReleaseToTalk):
            return self.release(now_s)
        if isinstance(command, ev.StopReply):
            return self.stop_reply(now_s)
        if isinstance(command, ev.SetMuted):
            return self.set_muted(command.muted, now_s)
        if isinstance(command, ev.SetListenMode):
            return self.set_mode(command.mode, now_s)
        raise TypeError(f"not a turn-taking command: {command!r}")

    def on_frames(self, frames: list[VadFrame], now_s: float,
                  echo_guard: bool = False) -> list[Action]:
        """Scored VAD frames in capture order; ``now_s`` is when they are processed.
        ``echo_guard``: the echo canceller is not trusted yet, so speech during a reply must
        not stop it."""
        for frame in frames:
            update = self._segmenter.step(frame)
            if self.muted:
                continue
            if self.params.mode == "push_to_talk":
                self._ptt_vad(update, now_s)
            elif self._user_turn is not None:
                self._turn_vad(update, now_s)
            else:
                self._idle_vad(update, now_s, echo_guard)
        return self._flush(now_s)

    def press(self, now_s: float) -> list[Action]:
        if self.params.mode == "push_to_talk" and not self.muted and not self._pressed:
            self._interrupt(now_s, now_s, "push_to_talk")
            self._pressed, self._press_s = True, now_s
        return self._flush(now_s)

    def release(self, now_s: float) -> list[Action]:
        if self._pressed:
            self._pressed = False
            if self._user_turn is not None:
                self._end_turn(max(self._last_voiced_s, self._onset_s), now_s, "release")
        return self._flush(now_s)

    def stop_reply(self, now_s: float) -> list[Action]:
        self._interrupt(now_s, now_s, "stop")
        return self._flush(now_s)

    def set_muted(self, muted: bool, now_s: float) -> list[Action]:
        """The person's mute switch."""
        self._user_muted = muted
        return self._update_muted(now_s)

    def set_paused(self, paused: bool, now_s: float) -> list[Action]:
        """The app stops listening for a while (e.g. to record a voice prompt); afterwards the
        VAD restarts, as what it heard meanwhile was not meant as a turn."""
        self._paused_by_app = paused
        if not paused:
            self._restart_vad()
        return self._update_muted(now_s)

    def _update_muted(self, now_s: float) -> list[Action]:
        muted = self._user_muted or self._paused_by_app
        if muted and not self.muted:
            self._abandon_turn(now_s)
            self._pressed = False
        self.muted = muted
        return self._flush(now_s)

    def set_mode(self, mode: ListenMode, now_s: float,
                 params: TurnParams | None = None) -> list[Action]:
        if mode != self.params.mode:
            self._abandon_turn(now_s)
            self._pressed = False
        self.params = replace(params or self.params, mode=mode)
        self._segmenter.params = self._segmenter_params()
        return self._flush(now_s)

    def reply_audible(self, turn_id: int, now_s: float) -> list[Action]:
        if turn_id == self._reply_turn:
            self._reply_audible = True
        return self._flush(now_s)

    def reply_finished(self, turn_id: int, now_s: float) -> list[Action]:
        """The reply played out, failed, or was silenced."""
        if turn_id == self._reply_turn:
            self._reply_turn, self._reply_audible = None, False
            if not self.params.barge_in or self._ducked:
                # What the VAD heard during the reply was ignored (or not yet confirmed), and
                # may have been the reply itself (speakers): speech now has to show a fresh
                # onset to start a turn (its pre-roll still covers a person already talking).
                self._restart_vad()
            self._set_duck(False)
        return self._flush(now_s)

    # ---- always-listening ------------------------------------------------------------------

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

    def _turn_vad(self, update: VadUpdate, now_s: float) -> None:
        assert self._user_turn is not None
        if update.last_voiced_s is not None:
            self._last_voiced_s = update.last_voiced_s
        if update.event == "resumed":
            self._paused = False
            if self._speculating:
                self._speculating = False
                self._actions.append(SpeculationCancelled(self._user_turn, now_s))
        elif update.event == "paused":
            self._paused = True
            self._pause += 1
        if update.event in ("paused", "resumed"):
            self._verdict = None
        if update.event == "endpoint":
            self._end_turn(self._last_voiced_s, now_s)
        elif self._over_cap(update):
            self._cap_turn(now_s)
        elif update.state == VadState.STOPPING and self.params.smart and self._smart_pause(
                update, now_s):
            return
        elif (update.state == VadState.STOPPING and self.params.speculative_start
              and not self._speculating
              and update.silence_ms + 1e-6 >= self.params.speculative_pause_ms):
            self._speculating = True
            self._actions.append(SpeculationStarted(self._user_turn, now_s))

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

    # ---- push-to-talk ----------------------------------------------------------------------

    def _ptt_vad(self, update: VadUpdate, now_s: float) -> None:
        if self._pressed and self._user_turn is not None and self._over_cap(update):
            self._pressed = False  # the key is still held: a new turn needs a new press
            self._cap_turn(now_s)
            return
        voiced = update.state in (VadState.STARTING, VadState.SPEAKING)
        if not (self._pressed and voiced):
            return
        if self._user_turn is None:
            audio_from = self._press_s - self.params.pre_roll_ms / 1000
            # Speech that began just before the press (within the pre-roll) counts from its
            # start; otherwise the turn's speech starts with this frame.
            began = update.onset_s
            onset = began if began is not None and began >= audio_from else update.start_s
            self._start_turn(onset, audio_from)
        self._last_voiced_s = update.end_s

    # ---- shared steps ----------------------------------------------------------------------

    def _over_cap(self, update: VadUpdate) -> bool:
        return update.end_s - self._onset_s >= self.params.max_user_turn_s

    def _cap_turn(self, now_s: float) -> None:
        """End an overlong turn as at an endpoint; the VAD forgets the utterance it is in."""
        self._end_turn(max(self._last_voiced_s, self._onset_s), now_s, "cap")
        self._restart_vad()

    def _restart_vad(self) -> None:
        """Forget the utterance the VAD is in: speech from the next frame on needs a fresh
        onset."""
        self._segmenter.reset()
        self._episode_start_s = None

    def _start_turn(self, onset_s: float, audio_from_s: float) -> None:
        self._episode_start_s = None
        turn_id = self._next_turn_id
        self._next_turn_id += 1
        self._user_turn, self._onset_s, self._last_voiced_s = turn_id, onset_s, onset_s
        self._paused = self._speculating = False
        self._pause, self._asked_pause, self._verdict = 0, -1, None
        self._actions.append(TurnStarted(turn_id, onset_s, audio_from_s))

    def _end_turn(self, user_end_s: float, endpoint_s: float,
                  by: Literal["silence", "model", "cap", "release"] = "silence") -> None:
        assert self._user_turn is not None
        self._actions.append(TurnEnded(self._user_turn, self._onset_s, user_end_s, endpoint_s,
                                       by, self._verdict))
        self._reply_turn, self._reply_audible = self._user_turn, False
        self._user_turn = None
        self._paused = self._speculating = False
        self._verdict = None

    def _abandon_turn(self, now_s: float) -> None:
        if self._user_turn is not None:
            if self._speculating:
                self._actions.append(SpeculationCancelled(self._user_turn, now_s))
            self._actions.append(TurnAbandoned(self._user_turn))
            self._user_turn = None
            self._paused = self._speculating = False
        self._interrupted = False

    def _interrupt(self, onset_s: float, detected_s: float,
                   cause: Literal["speech", "push_to_talk", "stop"]) -> None:
        if self._reply_turn is None:
            return
        self._actions.append(ReplyInterrupted(self._reply_turn, onset_s, detected_s, cause,
                                              self._reply_audible))
        self._reply_turn, self._reply_audible = None, False
        self._ducked = False  # the reply fades out from where it is: no swell back up first

    def _set_duck(self, ducked: bool) -> None:
        if ducked != self._ducked:
            self._ducked = ducked
            self._actions.append(DuckSet(ducked))

    def _derive_state(self) -> ConversationState:
        if self._user_turn is not None:
            return State.ENDPOINTING if self._paused else State.USER_SPEAKING
        if self._pressed:
            return State.USER_SPEAKING
        if self._interrupted:
            return State.INTERRUPTED
        if self._reply_turn is not None:
            return State.SPEAKING if self._reply_audible else State.RESPONDING
        if self.muted or self.params.mode == "push_to_talk":
            return State.IDLE
        return State.LISTENING

    def _flush(self, now_s: float) -> list[Action]:
        state = self._derive_state()
        if state != self.state:
            self.state = state
            self._actions.append(StateSet(state, now_s))
        actions, self._actions = self._actions, []
        return actions
