"""Whisper-VQ tokenizer: token counts, incremental == whole encoding, input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, dsp
from app.engine.moss_speech.codec.testing import speech_like


@pytest.mark.parametrize(("n_samples", "expected"), [
    (0, 0), (1, 1), (1280, 1), (1281, 2), (16000, 13), (16000 * 30, 375),
    (16000 * 30 + 1, 376), (16000 * 61, 375 * 2 + 13)])
def test_token_count_formula(codec: MossSpeechCodec, n_samples: int, expected: int) -> None:
    assert codec.token_count(n_samples) == expected


def test_one_second_gives_13_codes_in_range(codec: MossSpeechCodec) -> None:
    codes = codec.encode(speech_like(1.0, 16000), 16000)
    assert codes.dtype == torch.long and codes.shape == (13,)
    assert int(codes.min()) >= 0 and int(codes.max()) < 16384
    assert len(set(codes.tolist())) > 1  # the random network still depends on the input


def test_empty_audio_gives_no_codes(codec: MossSpeechCodec) -> None:
    assert codec.encode(np.zeros(0, dtype=np.float32), 16000).shape == (0,)
    stream = codec.stream_encoder()
    assert stream.finish().shape == (0,)


def _push_all(codec: MossSpeechCodec, audio: np.ndarray, sizes: list[int]):
    stream = codec.stream_encoder()
    returned, position, index = [], 0, 0
    while position < len(audio):
        size = sizes[index % len(sizes)]
        returned.append(stream.push(audio[position:position + size]))
        position += size
        index += 1
    return stream, torch.cat(returned), stream.finish()


@pytest.mark.parametrize("sizes", [[320], [4000, 17, 2500], [160000]])
def test_incremental_equals_whole_without_revision(codec: MossSpeechCodec,
                                                   sizes: list[int]) -> None:
    audio = speech_like(3.37, 16000, seed=5)
    audio[:400] *= 3.0  # the loudest moment comes first: the floor never moves later
    whole = codec.encode(audio, 16000)
    stream, pushed, final = _push_all(codec, audio, sizes)
    assert torch.equal(final, whole)
    assert stream.revised_from is None
    assert torch.equal(pushed, whole[:len(pushed)])
    assert len(pushed) >= len(whole) - 2  # codes arrive while the audio arrives


def test_incremental_rewinds_when_a_loud_sound_raises_the_floor(codec: MossSpeechCodec) -> None:
    audio = speech_like(3.0, 16000, seed=6)
    audio[:16000] *= 1e-4  # a quiet first second, whose frames sit below a later floor
    audio[40000:40400] *= 25.0
    whole = codec.encode(audio, 16000)
    stream, pushed, final = _push_all(codec, audio, [640])
    assert torch.equal(final, whole)
    assert stream.revised_from is not None and stream.revised_from < 13
    assert not torch.equal(pushed[:len(whole)], whole[:len(pushed)])  # provisional codes differed


def test_incremental_equals_whole_across_30s_segments(codec: MossSpeechCodec) -> None:
    audio = speech_like(31.0, 16000, seed=7)
    whole = codec.encode(audio, 16000)
    assert len(whole) == 375 + 13
    _, _, final = _push_all(codec, audio, [48000])
    assert torch.equal(final, whole)
    # segments are independent: the second one encodes like a fresh utterance, except that the
    # batch pads it to the first segment's length (which only matters at its very end)
    second = codec.encode(audio[480000:], 16000)
    assert torch.equal(whole[375:-1], second[:-1])


@pytest.mark.parametrize("loud_later", [False, True])
def test_a_fork_finishes_the_audio_so_far_and_the_original_goes_on(
        codec: MossSpeechCodec, loud_later: bool) -> None:
    """A speculative reply at a pause takes fork().finish(); if the user resumes, the original
    encoder goes on and still equals a whole encode (also when a revision hits both sides)."""
    audio = speech_like(3.0, 16000, seed=8)
    if loud_later:
        audio[:16000] *= 1e-3
        audio[36000:36400] *= 25.0  # after the fork: the original must rewind, not the fork
    stream = codec.stream_encoder()
    stream.push(audio[:20000])
    stream.push(audio[20000:26000])
    fork = stream.fork()
    so_far = fork.finish()
    stream.push(audio[26000:])
    assert torch.equal(so_far, codec.encode(audio[:26000], 16000))
    assert torch.equal(stream.finish(), codec.encode(audio, 16000))
    assert (stream.revised_from is not None) == loud_later
    with pytest.raises(RuntimeError, match="after finish"):
        fork.fork()


def test_two_forks_of_one_encoder_do_not_disturb_each_other(codec: MossSpeechCodec) -> None:
    audio = speech_like(2.0, 16000, seed=9)
    stream = codec.stream_encoder()
    stream.push(audio[:12000])
    first = stream.fork()
    first.push(audio[12000:20000])
    second = stream.fork()
    second.push(audio[12000:16000])
    assert torch.equal(first.finish(), codec.encode(audio[:20000], 16000))
    assert torch.equal(second.finish(), codec.encode(audio[:16000], 16000))
    assert torch.equal(stream.finish(), codec.encode(audio[:12000], 16000))


def test_other_rates_and_channels(codec: MossSpeechCodec) -> None:
    audio_16k = speech_like(1.5, 16000, seed=8)
    audio_48k = dsp.resample(torch.from_numpy(audio_16k), 16000, 48000).numpy()
    codes_48k = codec.encode(audio_48k, 48000)
    assert len(codes_48k) == codec.token_count(int(np.ceil(len(audio_48k) / 3)))
    stereo = np.stack([audio_16k, np.zeros_like(audio_16k)])
    assert torch.equal(codec.encode(stereo, 16000), codec.encode(audio_16k, 16000))


def test_bad_input_is_refused(codec: MossSpeechCodec) -> None:
    audio = speech_like(0.5, 16000)
    audio[100] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        codec.encode(audio, 16000)
    with pytest.raises(ValueError, match="1-D"):
        codec.encode(np.zeros((2, 2, 2), dtype=np.float32), 16000)
    stream = codec.stream_encoder()
    stream.finish()
    with pytest.raises(RuntimeError, match="finish"):
        stream.push(np.zeros(10, dtype=np.float32))
