"""What config.json of the AR model must say (contract §1.1), checked torch-free.

Every size has a maximum far above the published model's and far below what would make a check
take minutes (``num_shared_layers = 1e6`` once took 79 s and 2.5 GB to list the expected
tensors). The same rules run in verification and in :class:`MossSpeechConfig`, so a folder that
verifies also loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

LM_REQUIRED_CONFIG_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_shared_layers",
    "num_modality_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "audio_vocab_size",
    "rms_norm_eps",
    "rope_theta",
)
# key → largest accepted value (the published model's value in the comment)
LM_SIZE_LIMITS = {
    "hidden_size": 65_536,  # 4096
    "intermediate_size": 262_144,  # 12288
    "num_hidden_layers": 1_024,  # 36
    "num_shared_layers": 1_024,  # 32
    "num_modality_layers": 1_024,  # 4
    "num_attention_heads": 1_024,  # 32
    "num_key_value_heads": 1_024,  # 8
    "head_dim": 4_096,  # 128 (optional: hidden_size / num_attention_heads)
    "vocab_size": 4_194_304,  # 151680
    "audio_vocab_size": 4_194_304,  # 16512
    "max_position_embeddings": 16_777_216,  # 40960 (optional)
}
# Published special ids (contract §1.6); config.json may carry its own.
DEFAULT_TOKEN_IDS = {
    "pad_token_id": 151643,  # <|endoftext|>
    "im_start_token_id": 151644,  # <|im_start|>
    "im_end_token_id": 151645,  # <|im_end|>
    "sosp_token_id": 151646,  # <|object_ref_start|>: start of speech
    "modality_pad_token_id": 151667,  # text channel of audio rows
    "eosp_token_id": 16384,  # audio vocab: end of speech
    "audio_pad_token_id": 512,  # audio channel of text rows
}
TEXT_TOKEN_KEYS = ("sosp_token_id", "modality_pad_token_id", "pad_token_id",
                   "im_start_token_id", "im_end_token_id")
AUDIO_TOKEN_KEYS = ("eosp_token_id", "audio_pad_token_id")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size_problems(config: Mapping[str, Any]) -> list[str]:
    found = []
    for key, limit in LM_SIZE_LIMITS.items():
        value = config.get(key)
        if value is None and key not in LM_REQUIRED_CONFIG_KEYS:
            continue
        if isinstance(value, float) and value.is_integer() and 0 < value <= limit:
            continue  # 4096.0 is 4096 (MossSpeechConfig converts it)
        if isinstance(value, bool) or not isinstance(value, int):
            found.append(f"'{key}' must be an integer, got {str(value)[:40]}")
        elif not 0 < value <= limit:
            found.append(f"'{key}' is {value}; it must be between 1 and {limit:,}")
    for key in ("rms_norm_eps", "rope_theta"):
        value = config[key]
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and value > 0):
            found.append(f"'{key}' must be a positive number, got {str(value)[:40]}")
    return found


def _id_problems(config: Mapping[str, Any]) -> list[str]:
    found = []
    for keys, size_key in ((TEXT_TOKEN_KEYS, "vocab_size"), (AUDIO_TOKEN_KEYS, "audio_vocab_size")):
        for key in keys:
            value = config.get(key)
            if value is None:
                value = DEFAULT_TOKEN_IDS[key]
            if not _is_int(value):
                found.append(f"'{key}' must be an integer, got {str(value)[:40]}")
            elif not 0 <= value < int(config[size_key]):
                found.append(f"'{key}' ({value}) is outside {size_key} ({config[size_key]})")
    return found


def _architecture_problems(config: Mapping[str, Any]) -> list[str]:
    found = []
    if config.get("rope_scaling"):
        found.append("'rope_scaling' is set; MOSS-Speech uses plain RoPE (no scaling)")
    if config.get("attention_bias"):
        found.append("'attention_bias' is true; MOSS-Speech layers have no biases")
    if config.get("hidden_act", "silu") != "silu":
        found.append(f"'hidden_act' is {str(config['hidden_act'])[:40]!r}; only 'silu' is "
                     "supported")
    if config.get("tie_word_embeddings"):
        found.append("'tie_word_embeddings' is true; the heads are independent tensors")
    return found


def lm_config_problems(config: Mapping[str, Any]) -> list[str]:
    """Missing, out-of-range and contradictory config.json keys, each named."""
    problems = [f"config.json: missing key '{k}'" for k in LM_REQUIRED_CONFIG_KEYS
                if k not in config]
    if problems:
        return problems
    found = _size_problems(config)
    if not found:
        shared, modality = int(config["num_shared_layers"]), int(config["num_modality_layers"])
        if shared + modality != int(config["num_hidden_layers"]):
            found.append(f"num_shared_layers + num_modality_layers ({shared} + {modality}) != "
                         f"num_hidden_layers ({int(config['num_hidden_layers'])})")
        if int(config["num_attention_heads"]) % int(config["num_key_value_heads"]):
            found.append("num_attention_heads is not a multiple of num_key_value_heads")
        if not config.get("head_dim") and int(config["hidden_size"]) < int(
                config["num_attention_heads"]):
            found.append("hidden_size is smaller than num_attention_heads (no head_dim given)")
        found += _id_problems(config)
    found += _architecture_problems(config)
    return [f"config.json: {p}" for p in found]
