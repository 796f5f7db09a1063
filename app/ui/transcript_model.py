"""The conversation as a list of turns, built from pipeline events (no Qt; exported as text/JSON).

Entries are kept in conversation order: by turn id, the user's side before the assistant's.
Text-branch transcripts arrive after the audio (DESIGN.md), so an entry starts as a placeholder
and is filled in place when its TranscriptUpdated comes. A placeholder never waits forever: once
its side has been over for ``TRANSCRIPT_WAIT_S`` without text, it says "no transcript" (text that
comes later still fills it in).
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

from app.events import (
    ReplyFinished,
    ReplyStarted,
    TranscriptUpdated,
    UserSpeechStarted,
    UserTurnDropped,
    UserTurnEnded,
)

Role = Literal["user", "assistant"]
ROLE_NAMES = {"user": "You", "assistant": "Assistant"}
TRANSCRIPT_WAIT_S = 45.0  # after its side is over, an entry waits this long for its text


def entry_key(turn_id: int, role: Role) -> tuple[int, int]:
    """Conversation order: by turn, the user's side before the assistant's."""
    return (turn_id, 0 if role == "user" else 1)


@dataclass
class TranscriptEntry:
    turn_id: int
    role: Role
    text: str = ""
    final: bool = False
    speaking: bool = False  # audio of this side is still going
    spoken: bool = False  # there was (or is) audio; False for text replies
    duration_s: float | None = None  # user speech length
    interrupted: bool = False
    heard_ms: float | None = None  # how much of an interrupted reply was heard
    expect_text: bool = True  # False when nothing transcribes (echo demo, text branch off)
    ended_at_s: float | None = None  # (monotonic) when this side's audio was over
    gave_up: bool = False  # no text came within TRANSCRIPT_WAIT_S
    dropped: bool = False  # a user turn dropped before it ended (no reply follows)

    @property
    def key(self) -> tuple[int, int]:
        return entry_key(self.turn_id, self.role)

    def status_text(self) -> str:
        """What is shown while there is no text yet, or next to the text."""
        if self.interrupted:
            heard = f" after {self.heard_ms / 1000:.1f} s" if self.heard_ms is not None else ""
            return f"interrupted{heard}"
        if self.dropped:
            return "dropped (no reply)"
        if self.speaking:
            return "speaking…" if self.role == "assistant" else "listening…"
        if not self.text:
            if not self.expect_text:
                return "not transcribed"
            return "no transcript" if self.gave_up or self.final else "transcribing…"
        return "" if self.final else "…"

    def plain_text(self) -> str:
        body = self.text or f"({self.status_text()})"
        if self.interrupted and self.text:
            body += f" [{self.status_text()}]"
        return f"{ROLE_NAMES[self.role]}: {body}"


def _key_of(entry: TranscriptEntry) -> tuple[int, int]:
    return entry.key


class TranscriptModel:
    """Applies events; ``changed`` entries are returned so the view redraws only those."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wait_s: float = TRANSCRIPT_WAIT_S) -> None:
        self.entries: list[TranscriptEntry] = []
        self._by_key: dict[tuple[int, int], TranscriptEntry] = {}
        self.transcribing = True
        self.clock = clock
        self.wait_s = wait_s

    def expire(self) -> list[int]:
        """Entries that waited too long for text say "no transcript"; returns their indexes."""
        now = self.clock()
        changed = []
        for index, entry in enumerate(self.entries):
            if (entry.expect_text and not entry.text and not entry.final and not entry.gave_up
                    and entry.ended_at_s is not None and now - entry.ended_at_s >= self.wait_s):
                entry.gave_up = True
                changed.append(index)
        return changed

    @property
    def waiting(self) -> bool:
        """Some entry still waits for its text."""
        return any(e.expect_text and not e.text and not e.final and not e.gave_up
                   and not e.dropped for e in self.entries)

    def set_transcribing(self, transcribing: bool) -> list[int]:
        """Whether text is expected at all; returns the indexes of entries that changed."""
        self.transcribing = transcribing
        changed = [i for i, e in enumerate(self.entries) if e.expect_text != transcribing]
        for index in changed:
            self.entries[index].expect_text = transcribing
        return changed

    def entry(self, turn_id: int, role: Role) -> tuple[TranscriptEntry, int, bool]:
        """The entry for (turn, role), created in order if new: (entry, index, created)."""
        key = entry_key(turn_id, role)
        existing = self._by_key.get(key)
        if existing is not None:
            return existing, self.index_of(existing), False
        entry = TranscriptEntry(turn_id, role, expect_text=self.transcribing)
        index = bisect.bisect(self.entries, key, key=_key_of)
        self.entries.insert(index, entry)
        self._by_key[key] = entry
        return entry, index, True

    def index_of(self, entry: TranscriptEntry) -> int:
        return bisect.bisect_left(self.entries, entry.key, key=_key_of)

    def apply(self, event: object) -> tuple[TranscriptEntry, int, bool] | None:
        """Update from one event; returns (entry, index, created) or None if irrelevant."""
        if isinstance(event, (UserSpeechStarted, ReplyStarted)):
            role: Role = "user" if isinstance(event, UserSpeechStarted) else "assistant"
            found = self.entry(event.turn_id, role)
            found[0].speaking = found[0].spoken = True
        elif isinstance(event, UserTurnEnded):
            found = self.entry(event.turn_id, "user")
            found[0].speaking = False
            found[0].duration_s = event.duration_s
            found[0].ended_at_s = self.clock()
        elif isinstance(event, UserTurnDropped):
            found = self.entry(event.turn_id, "user")
            found[0].speaking = False
            found[0].dropped = True
        elif isinstance(event, ReplyFinished):
            found = self.entry(event.turn_id, "assistant")
            found[0].speaking = False
            found[0].interrupted = event.interrupted
            found[0].heard_ms = event.heard_ms if event.interrupted else None
            found[0].ended_at_s = self.clock()
        elif isinstance(event, TranscriptUpdated):
            found = self.entry(event.turn_id, event.role)
            entry = found[0]
            entry.text = event.text
            entry.final = event.final
            if event.heard_ms is not None:
                entry.interrupted = True
                entry.heard_ms = event.heard_ms
        else:
            return None
        return found

    def clear(self) -> None:
        self.entries.clear()
        self._by_key.clear()

    # ---- export --------------------------------------------------------------------------------

    def to_text(self) -> str:
        return "\n".join(e.plain_text() for e in self.entries) + ("\n" if self.entries else "")

    def to_markdown(self) -> str:
        lines = ["# Conversation", ""]
        for e in self.entries:
            body = e.text or f"_({e.status_text()})_"
            note = f" _({e.status_text()})_" if e.interrupted and e.text else ""
            lines += [f"**{ROLE_NAMES[e.role]}:** {body}{note}", ""]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"turns": [asdict(e) for e in self.entries]}, indent=2,
                          ensure_ascii=False)
