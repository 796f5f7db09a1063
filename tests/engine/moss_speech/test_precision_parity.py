"""The reduced precisions the plan relies on stay within their bars (docs/memory.md): the fp16
codec against fp32 and the int8 LM heads against bf16, measured on the tiny checkpoints (the
full-size figures are in BENCHMARKS.md, `bench parity --size full`)."""

from __future__ import annotations

import pytest
import torch

from app.engine.moss_speech.codec import CodecConfig
from app.engine.moss_speech.codec.parity import cosine, measure, snr_db
from app.engine.moss_speech.head_parity import head_parity, int4_dequantized, random_states
from app.engine.moss_speech.model import MossSpeechModel


def test_the_fp16_codec_meets_the_parity_bar() -> None:
    result = measure(CodecConfig.tiny(), torch.float16, n_codes=10, utterance_s=5.0)
    assert result["vq_codes"] >= 60 and result["vq_distinct_codes"] > 20
    assert result["vq_id_agreement"] >= 0.95
    assert result["mel_cosine"] >= 0.999
    assert result["wave_snr_db"] >= 30.0


def test_the_parity_measures_mean_what_they_say() -> None:
    a = torch.tensor([1.0, 2.0, 3.0])
    assert cosine(a, a) == pytest.approx(1.0) and cosine(a, -a) == pytest.approx(-1.0)
    wave = torch.sin(torch.arange(1000) / 5.0).numpy()
    assert snr_db(wave, wave * 1.1) == pytest.approx(20.0, abs=0.01)  # 10 % error: 20 dB


@pytest.mark.parametrize(("precision", "bar"), [("int8", 0.9999), ("int4", 0.99)])
def test_quantised_heads_keep_the_logits(tiny_model: MossSpeechModel, precision: str,
                                         bar: float) -> None:
    states = random_states(32, tiny_model.config.hidden_size)
    for head in (tiny_model.text_lm_head, tiny_model.audio_lm_head):
        result = head_parity(head, states, precision)
        assert result["logit_cosine_min"] >= bar, result
        assert head.weight.dtype == torch.float32  # the shared model is left as it was


def test_the_int4_stand_in_has_sixteen_levels_per_group() -> None:
    weight = torch.randn(8, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    dequantized = int4_dequantized(weight)
    for row in dequantized.view(8, 2, 128).flatten(0, 1):  # groups of 128 inputs
        assert len(row.unique()) <= 16
    error = (dequantized.float() - weight.float()).abs().max()
    assert 0 < error < 0.2 * weight.float().abs().max()
