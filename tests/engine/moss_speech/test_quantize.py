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


def _largest_allocation_bytes(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The module's output and the largest single allocation its call made (CPU profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y = module(x)
    return y, max(e.cpu_memory_usage for e in prof.events())


def test_a_large_int8_weight_is_multiplied_a_block_of_rows_at_a_time() -> None:
    """torchao multiplies by a bf16 copy of the whole weight (1.16 GiB for the text head);
    above the budget the same arithmetic runs on blocks of rows: equal output, bounded copy."""
    from app.engine.moss_speech.quantize import RowChunkedInt8Linear

    torch.manual_seed(0)
    weight = torch.randn(1000, 256, dtype=torch.bfloat16) * 0.02
    whole, blocks = (nn.Linear(256, 1000, bias=False, dtype=torch.bfloat16) for _ in range(2))
    for linear in (whole, blocks):
        linear.requires_grad_(False).weight.copy_(weight)
    whole = quantize_linears(whole, "int8", dequant_budget_bytes=1 << 30)
    blocks = quantize_linears(blocks, "int8", dequant_budget_bytes=64 * 1024)
    assert type(whole) is nn.Linear and isinstance(blocks, RowChunkedInt8Linear)
    assert blocks.rows == 128  # 64 KiB of bf16 rows of 256
    assert list(blocks.state_dict()) == ["weight"]
    assert weight_bytes(blocks) == weight_bytes(whole)
    x = torch.randn(3, 5, 256, dtype=torch.bfloat16)
    expected, whole_peak = _largest_allocation_bytes(whole, x)
    got, blocks_peak = _largest_allocation_bytes(blocks, x)
    assert torch.equal(got, expected) and got.dtype == torch.bfloat16
    assert whole_peak >= 1000 * 256 * 2  # the whole bf16 copy
    assert blocks_peak <= 64 * 1024 + 3 * 5 * 1000 * 2  # one block (or the output)


def test_the_loader_swaps_large_heads_and_the_logits_stay_equal() -> None:
    from app.engine import preflight
    from app.engine.moss_speech.quantize import RowChunkedInt8Linear

    config = MossSpeechConfig.tiny().with_(num_shared_layers=1, num_hidden_layers=2)
    plain = random_model(config, precision="int8", seed=0)
    chunked = random_model(config, precision="int8", seed=0, dequant_budget_bytes=1 << 20)
    assert isinstance(chunked.text_lm_head, RowChunkedInt8Linear)
    assert isinstance(chunked.audio_lm_head, RowChunkedInt8Linear)
    assert chunked.text_lm_head.rows == (1 << 20) // (2 * config.hidden_size)
    assert list(chunked.state_dict()) == list(plain.state_dict())
    grid = torch.tensor([[(1, 512), (2, 513), (3, 514)]])
    for ours, ref in zip(chunked.forward_grid(grid), plain.forward_grid(grid), strict=True):
        assert torch.equal(ours, ref)
    # the plan's transient is the largest bf16 copy the loaded model's int8 linears make
    copies = [(m.rows if isinstance(m, RowChunkedInt8Linear) else m.out_features)
              * m.in_features * 2 for m in plain.modules()
              if isinstance(m, nn.Linear | RowChunkedInt8Linear)]
    dims = preflight.ModelDims.from_config(config.to_dict())
    assert preflight.dequant_transient_bytes(dims, "int8") == max(copies)


def test_the_plan_counts_one_block_of_the_int8_heads_in_int8_and_int4() -> None:
    from app.engine import preflight

    full = preflight.ModelDims()
    budget = preflight.DEQUANT_BUDGET_BYTES
    assert preflight.dequant_transient_bytes(full, "bf16") == 0
    assert preflight.dequant_transient_bytes(full, "fp32") == 0
    # the text head (151,680 × 4,096) is cut into blocks of 16,384 rows: 128 MiB each
    assert preflight.dequant_transient_bytes(full, "int8") == budget
    assert preflight.dequant_transient_bytes(full, "int4") == budget
    parts = preflight.estimate("int8", 4096).parts_bytes()
    assert parts["dequant_transient"] == budget
