"""The flow cache in a memory bound: its size per code, buffers allocated once, the budget's
seamless switch to the bounded mode, the voice prefix borrowed in place, the preflight's
arithmetic tied to the codec's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import CodecConfig, MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.codec.flow_stream import (
    FlowStream,
    StreamCapacity,
    encoder_bytes_per_token,
    estimator_bytes_per_token,
)
from app.engine.moss_speech.codec.layers import KVCache
from app.engine.moss_speech.codec.streaming import StreamDecoder
from app.engine.preflight import FlowDims

from .conftest import FAST_STEPS, Codes


def _decode(codec: MossSpeechCodec, voice: VoiceConditioning, codes: torch.Tensor,
            feed: int = 3, **kwargs: Any) -> tuple[np.ndarray, StreamDecoder]:
    """Stream ``codes`` in pieces of ``feed``; returns the audio and the (closed) decoder."""
    kwargs.setdefault("n_timesteps", FAST_STEPS)
    kwargs.setdefault("final", "causal")
    decoder = codec.stream_decoder(voice, **kwargs)
    pieces = [decoder.push(codes[i:i + feed]) for i in range(0, len(codes), feed)]
    pieces.append(decoder.finish())
    return np.concatenate(pieces), decoder


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal up to float rounding (the tolerance of cache == recompute elsewhere); the signal
    is far above it, so a misplaced frame would show."""
    assert np.sqrt(np.mean(b ** 2)) > 100 * 1e-6
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=0, atol=1e-6))


def _kv_caches(stream: FlowStream) -> list[KVCache]:
    return [v for c in [stream.encoder_cache, *stream.estimator_caches] for v in c.values()
            if isinstance(v, KVCache)]


def _per_token(codec: MossSpeechCodec, steps: int = FAST_STEPS) -> int:
    config = codec.flow(5).config
    return estimator_bytes_per_token(config, steps, 4)


def test_the_published_flow_keeps_4_4_mib_per_mel_frame_and_preflight_agrees() -> None:
    """Contract §3.4 widths: 56 attention blocks × K/V × 512 × 2 CFG branches × 10 Euler steps
    in float32 = 4.375 MiB per mel frame (17.5 MiB per code, 219 MiB per second); the torch-free
    preflight computes the same bytes from its own constants."""
    flow = CodecConfig.full().flow
    per_code = estimator_bytes_per_token(flow, 10, 4)
    assert per_code / flow.token_mel_ratio == 4.375 * 2**20
    assert per_code * 12.5 / 2**20 == pytest.approx(218.75)
    assert FlowDims(element_bytes=4).estimator_bytes_per_code() == per_code
    assert FlowDims(element_bytes=4).encoder_bytes_per_code() == encoder_bytes_per_token(flow, 4)
    # on a GPU the flow runs in fp16 (the plan's codec dtype): half of it
    assert FlowDims().estimator_bytes_per_code() == estimator_bytes_per_token(flow, 10, 2)
    assert FlowDims().encoder_bytes_per_code() == encoder_bytes_per_token(flow, 2)
    assert FlowDims().longest_codes == flow.noise_frames // flow.token_mel_ratio
    assert estimator_bytes_per_token(flow, 10, 2) == per_code // 2  # bf16 halves it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cache_holds_exactly_the_computed_bytes_in_the_compute_dtype(
        tiny_codec_dir, tmp_path, voice_wav, make_codes: Codes, dtype: torch.dtype) -> None:
    from app.engine.moss_speech.codec import load_codec

    codec = load_codec(tiny_codec_dir, dtype=dtype, voice_cache_dir=tmp_path)
    voice = codec.voice(voice_wav)
    codes = make_codes(24, seed=2)
    decoder = codec.stream_decoder(voice, 5, n_timesteps=FAST_STEPS, max_codes=len(codes))
    decoder.push(codes)
    stream = decoder.flow_stream
    assert stream is not None and stream.tokens_done > len(voice.prompt_codes)
    config, size = codec.flow(5).config, dtype.itemsize
    per_token = (estimator_bytes_per_token(config, FAST_STEPS, size)
                 + encoder_bytes_per_token(config, size))
    assert stream.cache_used_nbytes() == stream.tokens_done * per_token
    assert {kv._k.dtype for kv in _kv_caches(stream)} == {dtype}  # type: ignore[union-attr]
    # allocated once for prompt + max_codes: exactly that, never doubled
    capacity = len(voice.prompt_codes) + len(codes)
    kv_bytes = sum(kv.nbytes() for kv in _kv_caches(stream))
    assert kv_bytes == capacity * per_token
    decoder.close()


