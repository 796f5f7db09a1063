"""Fan-out of pipeline events to subscribers (the UI bridge, metrics files, tests).

A subscriber that raises never stops the others or the voice loop; every error event is also
written to the log, so what a banner said can be found later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from app import events as ev
from app.conversation.metrics import JsonLinesWriter

log = logging.getLogger(__name__)
Sink = Callable[[ev.PipelineEvent], None]


class EventHub:
    def __init__(self, metrics_jsonl: Path | None = None) -> None:
        self._jsonl = JsonLinesWriter(metrics_jsonl) if metrics_jsonl else None
        self._sinks: list[Sink] = [self._jsonl.on_event] if self._jsonl is not None else []

    def subscribe(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, event: ev.PipelineEvent) -> None:
        if isinstance(event, ev.ErrorReported):
            log.warning("%s: %s %s", event.category, event.message, event.action)
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:
                log.exception("event subscriber failed on %s", type(event).__name__)

    def emit_all(self, events: list[ev.PipelineEvent]) -> None:
        for event in events:
            self.emit(event)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
