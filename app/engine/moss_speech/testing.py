"""Tiny random checkpoints in the real folder layout (contract §7), for tests, benchmarks and the
self-test: ``config.json``, safetensors (one file, or shards plus ``model.safetensors.index.json``)
with the real key names, and a byte-level ``tokenizer.json`` whose special tokens carry the real
ids. The vocab sizes are the real ones, so every special id is valid and the same code paths run
as on the published checkpoint.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file

from app.engine.folders import expected_lm_shapes
from app.engine.moss_speech.codec.testing import write_tiny_codec
from app.engine.moss_speech.config import MossSpeechConfig

if TYPE_CHECKING:
    from app.engine.moss_speech.model import MossSpeechModel
    from app.engine.moss_speech.sampling import Sampling
    from app.settings import Settings

__all__ = ["TinyReply", "offline_rows", "tiny_engine_reply", "tiny_engine_settings",
           "write_tiny_checkpoint", "write_tiny_codec", "write_tiny_voice"]

TINY_SPECIAL_TOKENS = {  # id → (string, special); 151667 is <think> in Qwen3 and not special
    151643: ("<|endoftext|>", True),
    151644: ("<|im_start|>", True),
    151645: ("<|im_end|>", True),
    151646: ("<|object_ref_start|>", True),
    151667: ("<think>", False),
    # Real ids unknown (contract §8.4); these two only exercise the decode replacements.
    151670: ("<|empty|>", False),
    151671: ("<|end_empty|>", False),
}


def write_tiny_checkpoint(folder: Path | str, seed: int = 0, shards: int = 1,
                          config: MossSpeechConfig | None = None,
                          dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write a random-weight model folder and return its path (the tiny config by default)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = config or MossSpeechConfig.tiny()
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n",
                                         encoding="utf-8")
    (folder / "tokenizer.json").write_text(json.dumps(tiny_tokenizer_json(), ensure_ascii=False),
                                            encoding="utf-8")
    tensors = random_tensors(config, seed, dtype)
    names = sorted(tensors)
    if shards <= 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return folder
    weight_map: dict[str, str] = {}
    per_shard = math.ceil(len(names) / shards)
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in names[i * per_shard:(i + 1) * per_shard]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2),
                                                           encoding="utf-8")
    return folder


def random_tensors(config: MossSpeechConfig, seed: int,
                   dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every checkpoint key with a random value scaled so activations stay O(1)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(expected_lm_shapes(config.to_dict()).items()):
        if len(shape) == 1:  # norm weights around 1
            value = 1.0 + 0.1 * torch.randn(shape, generator=generator)
        elif "embed" in name:
            value = torch.randn(shape, generator=generator)
        else:  # Linear [out, in]: heads a little sharper so sampling is not uniform
            gain = 4.0 if "lm_head" in name else 1.0
            value = torch.randn(shape, generator=generator) * (gain / math.sqrt(shape[1]))
        tensors[name] = value.to(dtype).contiguous()
    return tensors


def tiny_tokenizer_json() -> dict:
    """A byte-level BPE tokenizer (256 byte tokens, no merges) plus the special tokens.

    `tokenizers` keeps an added token's id only when the model vocab holds it, so the special
    tokens are in the vocab too, at their real ids.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    byte_to_char = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):  # GPT-2 byte-to-unicode map
        if b not in byte_to_char:
            byte_to_char[b] = chr(256 + extra)
            extra += 1
    vocab = {char: byte for byte, char in byte_to_char.items()}
    added = []
    for token_id, (content, special) in TINY_SPECIAL_TOKENS.items():
        vocab[content] = token_id
        added.append({"id": token_id, "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": special})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"}, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }



def write_tiny_voice(path: Path | str, seconds: float = 2.0, rate_hz: int = 24000) -> Path:
    """A short speech-like voice-prompt WAV (the app ships no voice of its own)."""
    import soundfile

    from app.engine.moss_speech.codec.testing import speech_like

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, speech_like(seconds, rate_hz, seed=7), rate_hz, subtype="FLOAT")
    return path


