"""The turn controller's state and the steps every policy shares (see
:mod:`app.conversation.turns`). Pure: no Qt, no torch, no threads, no clock of its own.

The controller is one object split by responsibility: this base holds who has the floor and
the primitive steps (start or end a turn, interrupt or duck a reply, restart the VAD, derive
the state shown to the person); :mod:`app.conversation.barge_in` decides what speech during a
reply does, :mod:`app.conversation.end_of_turn` when a paused turn is over, and
:class:`app.conversation.turns.TurnController` takes the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from app.conversation.turn_actions import (
    Action,
    DuckSet,
    ReplyInterrupted,
    SpeculationCancelled,
    StateSet,
    TurnAbandoned,
    TurnEnded,
    TurnStarted,
)
from app.conversation.turn_params import TurnParams
from app.events import ConversationState
from app.vad.base import Segmenter, VadParams, VadState, VadUpdate
from app.vad.sound import SpeechEnd

State = ConversationState
SOUND_GAP_S = 0.02  # a run of sound blocks may miss this much


@dataclass(frozen=True)
class Closing:
    """A turn the end-of-turn model ended early, while speech that goes on would still resume
    it (:mod:`app.conversation.end_of_turn`)."""

    turn_id: int
    onset_s: float
    pause: int
    until_s: float  # speech that goes on must begin before this
    # an end by silence the model was unsure of: the window also closes when its reply is
    # heard (later speech may be the reply's echo, or an answer to it)
    until_reply: bool = False


class TurnState:
    def __init__(self, params: TurnParams | None = None, vad: VadParams | None = None) -> None:
        self.params = params or TurnParams()
        self._vad = vad or VadParams()
        self._speech_end = SpeechEnd()  # every sound block's level
        self._segmenter = Segmenter(self._segmenter_params(), self._turn_speech_end,
                                    self._turn_sound_returns)
        self.state = State.IDLE if self.params.mode == "push_to_talk" else State.LISTENING
        self.muted = False  # by the person or the app
        self._user_muted = self._paused_by_app = False
        self._next_turn_id = 1
        self._user_turn: int | None = None
        self._onset_s = 0.0
        self._last_voiced_s = 0.0  # where the turn's speech stopped (level-refined at a pause)
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
        self._episode_peak = 0.0  # ... its most confident frame (the VAD's probability)
        self._closing: Closing | None = None  # an early end that speech may still take back
        self._lead_start_s: float | None = None  # weakly voiced frames since here (idle) ...
        self._lead_dips = 0  # ... but for this many frames under it
        self._sound_start_s: float | None = None  # the current run of sound blocks ...
        self._sound_end_s = 0.0  # ... ends here ...
        self._sound_blocks = 0  # ... and has this many
        self._sound_echo_free = True  # ... none of which can hold an echo of the speaker
        self._echo_free_now = True  # the latest block can hold no echo (nothing cancels it)
        self._sound_duck_s: float | None = None  # ducked on sound alone, from this run
        self._sound_spent_s: float | None = None  # a run that ducked and was given back
        self._sound_since_frame = False  # a sound block came after the latest VAD frame
        self._echo_guard_now = False  # as of the latest frames (see ``TurnController.on_frames``)
        self._echo_tail_until_s: float | None = None  # a reply's echo may come back until then
        self._outlasting_echo = False  # speech that began in it must go on past it to be a turn
        self._weak_frames = 0  # frames since then that the VAD scored weakly voiced
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

    def _turn_speech_end(self, last_voiced_s: float) -> float:
        """Where a user turn's words stopped at a pause (the segmenter's ``end_of_speech``);
        other speech (over a reply, after an early end) keeps the VAD's timing, which the
        barge-in rules were measured on."""
        if self._user_turn is None:
            return last_voiced_s
        return self._speech_end.end(last_voiced_s)

    def _turn_sound_returns(self, pause_from_s: float) -> bool:
        """Sound is coming back in a user turn's pause (the segmenter's endpoint waits); other
        speech keeps the VAD's timing, as for ``_turn_speech_end``."""
        return self._user_turn is not None and self._speech_end.resuming(pause_from_s)

    def _segmenter_params(self) -> VadParams:
        """With the end-of-turn model the segmenter's own endpoint is the long silence; the
        short one is the controller's (when the model has not answered)."""
        if self.params.smart:
            return replace(self._vad, endpoint_silence_ms=self.params.smart_long_silence_ms)
        return self._vad

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
        self._episode_start_s = self._lead_start_s = None
        self._outlasting_echo = False

    def _start_turn(self, onset_s: float, audio_from_s: float) -> None:
        self._episode_start_s = self._lead_start_s = None
        turn_id = self._next_turn_id
        self._next_turn_id += 1
        self._user_turn, self._onset_s, self._last_voiced_s = turn_id, onset_s, onset_s
        self._paused = self._speculating = False
        self._pause, self._asked_pause, self._verdict = 0, -1, None
        self._actions.append(TurnStarted(turn_id, onset_s, audio_from_s))

    def _end_turn(self, user_end_s: float, endpoint_s: float,
                  by: Literal["silence", "model", "cap", "release"] = "silence",
                  waited_for_canceller: bool = False, resumable: bool = False) -> None:
        assert self._user_turn is not None
        self._actions.append(TurnEnded(self._user_turn, self._onset_s, user_end_s, endpoint_s,
                                       by, self._verdict, waited_for_canceller, resumable))
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
        self._sound_duck_s = None

    def _sound_heard_from(self, start_s: float) -> bool:
        """The sound gate heard sound over the echo bound in speech from ``start_s`` on (up to
        a run's gap, ``SOUND_GAP_S``, before it): what makes unsure speech over a reply count,
        for a barge-in and for a turn going on over an early reply alike."""
        return self._sound_end_s >= start_s - SOUND_GAP_S - 1e-9

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
