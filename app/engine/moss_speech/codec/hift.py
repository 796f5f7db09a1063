"""HiFT vocoder: F0 predictor + neural-source-filter harmonics + iSTFTNet (contract §3.5).

Mel [1, 80, F] -> 24 kHz speech [1, 480·F]. The source module draws random phases and noise;
the reference takes them from the global RNG (pitfall 12), we take them from the generator the
caller passes (one per request), in the reference's order, so the global RNG is never touched
and a seed reproduces a waveform. Weight norm is folded into plain weights at load time.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.codec.config import HiFTConfig


def _padding(kernel: int, dilation: int = 1) -> int:
    return (kernel * dilation - dilation) // 2


class Snake(nn.Module):
    """x + sin²(αx)/α with a learned α per channel (linear scale)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, dilation=d,
                                              padding=_padding(kernel, d)) for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel,
                                              padding=_padding(kernel)) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1,
                                            self.activations2, strict=True):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class ConvRNNF0Predictor(nn.Module):
    """Five conv+ELU layers and a linear classifier: mel [1, 80, F] -> F0 in Hz [1, F]."""

    def __init__(self, in_channels: int, cond_channels: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for index in range(5):
            layers += [nn.Conv1d(in_channels if index == 0 else cond_channels, cond_channels,
                                 3, padding=1), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return torch.abs(self.classifier(self.condnet(mel).transpose(1, 2)).squeeze(-1))


class SourceModule(nn.Module):
    """SineGen2 + linear merge (``SourceModuleHnNSF2``) for 24 kHz."""

    def __init__(self, config: HiFTConfig) -> None:
        super().__init__()
        self.config = config
        self.harmonics = config.nb_harmonics + 1
        self.upsample = config.samples_per_frame
        self.l_linear = nn.Linear(self.harmonics, 1)

    def forward(self, f0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """f0: [1, L, 1] per sample -> merged source [1, L, 1]."""
        c = self.config
        with torch.no_grad():
            multiples = torch.arange(1, self.harmonics + 1, device=f0.device, dtype=f0.dtype)
            rad = (f0 * multiples / c.sampling_rate) % 1  # [1, L, H]
            rand_ini = torch.rand(f0.shape[0], self.harmonics, device=f0.device,
                                  generator=generator)
            rand_ini[:, 0] = 0
            rad[:, 0, :] = rad[:, 0, :] + rand_ini
            rad = F.interpolate(rad.transpose(1, 2), scale_factor=1 / self.upsample,
                                mode="linear").transpose(1, 2)
            phase = torch.cumsum(rad, dim=1) * 2 * np.pi
            phase = F.interpolate(phase.transpose(1, 2) * self.upsample,
                                  scale_factor=self.upsample, mode="linear").transpose(1, 2)
            sines = torch.sin(phase) * c.nsf_alpha
            uv = (f0 > c.nsf_voiced_threshold).to(torch.float32)
            noise_amp = uv * c.nsf_sigma + (1 - uv) * c.nsf_alpha / 3
            # as the reference's randn_like: same (transposed) strides, so the same draws
            noise = noise_amp * torch.empty_like(sines).normal_(generator=generator)
            sines = sines * uv + noise
            # the reference also draws (and discards) one more noise vector; keep the sequence
            torch.empty_like(uv).normal_(generator=generator)
        return torch.tanh(self.l_linear(sines))


class HiFTGenerator(nn.Module):
    """Checkpoint keys as in ``hift.pt`` (after folding weight norm)."""

    def __init__(self, config: HiFTConfig) -> None:
        super().__init__()
        self.config = config
        base = config.base_channels
        self.f0_predictor = ConvRNNF0Predictor(config.in_channels, config.f0_cond_channels)
        self.m_source = SourceModule(config)
        self.conv_pre = nn.Conv1d(config.in_channels, base, 7, padding=3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(base // 2 ** i, base // 2 ** (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes,
                                           strict=True)))
        n_freq = config.istft_n_fft + 2
        down_rates = np.cumprod([1, *config.upsample_rates[::-1][:-1]])[::-1]
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i, (u, k, d) in enumerate(zip(down_rates, config.source_resblock_kernel_sizes,
                                          config.source_resblock_dilation_sizes, strict=False)):
            ch = base // 2 ** (i + 1)
            u = int(u)
            self.source_downs.append(nn.Conv1d(n_freq, ch, 1) if u == 1 else
                                     nn.Conv1d(n_freq, ch, u * 2, u, padding=u // 2))
            self.source_resblocks.append(ResBlock(ch, k, d))
        self.resblocks = nn.ModuleList(
            ResBlock(base // 2 ** (i + 1), k, d) for i in range(len(self.ups))
            for k, d in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes,
                            strict=True))
        self.conv_post = nn.Conv1d(base // 2 ** len(self.ups), n_freq, 7, padding=3)
        self.register_buffer("stft_window", torch.zeros(0), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """(Re)make the STFT window (on the CPU: the module may be built on the meta device)."""
        self.stft_window = torch.hann_window(self.config.istft_n_fft, periodic=True,
                                             device="cpu")

    def _stft(self, x: torch.Tensor) -> torch.Tensor:
        n_fft, hop = self.config.istft_n_fft, self.config.istft_hop
        spec = torch.stft(x, n_fft, hop, n_fft, window=self.stft_window, return_complex=True)
        return torch.cat([spec.real, spec.imag], dim=1)  # [1, n_fft + 2, frames]

    def decode(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        c = self.config
        s_stft = self._stft(source.squeeze(1))
        x = self.conv_pre(mel)
        n_kernels = len(c.resblock_kernel_sizes)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, c.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            x = sum(self.resblocks[i * n_kernels + j](x) for j in range(n_kernels)) / n_kernels
        x = self.conv_post(F.leaky_relu(x))
        half = c.istft_n_fft // 2 + 1
        magnitude = torch.clip(torch.exp(x[:, :half]), max=1e2)
        phase = torch.sin(x[:, half:])
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        speech = torch.istft(spec, c.istft_n_fft, c.istft_hop, c.istft_n_fft,
                             window=self.stft_window)
        return torch.clamp(speech, -c.audio_limit, c.audio_limit)

    @torch.inference_mode()
    def inference(self, mel: torch.Tensor, generator: torch.Generator,
                  cache_source: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel [1, 80, F] -> (speech [1, 480·F], source [1, 1, 480·F]); the start of the source
        is replaced by ``cache_source`` (streaming continuity)."""
        mel = mel.to(self.conv_pre.weight)
        f0 = self.f0_predictor(mel)  # [1, F]
        per_sample = torch.repeat_interleave(f0[:, None], self.config.samples_per_frame, dim=2)
        source = self.m_source(per_sample.transpose(1, 2), generator).transpose(1, 2)
        if cache_source is not None and cache_source.shape[2]:
            source[:, :, :cache_source.shape[2]] = cache_source
        return self.decode(mel, source), source
