"""The voice loop, wired: mic → capture → [echo canceller] → 16 kHz → VAD → turn controller →
engine worker → player → speaker, with timestamped events to metrics and subscribers.

Threads: the device callbacks only copy audio and post to the inbox; the voice loop (``pump``,
on its own thread for real devices, or called by the simulation driver) does everything else;
the engine worker owns the engine. ``submit`` never blocks; subscribers are called from the
voice-loop thread (the UI's bridge re-emits them as queued Qt signals). Implements
:class:`app.events.ConversationPort`.

Hooks the engines rely on: while the user speaks, their 16 kHz audio (pre-roll first) goes to
``feed_user_audio`` in order, then ``respond`` gets the whole turn; with speculative start a
reply starts at a short pause but stays silent until the endpoint confirms it (discarded if the
user goes on); after each reply, ``reply_heard`` gets what really reached the speaker.

What each turn-controller action does, and the end-of-turn model's link, are in
:mod:`app.conversation.pipeline_turns` (a mixin of :class:`Pipeline`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app import events as ev
from app.audio.aec import AecStage
from app.audio.backend import AudioBackend
from app.audio.echo_canceller import EchoCanceller
from app.audio.player import PlaybackNotice
from app.conversation import engine_switch
from app.conversation import turns as t
from app.conversation.audio_io import AudioIO, StreamLost
from app.conversation.clock import Clock, WallClock
from app.conversation.device_tools import DeviceTools
from app.conversation.echo_control import EchoControl
from app.conversation.endpointing import (
    Endpointer,
    TurnCompleteness,
)
from app.conversation.engine_worker import (
    EngineBuilding,
    EngineSwapped,
    EngineWorker,
    WorkerEvent,
)
from app.conversation.event_hub import EventHub
from app.conversation.inbox import Inbox
from app.conversation.listener import Listener, TurnFeed
from app.conversation.metrics import TurnMetrics
from app.conversation.pipeline_turns import PipelineTurns
from app.conversation.replies import DEFAULT_REPLY_RATE_HZ, ReplyRoutes, Route
from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    ReplyNotice,
    ReplyText,
    StageTimed,
    UserTurn,
)
from app.settings import Settings
from app.vad.base import SpeechScorer, VadParams

log = logging.getLogger(__name__)


CommandHandler = Callable[[Any], None]


class Pipeline(PipelineTurns):
    """``engine_factory`` rebuilds the engine when settings ask for it; with ``load_engine``
    the engine the settings name is built at start (the given one answers until then)."""

    def __init__(self, settings: Settings, engine: Engine, backend: AudioBackend, *,
                 clock: Clock | None = None, scorer: SpeechScorer | None = None,
                 echo_canceller: EchoCanceller | None = None, block_ms: float = 10.0,
                 engine_factory: Callable[[Settings], Engine] | None = None,
                 load_engine: bool = False, metrics_jsonl: Path | None = None,
                 end_of_turn: TurnCompleteness | None = None) -> None:
        self.settings = settings
        self.clock = clock or WallClock()
        self._inbox = Inbox()
        self._listener = Listener(scorer, echo_canceller or AecStage("headset"))
        self._end_of_turn = end_of_turn  # the smart-turn model (loaded at start if None)
        self._endpointer: Endpointer | None = None
        self.end_of_turn_problem: str | None = None  # why the model is not used, if it is not
        self._controller = t.TurnController(self._turn_params(settings),
                                            VadParams.from_settings(settings.vad))
        self.metrics = TurnMetrics()
        self._hub = EventHub(metrics_jsonl)
        self._emit, self._emit_all = self._hub.emit, self._hub.emit_all
        self._worker = EngineWorker(engine, self.clock, self._inbox.post_data)
        self._io = AudioIO(backend, self._listener, self.clock, self._inbox,
                           settings.audio.playback_start_ms, block_ms)
        self._routes = ReplyRoutes(lambda: self._io.player)
        self._echo = EchoControl(settings, self._listener, self._io)
        self._seq = 0
        self._turn_feed = TurnFeed(self._listener, self._worker.feed)
        self._engines = engine_switch.EngineSwitch(self._worker, engine_factory, self._emit,
                                                   load_engine)
        self.tools = DeviceTools(self._io, self.clock, self._emit, block_ms, stop_reply=lambda:
                                 self._turn_command(ev.StopReply()), pause_listening=lambda on:
                                 self._run(self._controller.set_paused(on, self.clock.now())))
        self._commands: dict[type, CommandHandler] = {
            **dict.fromkeys(t.TURN_COMMANDS, self._turn_command),
            PlaybackNotice: self._playback_notice, StreamLost: self._stream_lost,
            ev.ApplySettings: self._apply_settings, ev.Shutdown: lambda _: self.stop(),
            ev.RunAcousticCheck: self._acoustic_check,
            **self.tools.handlers()}
        self._speculative_seq: int | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._released = threading.Event()  # set when stop() has released everything
        self._last_finished_turn = 0  # replies end in turn order; later reports are stale
        self._withdrawn: set[int] = set()  # replies taken back (TurnResumed), still fading

    # ---- ConversationPort ------------------------------------------------------------------

    @property
    def mic_waveform(self) -> ev.WaveformSource:
        return self._listener.history

    @property
    def reply_waveform(self) -> ev.WaveformSource:
        return self._io.reply_waveform

    def submit(self, command: ev.Command) -> None:
        self._inbox.post_control(command)

    def subscribe(self, sink: Callable[[ev.PipelineEvent], None]) -> None:
        self._hub.subscribe(sink)

    def add_command_handler(self, kind: type, handler: CommandHandler) -> None:
        """Handle commands of ``kind`` on the voice-loop thread (extension point)."""
        self._commands[kind] = handler

    # ---- life cycle ------------------------------------------------------------------------

    def start(self, threaded: bool = True) -> None:
        """Load the VAD model (unless one was given), open the devices, start the engine
        worker (and the voice-loop thread). May take a while: the UI calls it off its thread."""
        if self._listener.scorer is None:
            from app.vad.silero import SileroScorer

            self._listener.scorer = SileroScorer()
        self._start_end_of_turn()
        self._emit_all(self._io.start(self.settings.audio, self.clock.now()))
        self._emit(self._io.opened())
        self._emit_all(self._echo.start())
        self._worker.start()
        self._emit_all(engine_switch.status_events(self._worker.info))
        if self._engines.load_at_start:
            self._engines.rebuild(self.settings)
        self._emit(ev.StateChanged(self._controller.state, 0.0))
        self._running = True
        if threaded:
            self._thread = threading.Thread(target=self._loop, name="voice-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop everything and release devices and the engine; safe to call twice.

        ``submit(Shutdown())`` does the same from the voice-loop thread without blocking the
        caller (the UI's close event).
        """
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._running = False
        self._inbox.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self.tools.close()
        self._io.close()
        if self._endpointer is not None:
            self._endpointer.close()
        self._worker.cancel_all()
        self.clock.close()
        self._worker.stop()
        self._hub.close()
        self._released.set()

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop (or let a stop already under way finish) and wait until devices and the engine
        are released, so the process never exits with a PortAudio stream half closed."""
        self.stop()
        return self._released.wait(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def underruns(self) -> int:
        return self._io.player.underruns if self._io.player is not None else 0

    @property
    def engine_info(self) -> EngineInfo:
        return self._worker.info

    @property
    def echo(self) -> EchoControl:
        return self._echo

    def is_quiet(self) -> bool:
        """Nobody has the floor (no user turn, no reply pending or playing), no device test."""
        idle = (ev.ConversationState.LISTENING, ev.ConversationState.IDLE)
        return (self._controller.state in idle and not self._routes.active()
                and not self.tools.active and not self._worker.busy
                and (self._io.player is None or self._io.player.active_turn_id is None))

    def _loop(self) -> None:
        while self._running:
            self._inbox.wait(0.05)
            try:
                self.pump()
                for lost in self._io.stalled():
                    self._stream_lost(lost)
            except Exception as exc:  # the loop must survive anything
                log.exception("voice loop step failed")
                self._emit(ev.ErrorReported("internal", f"Voice loop error: {exc}",
                                            "The app keeps running; see the log for details."))

    # ---- the voice loop --------------------------------------------------------------------

    def pump(self) -> None:
        """Handle everything posted since the last call (control first, then data)."""
        control, data = self._inbox.take()
        for item in control:
            self._control(item)
        for item in data:
            self._worker_event(item)
        self._endpoint_verdicts()
        frames = self._listener.process()
        if frames and self._listener.first_sample_s is not None:  # set once, then the same
            self.metrics.origin_s = self._listener.first_sample_s
        sound = self._listener.take_sound()  # every 10 ms: a frame may not be complete yet
        if frames or sound:
            self._run(self._controller.on_frames(frames, self.clock.now(),
                                                 self._echo.echo_guard,
                                                 self._echo.echo_settled, sound))
        self._turn_feed.pump(self._controller.user_turn_id)
        self._emit_all(self._io.input_warnings())
        self.tools.poll()
        self._emit_all(self._echo.poll(self.clock.now()))


    def _control(self, item: object) -> None:
        handler = self._commands.get(type(item))
        if handler is None:
            log.warning("no handler for %s", type(item).__name__)
            return
        handler(item)

    def _turn_command(self, command: object) -> None:
        self._run(self._controller.on_command(command, self.clock.now()))

    def _acoustic_check(self, _command: ev.RunAcousticCheck) -> None:
        now = self.clock.now()
        self._run(self._controller.stop_reply(now))
        self._emit_all(self._echo.start_check(now, talking=self._controller.user_turn_id
                                              is not None))

    # ---- user audio → engine → player -------------------------------------------------------

    def _respond(self, turn: UserTurn, held: bool) -> Route:
        self._seq += 1
        cancel = self._worker.respond(turn, self._seq)
        return self._routes.open(self._seq, turn.turn_id, cancel, held)

    def _worker_event(self, item: WorkerEvent) -> None:
        event = item.event
        if isinstance(event, EngineSwapped | EngineBuilding):  # a build's progress or outcome
            self._engines.on_worker_event(event, self.settings)
            return
        route = self._routes.get(item.seq)
        if route is None or route.cancel.is_set():
            if item.seq == 0 and isinstance(event, ReplyFailed):
                self._emit(ev.ErrorReported(event.category, event.message, event.advice,
                                            event.turn_id))
            elif item.seq == 0 and isinstance(event, ReplyText):  # idle-time transcripts
                self._emit(ev.TranscriptUpdated(event.turn_id, event.role, event.text,
                                                event.final))
            return
        if route.held:
            route.pending.append((event, item.ready_s))
            return
        self._deliver(route, event, item.ready_s)

    def _deliver(self, route: Route, event: EngineEvent, ready_s: float) -> None:
        if isinstance(event, ReplyAudio):
            self.metrics.engine_audio(route.turn_id, ready_s)  # it keeps the turn's first
            self._routes.play(route, event)
        elif isinstance(event, ReplyText):
            self._emit(ev.TranscriptUpdated(route.turn_id, event.role, event.text, event.final))
        elif isinstance(event, StageTimed):
            self.metrics.stage(route.turn_id, event.stage, event.duration_ms)
        elif isinstance(event, ReplyNotice):  # e.g. the server is busy: the reply comes later
            self._emit(ev.ErrorReported(event.category, event.message, event.advice))
        elif isinstance(event, ReplyDone | ReplyFailed):
            if isinstance(event, ReplyFailed):
                self._emit(ev.ErrorReported(event.category, event.message, event.advice,
                                            event.turn_id))
            if self._io.player is None:
                self._reply_over(route.turn_id, 0, DEFAULT_REPLY_RATE_HZ, self.clock.now(),
                                 interrupted=False)
            else:
                self._routes.play(route, event)

    def _playback_notice(self, notice: PlaybackNotice) -> None:
        if notice.kind == "audible":
            self.metrics.audible(notice.turn_id, notice.t_s)
            self._emit(ev.ReplyStarted(notice.turn_id, self._rel(notice.t_s)))
            self._echo.reply_audible(notice.t_s)
            self._run(self._controller.reply_audible(notice.turn_id, self.clock.now()))
            return
        self._reply_over(notice.turn_id, notice.heard_samples, notice.sample_rate_hz,
                         notice.t_s, interrupted=notice.kind == "silenced")

    def _reply_over(self, turn_id: int, heard_samples: int, rate_hz: int, t_s: float,
                    interrupted: bool) -> None:
        if turn_id in self._withdrawn:  # taken back (TurnResumed): the turn is not over
            self._withdrawn.discard(turn_id)
            self._emit(ev.ReplyFinished(turn_id, True, heard_samples / rate_hz * 1000))
            return
        if turn_id <= self._last_finished_turn:
            return
        self._last_finished_turn = turn_id
        route = self._routes.for_turn(turn_id)
        reply_rate = route.reply_rate_hz if route is not None else DEFAULT_REPLY_RATE_HZ
        heard_ms = heard_samples / rate_hz * 1000
        self._worker.heard(turn_id, round(heard_samples * reply_rate / rate_hz), reply_rate)
        record = self.metrics.finished(turn_id, heard_ms, t_s)
        if record is not None:
            self._emit(ev.TurnMeasured(record))  # also written to the JSON lines file, if any
        self._emit(ev.ReplyFinished(turn_id, interrupted, heard_ms))
        self._echo.reply_over(t_s)
        if route is not None:
            self._routes.close(route.seq)
        self._run(self._controller.reply_finished(turn_id, self.clock.now()))

    # ---- devices and settings --------------------------------------------------------------

    def _stream_lost(self, lost: StreamLost) -> None:
        events = self._io.handle_lost(lost, self.clock.now())
        self._emit_all(events)
        if events:
            self._emit(self._io.opened())
        if lost.direction == "input":
            self.tools.inputs_changed()

    def _apply_settings(self, command: ev.ApplySettings) -> None:
        now, new = self.clock.now(), command.settings
        old, self.settings = self.settings, new
        if new.vad.smart_endpoint and self._endpointer is None and not self.end_of_turn_problem:
            self._start_end_of_turn()  # loads the model once (a few hundred ms, this thread)
        self._run(self._controller.update_params(self._turn_params(new), now,
                                                 VadParams.from_settings(new.vad)))
        self._io.set_playback_start_ms(new.audio.playback_start_ms)
        self._emit_all(self._echo.apply(new))
        if new.audio.input_device != old.audio.input_device:
            self._emit_all(self._io.start_input(new.audio.input_device, now))
            self.tools.inputs_changed()
        if new.audio.output_device != old.audio.output_device:
            self._emit_all(self._io.start_output(new.audio.output_device, now))
        if (new.audio.input_device, new.audio.output_device) != (old.audio.input_device,
                                                                 old.audio.output_device):
            self._emit(self._io.opened())
        self._engines.apply(old, new, command.reload_engine)

    # ---- events ----------------------------------------------------------------------------

    def _rel(self, t_s: float) -> float:
        """Clock time → seconds from the first input sample."""
        return t_s - self.metrics.origin_s
