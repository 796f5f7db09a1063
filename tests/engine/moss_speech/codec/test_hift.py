"""HiFT vocoder: 480 samples per frame, per-request randomness, source carry-over."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.codec.loader import fold_weight_norm

from .conftest import Codes


@pytest.mark.parametrize("frames", [1, 8, 33])
def test_480_samples_per_mel_frame(codec: MossSpeechCodec, frames: int) -> None:
    mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(frames))
    speech, source = codec.hift.inference(mel, torch.Generator().manual_seed(0))
    assert speech.shape == (1, 480 * frames) and source.shape == (1, 1, 480 * frames)
    assert float(speech.abs().max()) <= 0.99 and float(speech.abs().max()) > 0


def test_randomness_comes_from_the_given_generator_only(codec: MossSpeechCodec) -> None:
    mel = torch.randn(1, 80, 12, generator=torch.Generator().manual_seed(1))
    state = torch.get_rng_state()
    first, _ = codec.hift.inference(mel, torch.Generator().manual_seed(5))
    torch.manual_seed(12345)  # the global RNG must not matter
    again, _ = codec.hift.inference(mel, torch.Generator().manual_seed(5))
    other, _ = codec.hift.inference(mel, torch.Generator().manual_seed(6))
    torch.set_rng_state(state)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    state = torch.get_rng_state()
    codec.hift.inference(mel, torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)


def test_cached_source_replaces_the_start_of_the_source(codec: MossSpeechCodec) -> None:
    mel = torch.randn(1, 80, 10, generator=torch.Generator().manual_seed(2))
    cache = torch.full((1, 1, 960), 0.25)
    _, source = codec.hift.inference(mel, torch.Generator().manual_seed(0), cache)
    assert torch.equal(source[:, :, :960], cache)
    _, free = codec.hift.inference(mel, torch.Generator().manual_seed(0))
    assert torch.equal(source[:, :, 960:], free[:, :, 960:])


def test_decode_length_and_determinism(codec: MossSpeechCodec, voice: VoiceConditioning,
                                       make_codes: Codes) -> None:
    codes = make_codes(9, seed=3)
    state = torch.get_rng_state()
    pcm = codec.decode(codes, voice, seed=1, n_timesteps=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert pcm.dtype == np.float32 and pcm.shape == (9 * 1920,)
    assert np.array_equal(pcm, codec.decode(codes.tolist(), voice, seed=1, n_timesteps=2))
    assert not np.array_equal(pcm, codec.decode(codes, voice, seed=2, n_timesteps=2))
    assert codec.decode([], voice).shape == (0,)


@pytest.mark.parametrize("spelling", ["parametrizations", "g_v"])
def test_weight_norm_is_folded(spelling: str) -> None:
    conv = torch.nn.Conv1d(3, 4, 5)
    normed = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(3, 4, 5))
    with torch.no_grad():
        normed.parametrizations.weight.original0.mul_(2.0)
    state = dict(normed.state_dict())
    if spelling == "g_v":
        state = {k.replace("parametrizations.weight.original0", "weight_g")
                  .replace("parametrizations.weight.original1", "weight_v"): v
                 for k, v in state.items()}
    conv.load_state_dict(fold_weight_norm(state))
    assert torch.allclose(conv.weight, normed.weight, atol=1e-6)
