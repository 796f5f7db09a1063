"""Streaming generation: the text/audio state machine of contract §1.7 over a KV-cached session.

``GenerationSession`` owns the three KV caches and the rows they hold. ``prefill(grid)`` reuses
the longest cached prefix of the new prompt (so a conversation that grows turn by turn only runs
its new rows), ``rows()`` yields each row as soon as it is sampled and honours a cancel event
between rows, ``truncate(n)`` rolls the history back (barge-in). A text-output pass
(speech-to-text for the transcript) is just a prefill of a text-output prompt plus ``rows()``;
see :func:`text_pass`.

Per step (1-based k): the mode is updated from the last appended row *before* the forward, so
the session knows whether the text head is needed: in audio mode its sample is overwritten by
modality_pad and it draws no randomness (per-channel generators), so skipping it is exact.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.decode_policy import machine_plan
from app.engine.moss_speech.decode_step import DecodeChoice, EagerStep, select_decode_step
from app.engine.moss_speech.model import Logits, MossSpeechModel
from app.engine.moss_speech.prompt import OutputModality, Turn, build_prompt
from app.engine.moss_speech.sampling import (
    ChannelSampler,
    Sampling,
    mask_audio_logits,
    mask_text_logits,
    new_seed,
)
from app.engine.moss_speech.tokenizer import MossTokenizer

log = logging.getLogger(__name__)

TEXT, AUDIO = "text", "audio"
Row = tuple[int, int]


def initial_mode(last_row: Row, config: MossSpeechConfig) -> str:
    """Mode from the prompt's last row: modality_pad text → audio, then audio_pad → text wins."""
    mode = TEXT
    if last_row[0] == config.modality_pad_token_id:
        mode = AUDIO
    if last_row[1] == config.audio_pad_token_id:
        mode = TEXT
    return mode


def next_mode(mode: str, last_row: Row, config: MossSpeechConfig) -> str:
    """Transition read from the last appended row; both rules apply in this order each step."""
    if mode == TEXT and last_row[0] == config.sosp_token_id:
        mode = AUDIO
    if mode == AUDIO and last_row[1] == config.eosp_token_id:
        mode = TEXT
    return mode


def is_stop_row(row: Row, config: MossSpeechConfig) -> bool:
    """The reference stoppers watch the text channel only; the stop row stays in the output."""
    return row[0] in (config.pad_token_id, config.im_end_token_id)


class RowSampler:
    """FSM plus the two channel samplers for one reply (B = 1)."""

    def __init__(self, config: MossSpeechConfig, sampling: Sampling, history: Tensor,
                 seed: int | None, device: torch.device) -> None:
        last: Row = (int(history[-1, 0]), int(history[-1, 1]))  # history: [L, 2] all rows so far
        self.config, self.sampling = config, sampling
        self.mode, self.last_row = initial_mode(last, config), last
        self.step, self.finished = 0, False
        seed = new_seed() if seed is None else seed
        self.text = ChannelSampler(config.vocab_size, sampling, device, seed)
        self.audio = ChannelSampler(config.audio_vocab_size, sampling, device, seed + 1)
        self.text.remember(history[:, 0].to(device))  # fill values (151667, 512) included
        self.audio.remember(history[:, 1].to(device))
        self._modality_pad = torch.tensor(config.modality_pad_token_id, device=device)

    def upcoming_mode(self) -> str:
        """The mode the next step will sample in (known before its forward)."""
        return next_mode(self.mode, self.last_row, self.config)

    def sample(self, text_logits: Tensor | None, audio_logits: Tensor) -> tuple[Tensor, Row]:
        """Logits [V] / [V_audio] fp32 (text may be None in audio mode) → (row [2] tensor, row).

        The logits are masked in place.
        """
        cfg, s = self.config, self.sampling
        self.step += 1
        self.mode = self.upcoming_mode()
        audio_id = self.audio(mask_audio_logits(audio_logits, self.step, s.min_new_rows,
                                                cfg.eosp_token_id))
        if self.mode == AUDIO:
            text_id = self._modality_pad  # overwrite: the text sample would be discarded
        elif text_logits is None:
            raise ValueError("text logits are needed in text mode")
        else:
            text_id = self.text(mask_text_logits(text_logits, self.step, s.min_new_rows,
                                                 cfg.im_end_token_id))
        row_t = torch.stack((text_id, audio_id))  # [2]
        text, audio = row_t.tolist()  # the one host sync per row
        row = (int(text), int(audio))
        self.text.remember(row[0])
        self.audio.remember(row[1])
        self.last_row = row
        self.finished = is_stop_row(row, cfg) or self.step >= s.max_new_rows
        return row_t, row


