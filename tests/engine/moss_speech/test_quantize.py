from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.quantize import PrecisionError, quantize_linears, weight_bytes
from app.engine.moss_speech.weights import load_model, random_model


@pytest.fixture(scope="module")
def int8_model(tiny_dir: Path) -> MossSpeechModel:
    return load_model(tiny_dir, precision="int8")


def test_int8_quantises_the_decoder_linears_and_the_heads(int8_model: MossSpeechModel,
                                                          tiny_dir: Path) -> None:
    linears = [m for m in int8_model.modules() if isinstance(m, nn.Linear)]
    heads = (int8_model.text_lm_head, int8_model.audio_lm_head)
    decoder = [m for m in linears if all(m is not head for head in heads)]
    assert len(decoder) == 7 * MossSpeechConfig.tiny().kv_layers
    assert all(type(m.weight).__name__ == "Int8Tensor" for m in decoder)
    assert all(type(head.weight).__name__ == "Int8Tensor" for head in heads)  # heads int8
    assert type(int8_model.model.embed_tokens.weight) is nn.Parameter  # tables stay bf16
    assert int8_model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert int8_model.dtype == torch.bfloat16 and int8_model.precision == "int8"
    bf16 = load_model(tiny_dir, precision="bf16")
    linear_bf16 = sum(m.weight.numel() * 2 for m in linears)
    saved = weight_bytes(bf16) - weight_bytes(int8_model)
    assert saved > 0.45 * linear_bf16  # int8 decoder weights are about half of bf16


def test_int8_logits_are_close_to_full_precision(int8_model: MossSpeechModel,
                                                 tiny_model: MossSpeechModel) -> None:
    cfg = tiny_model.config
    grid = torch.tensor([[(t, cfg.audio_pad_token_id) for t in range(100, 130)]
                         + [(cfg.modality_pad_token_id, c) for c in range(900, 930)]])
    ref_text, ref_audio = tiny_model.forward_grid(grid)
    text, audio = int8_model.forward_grid(grid)
    for ours, ref in ((text, ref_text), (audio, ref_audio)):
        cosine = F.cosine_similarity(ours.flatten(1), ref.flatten(1)).item()
        assert cosine > 0.99
        agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
        assert agree > 0.8


def test_random_full_structure_model_and_quantiser_errors() -> None:
    config = MossSpeechConfig.tiny().with_(num_shared_layers=1, num_hidden_layers=2)
    model = random_model(config, precision="int8", seed=0)
    assert not any(p.is_meta for p in model.parameters())
    text, audio = model.forward_grid(torch.tensor([[(1, 512), (2, 512)]]))
    assert torch.isfinite(text).all() and torch.isfinite(audio).all()
    with pytest.raises(PrecisionError, match="use 'int8' or 'int4'"):
        quantize_linears(nn.Linear(4, 4), "bf16")


@pytest.mark.parametrize("precision", ["bf16", "fp32", "int8"])
def test_the_vram_preflight_counts_exactly_what_the_loader_allocates(precision: str) -> None:
    """app/engine/preflight.py estimates weights by the quantisation rule of weights.py; the
    two must agree byte for byte, or the preflight would refuse or admit the wrong setting."""
    from app.engine import preflight

    config = MossSpeechConfig.tiny()
    model = random_model(config, precision=precision)
    dims = preflight.ModelDims.from_config(config.to_dict())
    assert weight_bytes(model) == preflight.weight_bytes(dims, precision)
