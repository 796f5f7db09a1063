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
    new_seed,
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
    rows = torch.tensor([[0.0, 5.0, 5.0, 1.0], [9.0, 0.0, 0.0, 0.0]])  # [2, V]: one id per row
    assert draw(rows, False, None).tolist() == [1, 0]
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([0.0, 1.0, 2.0]).log_softmax(-1)
    drawn = draw(logits.expand(3000, 3), True, generator)  # 3000 independent draws, row-wise
    assert drawn.shape == (3000,)
    counts = torch.bincount(drawn, minlength=3).float() / 3000
    expected = logits.softmax(-1)
    # (a plain comparison: torch.testing's first use costs seconds, in every mutant's run)
    assert float((counts - expected).abs().max()) <= 0.03, (counts, expected)


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


def test_every_invalid_option_is_named_in_one_message() -> None:
    with pytest.raises(ValueError) as refused:
        Sampling(temperature=100.5, top_p=1.01, top_k=-1, repetition_penalty=0.0,
                 max_new_rows=0)
    assert str(refused.value) == (
        "temperature must be in [0, 100] (0 = greedy); top_p must be in (0, 1]; "
        "top_k must be >= 0 (0 = off); repetition_penalty must be > 0; "
        "max_new_rows must be >= 1 and min_new_rows >= 0")
    with pytest.raises(ValueError, match="min_new_rows >= 0"):
        Sampling(min_new_rows=-1)


def test_options_at_the_edges_of_their_ranges_are_accepted() -> None:
    edges = Sampling(temperature=100.0, top_p=1.0, top_k=0, repetition_penalty=0.5,
                     max_new_rows=1, min_new_rows=0)
    assert (edges.temperature, edges.max_new_rows, edges.min_new_rows) == (100.0, 1, 0)
    assert Sampling(temperature=0.0).do_sample is False and edges.do_sample is True


def test_repetition_penalty_divides_every_non_negative_score() -> None:
    logits = torch.tensor([0.5, 0.0, -0.5])
    seen = torch.tensor([True, True, True])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [0.25, 0.0, -1.0]


def test_temperature_above_one_flattens() -> None:
    assert apply_temperature(torch.tensor([1.0, -3.0]), 2.0).tolist() == [0.5, -1.5]
    assert apply_temperature(torch.tensor([1.0, -3.0]), 1.0).tolist() == [1.0, -3.0]


def test_top_k_of_one_keeps_only_the_best_and_larger_k_keep_the_k_best() -> None:
    logits = torch.tensor([3.0, 1.0, 2.0, 2.5, 0.0])
    assert torch.isfinite(apply_top_k(logits, 1)).tolist() == [True, False, False, False, False]
    assert torch.isfinite(apply_top_k(logits, 3)).tolist() == [True, False, True, True, False]
    assert apply_top_k(logits, 5).tolist() == logits.tolist()


def test_top_p_drops_ids_whose_total_mass_is_exactly_one_minus_p() -> None:
    logits = torch.tensor([4.0, 2.0, 1.0, 1.0]).log()  # probabilities 1/2, 1/4, 1/8, 1/8
    assert torch.isfinite(apply_top_p(logits, 0.75)).tolist() == [True, True, False, False]
    assert apply_top_p(logits, 1.0).tolist() == logits.tolist()


def test_a_sampling_channel_draws_more_than_the_best_id() -> None:
    flat = torch.zeros(50)  # every id equally likely
    sampling = Sampling(top_k=0, top_p=1.0, repetition_penalty=1.0)
    drawn = {int(ChannelSampler(50, sampling, torch.device("cpu"), seed=s)(flat))
             for s in range(20)}
    assert len(drawn) > 5


def test_new_seeds_differ_and_leave_room_for_the_audio_channel_seed() -> None:
    seeds = [new_seed() for _ in range(64)]
    assert all(0 <= seed < 2**62 for seed in seeds)  # seed + 1 still fits torch's int64
    assert len(set(seeds)) == len(seeds)


def test_a_channel_keeps_its_history_on_the_device_it_is_given() -> None:
    with torch.device("meta"):  # another default device, as while a model is being built
        sampler = ChannelSampler(4, Sampling(temperature=0, repetition_penalty=3.0),
                                 torch.device("cpu"), seed=0)
    assert sampler.seen.device == torch.device("cpu")
    sampler.remember(0)
    assert int(sampler(torch.tensor([1.0, 0.9, 0.0, 0.0]))) == 1
