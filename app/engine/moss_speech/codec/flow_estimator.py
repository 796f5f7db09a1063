"""The CFM velocity estimator (CosyVoice2 ``CausalConditionalDecoder``, contract §3.4).

A 1-D U-Net without resampling (one level: the MOSS config has ``channels: [256]``): causal
ResNet blocks conditioned on the flow time, transformer blocks (diffusers
``BasicTransformerBlock`` layout, GELU feed-forward) and causal convolutions. Attention is
chunk-causal over mel frames when streaming. Module names follow the checkpoint keys
(``decoder.estimator.*``).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.codec.config import EstimatorConfig
from app.engine.moss_speech.codec.layers import (
    CausalConv1d,
    ChunkSpan,
    KVAttention,
    StepCache,
    attention,
)


class CausalBlock1D(nn.Module):
    """CausalConv1d(k=3) → LayerNorm over channels → Mish (keys ``block.0``, ``block.2``)."""

    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([CausalConv1d(dim, dim_out, 3), nn.Identity(),
                                    nn.LayerNorm(dim_out)])

    def forward(self, x: torch.Tensor, cache: StepCache | None) -> torch.Tensor:
        h = self.block[0](x, cache)
        h = self.block[2](h.transpose(1, 2)).transpose(1, 2)
        return F.mish(h)


class CausalResnetBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_emb_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, time_emb: torch.Tensor,
                cache: StepCache | None) -> torch.Tensor:
        h = self.block1(x, cache) + self.mlp(time_emb)[:, :, None]
        h = self.block2(h, cache)
        return h + self.res_conv(x)


class Attention(KVAttention):
    """diffusers ``Attention`` as used here: no q/k/v bias, output Linear with bias."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, span: ChunkSpan, cache: StepCache | None) -> torch.Tensor:
        B, T, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, t.shape[1], self.heads, -1).transpose(1, 2)  # [B, H, T, Dh]

        q = heads(self.to_q(x))
        k, v = self.keys_values(heads(self.to_k(x)), heads(self.to_v(x)), cache)
        span.check(k.shape[2])
        out = attention(q, k, v, span.mask)
        return self.to_out[0](out.transpose(1, 2).reshape(B, T, -1))


class GELUProj(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class FeedForward(nn.Module):
    """GELU MLP ×4 (keys ``net.0.proj``, ``net.2``; index 1 is the reference's dropout)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, 4 * dim), nn.Identity(), nn.Linear(4 * dim, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net[2](self.net[0](x))


class TransformerBlock(nn.Module):
    """Self-attention + GELU feed-forward (×4), pre-LayerNorm (keys norm1/attn1/norm3/ff)."""

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = Attention(dim, heads, dim_head)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim)

    def forward(self, x: torch.Tensor, span: ChunkSpan, cache: StepCache | None) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x), span, cache)
        return x + self.ff(self.norm3(x))


class TimestepEmbedding(nn.Module):
    def __init__(self, in_channels: int, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


def sinusoidal_time(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """Matcha ``SinusoidalPosEmb``: [B] -> [B, dim]."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))
    angles = scale * t[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def _level(modules: nn.Module) -> tuple[CausalResnetBlock1D, nn.ModuleList, CausalConv1d | None]:
    """(resnet, transformer blocks, resampling conv or None) of one U-Net level; the levels are
    plain ModuleLists so that the checkpoint keys (``down_blocks.0.1.2...``) line up."""
    parts = list(modules.children())
    conv = parts[2] if len(parts) > 2 else None
    return (cast(CausalResnetBlock1D, parts[0]), cast(nn.ModuleList, parts[1]),
            cast(CausalConv1d | None, conv))


class CausalConditionalDecoder(nn.Module):
    """Velocity estimator v(x, mu, t, spks, cond): [B, 80, T] each -> [B, 80, T]."""

    def __init__(self, config: EstimatorConfig) -> None:
        super().__init__()
        if len(config.channels) != 1:
            raise ValueError("only a single-level estimator (channels: [C]) is supported")
        self.config = config
        c = config.channels[0]
        time_dim = 4 * c
        self.time_mlp = TimestepEmbedding(config.in_channels, time_dim)

        def transformers() -> nn.ModuleList:
            return nn.ModuleList(TransformerBlock(c, config.num_heads, config.attention_head_dim)
                                 for _ in range(config.n_blocks))

        self.down_blocks = nn.ModuleList([nn.ModuleList([
            CausalResnetBlock1D(config.in_channels, c, time_dim), transformers(),
            CausalConv1d(c, c, 3)])])
        self.mid_blocks = nn.ModuleList(
            nn.ModuleList([CausalResnetBlock1D(c, c, time_dim), transformers()])
            for _ in range(config.num_mid_blocks))
        self.up_blocks = nn.ModuleList([nn.ModuleList([
            CausalResnetBlock1D(2 * c, c, time_dim), transformers(), CausalConv1d(c, c, 3)])])
        self.final_block = CausalBlock1D(c, c)
        self.final_proj = nn.Conv1d(c, config.out_channels, 1)

    def forward(self, x: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, spks: torch.Tensor,
                cond: torch.Tensor, chunk: int, cache: StepCache | None = None) -> torch.Tensor:
        """x, mu, cond: [B, 80, T] at frames cache["frames"] onward; t: [B]; spks: [B, 80];
        chunk: frames per attention chunk (0 = full attention)."""
        start = cache.get("frames", 0) if cache is not None else 0
        time_emb = self.time_mlp(sinusoidal_time(t, self.config.in_channels).to(t.dtype))
        h = torch.cat([x, mu, spks[:, :, None].expand(-1, -1, x.shape[2]), cond], dim=1)
        resnet, blocks, downsample = _level(self.down_blocks[0])
        # no level resamples, so every block attends over the same positions: one mask for all
        first = cast(TransformerBlock, blocks[0]).attn1 if len(blocks) else None
        span = ChunkSpan.build(first, cache, start, x.shape[2], chunk, x.device)

        def attend(blocks: nn.ModuleList, h: torch.Tensor) -> torch.Tensor:
            h = h.transpose(1, 2)
            for block in blocks:
                h = block(h, span, cache)
            return h.transpose(1, 2)

        h = attend(blocks, resnet(h, time_emb, cache))
        skip = h
        h = downsample(h, cache) if downsample is not None else h
        for mid in self.mid_blocks:
            resnet, blocks, _ = _level(mid)
            h = attend(blocks, resnet(h, time_emb, cache))
        resnet, blocks, upsample = _level(self.up_blocks[0])
        h = attend(blocks, resnet(torch.cat([h, skip], dim=1), time_emb, cache))
        h = upsample(h, cache) if upsample is not None else h
        h = self.final_block(h, cache)
        if cache is not None:
            cache["frames"] = start + x.shape[2]
        return self.final_proj(h)
