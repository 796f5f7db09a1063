"""Signal processing shared by the codec: mel filter banks, the Whisper log-mel front end, the
24 kHz prompt mel, Kaldi fbank for CAM++, and torchaudio-compatible sinc resampling.

Everything is plain torch (no torchaudio, no librosa) and follows the reference recipes exactly,
because the codes and the voice conditioning are sensitive to each of them (contract §3.2, §3.3,
pitfall 13).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

# Whisper front end (preprocessor_config.json of the codec)
WHISPER_LOG_FLOOR = 1e-10
WHISPER_DYNAMIC_RANGE = 8.0  # log10 units below the loudest bin of the segment

# 24 kHz prompt mel (Matcha/CosyVoice recipe, contract §3.3)
PROMPT_SAMPLE_RATE_HZ = 24000
PROMPT_N_FFT = 1920
PROMPT_HOP = 480
PROMPT_MAGNITUDE_EPS = 1e-9
PROMPT_LOG_FLOOR = 1e-5

# Kaldi fbank defaults as used by CosyVoice for CAM++ (25 ms / 10 ms frames at 16 kHz)
FBANK_SAMPLE_RATE_HZ = 16000
FBANK_FRAME_LENGTH = 400
FBANK_FRAME_SHIFT = 160
FBANK_FFT = 512
FBANK_PREEMPHASIS = 0.97
FBANK_LOW_HZ = 20.0
FBANK_POVEY_POWER = 0.85
FBANK_EPS = float(torch.finfo(torch.float32).eps)


def _hz_to_mel_slaney(freq: np.ndarray | float) -> np.ndarray:
    freq = np.asarray(freq, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz = 1000.0
    logstep = np.log(6.4) / 27.0
    log_region = freq >= min_log_hz
    mels = np.where(log_region, min_log_hz / f_sp + np.log(np.maximum(freq, 1e-12) / min_log_hz)
                    / logstep, mels)
    return mels


def _mel_to_hz_slaney(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_mel = 1000.0 / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, 1000.0 * np.exp(logstep * (mels - min_log_mel)), freqs)


@lru_cache(maxsize=8)
def slaney_mel_filters(sample_rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float,
                       fmax_hz: float) -> np.ndarray:
    """[n_fft//2+1, n_mels] slaney-scale, slaney-normalised triangles (librosa's default)."""
    n_freqs = n_fft // 2 + 1
    fft_freqs = np.linspace(0, sample_rate_hz // 2, n_freqs)
    mel_edges = np.linspace(_hz_to_mel_slaney(fmin_hz), _hz_to_mel_slaney(fmax_hz), n_mels + 2)
    hz_edges = _mel_to_hz_slaney(mel_edges)
    widths = np.diff(hz_edges)
    slopes = hz_edges[None, :] - fft_freqs[:, None]  # [F, M+2]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (hz_edges[2:n_mels + 2] - hz_edges[:n_mels])
    return filters


@lru_cache(maxsize=4)
def kaldi_mel_filters(n_mels: int = 80) -> np.ndarray:
    """[FBANK_FFT//2+1, n_mels] Kaldi triangles (built in mel space, 1127·ln(1+f/700))."""
    def mel(freq: np.ndarray | float) -> np.ndarray:
        return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)

    n_bins = FBANK_FFT // 2
    bin_mels = mel(FBANK_SAMPLE_RATE_HZ / FBANK_FFT * np.arange(n_bins))
    low, high = mel(FBANK_LOW_HZ), mel(FBANK_SAMPLE_RATE_HZ / 2)
    delta = (high - low) / (n_mels + 1)
    left = low + delta * np.arange(n_mels)
    center, right = left + delta, left + 2 * delta
    up = (bin_mels[:, None] - left[None, :]) / (center - left)[None, :]
    down = (right[None, :] - bin_mels[:, None]) / (right - center)[None, :]
    filters = np.maximum(0.0, np.minimum(up, down))
    return np.concatenate([filters, np.zeros((1, n_mels))], axis=0)  # Nyquist bin weighs 0


# Device copies built once per (shape, device): the streaming front end runs every 0.4 s.
# Shared tensors: callers must never write into them.


@lru_cache(maxsize=16)
def _mel_basis(sample_rate_hz: int, n_fft: int, n_mels: int,
               device: torch.device) -> torch.Tensor:
    """Slaney filters (0–8 kHz) as float32 on ``device``: [n_fft//2+1, n_mels]."""
    filters = slaney_mel_filters(sample_rate_hz, n_fft, n_mels, 0.0, 8000.0)
    return torch.from_numpy(filters.astype(np.float32)).to(device)


@lru_cache(maxsize=16)
def _hann(n_samples: int, device: torch.device) -> torch.Tensor:
    """Periodic float32 Hann window on ``device`` (torch.stft's window)."""
    return torch.hann_window(n_samples, device=device, dtype=torch.float32)


@lru_cache(maxsize=8)
def _fbank_tables(n_mels: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Kaldi's povey window [400] and mel filters [257, n_mels], float64 on ``device``."""
    window = torch.hann_window(FBANK_FRAME_LENGTH, periodic=False, dtype=torch.float64,
                               device=device) ** FBANK_POVEY_POWER
    return window, torch.from_numpy(kaldi_mel_filters(n_mels)).to(device)


# ---------------------------------------------------------------------------------------------
# Whisper log-mel


def whisper_raw_log_mel(pcm_16k: torch.Tensor, n_fft: int, hop: int, n_mels: int,
                        mode: str = "center") -> torch.Tensor:
    """log10 mel power of 16 kHz audio before the dynamic-range floor: [n_mels, frames].

    ``mode``: "center" is ``torch.stft(center=True)`` with the last frame dropped (Whisper);
    "growing" reflects only the start and leaves out the frames whose window would reach past
    the end (audio that is still arriving); "slice" computes every full window of the slice.
    """
    x = pcm_16k.to(torch.float32)
    window = _hann(n_fft, x.device)
    if mode == "center":
        spec = torch.stft(x, n_fft, hop, window=window, return_complex=True)[..., :-1]
    else:
        if mode == "growing":
            if x.shape[-1] <= n_fft // 2:
                return torch.zeros(n_mels, 0, device=x.device)
            x = F.pad(x[None, None], (n_fft // 2, 0), mode="reflect")[0, 0]
        if x.shape[-1] < n_fft:
            return torch.zeros(n_mels, 0, device=x.device)
        spec = torch.stft(x, n_fft, hop, window=window, center=False, return_complex=True)
    power = (spec.abs() ** 2).contiguous()
    filters = _mel_basis(16000, n_fft, n_mels, x.device)
    return torch.clamp(filters.T @ power, min=WHISPER_LOG_FLOOR).log10()


def whisper_normalise(raw_log_mel: torch.Tensor, max_value: float | torch.Tensor) -> torch.Tensor:
    """Whisper's floor at max − 8 and the (x + 4) / 4 scaling."""
    floor = torch.as_tensor(max_value, dtype=raw_log_mel.dtype, device=raw_log_mel.device)
    return (torch.maximum(raw_log_mel, floor - WHISPER_DYNAMIC_RANGE) + 4.0) / 4.0


def whisper_log_mel(pcm_16k: torch.Tensor, n_fft: int = 400, hop: int = 160,
                    n_mels: int = 128) -> torch.Tensor:
    """Whisper log-mel of one segment, [n_mels, len // hop], as WhisperFeatureExtractor."""
    raw = whisper_raw_log_mel(pcm_16k, n_fft, hop, n_mels)
    return whisper_normalise(raw, raw.max())


# ---------------------------------------------------------------------------------------------
# Prompt mel and fbank


def prompt_mel(pcm_24k: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """Matcha/HiFi-GAN mel of a 24 kHz waveform: [frames, n_mels], frames = len // 480."""
    pad = (PROMPT_N_FFT - PROMPT_HOP) // 2
    x = F.pad(pcm_24k.to(torch.float32)[None, None], (pad, pad), mode="reflect")[0, 0]
    window = _hann(PROMPT_N_FFT, x.device)
    spec = torch.stft(x, PROMPT_N_FFT, PROMPT_HOP, PROMPT_N_FFT, window=window, center=False,
                      return_complex=True)
    magnitude = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + PROMPT_MAGNITUDE_EPS)
    filters = _mel_basis(PROMPT_SAMPLE_RATE_HZ, PROMPT_N_FFT, n_mels, x.device)
    mel = filters.T @ magnitude  # [n_mels, frames]
    return torch.log(torch.clamp(mel, min=PROMPT_LOG_FLOOR)).T.contiguous()


def kaldi_fbank(pcm_16k: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """Kaldi log-mel fbank, [frames, n_mels] (dither 0, povey window, pre-emphasis 0.97,
    snip edges), as torchaudio.compliance.kaldi.fbank."""
    x = pcm_16k.to(torch.float64)
    if x.shape[-1] < FBANK_FRAME_LENGTH:
        return torch.zeros(0, n_mels, dtype=torch.float32, device=x.device)
    frames = x.unfold(-1, FBANK_FRAME_LENGTH, FBANK_FRAME_SHIFT)  # [N, 400]
    frames = frames - frames.mean(dim=-1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=-1)
    frames = frames - FBANK_PREEMPHASIS * previous
    window, filters = _fbank_tables(n_mels, x.device)
    frames = F.pad(frames * window, (0, FBANK_FFT - FBANK_FRAME_LENGTH))
    power = torch.fft.rfft(frames).abs() ** 2  # [N, 257]
    energies = power @ filters
    return torch.clamp(energies, min=FBANK_EPS).log().to(torch.float32)


# ---------------------------------------------------------------------------------------------
# Resampling (torchaudio.transforms.Resample, sinc_interp_hann, width 6, rolloff 0.99)


@lru_cache(maxsize=16)
def _sinc_kernel(orig_hz: int, new_hz: int, width_zeros: int = 6,
                 rolloff: float = 0.99) -> tuple[torch.Tensor, int]:
    base = min(orig_hz, new_hz) * rolloff
    width = math.ceil(width_zeros * orig_hz / base)
    idx = torch.arange(-width, width + orig_hz, dtype=torch.float64)[None, None] / orig_hz
    t = torch.arange(0, -new_hz, -1, dtype=torch.float64)[:, None, None] / new_hz + idx
    t = (t * base).clamp(-width_zeros, width_zeros)
    window = torch.cos(t * math.pi / width_zeros / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    kernel = kernel * window * (base / orig_hz)
    return kernel.to(torch.float32), width


def resample(pcm: torch.Tensor, orig_hz: int, new_hz: int) -> torch.Tensor:
    """Band-limited resampling of a 1-D waveform, numerically as torchaudio's default."""
    if orig_hz == new_hz:
        return pcm
    gcd = math.gcd(int(orig_hz), int(new_hz))
    orig, new = int(orig_hz) // gcd, int(new_hz) // gcd
    kernel, width = _sinc_kernel(orig, new)
    length = pcm.shape[-1]
    x = F.pad(pcm.to(torch.float32)[None, None], (width, width + orig))
    out = F.conv1d(x, kernel.to(pcm.device), stride=orig)  # [1, new, n]
    out = out.transpose(1, 2).reshape(-1)
    return out[: math.ceil(new * length / orig)]