def test_buffers_are_allocated_once_for_the_whole_reply(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    codes = make_codes(40, seed=3)
    decoder = codec.stream_decoder(voice, 5, n_timesteps=FAST_STEPS, max_codes=len(codes))
    first: dict[int, int] | None = None
    for start in range(0, len(codes), 2):
        decoder.push(codes[start:start + 2])
        stream = decoder.flow_stream
        assert stream is not None
        if stream.tokens_done:
            pointers = {id(kv): kv.buffer_ptr() for kv in _kv_caches(stream)}
            first = first or pointers
            assert pointers == first  # no buffer was reallocated (no growth, no copy)
    assert decoder.steps >= 6
    decoder.close()


def test_convolution_tails_hold_only_their_own_frames(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    """A tail that is a view of its step's input would keep the whole input alive (for the
    voice prefix: every prompt frame of every convolution, uncounted)."""
    decoder = codec.stream_decoder(voice, 5, n_timesteps=FAST_STEPS)
    decoder.push(make_codes(12, seed=4))
    stream = decoder.flow_stream
    assert stream is not None
    tails = [v for c in [stream.encoder_cache, *stream.estimator_caches] for v in c.values()
             if isinstance(v, torch.Tensor)]
    assert len(tails) > 10
    for tail in tails:
        assert tail.untyped_storage().nbytes() == tail.numel() * tail.element_size()
    decoder.close()


def _budgets(codec: MossSpeechCodec, voice: VoiceConditioning) -> dict[str, int]:
    """Budgets (bytes) that freeze the estimator state at chosen points of a 41-code reply."""
    per_token = _per_token(codec)
    prompt = len(voice.prompt_codes)
    return {"nothing": 0, "inside the prompt": (prompt - 2) * per_token,
            "after a few chunks": (prompt + 14) * per_token,
            "never reached": (prompt + 60) * per_token}


@pytest.mark.parametrize("reuse_voice_prefix", [False, True])
@pytest.mark.parametrize("where", ["nothing", "inside the prompt", "after a few chunks",
                                   "never reached"])
def test_a_reply_crossing_the_budget_sounds_the_same_as_the_uncached_decode(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes, where: str,
        reuse_voice_prefix: bool) -> None:
    codes = make_codes(41, seed=5)
    exact, _ = _decode(codec, voice, codes, chunk=5, seed=2, flow_cache=False)
    assert len(exact) == 1920 * len(codes)  # the uncached stream with a chunk-causal final
    budget = _budgets(codec, voice)[where]
    bounded, decoder = _decode(codec, voice, codes, chunk=5, seed=2, max_codes=len(codes),
                               flow_cache_budget_bytes=budget,
                               reuse_voice_prefix=reuse_voice_prefix)
    assert len(bounded) == 1920 * len(codes)
    assert _close(bounded, exact)
    switched = decoder.flow_stats.bounded_from_code
    if where == "never reached":
        assert switched is None
    elif where == "after a few chunks":
        assert switched is not None and 5 <= switched <= 14  # mid-reply
    else:
        assert switched == 0
    # the estimator state stays within the budget; the encoder's state and output (mu) and
    # the convolution tails come on top, by the stream's length
    config, tokens = codec.flow(5).config, len(voice.prompt_codes) + len(codes)
    estimator_bytes = budget if where != "never reached" else math.inf
    extra = tokens * (encoder_bytes_per_token(config, 4)
                      + config.mel_bins * config.token_mel_ratio * 4) + 16 * 1024
    assert decoder.flow_stats.peak_nbytes <= estimator_bytes + extra


@pytest.mark.parametrize(("chunk", "final", "feed"), [(5, "reference", 1), (25, "causal", 4)])
def test_the_switch_is_seamless_for_both_chunk_sizes_and_final_passes(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes, chunk: int,
        final: str, feed: int) -> None:
    codes = make_codes(2 * chunk + 21, seed=6)
    exact, _ = _decode(codec, voice, codes, feed=feed, chunk=chunk, final=final,
                       flow_cache=False)
    cached, _ = _decode(codec, voice, codes, feed=feed, chunk=chunk, final=final)
    first_hop = (-len(voice.prompt_codes)) % chunk + chunk  # aligned
    budget = (len(voice.prompt_codes) + first_hop + 1) * _per_token(codec)
    bounded, decoder = _decode(codec, voice, codes, feed=feed, chunk=chunk, final=final,
                               flow_cache_budget_bytes=budget, max_codes=len(codes))
    assert decoder.flow_stats.bounded_from_code == first_hop
    assert _close(bounded, exact) and _close(bounded, cached)


def test_the_bounded_mode_keeps_its_state_read_only(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    codes = make_codes(36, seed=7)
    frozen_at = len(voice.prompt_codes) + 8
    decoder = codec.stream_decoder(voice, 5, n_timesteps=FAST_STEPS, max_codes=len(codes),
                                   flow_cache_budget_bytes=frozen_at * _per_token(codec))
    snapshot: tuple[int, list[torch.Tensor]] | None = None
    bounded_steps = 0
    for start in range(0, len(codes), 5):
        decoder.push(codes[start:start + 5])
        stream = decoder.flow_stream
        assert stream is not None
        if not stream.bounded:
            continue
        assert stream.frozen_tokens is not None and stream.frozen_tokens <= frozen_at
        estimator = [kv for cache in stream.estimator_caches for kv in cache.values()
                     if isinstance(kv, KVCache)]
        used = sum(kv.used_nbytes() for kv in estimator)
        keys = [kv._k[:, :, :kv.length].clone() for kv in estimator]  # type: ignore[index]
        if snapshot is None:
            snapshot = (used, keys)
        bounded_steps += 1
        assert used == snapshot[0]  # nothing more stored once bounded
        assert all(torch.equal(a, b) for a, b in zip(keys, snapshot[1], strict=True))
    assert bounded_steps >= 3
    decoder.close()


def test_the_voice_prefix_is_borrowed_in_place_by_one_reply_at_a_time(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    codes = make_codes(30, seed=8)
    bounds = {"max_codes": len(codes), "n_timesteps": FAST_STEPS}
    plain, _ = _decode(codec, voice, codes, chunk=5, **bounds)
    codec.clear_caches()
    first = codec.stream_decoder(voice, 5, final="causal", reuse_voice_prefix=True, **bounds)
    prefix = codec._prefix[-1] if codec._prefix else None
    assert isinstance(prefix, FlowStream)
    held = codec.cache_nbytes()
    pieces = {first: [first.push(codes[:12])]}

    def pointers(stream: FlowStream | None) -> set[int]:
        assert stream is not None
        return {kv.buffer_ptr() for kv in _kv_caches(stream)}

    assert pointers(first.flow_stream) == pointers(prefix)  # appended in place, not copied
    second = codec.stream_decoder(voice, 5, final="causal", reuse_voice_prefix=True, **bounds)
    pieces[second] = [second.push(codes[:12])]  # the first still borrows: this one copies
    assert not pointers(second.flow_stream) & pointers(prefix)
    for decoder, out in pieces.items():
        out += [decoder.push(codes[12:]), decoder.finish()]
        assert _close(np.concatenate(out), plain)
    assert codec.cache_nbytes() == held  # the prefix never grew
    third = codec.stream_decoder(voice, 5, final="causal", reuse_voice_prefix=True, **bounds)
    assert pointers(third.flow_stream) == pointers(prefix)  # free again after the closes
    out = [third.push(codes), third.finish()]
    assert _close(np.concatenate(out), plain)  # the borrowers left the prefix state intact


def test_a_prefix_made_for_another_bound_is_refused(
        codec: MossSpeechCodec, voice: VoiceConditioning) -> None:
    flow = codec.flow(5)
    prefix = FlowStream.voice_prefix(flow, voice.prompt_codes, voice.prompt_mel, voice.xvector,
                                     FAST_STEPS, max_codes=20)
    assert prefix is not None
    with pytest.raises(ValueError, match="memory bound"):
        FlowStream(flow, voice.prompt_codes, voice.prompt_mel, voice.xvector, FAST_STEPS,
                   prefix=prefix, max_codes=40)
    # a budget smaller than the prompt's own state leaves nothing to reuse
    assert FlowStream.voice_prefix(flow, voice.prompt_codes, voice.prompt_mel, voice.xvector,
                                   FAST_STEPS, budget_bytes=_per_token(codec)) is None


def test_capacity_plan(codec: MossSpeechCodec) -> None:
    flow, per_token = codec.flow(5), _per_token(codec)
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, None, None) == StreamCapacity(None, None)
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, None, 50) == StreamCapacity(80, 80)
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, 40 * per_token + 1, 50) == (
        StreamCapacity(80, 40))
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, 10**12, 50) == StreamCapacity(80, 80)
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, 40 * per_token, None) == (
        StreamCapacity(None, 40))
    longest = codec.flow(5).config.noise_frames // 4  # 300 s: the flow refuses more anyway
    assert StreamCapacity.plan(flow, 30, FAST_STEPS, None, 10**6) == (
        StreamCapacity(longest, longest))
