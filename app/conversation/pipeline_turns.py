"""The voice loop's side of turn-taking: what the pipeline does with each action of the turn
controller (events to the UI and metrics, the user's audio to the engine, the player ducked or
flushed), and the end-of-turn model's link (loaded off the audio path, asked at pauses).

A mixin of :class:`app.conversation.pipeline.Pipeline`, kept apart so that the pipeline module
stays about wiring and the voice loop; it uses the pipeline's parts, declared below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from app import events as ev
from app.conversation import turns as t
from app.conversation.audio_io import AudioIO
from app.conversation.clock import Clock, VirtualClock
from app.conversation.endpointing import (
    NOMINAL_DELAY_S,
    Endpointer,
    InlineEndpointer,
    ThreadedEndpointer,
    TurnCompleteness,
)
from app.conversation.listener import Listener, TurnFeed
from app.conversation.metrics import TurnMetrics
from app.conversation.replies import DEFAULT_REPLY_RATE_HZ, ReplyRoutes
from app.engine.base import UserTurn
from app.settings import Settings
from app.vad.smart_turn import WINDOW_SAMPLES as SMART_TURN_WINDOW_SAMPLES

if TYPE_CHECKING:
    from app.conversation.replies import Route
    from app.engine.base import EngineEvent

log = logging.getLogger("app.conversation.pipeline")


class PipelineTurns:
    """Turn-controller actions → the pipeline's parts (all on the voice-loop thread)."""

    settings: Settings
    clock: Clock
    metrics: TurnMetrics
    end_of_turn_problem: str | None
    _controller: t.TurnController
    _end_of_turn: TurnCompleteness | None
    _endpointer: Endpointer | None
    _listener: Listener
    _turn_feed: TurnFeed
    _routes: ReplyRoutes
    _io: AudioIO
    _emit: Callable[[ev.PipelineEvent], None]
    _speculative_seq: int | None
    _withdrawn: set[int]

    if TYPE_CHECKING:  # the pipeline's own steps (app.conversation.pipeline)
        def _respond(self, turn: UserTurn, held: bool) -> Route: ...
        def _deliver(self, route: Route, event: EngineEvent, ready_s: float) -> None: ...
        def _reply_over(self, turn_id: int, heard_samples: int, rate_hz: int, t_s: float,
                        interrupted: bool) -> None: ...
        def _rel(self, t_s: float) -> float: ...

    # ---- end of turn ---------------------------------------------------------------------

    def _turn_params(self, settings: Settings) -> t.TurnParams:
        params = t.TurnParams.from_settings(settings)
        return replace(params, smart_endpoint=params.smart_endpoint
                       and self._endpointer is not None)

    def _start_end_of_turn(self) -> None:
        """Load the end-of-turn model (unless one was given); without it turns end after a
        fixed silence, and ``end_of_turn_problem`` says why (doctor shows it too)."""
        model = self._end_of_turn
        if model is None and not self.settings.vad.smart_endpoint:
            return  # loaded when the setting is switched on
        from app.vad.smart_turn import SmartTurnModel, smart_turn_model_path

        try:
            path = None if model is not None else smart_turn_model_path()
            clock = self.clock
            if isinstance(clock, VirtualClock):  # simulations: load now, on virtual time
                self._endpointer = InlineEndpointer(
                    model or SmartTurnModel(path),
                    None if clock.charge_compute else NOMINAL_DELAY_S)
            else:  # real devices: loaded on the endpointer's thread
                given = model
                self._endpointer = ThreadedEndpointer(lambda: given or SmartTurnModel(path))
        except Exception as exc:  # missing file, broken file, onnxruntime refusing it
            self.end_of_turn_problem = str(exc)
            log.warning("end-of-turn model not used: %s", exc)
            return
        self._run(self._controller.update_params(self._turn_params(self.settings),
                                                 self.clock.now()))

    def _endpoint_verdicts(self) -> None:
        if self._endpointer is None:
            return
        now = self.clock.now()
        problem = getattr(self._endpointer, "problem", None)
        if problem:  # it could not be loaded after all: silence decides from now on
            self.end_of_turn_problem, self._endpointer = problem, None
            self._run(self._controller.update_params(self._turn_params(self.settings), now))
            return
        for verdict in self._endpointer.poll(now):
            self.metrics.endpoint_model(verdict.turn_id, verdict.cost_ms)
            self._run(self._controller.endpoint_verdict(verdict.turn_id, verdict.pause,
                                                        verdict.probability, now))

    def _on_endpoint_query(self, a: t.EndpointQuery) -> None:
        if self._endpointer is None:
            return
        self._turn_feed.pump(a.turn_id)
        heard = self._turn_feed.audio_until(a.speech_end_s
                                            + self.settings.vad.smart_tail_ms / 1000,
                                            SMART_TURN_WINDOW_SAMPLES,
                                            a.heard_from_s)  # what the model hears
        self._endpointer.submit(a.turn_id, a.pause, heard, self.clock.now())
    # ---- turn actions -> events, engine, player -----------------------------------------

    def _run(self, actions: list[t.Action]) -> None:
        for action in actions:
            handler = self._ACTIONS[type(action)]
            handler(self, action)

    def _on_state(self, a: t.StateSet) -> None:
        self._emit(ev.StateChanged(a.state, self._rel(a.t_s)))

    def _on_turn_started(self, a: t.TurnStarted) -> None:
        self.metrics.started(a.turn_id, a.onset_s, a.audio_from_s)
        self._turn_feed.begin(a.audio_from_s)
        self._emit(ev.UserSpeechStarted(a.turn_id, self._rel(a.onset_s),
                                        self._rel(a.audio_from_s)))

    def _on_turn_ended(self, a: t.TurnEnded) -> None:
        self._turn_feed.pump(a.turn_id)
        self.metrics.ended(a.turn_id, a.user_end_s, a.endpoint_s, a.decided_by,
                           a.model_probability, a.waited_for_canceller)
        self._emit(ev.UserTurnEnded(a.turn_id, self._rel(a.endpoint_s), a.user_end_s - a.onset_s))
        spec, self._speculative_seq = self._speculative_seq, None
        route = self._routes.get(spec) if spec is not None else None
        if route is not None:
            for event, ready_s in self._routes.release(route.seq):
                self._deliver(route, event, ready_s)
        else:
            self._respond(UserTurn(a.turn_id, self._turn_feed.audio()), held=False)
        if a.final:  # an open end keeps the audio: the turn may go on (TurnResumed)
            self._turn_feed.end()

    def _on_turn_resumed(self, a: t.TurnResumed) -> None:
        """The early end is taken back: the reply is withdrawn (never reported as heard, so
        the engine drops it) and the turn goes on, its audio whole."""
        self._speculative_seq = None
        route = self._routes.for_turn(a.turn_id)
        if route is not None:
            self._routes.discard(route.seq)
        player = self._io.player
        if player is not None and player.active_turn_id == a.turn_id:
            self._withdrawn.add(a.turn_id)
            player.flush(self.clock.now())
        onset, audio_from = self.metrics.resumed(a.turn_id)
        self._emit(ev.UserSpeechStarted(a.turn_id, self._rel(onset), self._rel(audio_from)))

    def _on_turn_abandoned(self, a: t.TurnAbandoned) -> None:
        self.metrics.abandoned(a.turn_id)
        self._turn_feed.end()
        self._emit(ev.UserTurnDropped(a.turn_id, self._rel(self.clock.now())))

    def _on_speculation_started(self, a: t.SpeculationStarted) -> None:
        self._turn_feed.pump(a.turn_id)
        turn = UserTurn(a.turn_id, self._turn_feed.audio(), speculative=True)
        self._speculative_seq = self._respond(turn, held=True).seq

    def _on_speculation_cancelled(self, a: t.SpeculationCancelled) -> None:
        if self._speculative_seq is not None:
            self._routes.discard(self._speculative_seq)
            self._speculative_seq = None

    def _on_interrupted(self, a: t.ReplyInterrupted) -> None:
        route = self._routes.for_turn(a.turn_id)
        if route is not None:
            route.cancel.set()  # control beats data: the engine sees it at its next step
        if a.was_audible:
            self.metrics.interrupted(a.turn_id, a.onset_s, a.detected_s)
        if self._io.player is not None and self._io.player.active_turn_id == a.turn_id:
            self._io.player.flush(self.clock.now())
        else:
            self._reply_over(a.turn_id, 0, DEFAULT_REPLY_RATE_HZ, self.clock.now(),
                             interrupted=True)

    def _on_duck(self, a: t.DuckSet) -> None:
        """Where no echo of the speaker can reach the microphone (no echo heard, a headset),
        the duck silences the reply: nothing is lost to the canceller, and a barge-in is
        silent at the duck instead of at its confirmation. Over an echo it ducks 26 dB: a
        reply muted and brought back in full made the cold canceller's residue stop it."""
        if self._io.player is not None:
            echo_free = self._listener.echo_canceller.echo_power_bound <= 0.0
            self._io.player.set_ducked(a.ducked, silent=echo_free)

    def _on_false_interruption(self, a: t.FalseInterruption) -> None:
        self.metrics.false_interruptions += 1
        self._emit(ev.FalseInterruptionDetected(a.turn_id, self._rel(a.t_s), a.reply_stopped,
                                                self.metrics.false_interruptions))

    _ACTIONS: ClassVar[dict[type, Callable[[PipelineTurns, Any], None]]] = {
        t.StateSet: _on_state, t.TurnStarted: _on_turn_started, t.TurnEnded: _on_turn_ended,
        t.TurnAbandoned: _on_turn_abandoned, t.SpeculationStarted: _on_speculation_started,
        t.SpeculationCancelled: _on_speculation_cancelled, t.ReplyInterrupted: _on_interrupted,
        t.DuckSet: _on_duck,
        t.FalseInterruption: _on_false_interruption, t.EndpointQuery: _on_endpoint_query,
        t.TurnResumed: _on_turn_resumed,
    }
