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

from dataclasses import dataclass, replace
from typing import Literal

from app import events as ev
from app.conversation.turn_actions import (  # also used by the pipeline as t.StateSet, ...
    Action,
    DuckSet,
    FalseInterruption,
    ReplyInterrupted,
    SpeculationCancelled,
    SpeculationStarted,
    StateSet,
    TurnAbandoned,
    TurnEnded,
    TurnStarted,
)
from app.events import ConversationState
from app.settings import ListenMode, Settings
from app.vad.base import Segmenter, VadFrame, VadParams, VadState, VadUpdate

State = ConversationState


@dataclass(frozen=True)
class TurnParams:
    mode: ListenMode = "always_listening"
    barge_in: bool = True
    barge_in_min_speech_ms: float = 96.0
    pre_roll_ms: float = 300.0
    speculative_start: bool = True
    speculative_pause_ms: float = 150.0
    max_user_turn_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> TurnParams:
        return cls(mode=settings.turn.mode,
                   barge_in=settings.turn.barge_in and settings.echo.mode != "half_duplex",
                   barge_in_min_speech_ms=settings.turn.barge_in_min_speech_ms,
                   pre_roll_ms=settings.vad.pre_roll_ms,
                   speculative_start=settings.engine.speculative_start,
                   speculative_pause_ms=settings.engine.speculative_pause_ms,
                   max_user_turn_s=settings.turn.max_user_turn_s)



TURN_COMMANDS = (ev.PressToTalk, ev.ReleaseToTalk, ev.StopReply, ev.SetMuted, ev.SetListenMode)



class TurnController:
    def __init__(self, params: TurnParams | None = None, vad: VadParams | None = None) -> None:
        self.params = params or TurnParams()
        self._segmenter = Segmenter(vad or VadParams())
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
        self._actions: list[Action] = []

    @property
    def user_turn_id(self) -> int | None:
        return self._user_turn

    @property
    def vad_params(self) -> VadParams:
        return self._segmenter.params

    @property
    def vad_state(self) -> VadState:
        return self._segmenter.state

    def update_params(self, params: TurnParams, now_s: float,
                      vad: VadParams | None = None) -> list[Action]:
        if vad is not None:
            self._segmenter.params = vad
        if params.mode != self.params.mode:
            return self.set_mode(params.mode, now_s, params)
        self.params = params
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
                self._end_turn(max(self._last_voiced_s, self._onset_s), now_s)
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
        replying = self._reply_turn is not None
        if update.event == "dropped" or (replying and self._ducked and update.state in (
                VadState.STOPPING, VadState.QUIET)):
            self._not_confirmed(update, now_s)
            return
        if update.onset_s is None or update.state not in (VadState.STARTING, VadState.SPEAKING):
            return
        if replying:
            if not self.params.barge_in:
                return
            self._set_duck(self._reply_audible)
            if not echo_guard and update.voiced_ms + 1e-6 >= self.params.barge_in_min_speech_ms:
                self._interrupted_turn = self._reply_turn or 0
                self._interrupt(update.onset_s, now_s, "speech")
                self._interrupted = True
        confirmed = update.event == "onset" or (self._interrupted
                                                and update.state == VadState.SPEAKING)
        if confirmed and self._reply_turn is None:
            self._interrupted = False
            self._start_turn(update.onset_s, update.onset_s - self.params.pre_roll_ms / 1000)
            self._last_voiced_s = update.last_voiced_s or update.end_s

    def _not_confirmed(self, update: VadUpdate, now_s: float) -> None:
        """Speech that ducked or stopped a reply ended before it was confirmed."""
        onset = update.onset_s if update.onset_s is not None else update.start_s
        if self._ducked and self._reply_turn is not None:
            self._actions.append(FalseInterruption(self._reply_turn, onset, now_s, False))
            if update.event != "dropped":
                self._restart_vad()  # the next speech needs a fresh onset
        elif self._interrupted:
            self._actions.append(FalseInterruption(self._interrupted_turn, onset, now_s, True))
        self._set_duck(False)
        self._interrupted = False

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
        if update.event == "endpoint":
            self._end_turn(self._last_voiced_s, now_s)
        elif self._over_cap(update):
            self._cap_turn(now_s)
        elif (update.state == VadState.STOPPING and self.params.speculative_start
              and not self._speculating
              and update.silence_ms + 1e-6 >= self.params.speculative_pause_ms):
            self._speculating = True
            self._actions.append(SpeculationStarted(self._user_turn, now_s))

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
        self._end_turn(max(self._last_voiced_s, self._onset_s), now_s)
        self._restart_vad()

    def _restart_vad(self) -> None:
        """Forget the utterance the VAD is in: speech from the next frame on needs a fresh
        onset."""
        self._segmenter.reset()

    def _start_turn(self, onset_s: float, audio_from_s: float) -> None:
        turn_id = self._next_turn_id
        self._next_turn_id += 1
        self._user_turn, self._onset_s, self._last_voiced_s = turn_id, onset_s, onset_s
        self._paused = self._speculating = False
        self._actions.append(TurnStarted(turn_id, onset_s, audio_from_s))

    def _end_turn(self, user_end_s: float, endpoint_s: float) -> None:
        assert self._user_turn is not None
        self._actions.append(TurnEnded(self._user_turn, self._onset_s, user_end_s, endpoint_s))
        self._reply_turn, self._reply_audible = self._user_turn, False
        self._user_turn = None
        self._paused = self._speculating = False

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
        self._set_duck(False)

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