class GenerationSession:
    """KV caches + the rows they hold, for one conversation on one model.

    ``decode_path`` picks the per-row step (:mod:`.decode_policy`: ``auto``, ``compile``,
    ``graph``, ``static`` or ``eager``); anything but eager is built and validated against eager
    here, on the fresh caches, and ``decode`` says which one runs and why."""

    def __init__(self, model: MossSpeechModel, max_rows: int, decode_path: str = "eager",
                 prefill_chunk_rows: int = 1024) -> None:
        self.model, self.config = model, model.config
        self.caches = model.new_caches(max_rows)
        self.history: list[Row] = []  # rows whose keys/values are in the caches
        self.prefill_chunk_rows = prefill_chunk_rows
        self._logits: Logits | None = None  # logits after the last prefilled row
        if decode_path == "eager":
            self.decode = DecodeChoice(EagerStep(model, self.caches))
        else:
            plan = machine_plan(model.device.type, decode_path)
            self.decode = select_decode_step(model, self.caches, plan)

    @property
    def max_rows(self) -> int:
        return self.caches.max_rows

    def reset(self) -> None:
        self.truncate(0)

    def truncate(self, n_rows: int) -> None:
        """Keep the first ``n_rows`` rows of the history (and their caches)."""
        self.caches.truncate(n_rows)
        del self.history[n_rows:]
        self._logits = None

    def prefill(self, grid: Tensor | Sequence[Row]) -> int:
        """Make ``grid`` [L, 2] the history, running only rows past the longest cached prefix.

        Returns the number of rows reused from the cache.
        """
        cpu = torch.as_tensor(grid, dtype=torch.int64).reshape(-1, 2).cpu()
        self.model.check_grid(cpu[None])  # on the host: no device syncs, no round trip for rows
        rows: list[Row] = [(int(t), int(a)) for t, a in cpu.tolist()]
        self.caches.check_room(0, len(rows))
        reuse = min(_common_prefix(self.history, rows), len(rows) - 1)  # re-run the last row
        self.truncate(reuse)
        grid = cpu.to(self.model.embed_device)  # the embedding reads the ids where it lives
        first_mode = next_mode(initial_mode(rows[-1], self.config), rows[-1], self.config)
        with torch.no_grad():
            for start in range(reuse, len(rows), self.prefill_chunk_rows):
                end = min(start + self.prefill_chunk_rows, len(rows))
                logits = self.model.forward_rows(grid[None, start:end], self.caches, start,
                                                 text_head=end == len(rows) and first_mode == TEXT)
        self.history = rows
        self._logits = logits
        return reuse

    def rows(self, sampling: Sampling | Any = None, cancel: threading.Event | None = None,
             seed: int | None = None) -> Iterator[Row]:
        """Yield (text_id, audio_id) rows as they are sampled, stop row included.

        A set ``cancel`` ends the iterator before the next row. The last yielded row is not yet
        in the caches (it has not been forwarded); a later ``prefill`` handles that.
        """
        if self._logits is None:
            raise RuntimeError("prefill() a prompt before generating rows")
        sampling = Sampling.coerce(sampling)
        if len(self.history) + sampling.max_new_rows - 1 > self.max_rows:
            raise ValueError(f"{len(self.history)} prompt rows + {sampling.max_new_rows} new rows "
                             f"exceed the KV cache ({self.max_rows} rows)")
        history = torch.tensor(self.history, dtype=torch.int64)
        sampler = RowSampler(self.config, sampling, history, seed, self.model.device)
        logits, self._logits = self._logits, None
        while not (cancel is not None and cancel.is_set()):
            text_logits, audio_logits = logits
            with torch.no_grad():
                row_t, row = sampler.sample(None if text_logits is None else text_logits[0],
                                            audio_logits[0])
            yield row
            if sampler.finished or (cancel is not None and cancel.is_set()):
                return
            with torch.no_grad():
                logits = self._step(self._row_input(row_t, row), sampler.upcoming_mode() == TEXT)
            self.history.append(row)

    def _row_input(self, row_t: Tensor, row: Row) -> Tensor:
        """The sampled row [1, 1, 2] where the embedding tables live: the device tensor as
        sampled, or the host's copy of the ids (already there after the row's one sync)."""
        if self.model.embed_device == row_t.device:
            return row_t.view(1, 1, 2)
        return torch.tensor([[row]], dtype=torch.int64)

    def _step(self, row: Tensor, text_head: bool) -> Logits:
        """Forward one appended row [1, 1, 2] at the next position."""
        return self.decode.step(row, len(self.history), text_head)


def open_session(model: MossSpeechModel, capacity: int, decode_path: str) -> GenerationSession:
    """A session whose decode step is chosen (and validated) now, on this thread."""
    session = GenerationSession(model, capacity, decode_path=decode_path)
    log.info("decode step on %s: %s, ready in %.0f ms", model.device, session.decode.summary,
             session.decode.setup_ms)
    return session


def warm_session(session: GenerationSession, tokenizer: MossTokenizer) -> None:
    """Run a few rows of both modes (text head off / on) so the first reply pays for no
    first-use kernels; the session is empty again afterwards."""
    modalities: tuple[OutputModality, ...] = ("audio", "text")
    for modality in modalities:
        session.prefill(build_prompt(tokenizer, [Turn("system", "Warm up.")], modality))
        for _row in session.rows(Sampling(max_new_rows=4, min_new_rows=0), seed=0):
            pass
    session.reset()


def generate_rows(model: MossSpeechModel, prompt_grid: Tensor, sampling: Sampling | Any = None,
                  cancel: threading.Event | None = None,
                  seed: int | None = None) -> Iterator[Row]:
    """One-shot streaming generation: a fresh session sized for the prompt plus the reply."""
    sampling = Sampling.coerce(sampling)
    grid = torch.as_tensor(prompt_grid, dtype=torch.int64).reshape(-1, 2)
    session = GenerationSession(model, max_rows=grid.shape[0] + sampling.max_new_rows)
    session.prefill(grid)
    yield from session.rows(sampling, cancel=cancel, seed=seed)


def text_pass(session: GenerationSession, prompt_grid: Tensor, max_new_rows: int = 256,
              cancel: threading.Event | None = None) -> list[Row]:
    """Greedy text-output pass (e.g. a transcript) on the session's caches.

    The prompt should end with a text-output assistant prefix. Rows shared with the
    conversation are reused and rows after the divergence are recomputed by the next prefill.
    """
    sampling = Sampling(temperature=0.0, repetition_penalty=1.0, max_new_rows=max_new_rows,
                        min_new_rows=0)
    session.prefill(prompt_grid)
    return list(session.rows(sampling, cancel=cancel, seed=0))


def _common_prefix(a: Sequence[Row], b: Sequence[Row]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n

