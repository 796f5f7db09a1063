"""Streaming decode: the §3.7 protocol, total length, cache == recompute, seams, lifecycle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, VoiceConditioning
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.streaming import StreamDecoder

from .conftest import FAST_STEPS, Codes


def _stream(codec: MossSpeechCodec, voice: VoiceConditioning, codes: torch.Tensor,
            feed: int = 1, **kwargs) -> tuple[np.ndarray, list[int]]:
    pieces = []
    with codec.stream_decoder(voice, n_timesteps=FAST_STEPS, **kwargs) as decoder:
        for start in range(0, len(codes), feed):
            pieces.append(decoder.push(codes[start:start + feed]))
        pieces.append(decoder.finish())
    return np.concatenate(pieces), [len(p) for p in pieces]


@pytest.mark.parametrize(("n_codes", "chunk", "first_hop", "final"), [
    (1, 5, "aligned", "reference"), (9, 5, "aligned", "reference"),
    (23, 5, "aggressive", "causal"), (40, 5, "aligned", "causal"),
    (31, 25, "aggressive", "reference"), (70, 25, "aligned", "causal")])
def test_total_samples_are_1920_per_code(codec: MossSpeechCodec, voice: VoiceConditioning,
                                         make_codes: Codes, n_codes: int, chunk: int,
                                         first_hop: str, final: str) -> None:
    pcm, _ = _stream(codec, voice, make_codes(n_codes), chunk=chunk, first_hop=first_hop,
                     final=final)
    assert pcm.dtype == np.float32 and len(pcm) == 1920 * n_codes
    assert np.isfinite(pcm).all()


@pytest.mark.parametrize("first_hop", ["aligned", "aggressive"])
def test_first_audio_needs_the_prompt_aligned_hop_plus_3_lookahead(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes,
        first_hop: str) -> None:
    prompt = len(voice.prompt_codes)
    pad = (-prompt) % 5
    hop = pad if first_hop == "aggressive" and pad >= 3 else pad + 5
    assert (prompt + hop) % 5 == 0
    _, sizes = _stream(codec, voice, make_codes(hop + 3 + 5 + 3), chunk=5, first_hop=first_hop)
    first = next(i for i, n in enumerate(sizes) if n)
    assert first == hop + 3 - 1  # the push that delivers code number hop + 3
    assert sizes[first] == 1920 * hop - 3840  # the last 3840 samples wait for the cross-fade
    assert sizes[first + 5] == 1920 * 5  # then one chunk per 5 codes


def test_cached_flow_gives_the_same_audio_as_the_reference_recompute(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    codes = make_codes(33, seed=4)
    cached, _ = _stream(codec, voice, codes, feed=4, chunk=5, seed=3)
    recomputed, _ = _stream(codec, voice, codes, feed=4, chunk=5, seed=3, flow_cache=False)
    assert np.abs(cached - recomputed).max() < 1e-5 * max(1.0, np.abs(recomputed).max() * 1e3)


def _reference_token2wav(codec: MossSpeechCodec, voice: VoiceConditioning,
                         codes: torch.Tensor, chunk: int, seed: int) -> np.ndarray:
    """An independent transcription of CosyVoice2Model.tts(stream=True) + token2wav."""
    flow, hift = codec.flow(chunk), codec.hift
    generator = torch.Generator().manual_seed(seed)
    window = np.hamming(2 * 3840)
    prompt = voice.prompt_codes
    pad = int(np.ceil(len(prompt) / chunk) * chunk - len(prompt))
    cache, out, offset = None, [], 0

    def token2wav(tokens: torch.Tensor, finalize: bool) -> torch.Tensor:
        nonlocal cache
        mel = flow.inference(tokens, prompt, voice.prompt_mel, voice.xvector,
                             streaming=not finalize, finalize=finalize,
                             n_timesteps=FAST_STEPS)[:, :, offset * 4:]
        source = torch.zeros(1, 1, 0)
        if cache is not None:
            mel, source = torch.concat([cache["mel"], mel], dim=2), cache["source"]
        speech, new_source = hift.inference(mel, generator, source)
        speech = speech.clone()  # an inference tensor; the fade below writes into it
        if cache is not None:
            speech[..., :3840] = torch.from_numpy(
                speech[..., :3840].numpy() * window[:3840]
                + cache["speech"][..., -3840:].numpy() * window[3840:]).float()
        if not finalize:
            cache = {"mel": mel[:, :, -8:], "source": new_source[:, :, -3840:],
                     "speech": speech[:, -3840:]}
            speech = speech[:, :-3840]
        return speech

    while True:
        hop = chunk + pad if offset == 0 else chunk
        if len(codes) - offset < hop + 3:
            break
        out.append(token2wav(codes[:offset + hop + 3], finalize=False))
        offset += hop
    out.append(token2wav(codes, finalize=True))
    return torch.cat(out, dim=1)[0].numpy()


@pytest.mark.parametrize(("n_codes", "chunk"), [(27, 5), (61, 25)])
def test_stream_follows_the_reference_protocol(codec: MossSpeechCodec,
                                               voice: VoiceConditioning, make_codes: Codes,
                                               n_codes: int, chunk: int) -> None:
    codes = make_codes(n_codes, seed=5)
    expected = _reference_token2wav(codec, voice, codes, chunk, seed=11)
    exact, _ = _stream(codec, voice, codes, feed=3, chunk=chunk, seed=11, flow_cache=False)
    assert exact.shape == expected.shape
    assert np.array_equal(exact, expected)
    cached, _ = _stream(codec, voice, codes, feed=3, chunk=chunk, seed=11)
    assert np.allclose(cached, expected, atol=1e-6)


class _RecordingHiFT:
    """Passes calls to the real vocoder and keeps every mel and source it vocoded."""

    def __init__(self, hift: HiFTGenerator) -> None:
        self.hift, self.config, self.conv_pre = hift, hift.config, hift.conv_pre
        self.mels: list[torch.Tensor] = []
        self.sources: list[torch.Tensor] = []

    def inference(self, mel, generator, cache_source=None):
        speech, source = self.hift.inference(mel, generator, cache_source)
        self.mels.append(mel)
        self.sources.append(source)
        return speech, source


def test_seams_are_continuous(codec: MossSpeechCodec, voice: VoiceConditioning,
                              make_codes: Codes) -> None:
    """Away from seams the stream equals one vocoding of the whole mel and source; at each
    seam the cross-fade keeps it close to that continuous signal, where naively concatenated
    chunks are far from it."""
    recorder = _RecordingHiFT(codec.hift)
    decoder = StreamDecoder(codec.flow(5), recorder, voice, final="causal",  # type: ignore[arg-type]
                            n_timesteps=FAST_STEPS)
    codes = make_codes(40, seed=6)
    pieces = [decoder.push(codes[i:i + 1]) for i in range(len(codes))] + [decoder.finish()]
    stream = np.concatenate(pieces)
    mels, sources = recorder.mels, recorder.sources
    whole_mel = torch.cat([mels[0]] + [m[:, :, 8:] for m in mels[1:]], dim=2)
    whole_source = torch.cat([sources[0]] + [s[:, :, 3840:] for s in sources[1:]], dim=2)
    continuous = codec.hift.decode(whole_mel, whole_source)[0].numpy()
    assert len(continuous) == len(stream) == 40 * 1920
    rms = np.sqrt(np.mean(continuous ** 2))

    def error(signal: np.ndarray, start: int, end: int) -> float:
        return float(np.sqrt(np.mean((signal[start:end] - continuous[start:end]) ** 2)) / rms)

    seams = np.cumsum([len(p) for p in pieces if len(p)])[:-1]
    assert len(seams) >= 5
    overlap_errors = [error(stream, seam, seam + 3840) for seam in seams]  # cross-faded parts
    assert max(overlap_errors) < 0.15
    for seam, following in itertools.pairwise(seams):
        assert error(stream, seam + 4340, following - 500) < 1e-4  # chunk interiors
    naive = np.concatenate([codec.hift.inference(m if i == 0 else m[:, :, 8:],
                                                 torch.Generator().manual_seed(i))[0][0].numpy()
                            for i, m in enumerate(mels)])
    naive_seams = np.cumsum([m.shape[2] - (8 if i else 0) for i, m in enumerate(mels)])[:-1]
    naive_errors = [error(naive, 480 * s - 1920, 480 * s + 1920) for s in naive_seams]
    assert min(naive_errors) > 2 * max(overlap_errors)  # it can tell a seam without the protocol


def test_lifecycle(codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    decoder = codec.stream_decoder(voice, chunk=5, n_timesteps=FAST_STEPS)
    with decoder:
        decoder.push(make_codes(12))
        assert decoder.cache_nbytes() > 0
    assert decoder.cache_nbytes() == 0
    with pytest.raises(RuntimeError, match="start a new"):
        decoder.push([1])
    with pytest.raises(ValueError, match="16384"):
        codec.stream_decoder(voice).push([16384])
    with pytest.raises(ValueError, match="first_hop"):
        codec.stream_decoder(voice, first_hop="eager")  # type: ignore[arg-type]
    empty = codec.stream_decoder(voice)
    assert empty.finish().shape == (0,)


def test_streaming_is_deterministic_and_leaves_the_global_rng_alone(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes) -> None:
    codes = make_codes(14, seed=8)
    state = torch.get_rng_state()
    first, _ = _stream(codec, voice, codes, chunk=5, seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    second, _ = _stream(codec, voice, codes, chunk=5, seed=4)
    third, _ = _stream(codec, voice, codes, chunk=5, seed=5)
    assert np.array_equal(first, second) and not np.array_equal(first, third)


@pytest.mark.parametrize(("chunk", "first_hop"), [(5, "aligned"), (5, "aggressive"),
                                                  (25, "aligned")])
def test_reusing_the_voice_prefix_changes_nothing_but_the_work(
        codec: MossSpeechCodec, voice: VoiceConditioning, make_codes: Codes, chunk: int,
        first_hop: str) -> None:
    codes = make_codes(2 * chunk + 9, seed=9)
    plain, _ = _stream(codec, voice, codes, feed=2, chunk=chunk, first_hop=first_hop)
    codec.clear_caches()
    assert codec.cache_nbytes() == 0
    for _reply in range(2):  # the second reply must find the shared state unchanged
        reused, _ = _stream(codec, voice, codes, feed=2, chunk=chunk, first_hop=first_hop,
                            reuse_voice_prefix=True)
        assert np.allclose(reused, plain, atol=1e-6)
    held = codec.cache_nbytes()
    assert held > 0
    decoder = codec.stream_decoder(voice, chunk, reuse_voice_prefix=True,
                                   n_timesteps=FAST_STEPS)
    lookahead = 3
    assert decoder._flow_stream.tokens_done == (  # the prompt chunks are already done
        (len(voice.prompt_codes) - lookahead) // chunk * chunk)
    assert codec.cache_nbytes() == held
    codec.clear_caches()
    assert codec.cache_nbytes() == 0
