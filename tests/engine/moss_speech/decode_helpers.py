"""A conversation script for comparing decode steps: over 50 rows, both mode switches, a
roll-back into the middle of a reply and an incremental prefill on top of it."""

from __future__ import annotations

from app.engine.moss_speech.generate import GenerationSession
from app.engine.moss_speech.prompt import Turn, build_prompt
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.tokenizer import MossTokenizer

Row = tuple[int, int]


def conversation_rows(session: GenerationSession, tokenizer: MossTokenizer,
                      min_new_rows: int = 2) -> list[Row]:
    """A text-output reply (it switches to audio and back on the switchy model), a truncate to
    its middle, two appended rows ending in sosp, and a second reply from there; each reply
    runs at least ``min_new_rows`` rows (eosp and im_end masked until then)."""
    cfg = session.config
    sampling = Sampling(max_new_rows=40, min_new_rows=min_new_rows)
    prompt = build_prompt(tokenizer, [Turn("system", "Hi"), Turn("user", (5, 6, 7))], "text")
    session.prefill(prompt)
    first = list(session.rows(sampling, seed=1))
    session.truncate(len(prompt) + len(first) // 2)
    more = [(20, cfg.audio_pad_token_id), (cfg.sosp_token_id, cfg.audio_pad_token_id)]
    kept = list(session.history)
    assert session.prefill(kept + more) == len(kept)  # the rolled-back prefix is reused
    return first + list(session.rows(sampling, seed=1))


def switches_of(rows: list[Row], session: GenerationSession) -> set[str]:
    """Which of the mode switches (sosp: text → audio, eosp: audio → text) the rows contain."""
    cfg = session.config
    seen = {"sosp"} if any(t == cfg.sosp_token_id for t, _ in rows) else set()
    return seen | ({"eosp"} if any(a == cfg.eosp_token_id for _, a in rows) else set())