def tiny_engine_settings(folder: Path | str, **engine: object) -> Settings:
    """Settings for the moss_speech engine on tiny random model, codec and voice written under
    ``folder`` (once; reused if present). CPU, fp32, short replies."""
    from app.settings import Settings

    folder = Path(folder)
    model_dir, codec_dir = folder / "model", folder / "codec"
    if not (model_dir / "config.json").is_file():
        write_tiny_checkpoint(model_dir)
    if not (codec_dir / "flow" / "hift.pt").is_file():
        write_tiny_codec(codec_dir)
    voice = folder / "voice.wav"
    if not voice.is_file():
        write_tiny_voice(voice)
    values = {"kind": "moss_speech", "model_dir": str(model_dir), "codec_dir": str(codec_dir),
              "voice_prompt": str(voice), "device": "cpu", "precision": "fp32", **engine}
    data = Settings().model_dump()
    data["engine"].update(values)
    data["sampling"].update(max_new_rows=24, seed=0)
    return Settings.model_validate(data)


@dataclass(frozen=True)
class TinyReply:
    """What :func:`tiny_engine_reply` observed."""

    audio_samples: int
    sample_rate_hz: int
    stages_ms: dict[str, float]
    transcripts: dict[str, str]
    seconds: float


def tiny_engine_reply(folder: Path | str) -> TinyReply:
    """Build the real engine on tiny random checkpoints and answer one short spoken turn
    (the end-to-end step of ``python -m app --self-test``). Raises if anything fails."""
    import threading
    import time

    import numpy as np

    from app.engine.base import ReplyAudio, ReplyDone, ReplyFailed, ReplyText, StageTimed, UserTurn
    from app.engine.moss_speech.build import build_engine
    from app.engine.moss_speech.codec.testing import speech_like

    started = time.perf_counter()
    engine = build_engine(tiny_engine_settings(folder))
    try:
        question = speech_like(1.0, 16000, seed=11)
        engine.feed_user_audio(1, question)
        samples, rate, stages = 0, 24000, {}
        for event in engine.respond(UserTurn(1, question), threading.Event()):
            if isinstance(event, ReplyAudio):
                samples, rate = samples + len(event.pcm), event.sample_rate_hz
            elif isinstance(event, StageTimed):
                stages[event.stage] = event.duration_ms
            elif isinstance(event, ReplyFailed):
                raise RuntimeError(f"the tiny engine failed: {event.message}")
            elif isinstance(event, ReplyDone) and event.cancelled:
                raise RuntimeError("the tiny engine reply was cancelled")
        if samples == 0 or not np.isfinite(samples):
            raise RuntimeError("the tiny engine produced no audio")
        engine.reply_heard(1, samples, rate)
        transcripts: dict[str, str] = {e.role: e.text
                                       for e in engine.idle_work(threading.Event())
                                       if isinstance(e, ReplyText)}
        return TinyReply(samples, rate, stages, transcripts, time.perf_counter() - started)
    finally:
        engine.close()


def offline_rows(model: MossSpeechModel, prompt: torch.Tensor, sampling: Sampling,
                 seed: int) -> list[tuple[int, int]]:
    """Reference loop: no cache, full forward_grid each step, both heads always computed; what
    the streamed rows must equal (the generation tests and the self-test)."""
    from app.engine.moss_speech.generate import RowSampler

    sampler = RowSampler(model.config, sampling, prompt, seed, model.device)
    grid, rows = prompt, []
    with torch.no_grad():
        while not sampler.finished:
            text, audio = model.forward_grid(grid[None])  # [1, L, V], [1, L, V_audio]
            _, row = sampler.sample(text[0, -1].clone(), audio[0, -1].clone())
            rows.append(row)
            grid = torch.cat([grid, torch.tensor([row])])
    return rows
