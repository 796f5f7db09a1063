"""The conversation the remote engine sends with every request, cut at what the user heard.

The server keeps nothing between requests, so each request carries the system turn, the
earlier exchanges and the new user turn. An exchange is a user turn and what the user really
heard of the reply (its audio up to the heard position, or its text); a reply nobody heard
leaves only the user turn. Audio is kept as 16 kHz 16-bit PCM: the server re-encodes every
audio turn at 16 kHz, so sending more would only make uploads bigger. Each turn's base64 WAV
is made once and reused by every later request.

The request is bounded like the server bounds it: at most ``context_rows`` prompt rows (12.5
rows per second of audio, plus the chat template) and 120 s of audio in all; the oldest
exchanges leave the request first (the transcript keeps them), and exchanges that could not
fit even beside the shortest turn are let go, so memory stays flat in a long session. One
turn's audio is at most 30 s: a longer reply is kept up to 30 s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr

from app.engine.remote.protocol import (
    CODES_PER_S,
    DEFAULT_SYSTEM_PROMPTS,
    INPUT_RATE_HZ,
    MAX_TOTAL_AUDIO_S,
    MAX_TURN_AUDIO_S,
    REPLY_RATE_HZ,
    Modality,
    audio_part,
    float_to_s16le,
    s16le_to_float,
    wav_bytes,
)

TURN_TEMPLATE_ROWS = 5  # "<|im_start|>{role}\n" and "<|im_end|>\n" around every turn
AUDIO_MARKER_ROWS = 2  # sosp/audio_pad before the codes, eosp after
ASSISTANT_PREFIX_ROWS = 5  # "<|im_start|>assistant\n" (+ "<|object_ref_start|>" for speech)
CHARS_PER_ROW = 2.0  # the server's own conservative text estimate


def text_rows(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_ROW) + TURN_TEMPLATE_ROWS


def audio_rows(seconds: float) -> int:
    return math.ceil(seconds * CODES_PER_S) + AUDIO_MARKER_ROWS + TURN_TEMPLATE_ROWS


@dataclass
class Turn:
    """One message: text, or 16 kHz 16-bit audio (its content part made once, when asked)."""

    role: str
    text: str | None = None
    pcm_16k: bytes = field(default=b"", repr=False)  # s16le
    _part: dict[str, Any] | None = field(default=None, repr=False)
    _json: bytes | None = field(default=None, repr=False)

    @property
    def audio_s(self) -> float:
        return len(self.pcm_16k) / 2 / INPUT_RATE_HZ

    @property
    def rows(self) -> int:
        return text_rows(self.text) if self.text is not None else audio_rows(self.audio_s)

    def message(self) -> dict[str, Any]:
        if self.text is not None:
            return {"role": self.role, "content": self.text}
        if self._part is None:
            self._part = audio_part(wav_bytes(self.pcm_16k, INPUT_RATE_HZ))
        return {"role": self.role, "content": [self._part]}

    def message_json(self) -> bytes:
        """``message()`` as JSON, encoded once (a turn's audio is sent with every request)."""
        if self._json is None:
            self._json = json.dumps(self.message()).encode()
        return self._json


def user_turn(pcm_16k: np.ndarray, text: str | None = None) -> Turn:
    """The user's turn: typed text, or their speech ([T] float32 at 16 kHz)."""
    if text is not None and len(pcm_16k) == 0:
        return Turn("user", text=text)
    return Turn("user", pcm_16k=float_to_s16le(pcm_16k))


def heard_reply(pcm_24k_s16le: bytes, heard_samples_24k: int, text: str) -> Turn | None:
    """The assistant turn the user heard: its audio up to ``heard_samples_24k`` (at most 30 s,
    as 16 kHz), or its text when it had no audio; None when nothing was heard."""
    if not pcm_24k_s16le:
        return Turn("assistant", text=text.strip()) if text.strip() else None
    keep = min(max(0, heard_samples_24k), int(MAX_TURN_AUDIO_S * REPLY_RATE_HZ))
    heard = s16le_to_float(pcm_24k_s16le[: keep * 2])
    if len(heard) == 0:
        return None
    pcm = soxr.resample(heard, REPLY_RATE_HZ, INPUT_RATE_HZ).astype(np.float32)  # [T] 16 kHz
    return Turn("assistant", pcm_16k=float_to_s16le(pcm))


@dataclass(frozen=True)
class Exchange:
    user: Turn
    assistant: Turn | None

    @property
    def turns(self) -> list[Turn]:
        return [self.user] if self.assistant is None else [self.user, self.assistant]


class History:
    """Exchanges in order; ``messages`` builds a request that fits the server's bounds."""

    def __init__(self, context_rows: int = 512, system_prompt: str = "",
                 modality: Modality = "audio") -> None:
        self.exchanges: list[Exchange] = []
        self.dropped = 0  # exchanges let go for good (the transcript keeps them)
        self.context_rows = context_rows
        self.system_prompt = system_prompt
        self.modality: Modality = modality

    @property
    def system_turn(self) -> Turn:
        return Turn("system", text=self.system_prompt.strip()
                    or DEFAULT_SYSTEM_PROMPTS[self.modality])

    def commit(self, exchange: Exchange) -> None:
        """Add an exchange; exchanges that could no longer fit any request are let go."""
        self.exchanges.append(exchange)
        room = self.context_rows - self.system_turn.rows - ASSISTANT_PREFIX_ROWS
        rows = audio_s = 0.0
        for index in range(len(self.exchanges) - 1, -1, -1):
            turns = self.exchanges[index].turns
            rows += sum(t.rows for t in turns)
            audio_s += sum(t.audio_s for t in turns)
            if rows > room or audio_s > MAX_TOTAL_AUDIO_S:
                self.dropped += index + 1
                del self.exchanges[:index + 1]
                break

    def clear(self) -> None:
        self.exchanges.clear()
        self.dropped = 0

    def messages(self, new_turn: Turn) -> list[dict[str, Any]]:
        return [turn.message() for turn in self.turns(new_turn)]

    def messages_json(self, new_turn: Turn) -> bytes:
        """``messages`` as a JSON array, from each turn's JSON made once (a full request is a
        megabyte of base64; encoding it anew every turn would cost ~10 ms)."""
        return b"[" + b", ".join(t.message_json() for t in self.turns(new_turn)) + b"]"

    def turns(self, new_turn: Turn) -> list[Turn]:
        """System turn, the newest exchanges that fit, then ``new_turn``. The new turn always
        goes (if it alone is too long, the server says so); nothing is forgotten here, so a
        refused turn costs the history nothing."""
        rows = self.system_turn.rows + new_turn.rows + ASSISTANT_PREFIX_ROWS
        audio_s = new_turn.audio_s
        kept: list[Exchange] = []
        for exchange in reversed(self.exchanges):
            rows += sum(t.rows for t in exchange.turns)
            audio_s += sum(t.audio_s for t in exchange.turns)
            if rows > self.context_rows or audio_s > MAX_TOTAL_AUDIO_S:
                break
            kept.append(exchange)
        return [self.system_turn, *(t for e in reversed(kept) for t in e.turns), new_turn]
