"""The transcript from the model's own text branch: a speech-to-text pass per side of a turn.

No source shows the text head carrying a transcript while the model speaks (contract §2.6: the
reference overwrites it), so each side gets its own greedy text-output pass: a system
instruction to transcribe, the speech as a user turn, and a text assistant prefix. The passes
run at low priority (the engine worker's idle time: while a reply plays, or between turns),
one row per step, and stop at once when a command arrives; an unfinished job stays queued and
continues from its last row at the next idle moment.

They use their own small KV cache, so the conversation's cache (and its reuse from turn to
turn) is never disturbed; the instruction rows are cached across passes.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Literal

from app.engine.base import ReplyText
from app.engine.moss_speech.generate import GenerationSession, is_stop_row
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.prompt import Turn, prompt_rows
from app.engine.moss_speech.reply import reply_text
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.tokenizer import MossTokenizer
from app.engine.preflight import TRANSCRIPT_KV_ROWS

log = logging.getLogger(__name__)

# Not from a source (none documents a speech-to-text instruction for MOSS-Speech): an explicit
# instruction in the style of the GitHub demo's system prompts (contract §2.3).
TRANSCRIBE_PROMPT = ("You are a speech recognition assistant. Write down exactly what the "
                     "speaker says, word for word, with no other text.")
# KV rows of the transcript cache: ~72 s of speech + 256 text rows (the VRAM plan counts them)
TRANSCRIPT_MAX_ROWS = TRANSCRIPT_KV_ROWS
MAX_TEXT_ROWS = 256
MAX_QUEUED = 16  # older jobs are dropped if the passes never get idle time
Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class TranscriptJob:
    turn_id: int
    role: Role
    codes: tuple[int, ...]


class Transcriber:
    """A queue of speech-to-text jobs and the session that runs them."""

    def __init__(self, model: MossSpeechModel, tokenizer: MossTokenizer,
                 max_rows: int = TRANSCRIPT_MAX_ROWS) -> None:
        self.tokenizer = tokenizer
        self.session = GenerationSession(model, max_rows=max_rows)
        self.jobs: deque[TranscriptJob] = deque()
        self._progress: dict[TranscriptJob, list[tuple[int, int]]] = {}  # rows of a preempted pass
        self._overhead_rows = len(self._prompt(()))

    def add(self, turn_id: int, role: Role, codes: list[int]) -> None:
        """Queue a job (replacing a queued one for the same side of the same turn)."""
        self.drop(turn_id, role)
        if not codes:
            return
        room = self.session.max_rows - self._overhead_rows - MAX_TEXT_ROWS
        if len(codes) > room:
            log.info("transcribing the first %d of %d codes of turn %d (%s)", room, len(codes),
                     turn_id, role)
            codes = codes[:room]
        self.jobs.append(TranscriptJob(turn_id, role, tuple(codes)))
        while len(self.jobs) > MAX_QUEUED:
            self._progress.pop(self.jobs.popleft(), None)

    def drop(self, turn_id: int, role: Role | None = None) -> None:
        """Forget queued jobs of a turn (e.g. the user resumed after a speculative reply)."""
        self.jobs = deque(j for j in self.jobs
                          if not (j.turn_id == turn_id and role in (None, j.role)))
        self._progress = {j: rows for j, rows in self._progress.items() if j in self.jobs}

    def clear(self) -> None:
        self.jobs.clear()
        self._progress.clear()
        self.session.reset()

    def run(self, cancel: threading.Event) -> Iterator[ReplyText | None]:
        """Work through the queue: ``None`` after each step, a final ReplyText per job."""
        while self.jobs and not cancel.is_set():
            job = self.jobs[0]
            try:
                text = yield from self._transcribe(job, cancel)
            except Exception:
                log.exception("transcript pass for turn %d (%s) failed; skipped", job.turn_id,
                              job.role)
                self._discard(job)
                self.session.reset()  # its rows may be half written
                continue
            if text is None:  # preempted: the job stays first in the queue
                return
            self._discard(job)
            yield ReplyText(job.turn_id, text, job.role, final=True)

    def _discard(self, job: TranscriptJob) -> None:
        if self.jobs and self.jobs[0] is job:
            self.jobs.popleft()
        self._progress.pop(job, None)

    def _prompt(self, codes: tuple[int, ...]) -> list[tuple[int, int]]:
        turns = [Turn("system", TRANSCRIBE_PROMPT), Turn("user", codes)]
        return prompt_rows(self.tokenizer, turns, "text")

    def _transcribe(self, job: TranscriptJob,
                    cancel: threading.Event) -> Generator[None, None, str | None]:
        """One pass; returns the text, or None when preempted (the rows so far are kept: a
        greedy pass without penalties continues exactly where it stopped)."""
        max_text = min(MAX_TEXT_ROWS, 16 + len(job.codes))  # speech: ~0.3 tokens per code
        done = self._progress.setdefault(job, [])
        if len(done) < max_text and not (done and is_stop_row(done[-1], self.session.config)):
            sampling = Sampling(temperature=0.0, repetition_penalty=1.0,
                                max_new_rows=max_text - len(done), min_new_rows=0)
            self.session.prefill(self._prompt(job.codes) + done)
            yield None
            for row in self.session.rows(sampling, cancel=cancel, seed=0):
                done.append(row)
                if cancel.is_set():
                    return None
                yield None
            if cancel.is_set():
                return None
        return reply_text(self.tokenizer, done).strip()
