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

Barge-in (when enabled and echo mode is not half-duplex): speech during a reply ducks it, then
stops it once confirmed (:mod:`app.conversation.barge_in`). A push-to-talk press during a reply
is a barge-in too, and so is the Stop button.

Semantic end of turn (always-listening with the end-of-turn model): the model is asked at a
pause (:mod:`app.conversation.end_of_turn`).

The class is split by responsibility: shared state and steps in
:mod:`app.conversation.turn_state`, the two policies in their modules, the inputs here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from app import events as ev
from app.conversation.barge_in import DIP_TOLERANCE_S, ECHO_TAIL_S, BargeInPolicy
from app.conversation.end_of_turn import EndOfTurnPolicy
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
    TurnResumed,
    TurnStarted,
)
from app.conversation.turn_params import TurnParams
from app.conversation.turn_state import State
from app.settings import ListenMode
from app.vad.base import VadFrame, VadParams, VadState, VadUpdate
from app.vad.sound import SoundBlock

__all__ = ["DIP_TOLERANCE_S", "TURN_COMMANDS", "Action", "DuckSet", "EndpointQuery",
           "FalseInterruption", "ReplyInterrupted", "SpeculationCancelled",
           "SpeculationStarted", "State", "StateSet", "TurnAbandoned", "TurnController",
           "TurnEnded", "TurnParams", "TurnResumed", "TurnStarted"]

TURN_COMMANDS = (ev.PressToTalk, ev.ReleaseToTalk, ev.StopReply, ev.SetMuted, ev.SetListenMode)


class TurnController(BargeInPolicy, EndOfTurnPolicy):
    def update_params(self, params: TurnParams, now_s: float,
                      vad: VadParams | None = None) -> list[Action]:
        self._vad = vad or self._vad
        if params.mode != self.params.mode:
            actions = self.set_mode(params.mode, now_s, params)
        else:
            self.params = params
            if not params.smart:
                self.finish_closing(now_s)
            actions = self._flush(now_s)
        self._segmenter.params = self._segmenter_params()
        return actions

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
                  echo_guard: bool = False, echo_settled: bool = True,
                  sound: Sequence[SoundBlock] = ()) -> list[Action]:
        """Scored VAD frames and 10 ms sound blocks, each in capture order (taken together in
        the order of their ends); ``now_s`` is when they are processed. ``echo_guard``: the
        echo canceller is not trusted yet, so speech during a reply must not stop it.
        ``echo_settled``: a reply's echo would be cancelled (or there is none), so a person
        going on over an early reply would be heard (see ``endpoint_verdict``)."""
        self._echo_settled, self._echo_guard_now = echo_settled, echo_guard
        blocks = iter(sound)
        block = next(blocks, None)
        for frame in frames:
            while block is not None and block.end_s <= frame.end_s + 1e-9:
                self._sound_block(block, now_s)
                block = next(blocks, None)
            update = self._segmenter.step(frame, self._reply_turn is not None
                                          and not self._echo_free_now)
            self._sound_since_frame = False
            if self.muted:
                continue
            if self.params.mode == "push_to_talk":
                self._ptt_vad(update, now_s)
            elif self._closing is not None and self._closing_vad(update, now_s, echo_guard):
                continue
            elif self._user_turn is not None:
                self._turn_vad(update, now_s)
            else:
                self._idle_vad(update, now_s, echo_guard)
        while block is not None:
            self._sound_block(block, now_s)
            block = next(blocks, None)
        return self._flush(now_s)

    def _sound_block(self, block: SoundBlock, now_s: float) -> None:
        self._speech_end.add(block)
        self._echo_free_now = block.echo_free
        if not self.muted and self.params.mode == "always_listening":
            self._on_sound(block, now_s)
            self._sound_endpoint(block, now_s)

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
        self.finish_closing(now_s)
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
            self.finish_closing(now_s)
            self._abandon_turn(now_s)
            self._pressed = False
        self.muted = muted
        return self._flush(now_s)

    def set_mode(self, mode: ListenMode, now_s: float,
                 params: TurnParams | None = None) -> list[Action]:
        if mode != self.params.mode:
            self.finish_closing(now_s)
            self._abandon_turn(now_s)
            self._pressed = False
        self.params = replace(params or self.params, mode=mode)
        self._segmenter.params = self._segmenter_params()
        return self._flush(now_s)

    def reply_audible(self, turn_id: int, now_s: float) -> list[Action]:
        if turn_id == self._reply_turn:
            self._reply_audible = True
            self._closing_heard_reply(now_s)
        return self._flush(now_s)

    def reply_finished(self, turn_id: int, now_s: float) -> list[Action]:
        """The reply played out, failed, or was silenced."""
        if turn_id == self._reply_turn:
            self._reply_turn, self._reply_audible = None, False
            self._sound_duck_s = None
            closing = self._closing is not None and self._closing.turn_id == turn_id
            if closing:  # speech going on still resumes the turn (no reply to mistake it for)
                self._resume_heard_s = None
            else:
                if self.params.barge_in and self._echo_guard_now:  # see ``_in_echo_tail``
                    self._echo_tail_until_s = now_s + ECHO_TAIL_S
                if not self.params.barge_in or self._ducked:
                    # What the VAD heard during the reply was ignored (or not yet confirmed),
                    # and may have been the reply itself (speakers): speech now has to show a
                    # fresh onset to start a turn (its pre-roll still covers a person already
                    # talking).
                    self._restart_vad()
            self._set_duck(False)
        return self._flush(now_s)

    # ---- always-listening ------------------------------------------------------------------

    def _turn_vad(self, update: VadUpdate, now_s: float) -> None:
        assert self._user_turn is not None
        if update.last_voiced_s is not None:
            self._last_voiced_s = update.last_voiced_s
        if update.event == "resumed":
            self._paused = False
        if self._speculating and update.state == VadState.SPEAKING and not update.may_be_blip:
            # (a blip in the pause leaves the engine's head start alone)
            self._speculating = False
            self._actions.append(SpeculationCancelled(self._user_turn, now_s))
        if update.event == "paused":
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
