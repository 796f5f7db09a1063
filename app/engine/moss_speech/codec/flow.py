"""Codes → 80-bin mel at 50 frames/s: CosyVoice2 ``CausalMaskedDiffWithXvec`` (contract §3.4).

The voice prompt's codes are prepended to the reply codes, its mel is the CFM condition for the
first frames and its x-vector the speaker input. The CFM integrates 10 Euler steps on the cosine
schedule with classifier-free guidance (``v = 1.7·v_cond − 0.7·v_uncond``) from a fixed noise
buffer made with its own generator seeded 0 (the reference seeds the global RNG to make it).

``inference`` is one whole pass (offline decode, and the reference streaming recompute).
``FlowStream`` (flow_stream.py) runs the same network chunk by chunk with caches, so a streaming
step costs the new chunk only instead of the whole prefix; its output equals the recompute.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.codec.config import FlowConfig
from app.engine.moss_speech.codec.flow_encoder import UpsampleConformerEncoder
from app.engine.moss_speech.codec.flow_estimator import CausalConditionalDecoder
from app.engine.moss_speech.codec.layers import StepCache, assign_cache_keys

SPEECH_CODES = 16384  # valid Whisper-VQ codes; larger ids are control tokens of the LM


class ConditionalCFM(nn.Module):
    """Holds the estimator (keys ``decoder.estimator.*``) and the fixed noise buffer."""

    def __init__(self, config: FlowConfig) -> None:
        super().__init__()
        self.config = config
        self.estimator = CausalConditionalDecoder(config.estimator)
        self.register_buffer("rand_noise", torch.zeros(0), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """(Re)make the noise buffer; on the CPU explicitly, since the module may have been
        built on the meta device."""
        generator = torch.Generator().manual_seed(self.config.noise_seed)
        self.rand_noise = torch.randn(1, self.config.mel_bins, self.config.noise_frames,
                                      generator=generator, device="cpu")

    def time_span(self, n_timesteps: int, dtype: torch.dtype) -> torch.Tensor:
        t = torch.linspace(0, 1, n_timesteps + 1, device=self.rand_noise.device, dtype=dtype)
        return 1 - torch.cos(t * 0.5 * torch.pi)

    def noise(self, start: int, end: int, dtype: torch.dtype) -> torch.Tensor:
        if end > self.config.noise_frames:
            seconds = self.config.noise_frames // 50
            raise ValueError(f"voice prompt plus reply exceed the flow's {seconds} s limit; "
                             "use a shorter voice prompt or a shorter reply")
        return self.rand_noise[:, :, start:end].to(dtype)

    def solve(self, x: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor, cond: torch.Tensor,
              chunk: int, n_timesteps: int, caches: list[StepCache] | None = None
              ) -> torch.Tensor:
        """Euler integration with CFG. x (noise), mu, cond: [1, 80, T]; spks: [1, 80].
        ``caches``: one StepCache per Euler step when streaming with caches."""
        cfg = self.config.inference_cfg_rate
        t_span = self.time_span(n_timesteps, mu.dtype)
        t, dt = t_span[0], t_span[1] - t_span[0]
        mu_in = torch.cat([mu, torch.zeros_like(mu)])
        spks_in = torch.cat([spks, torch.zeros_like(spks)])
        cond_in = torch.cat([cond, torch.zeros_like(cond)])
        for step in range(1, len(t_span)):
            cache = caches[step - 1] if caches is not None else None
            v = self.estimator(torch.cat([x, x]), mu_in, t.expand(2), spks_in, cond_in, chunk,
                               cache)
            v_cond, v_uncond = v.chunk(2)
            x = x + dt * ((1.0 + cfg) * v_cond - cfg * v_uncond)
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
        return x.float()


class Flow(nn.Module):
    """The flow decoder of one checkpoint (flow.pt, or flow-chunk-N.pt with ``chunk`` = N)."""

    def __init__(self, config: FlowConfig, chunk: int = 0) -> None:
        super().__init__()
        self.config = config
        self.chunk = chunk  # tokens per attention chunk when streaming (0: offline checkpoint)
        self.input_embedding = nn.Embedding(config.vocab_size, config.encoder.input_size)
        self.spk_embed_affine_layer = nn.Linear(config.spk_embed_dim, config.mel_bins)
        self.encoder = UpsampleConformerEncoder(config.encoder)
        self.encoder_proj = nn.Linear(config.encoder.output_size, config.mel_bins)
        self.decoder = ConditionalCFM(config)
        assign_cache_keys(self)

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder_proj.weight.dtype

    def speaker(self, xvector: torch.Tensor) -> torch.Tensor:
        """[192] or [1, 192] x-vector -> [1, 80] speaker condition."""
        xvector = xvector.reshape(1, -1).to(self.encoder_proj.weight)
        return self.spk_embed_affine_layer(F.normalize(xvector, dim=1))

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.input_embedding(tokens.clamp(min=0))[None]  # [1, T, D]

    def condition(self, prompt_feat: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """CFM condition for frames [start, end): the prompt mel where it exists, else 0."""
        weight = self.encoder_proj.weight
        cond = torch.zeros(1, self.config.mel_bins, end - start, device=weight.device,
                           dtype=weight.dtype)
        known = min(end, prompt_feat.shape[0])
        if known > start:
            cond[0, :, :known - start] = prompt_feat[start:known].T.to(weight)
        return cond

    @torch.inference_mode()
    def inference(self, codes: torch.Tensor, prompt_codes: torch.Tensor,
                  prompt_feat: torch.Tensor, xvector: torch.Tensor, streaming: bool,
                  finalize: bool, n_timesteps: int | None = None) -> torch.Tensor:
        """One whole pass, as the reference ``flow.inference``. codes, prompt_codes: [n], [p];
        prompt_feat: [4p, 80]. Returns the reply mel [1, 80, 4·n] (finalize) or
        [1, 80, 4·(n − lookahead)] (streaming step)."""
        check_codes(codes)
        tokens = torch.cat([prompt_codes, codes]).to(self.encoder_proj.weight.device)
        emb = self.embed(tokens)
        lookahead = self.config.encoder.pre_lookahead_len
        chunk = self.chunk if streaming else 0
        if finalize:
            h = self.encoder(emb, None, chunk)
        else:
            h = self.encoder(emb[:, :-lookahead], emb[:, -lookahead:], chunk)
        mu = self.encoder_proj(h).transpose(1, 2)  # [1, 80, T]
        mel = self.solve_frames(mu, 0, self.speaker(xvector), prompt_feat, chunk,
                                n_timesteps or self.config.n_timesteps)
        return mel[:, :, prompt_feat.shape[0]:]

    def solve_frames(self, mu: torch.Tensor, start_frame: int, spks: torch.Tensor,
                     prompt_feat: torch.Tensor, chunk: int, n_timesteps: int,
                     caches: list[StepCache] | None = None) -> torch.Tensor:
        """The CFM for mel frames [start_frame, start_frame + F) given their encoder output
        ``mu`` [1, 80, F]: the fixed noise and prompt condition of those frames, attention
        chunks of ``chunk`` tokens. Returns the mel [1, 80, F] (float32)."""
        end_frame = start_frame + mu.shape[2]
        return self.decoder.solve(self.decoder.noise(start_frame, end_frame, mu.dtype), mu, spks,
                                  self.condition(prompt_feat, start_frame, end_frame),
                                  chunk * self.config.token_mel_ratio, n_timesteps, caches)


def check_codes(codes: torch.Tensor) -> None:
    if codes.ndim != 1:
        raise ValueError(f"codes must be 1-D [n], got shape {tuple(codes.shape)}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= SPEECH_CODES):
        raise ValueError(f"codes must lie in [0, {SPEECH_CODES}); got {int(codes.min())}.."
                         f"{int(codes.max())} (strip the LM's end-of-speech and pad ids first)")
