"""Routing reply events from the engine worker to the player, one route per ``respond`` call.

A route knows whether its audio may play yet: a speculative reply (started at a short pause)
is *held* — its audio, text and stage timings are kept aside — until the endpoint confirms it
(``release``) or the user goes on speaking (``discard``: cancel, and nothing reaches the
speaker). Audio is resampled from the engine's rate to the output device's rate on the way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.audio.player import Player
from app.audio.resample import StreamResampler
from app.engine.base import EngineEvent, ReplyAudio, ReplyDone, ReplyFailed

DEFAULT_REPLY_RATE_HZ = 24000  # assumed for a reply that has sent no audio yet

@dataclass
class Route:
    seq: int
    turn_id: int
    cancel: threading.Event
    held: bool
    pending: list[tuple[EngineEvent, float]] = field(default_factory=list)  # while held
    resampler: StreamResampler | None = None

    @property
    def reply_rate_hz(self) -> int:
        """The engine's sample rate for this reply (that of its latest audio)."""
        return self.resampler.in_rate_hz if self.resampler is not None else DEFAULT_REPLY_RATE_HZ


class ReplyRoutes:
    def __init__(self, player: Callable[[], Player | None]) -> None:
        self._player = player
        self._routes: dict[int, Route] = {}

    def open(self, seq: int, turn_id: int, cancel: threading.Event, held: bool) -> Route:
        route = Route(seq, turn_id, cancel, held)
        self._routes[seq] = route
        player = self._player()
        if not held and player is not None:
            player.begin_reply(turn_id)
        return route

    def get(self, seq: int) -> Route | None:
        return self._routes.get(seq)

    def for_turn(self, turn_id: int) -> Route | None:
        for route in self._routes.values():
            if route.turn_id == turn_id:
                return route
        return None

    def active(self) -> bool:
        return bool(self._routes)

    def close(self, seq: int) -> None:
        self._routes.pop(seq, None)

    def discard(self, seq: int) -> None:
        """Cancel the engine's reply and forget everything it produced."""
        route = self._routes.pop(seq, None)
        if route is not None:
            route.cancel.set()

    def release(self, seq: int) -> list[tuple[EngineEvent, float]]:
        """Let a held route play; returns the events kept aside, for the caller to replay."""
        route = self._routes.get(seq)
        if route is None or not route.held:
            return []
        route.held = False
        player = self._player()
        if player is not None:
            player.begin_reply(route.turn_id)
        pending, route.pending = route.pending, []
        return pending

    def play(self, route: Route, event: ReplyAudio | ReplyDone | ReplyFailed) -> None:
        """Audio → player (resampled); done/failed → the player's end of reply."""
        player = self._player()
        if player is None:
            return
        if isinstance(event, ReplyAudio):
            if route.resampler is None or route.resampler.in_rate_hz != event.sample_rate_hz:
                route.resampler = StreamResampler(event.sample_rate_hz, player.sample_rate_hz)
            player.enqueue(route.turn_id, route.resampler.process(event.pcm))
            return
        if route.resampler is not None:
            player.enqueue(route.turn_id, route.resampler.process(np.zeros(0, np.float32),
                                                                  last=True))
        player.end_reply(route.turn_id)
