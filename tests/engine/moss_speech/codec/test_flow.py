"""Flow decoder: lengths, the CFM schedule and guidance, the noise buffer, cached streaming."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from app.engine.moss_speech.codec import CodecConfig, MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.codec.flow import ConditionalCFM, Flow
from app.engine.moss_speech.codec.flow_stream import FlowStream

from .conftest import FAST_STEPS, Codes


def _infer(flow: Flow, voice: VoiceConditioning, codes: torch.Tensor, streaming: bool,
           finalize: bool, steps: int | None = FAST_STEPS) -> torch.Tensor:
    return flow.inference(codes, voice.prompt_codes, voice.prompt_mel, voice.xvector,
                          streaming=streaming, finalize=finalize, n_timesteps=steps)


@pytest.mark.parametrize("n_codes", [1, 4, 17])
def test_flow_output_is_four_frames_per_code(codec: MossSpeechCodec, voice: VoiceConditioning,
                                             make_codes: Codes, n_codes: int) -> None:
    codes = make_codes(n_codes)
    mel = _infer(codec.flow(0), voice, codes, streaming=False, finalize=True)
    assert mel.shape == (1, 80, 4 * n_codes) and mel.dtype == torch.float32
    assert torch.isfinite(mel).all()
    step = _infer(codec.flow(5), voice, make_codes(n_codes + 3), streaming=True, finalize=False)
    assert step.shape == (1, 80, 4 * n_codes)  # the last 3 codes are lookahead only


def test_ten_euler_steps_on_the_cosine_schedule(codec: MossSpeechCodec,
                                                voice: VoiceConditioning,
                                                make_codes: Codes) -> None:
    flow = codec.flow(0)
    span = flow.decoder.time_span(10, torch.float32)
    expected = 1 - torch.cos(torch.linspace(0, 1, 11) * math.pi / 2)
    assert torch.allclose(span, expected, atol=1e-7)
    calls: list[float] = []
    hook = flow.decoder.estimator.register_forward_hook(
        lambda _module, args, _out: calls.append(float(args[2][0])))
    try:
        _infer(flow, voice, make_codes(3), streaming=False, finalize=True, steps=None)
    finally:
        hook.remove()
    assert len(calls) == 10  # the default decode integrates 10 steps
    assert calls == pytest.approx(expected[:-1].tolist(), abs=1e-6)


class _MuVelocity(nn.Module):
    """v(x, mu, ...) = mu: the conditional branch sees mu, the unconditional one zeros."""

    def forward(self, x, mu, t, spks, cond, chunk, cache=None):
        return mu


def test_euler_with_classifier_free_guidance() -> None:
    cfm = ConditionalCFM(CodecConfig.tiny().flow)
    cfm.estimator = _MuVelocity()
    x0 = torch.randn(1, 80, 6, generator=torch.Generator().manual_seed(3))
    mu = torch.randn(1, 80, 6, generator=torch.Generator().manual_seed(4))
    out = cfm.solve(x0, mu, torch.zeros(1, 80), torch.zeros(1, 80, 6), chunk=0, n_timesteps=10)
    # v = 1.7·mu − 0.7·0 at every step, and the steps sum to t = 1
    assert torch.allclose(out, x0 + 1.7 * mu, atol=1e-5)


def test_noise_buffer_is_seed_0_and_leaves_the_global_rng_alone() -> None:
    config = CodecConfig.tiny().flow
    state = torch.get_rng_state()
    with torch.device("meta"):  # as the loader builds it: no parameter init draws either
        cfm = ConditionalCFM(config)
    assert torch.equal(torch.get_rng_state(), state)
    assert cfm.rand_noise.device.type == "cpu"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        expected = torch.randn(1, 80, config.noise_frames)  # what set_all_random_seed(0) gives
    assert torch.equal(cfm.rand_noise, expected)


def test_codes_outside_the_speech_range_are_refused(codec: MossSpeechCodec,
                                                    voice: VoiceConditioning) -> None:
    with pytest.raises(ValueError, match="16384"):
        _infer(codec.flow(0), voice, torch.tensor([5, 16384]), streaming=False, finalize=True)
    with pytest.raises(ValueError, match="300 s"):
        codec.flow(0).decoder.noise(0, 15001, torch.float32)


@pytest.mark.parametrize("chunk", [5, 25])
def test_cached_streaming_flow_equals_the_reference_recompute(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes, chunk: int) -> None:
    """Each step with caches computes only the new chunk; the reference recomputes the flow
    over the whole prefix. Chunk-causal masks make both identical (up to float rounding)."""
    flow = codec.flow(chunk)
    prompt = len(voice.prompt_codes)
    codes = make_codes(chunk + (-prompt) % chunk + chunk + 3 + 4, seed=1)  # 2 steps + a tail
    stream = FlowStream(flow, voice.prompt_codes, voice.prompt_mel, voice.xvector, FAST_STEPS)
    cursor, hop, steps, pieces = 0, chunk + (-prompt) % chunk, 0, []
    while len(codes) - cursor >= hop + 3:
        cached = stream.advance(codes[:cursor + hop + 3], cursor + hop, finalize=False)
        pieces.append(cached)
        reference = _infer(flow, voice, codes[:cursor + hop + 3], streaming=True,
                           finalize=False)[:, :, 4 * cursor:]
        assert cached.shape == reference.shape == (1, 80, 4 * hop)
        assert torch.allclose(cached, reference, atol=1e-5, rtol=1e-5)
        cursor, hop, steps = cursor + hop, chunk, steps + 1
    assert steps >= 2
    tail = stream.advance(codes, len(codes), finalize=True)
    one_pass = _infer(flow, voice, codes, streaming=True, finalize=True)
    assert torch.allclose(tail, one_pass[:, :, 4 * cursor:], atol=1e-5, rtol=1e-5)
    # so the whole streamed mel is the offline chunk-causal pass over all codes
    streamed = torch.cat([*pieces, tail], dim=2)
    assert torch.allclose(streamed, one_pass, atol=1e-5, rtol=1e-5)
    assert stream.cache_nbytes() > 0


def test_a_non_final_step_must_end_on_a_chunk_boundary(codec: MossSpeechCodec,
                                                       voice: VoiceConditioning,
                                                       make_codes: Codes) -> None:
    stream = FlowStream(codec.flow(5), voice.prompt_codes, voice.prompt_mel, voice.xvector,
                        FAST_STEPS)
    misaligned = 5 + (-len(voice.prompt_codes)) % 5 + 1
    with pytest.raises(ValueError, match="chunk boundary"):
        stream.advance(make_codes(misaligned + 3), misaligned, finalize=False)
    with pytest.raises(ValueError, match="chunk-trained"):
        FlowStream(codec.flow(0), voice.prompt_codes, voice.prompt_mel, voice.xvector)


def test_full_size_flow_keys_match_the_published_checkpoint_names() -> None:
    """Contract §3.4 key families on the real widths (meta tensors, no memory)."""
    with torch.device("meta"):
        flow = Flow(CodecConfig.full().flow, chunk=5)
    shapes = {k: tuple(v.shape) for k, v in flow.state_dict().items()}
    assert shapes["input_embedding.weight"] == (20480, 512)
    assert shapes["spk_embed_affine_layer.weight"] == (80, 192)
    assert shapes["encoder_proj.weight"] == (80, 512)
    assert shapes["encoder.embed.out.0.weight"] == (512, 512)
    assert shapes["encoder.pre_lookahead_layer.conv1.weight"] == (512, 512, 4)
    assert shapes["encoder.pre_lookahead_layer.conv2.weight"] == (512, 512, 3)
    assert shapes["encoder.up_layer.conv.weight"] == (512, 512, 9)
    assert shapes["encoder.encoders.5.self_attn.pos_bias_u"] == (8, 64)
    assert shapes["encoder.up_encoders.3.feed_forward.w_1.weight"] == (2048, 512)
    assert shapes["decoder.estimator.down_blocks.0.0.block1.block.0.weight"] == (256, 320, 3)
    assert shapes["decoder.estimator.mid_blocks.11.1.3.attn1.to_q.weight"] == (512, 256)
    assert shapes["decoder.estimator.up_blocks.0.1.0.ff.net.0.proj.weight"] == (1024, 256)
    assert shapes["decoder.estimator.final_proj.weight"] == (80, 256, 1)
    assert "encoder.encoders.6.norm_mha.weight" not in shapes
    assert sum(math.prod(s) for s in shapes.values()) > 100_000_000
