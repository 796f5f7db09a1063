"""The text tokenizer (tokenizer.json through `tokenizers`), checked against the special ids.

A tokenizer whose special tokens do not carry the ids the model was trained with would produce
fluent garbage, so loading verifies every special id and names the one that differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer

from app.engine.folders import SPECIAL_TOKENS, FolderError  # the folder check uses the same ids
from app.engine.moss_speech.config import MossSpeechConfig

__all__ = ["SPECIAL_TOKENS", "MossTokenizer", "load_tokenizer"]
# Text decode replacements of the reference processor (contract §1.8).
DECODE_REPLACEMENTS = (("<|empty|>", "."), ("<|end_empty|>", ":"))


class MossTokenizer:
    """Per-segment encoding (no added BOS/EOS) and reference-style decoding."""

    def __init__(self, tokenizer: Tokenizer, config: MossSpeechConfig) -> None:
        self.tokenizer = tokenizer
        self.config = config

    def encode(self, text: str) -> list[int]:
        """Token ids of one segment; special-token strings inside it are recognised."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a text channel: special tokens skipped, modality fill values dropped."""
        cfg = self.config
        dropped = {cfg.modality_pad_token_id, cfg.sosp_token_id}
        text = self.tokenizer.decode([i for i in ids if i not in dropped],
                                     skip_special_tokens=True)
        for token, replacement in DECODE_REPLACEMENTS:
            text = text.replace(token, replacement)
        return text


def load_tokenizer(model_dir: Path | str, config: MossSpeechConfig | None = None) -> MossTokenizer:
    """Load ``tokenizer.json`` from the model folder; FolderError if missing or mismatched."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise FolderError(f"{path.name}: missing in {path.parent}; download the model again")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise FolderError(f"{path.name}: unreadable ({exc}); download the model again") from exc
    if config is None:
        config_path = Path(model_dir) / "config.json"
        config = (MossSpeechConfig.from_folder(model_dir) if config_path.is_file()
                  else MossSpeechConfig.full())
    problems = []
    for token, field in SPECIAL_TOKENS.items():
        expected, found = getattr(config, field), tokenizer.token_to_id(token)
        if found != expected:
            problems.append(f"{token} has id {found}, the model expects {expected}")
    if problems:
        raise FolderError(f"{path.name}: " + "; ".join(problems))
    return MossTokenizer(tokenizer, config)
