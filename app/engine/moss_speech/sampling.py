"""Per-channel logits processors and the row sampler of contract §1.7.

Each channel (text, audio) has its own processors and its own random generator, so a channel
whose sample is thrown away (the text channel in audio mode) consumes no randomness; that is what
makes skipping the text head in audio mode exact. Order per step, as the reference does:
fp32 logits → hard masks (audio range, eosp / im_end during the first rows) → repetition penalty
over the channel's full history → [sampling only] temperature → top-k → top-p → argmax or draw.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Sampling:
    """Sampling options applied to both channels (the reference UI uses one set for both)."""

    temperature: float = 0.6  # 0 = greedy
    top_p: float = 0.95  # 1.0 = off
    top_k: int = 20  # 0 = off
    repetition_penalty: float = 1.1  # 1.0 = off
    max_new_rows: int = 500
    min_new_rows: int = 10  # eosp (and im_end on text) masked for the first rows

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.temperature <= 100.0:
            problems.append("temperature must be in [0, 100] (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            problems.append("top_p must be in (0, 1]")
        if self.top_k < 0:
            problems.append("top_k must be >= 0 (0 = off)")
        if self.repetition_penalty <= 0.0:
            problems.append("repetition_penalty must be > 0")
        if self.max_new_rows < 1 or self.min_new_rows < 0:
            problems.append("max_new_rows must be >= 1 and min_new_rows >= 0")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0.0

    @classmethod
    def coerce(cls, value: Any) -> Sampling:
        """Accept a Sampling, the app's SamplingSettings, a dict, or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        names = [f.name for f in fields(cls)]
        if isinstance(value, dict):
            return cls(**{k: value[k] for k in names if k in value})
        return cls(**{k: getattr(value, k) for k in names if hasattr(value, k)})


def mask_audio_logits(logits: Tensor, step: int, min_new_rows: int, eosp: int) -> Tensor:
    """In place: ids past eosp are never valid; eosp itself only from step ``min_new_rows``."""
    logits[eosp + 1:] = NEG_INF
    if step < min_new_rows:
        logits[eosp] = NEG_INF
    return logits


def mask_text_logits(logits: Tensor, step: int, min_new_rows: int, im_end: int) -> Tensor:
    """In place: the min-new-tokens processor blocks <|im_end|> for the first ``min_new_rows``."""
    if step <= min_new_rows:
        logits[im_end] = NEG_INF
    return logits


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """HF math on every id in the history: s < 0 → s·p, else s / p. seen: [V] bool."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    return logits if temperature == 1.0 else logits / temperature


def apply_top_k(logits: Tensor, top_k: int) -> Tensor:
    """Keep every id scoring at least the k-th best (ties at the threshold are all kept)."""
    if top_k <= 0 or top_k >= logits.shape[-1]:
        return logits
    threshold = torch.topk(logits, top_k).values[..., -1:]
    return logits.masked_fill(logits < threshold, NEG_INF)


def apply_top_p(logits: Tensor, top_p: float) -> Tensor:
    """Drop the least likely ids whose total mass is at most 1 - top_p; keep at least one."""
    if top_p >= 1.0:
        return logits
    sorted_logits, sorted_ids = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1.0 - top_p)
    drop_sorted[..., -1:] = False
    drop = drop_sorted.scatter(-1, sorted_ids, drop_sorted)
    return logits.masked_fill(drop, NEG_INF)


def draw(logits: Tensor, do_sample: bool, generator: torch.Generator | None) -> Tensor:
    """Greedy argmax (lowest id on ties) or a draw from softmax(logits), on the device.

    The draw is an exponential race, argmax(p / E) with E ~ Exp(1): the same distribution as
    multinomial, without a host sync (gpt-fast's trick).
    """
    if not do_sample:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits, dim=-1)
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return torch.argmax(probs / race, dim=-1)


class ChannelSampler:
    """The processors of one channel plus its history set and random generator."""

    def __init__(self, vocab_size: int, sampling: Sampling, device: torch.device,
                 seed: int) -> None:
        self.sampling = sampling
        self.seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)  # [V]
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def remember(self, ids: Tensor | int) -> None:
        """Add ids (prompt fill values included) to the penalty history."""
        self.seen[ids] = True

    def __call__(self, logits: Tensor) -> Tensor:
        """logits [V] fp32, already masked → sampled id (0-d tensor on the device)."""
        s = self.sampling
        scores = apply_repetition_penalty(logits, self.seen, s.repetition_penalty)
        if s.do_sample:
            scores = apply_top_p(apply_top_k(apply_temperature(scores, s.temperature), s.top_k),
                                 s.top_p)
        return draw(scores, s.do_sample, self.generator)


def new_seed() -> int:
    return secrets.randbits(62)
