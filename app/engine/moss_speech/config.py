"""Typed MOSS-Speech config from ``config.json`` (contract §1.1), with named problems.

Missing and contradictory keys are rejected by name before anything is allocated. The special ids
are config-driven (defaulting to the published ids) so the FSM, prompt and sampler never
hardcode them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from app.engine.folders import FolderError, lm_config_problems, load_json
from app.engine.preflight import ModelDims

# Published special ids (contract §1.6); config.json may override the ones it carries.
PAD_TOKEN_ID = 151643  # <|endoftext|>
IM_START_TOKEN_ID = 151644  # <|im_start|>
IM_END_TOKEN_ID = 151645  # <|im_end|>
SOSP_TOKEN_ID = 151646  # <|object_ref_start|>: start of speech
MODALITY_PAD_TOKEN_ID = 151667  # text channel of audio rows
EOSP_TOKEN_ID = 16384  # audio vocab: end of speech
AUDIO_PAD_TOKEN_ID = 512  # audio channel of text rows


@dataclass(frozen=True)
class MossSpeechConfig:
    """Shapes and special ids of the AR model. Build with :meth:`from_dict` or a preset."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int  # shared + ONE modality block (36), not the KV layer count (40)
    num_shared_layers: int
    num_modality_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    audio_vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    sosp_token_id: int = SOSP_TOKEN_ID
    eosp_token_id: int = EOSP_TOKEN_ID
    modality_pad_token_id: int = MODALITY_PAD_TOKEN_ID
    audio_pad_token_id: int = AUDIO_PAD_TOKEN_ID
    pad_token_id: int = PAD_TOKEN_ID
    im_start_token_id: int = IM_START_TOKEN_ID
    im_end_token_id: int = IM_END_TOKEN_ID

    def dims(self) -> ModelDims:
        """The memory-deciding dimensions, counted by the VRAM preflight's one rule."""
        return ModelDims.from_config(self.to_dict())

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache: shared + text block + audio block."""
        return self.dims().num_decoder_layers

    @property
    def kv_bytes_per_row(self) -> int:
        """KV cache bytes per grid row in bf16."""
        return self.dims().kv_bytes_per_row("bf16")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "config.json") -> MossSpeechConfig:
        """Parse a config.json mapping; raise FolderError naming every bad key."""
        problems = [p.replace("config.json", source, 1) for p in lm_config_problems(raw)]
        if problems:
            raise FolderError("\n".join(problems))
        values = {name: raw[name] for name in cls.__dataclass_fields__
                  if raw.get(name) is not None}
        values.setdefault("head_dim", int(raw["hidden_size"]) // int(raw["num_attention_heads"]))
        try:
            config = cls(**{k: _coerce(cls, k, v) for k, v in values.items()})
        except (TypeError, ValueError) as exc:
            raise FolderError(f"{source}: {exc}") from exc
        problems = config.problems(raw)
        if problems:
            raise FolderError("\n".join(f"{source}: {p}" for p in problems))
        return config

    @classmethod
    def from_folder(cls, folder: Path | str) -> MossSpeechConfig:
        path = Path(folder) / "config.json"
        return cls.from_dict(load_json(path), source=str(path.name))

    def problems(self, raw: Mapping[str, Any] | None = None) -> list[str]:
        """Contradictions between keys, each named (after the required keys are present)."""
        raw = raw or {}
        found: list[str] = []
        positive = ("hidden_size", "intermediate_size", "num_shared_layers", "num_modality_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                    "audio_vocab_size", "max_position_embeddings")
        found += [f"'{k}' must be a positive integer" for k in positive if getattr(self, k) <= 0]
        if self.num_shared_layers + self.num_modality_layers != self.num_hidden_layers:
            found.append(f"num_shared_layers + num_modality_layers ({self.num_shared_layers} + "
                         f"{self.num_modality_layers}) != num_hidden_layers "
                         f"({self.num_hidden_layers})")
        text_ids = ("sosp_token_id", "modality_pad_token_id", "pad_token_id",
                    "im_start_token_id", "im_end_token_id")
        found += [f"'{k}' ({getattr(self, k)}) is outside vocab_size ({self.vocab_size})"
                  for k in text_ids if not 0 <= getattr(self, k) < self.vocab_size]
        found += [f"'{k}' ({getattr(self, k)}) is outside audio_vocab_size "
                  f"({self.audio_vocab_size})" for k in ("eosp_token_id", "audio_pad_token_id")
                  if not 0 <= getattr(self, k) < self.audio_vocab_size]
        if raw.get("rope_scaling"):
            found.append("'rope_scaling' is set; MOSS-Speech uses plain RoPE (no scaling)")
        if raw.get("attention_bias"):
            found.append("'attention_bias' is true; MOSS-Speech layers have no biases")
        if raw.get("hidden_act", "silu") != "silu":
            found.append(f"'hidden_act' is {raw['hidden_act']!r}; only 'silu' is supported")
        if raw.get("tie_word_embeddings"):
            found.append("'tie_word_embeddings' is true; the heads are independent tensors")
        return found

    def to_dict(self) -> dict[str, Any]:
        """The config.json form (HF key names plus architecture tags)."""
        return {"architectures": ["MossSpeechForCausalLM"], "model_type": "moss_speech",
                "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
                "channels": 2, **asdict(self)}

    def with_(self, **changes: Any) -> MossSpeechConfig:
        return replace(self, **changes)

    @classmethod
    def full(cls) -> MossSpeechConfig:
        """The published checkpoint's shapes (contract §1.1)."""
        return cls(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                   num_shared_layers=32, num_modality_layers=4, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, vocab_size=151680,
                   audio_vocab_size=16512)

    @classmethod
    def tiny(cls) -> MossSpeechConfig:
        """Structure-preserving CPU test model with the real vocab sizes (contract §7)."""
        return cls(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                   num_shared_layers=2, num_modality_layers=1, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=16, vocab_size=151680,
                   audio_vocab_size=16512, max_position_embeddings=1024)


def _coerce(cls: Any, name: str, value: Any) -> Any:  # cls: a dataclass type
    kind = cls.__dataclass_fields__[name].type
    if kind == "float":
        return float(value)
    if kind == "int":
        if isinstance(value, bool) or int(value) != value:
            raise ValueError(f"'{name}' must be an integer, got {value!r}")
        return int(value)
    return value
