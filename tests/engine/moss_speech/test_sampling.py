from __future__ import annotations

import pytest
import torch

from app.engine.moss_speech.sampling import (
    ChannelSampler,
    Sampling,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    draw,
    mask_audio_logits,
    mask_text_logits,
)
from app.settings import SamplingSettings

INF = float("inf")


def test_audio_mask_blocks_ids_past_eosp_always_and_eosp_for_min_minus_one_steps() -> None:
    for step, eosp_open in ((1, False), (9, False), (10, True), (11, True)):
        logits = mask_audio_logits(torch.zeros(20), step, min_new_rows=10, eosp=16)
        assert torch.isinf(logits[17:]).all() and not torch.isinf(logits[:16]).any()
        assert bool(torch.isinf(logits[16])) is not eosp_open


def test_text_mask_blocks_im_end_for_the_first_min_steps() -> None:
    assert torch.isinf(mask_text_logits(torch.zeros(8), 3, 3, im_end=5)[5])
    assert not torch.isinf(mask_text_logits(torch.zeros(8), 4, 3, im_end=5)).any()


def test_repetition_penalty_uses_hf_math_on_seen_ids_only() -> None:
    logits = torch.tensor([2.0, -2.0, 2.0, -2.0])
    seen = torch.tensor([True, True, False, False])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert out.tolist() == [1.0, -4.0, 2.0, -2.0]
    assert apply_repetition_penalty(logits, seen, 1.0) is logits


def test_temperature_divides() -> None:
    assert apply_temperature(torch.tensor([1.0, -3.0]), 0.5).tolist() == [2.0, -6.0]


def test_top_k_keeps_ties_at_the_threshold() -> None:
    out = apply_top_k(torch.tensor([3.0, 1.0, 2.0, 2.0, 0.0]), 2)
    assert out.tolist() == [3.0, -INF, 2.0, 2.0, -INF]
    assert apply_top_k(torch.tensor([1.0, 2.0]), 0).tolist() == [1.0, 2.0]


def test_top_p_keeps_the_smallest_set_reaching_p_and_at_least_one() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    out = apply_top_p(probs.log(), 0.75)
    assert torch.isfinite(out).tolist() == [True, True, False, False]
    assert torch.isfinite(apply_top_p(probs.log(), 0.01)).tolist() == [True, False, False, False]


def test_greedy_breaks_ties_to_the_lowest_id_and_sampling_follows_probs() -> None:
    assert int(draw(torch.tensor([0.0, 5.0, 5.0, 1.0]), False, None)) == 1
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([0.0, 1.0, 2.0]).log_softmax(-1)
    counts = torch.bincount(torch.stack([draw(logits, True, generator) for _ in range(3000)]),
                            minlength=3).float() / 3000
    expected = logits.softmax(-1)
    torch.testing.assert_close(counts, expected, atol=0.03, rtol=0)


def test_channel_sampler_penalises_its_history_and_is_seeded() -> None:
    greedy = ChannelSampler(4, Sampling(temperature=0, repetition_penalty=3.0), torch.device("cpu"),
                            seed=0)
    logits = torch.tensor([1.0, 0.9, 0.0, 0.0])
    assert int(greedy(logits)) == 0
    greedy.remember(0)
    assert int(greedy(logits)) == 1
    draws = [[int(ChannelSampler(50, Sampling(top_k=0, top_p=1.0), torch.device("cpu"), seed=s)(
        torch.zeros(50))) for _ in range(1)] for s in (1, 1, 2)]
    assert draws[0] == draws[1]


def test_sampling_options_validate_and_coerce_from_settings() -> None:
    settings = SamplingSettings(temperature=0.7, top_k=5, max_new_rows=99, min_new_rows=3)
    s = Sampling.coerce(settings)
    assert (s.temperature, s.top_k, s.max_new_rows, s.min_new_rows) == (0.7, 5, 99, 3)
    assert Sampling.coerce({"temperature": 0}).do_sample is False
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0.0)
