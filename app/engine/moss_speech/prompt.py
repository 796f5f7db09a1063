"""The prompt grid of contract §2.2, built by hand (the repo's chat template is not used).

Per turn: rows of ``<|im_start|>{role}\\n``, the content (text rows, or an audio segment of n+2
rows), rows of ``<|im_end|>\\n``. Text is tokenised per segment, so BPE never merges across
segment boundaries. Without a system turn the default system turn is appended AFTER the turns.
The assistant prefix ends with sosp when the reply is speech.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from app.engine.moss_speech.tokenizer import MossTokenizer

ROLES = ("system", "user", "assistant")
OutputModality = Literal["audio", "text"]
# Processor fallback prompts (contract §2.3); the app passes its own system turn first.
DEFAULT_SYSTEM_PROMPTS = {
    "audio": "You are a helpful assistant. Respond with spoken outputs.",
    "text": "You are a helpful assistant. Respond with text outputs.",
}


@dataclass(frozen=True)
class Turn:
    """One turn: text, or the Whisper-VQ codes (0..16383) of a spoken turn."""

    role: str
    content: str | tuple[int, ...]

    @property
    def is_audio(self) -> bool:
        return not isinstance(self.content, str)

    @property
    def codes(self) -> tuple[int, ...]:
        """The codes of a spoken turn; empty for a text turn."""
        return () if isinstance(self.content, str) else self.content


def as_turn(item: Turn | Mapping[str, Any]) -> Turn:
    """Accept a Turn or {"role": ..., "content": str | codes}; codes may be any int sequence."""
    if isinstance(item, Turn):
        turn = item
    else:
        content = item["content"]
        if not isinstance(content, str):
            content = tuple(int(c) for c in _flat(content))
        turn = Turn(str(item["role"]), content)
    if turn.role not in ROLES:
        raise ValueError(f"turn role must be one of {', '.join(ROLES)}, got {turn.role!r}")
    return turn


def text_rows(tokenizer: MossTokenizer, text: str) -> list[tuple[int, int]]:
    pad = tokenizer.config.audio_pad_token_id
    return [(t, pad) for t in tokenizer.encode(text)]


def audio_rows(tokenizer: MossTokenizer, codes: Sequence[int]) -> list[tuple[int, int]]:
    """An audio segment of n+2 rows: (sosp, audio_pad), (modality_pad, code)×n, (.., eosp)."""
    cfg = tokenizer.config
    bad = [c for c in codes if not 0 <= c < cfg.eosp_token_id]
    if bad:
        raise ValueError(f"audio codes must lie in [0, {cfg.eosp_token_id}), got {bad[:4]}")
    pad = cfg.modality_pad_token_id
    return ([(cfg.sosp_token_id, cfg.audio_pad_token_id)] + [(pad, c) for c in codes]
            + [(pad, cfg.eosp_token_id)])


def turn_rows(tokenizer: MossTokenizer, turn: Turn) -> list[tuple[int, int]]:
    content = (audio_rows(tokenizer, turn.content) if not isinstance(turn.content, str)
               else text_rows(tokenizer, turn.content))
    return (text_rows(tokenizer, f"<|im_start|>{turn.role}\n") + content
            + text_rows(tokenizer, "<|im_end|>\n"))


def assistant_prefix_rows(tokenizer: MossTokenizer,
                          output_modality: OutputModality) -> list[tuple[int, int]]:
    """``<|im_start|>assistant\\n`` (+ sosp when the reply is speech), contract §2.2."""
    rows = text_rows(tokenizer, "<|im_start|>assistant\n")
    if output_modality == "audio":
        rows.append((tokenizer.config.sosp_token_id, tokenizer.config.audio_pad_token_id))
    return rows


def build_prompt(tokenizer: MossTokenizer, conversation: Iterable[Turn | Mapping[str, Any]],
                 output_modality: OutputModality) -> Tensor:
    """The prompt grid [L, 2] int64 for a conversation and the reply modality."""
    return torch.tensor(prompt_rows(tokenizer, conversation, output_modality), dtype=torch.int64)


def prompt_rows(tokenizer: MossTokenizer, conversation: Iterable[Turn | Mapping[str, Any]],
                output_modality: OutputModality) -> list[tuple[int, int]]:
    """The rows of :func:`build_prompt`'s grid, as (text_id, audio_id) tuples."""
    if output_modality not in DEFAULT_SYSTEM_PROMPTS:
        raise ValueError(f"output_modality must be 'audio' or 'text', got {output_modality!r}")
    turns = [as_turn(t) for t in conversation]
    if not any(t.role == "system" for t in turns):
        turns.append(Turn("system", DEFAULT_SYSTEM_PROMPTS[output_modality]))
    rows: list[tuple[int, int]] = []
    for turn in turns:
        rows += turn_rows(tokenizer, turn)
    return rows + assistant_prefix_rows(tokenizer, output_modality)


def _flat(content: Any) -> Iterable[Any]:
    if hasattr(content, "tolist"):  # numpy array or tensor
        content = content.tolist()
    if isinstance(content, Mapping):
        content = content.get("codes", ())
    return content
