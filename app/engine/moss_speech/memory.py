"""What the model remembers of the conversation, bounded by a number of grid rows.

The model context is an explicit system turn first (so the cached prefix stays stable from turn
to turn: the processor's fallback would append it *after* the turns, contract §2.2), then the
exchanges (a user turn and the assistant turn the user heard). Prompts are built here as row
lists, so :class:`~app.engine.moss_speech.generate.GenerationSession` reuses every cached row
the new prompt shares with the last one.

When a prompt plus the longest reply would not fit ``capacity_rows``, the oldest exchanges
leave the model context (the transcript keeps them). Removing the oldest turn shifts every
later row's position, so no cached row survives: the planner then drops until an eighth of the
context is free beyond what this turn needs, so that full re-prefills happen once every few
turns instead of at every turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.moss_speech.prompt import (
    OutputModality,
    Turn,
    assistant_prefix_rows,
    text_rows,
    turn_rows,
)
from app.engine.moss_speech.tokenizer import MossTokenizer

Row = tuple[int, int]
# The GitHub demo's explicit system prompts (contract §2.3), used when the setting is empty.
DEFAULT_SYSTEM_PROMPTS = {
    "audio": "You are a helpful voice assistant. Answer the user's questions with spoken "
             "responses.",
    "text": "You are a helpful assistant. Answer the user's questions with text.",
}
FREE_FRACTION_AFTER_DROP = 8  # drop until 1/8 of the context is free beyond this turn's needs


class ContextFullError(ValueError):
    """One turn plus the longest reply does not fit the context at all."""

    category = "input"

    def __init__(self, needed_rows: int, capacity_rows: int) -> None:
        super().__init__(f"This turn needs {needed_rows} rows of model context (with room for "
                         f"the longest reply) but the context holds {capacity_rows}.")
        self.action = ("Speak in shorter turns, raise Settings → Engine → Context max rows, or "
                       "lower Sampling → Max new rows.")


@dataclass(frozen=True)
class Exchange:
    """A user turn and the assistant turn that followed (None: nothing was heard)."""

    user: Turn
    assistant: Turn | None
    rows: tuple[Row, ...]


class ConversationMemory:
    """The turns in the model context, and the prompts built from them."""

    def __init__(self, tokenizer: MossTokenizer, capacity_rows: int,
                 system_prompt: str = "", modality: OutputModality = "audio") -> None:
        self.tokenizer = tokenizer
        self.capacity_rows = capacity_rows
        self.exchanges: list[Exchange] = []
        self.dropped = 0  # exchanges that left the model context
        self._system_text = ""
        self._system_rows: list[Row] = []
        # constant rows, tokenised once (not at every prompt or early prefill)
        self._user_header = text_rows(tokenizer, "<|im_start|>user\n")
        self._assistant_prefixes = {m: assistant_prefix_rows(tokenizer, m)
                                    for m in ("audio", "text")}
        self._closing_rows = len(self.user_rows(Turn("user", ()))) - len(
            self.partial_user_rows(()))  # eosp and <|im_end|>\n after the codes of a turn
        self.configure(system_prompt, modality)

    def configure(self, system_prompt: str, modality: OutputModality) -> None:
        """The system turn for a setting (empty: the default for the reply modality)."""
        self.modality = modality
        text = system_prompt.strip() or DEFAULT_SYSTEM_PROMPTS[modality]
        if text != self._system_text:
            self._system_text = text
            self._system_rows = turn_rows(self.tokenizer, Turn("system", text))

    @property
    def history_rows_count(self) -> int:
        return len(self._system_rows) + sum(len(e.rows) for e in self.exchanges)

    def history_rows(self) -> list[Row]:
        """System turn and every exchange: the prefix of the next prompt."""
        rows = list(self._system_rows)
        for exchange in self.exchanges:
            rows += exchange.rows
        return rows

    def assistant_prefix(self) -> list[Row]:
        """``<|im_start|>assistant\\n`` (+ sosp when the reply is speech), contract §2.2."""
        return list(self._assistant_prefixes[self.modality])

    def user_rows(self, user: Turn) -> list[Row]:
        return turn_rows(self.tokenizer, user)

    def partial_user_rows(self, codes: Sequence[int]) -> list[Row]:
        """The rows of a spoken user turn that is still going: header, sosp, codes so far.

        These are exactly the first rows of the finished turn, so prefilling them while the
        user talks leaves only the last codes (and the closing rows) for the end of the turn.
        """
        cfg = self.tokenizer.config
        return (self._user_header
                + [(cfg.sosp_token_id, cfg.audio_pad_token_id)]
                + [(cfg.modality_pad_token_id, int(c)) for c in codes])

    def prompt(self, user: Turn, reserve_rows: int) -> list[Row]:
        """The prompt for a finished user turn; drops the oldest exchanges if needed."""
        tail = self.user_rows(user) + self.assistant_prefix()
        self.make_room(len(tail) + reserve_rows)
        return self.history_rows() + tail

    def partial_prompt(self, codes: Sequence[int], reserve_rows: int) -> list[Row]:
        """History plus the part of a spoken user turn heard so far (early prefill)."""
        tail = self.partial_user_rows(codes)
        self.make_room(len(tail) + self._closing_rows + len(self._assistant_prefixes[self.modality])
                       + reserve_rows)
        return self.history_rows() + tail

    def make_room(self, needed_rows: int) -> int:
        """Drop the oldest exchanges until ``needed_rows`` fit; returns how many left."""
        limit = self.capacity_rows - needed_rows
        if len(self._system_rows) > limit:
            raise ContextFullError(len(self._system_rows) + needed_rows, self.capacity_rows)
        if self.history_rows_count <= limit:
            return 0
        target = limit - self.capacity_rows // FREE_FRACTION_AFTER_DROP
        dropped = 0
        while self.exchanges and (self.history_rows_count > limit
                                  or self.history_rows_count > target):
            self.exchanges.pop(0)
            dropped += 1
        self.dropped += dropped
        return dropped

    def commit(self, user: Turn, assistant: Turn | None) -> Exchange:
        """Remember an answered user turn and what the user heard of the reply."""
        rows = self.user_rows(user)
        if assistant is not None:
            rows += turn_rows(self.tokenizer, assistant)
        exchange = Exchange(user, assistant, tuple(rows))
        self.exchanges.append(exchange)
        return exchange

    def clear(self) -> None:
        self.exchanges.clear()
        self.dropped = 0
