"""Turning generated rows into results (contract §1.8), offline and while streaming.

The reference drops the last row unconditionally, takes text from the text channel (specials
skipped), and audio codes from audio rows up to the first eosp. ``ReplyStream`` applies the same
rules row by row: it holds one row back until the next arrives, so a row that turns out to be the
last one is never emitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.tokenizer import MossTokenizer

Row = tuple[int, int]


def reply_codes(rows: Sequence[Row], config: MossSpeechConfig) -> list[int]:
    """Audio codes of a reply: audio rows before the first eosp, last row dropped."""
    codes: list[int] = []
    for text, audio in rows[:-1]:
        if text != config.modality_pad_token_id:
            continue
        if audio == config.eosp_token_id:
            break
        codes.append(audio)
    return codes


def reply_text(tokenizer: MossTokenizer, rows: Sequence[Row]) -> str:
    """Text of a reply: the text channel without the last row, specials skipped."""
    return tokenizer.decode(text for text, _ in rows[:-1])


@dataclass
class ReplyStream:
    """Feed rows as they are sampled; get codes and text-token ids that are final."""

    config: MossSpeechConfig
    _held: Row | None = None
    _speech_ended: bool = False
    codes: list[int] = field(default_factory=list)
    text_ids: list[int] = field(default_factory=list)

    def push(self, row: Row) -> tuple[list[int], list[int]]:
        """Returns (new codes, new text ids) released by this row (from the row before it)."""
        released, self._held = self._held, row
        if released is None:
            return [], []
        return self._release(released)

    def _release(self, row: Row) -> tuple[list[int], list[int]]:
        text, audio = row
        if text != self.config.modality_pad_token_id:
            self.text_ids.append(text)
            return [], [text]
        if self._speech_ended or audio == self.config.eosp_token_id:
            self._speech_ended = True
            return [], []
        self.codes.append(audio)
        return [audio], []
