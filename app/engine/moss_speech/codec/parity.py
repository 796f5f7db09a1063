"""How far a bf16/fp16 codec drifts from the float32 codec it is made from.

Three measures, one per stage a person hears through (the issue's parity bar):

- **Whisper-VQ id agreement**: the share of equal codes when the same utterance is encoded by
  both (the user's words as the LM reads them);
- **mel cosine**: the streaming flow's mel for the same codes and the same (float32) voice,
  cosine over all values, plus the relative RMS error;
- **waveform SNR**: the streamed 24 kHz reply of both (same codes, voice and seed), in dB.

Both codecs are built from one seed, so their weights are the same numbers; only the precision
of the tokenizer and flow networks differs (HiFT, the VQ distances and the CFM state stay
float32 in both, as in :func:`~app.engine.moss_speech.codec.loader.load_codec`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.engine.moss_speech.codec.codec import MossSpeechCodec
from app.engine.moss_speech.codec.config import CodecConfig
from app.engine.moss_speech.codec.testing import build_random_codec, speech_like
from app.engine.moss_speech.codec.voice import VoiceConditioning

FIXTURE_SPEECH = Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "audio"


def utterance_16k(seconds: float, seed: int) -> tuple[np.ndarray, str]:
    """Recorded speech (the repository's four test recordings, one after another, up to
    ``seconds``) when they are present, else speech-like audio."""
    paths = sorted(FIXTURE_SPEECH.glob("*.wav"))
    if not paths:
        return speech_like(seconds, 16000, seed=seed), "speech_like"
    import soundfile

    from app.audio.resample import resample

    pieces = []
    for path in paths:
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
        pieces.append(resample(samples[:, 0], rate, 16000))
    pcm = np.concatenate(pieces)[:int(seconds * 16000)]
    return pcm, "+".join(p.stem for p in paths)


def codec_pair(config: CodecConfig, dtype: torch.dtype, device: torch.device | str,
               chunk: int, seed: int, cache_dir: Path) -> tuple[MossSpeechCodec, MossSpeechCodec]:
    """The float32 codec and its ``dtype`` twin (same random weights)."""
    reference = build_random_codec(config, device, torch.float32, seed=seed, chunks=(chunk,),
                                   voice_cache_dir=cache_dir)
    low = build_random_codec(config, device, dtype, seed=seed, chunks=(chunk,),
                             voice_cache_dir=cache_dir)
    return reference, low


def streamed(codec: MossSpeechCodec, voice: VoiceConditioning, codes: torch.Tensor,
             chunk: int, seed: int) -> np.ndarray:
    with codec.stream_decoder(voice, chunk=chunk, seed=seed, final="causal") as decoder:
        pieces = [decoder.push(codes[i:i + chunk]) for i in range(0, len(codes), chunk)]
        pieces.append(decoder.finish())
    return np.concatenate(pieces)


def cosine(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    x = torch.as_tensor(a, dtype=torch.float64).flatten()
    y = torch.as_tensor(b, dtype=torch.float64).flatten()
    return float(torch.dot(x, y) / (x.norm() * y.norm()).clamp_min(1e-30))


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = float(((ref - test.astype(np.float64)) ** 2).sum())
    power = float((ref ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(power / noise)


def measure(config: CodecConfig, dtype: torch.dtype, device: torch.device | str = "cpu",
            chunk: int = 5, n_codes: int = 30, utterance_s: float = 6.0, seed: int = 0,
            cache_dir: Path | None = None) -> dict[str, Any]:
    """The three parity measures of ``dtype`` against float32 for one random codec."""
    from app.paths import scratch_dir

    cache_dir = cache_dir or scratch_dir("moss-voice-parity-")
    reference, low = codec_pair(config, dtype, device, chunk, seed, cache_dir)
    pcm, source = utterance_16k(utterance_s, seed)
    ids_ref, ids_low = reference.encode(pcm, 16000), low.encode(pcm, 16000)
    agree = float((ids_ref == ids_low).float().mean()) if len(ids_ref) == len(ids_low) else 0.0
    voice = reference.voice_from_samples(speech_like(3.0, 24000, seed=seed + 1), 24000)
    codes = torch.randint(0, 16384, (n_codes,), generator=torch.Generator().manual_seed(seed))
    mels = [codec.flow(chunk).inference(codes, voice.prompt_codes, voice.prompt_mel,
                                        voice.xvector, streaming=True, finalize=True)
            for codec in (reference, low)]
    waves = [streamed(codec, voice, codes, chunk, seed) for codec in (reference, low)]
    rel_rms = float((mels[1] - mels[0]).float().pow(2).mean().sqrt()
                    / mels[0].float().pow(2).mean().sqrt())
    return {"dtype": str(dtype).removeprefix("torch."), "utterance": source,
            "vq_codes": len(ids_ref), "vq_id_agreement": round(agree, 4),
            "vq_distinct_codes": int(ids_ref.unique().numel()),
            "mel_cosine": round(cosine(mels[0], mels[1]), 6), "mel_rel_rms": round(rel_rms, 5),
            "wave_snr_db": round(snr_db(waves[0], waves[1]), 2),
            "wave_rms": round(float(np.sqrt((waves[0] ** 2).mean())), 5)}
