"""The flow's token encoder (CosyVoice2 ``UpsampleConformerEncoder``, contract §3.4).

Linear embedding → pre-lookahead convolution (sees 3 future tokens) → conformer blocks with
espnet relative-position attention → ×4 nearest upsampling + causal conv → more conformer
blocks at the mel frame rate → LayerNorm. Widths are parameters here (the reference hardcodes
512 channels in the lookahead and upsampling layers). Attention is chunk-causal when
``chunk > 0`` (streaming), full otherwise; with a StepCache only new positions are computed.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.codec.config import FlowEncoderConfig
from app.engine.moss_speech.codec.layers import CausalConv1d, ChunkSpan, KVAttention, StepCache

CONFORMER_LN_EPS = 1e-12


def relative_positions(rel_max: int, count: int, d_model: int, device: torch.device,
                       dtype: torch.dtype) -> torch.Tensor:
    """espnet relative encodings for distances rel_max, rel_max−1, … (``count`` of them):
    [1, count, d_model], computed exactly as the reference table (float32 sin/cos)."""
    rel = torch.arange(rel_max, rel_max - count, -1, dtype=torch.float32, device=device)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=device)
                    * -(math.log(10000.0) / d_model))
    angles = rel[:, None] * div[None, :]
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(count, d_model)
    return pe[None].to(dtype)


class LinearEmbed(nn.Module):
    """``LinearNoSubsampling`` + espnet scaling: LayerNorm(Linear(x)) · √d (keys ``out.0/1``)."""

    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.xscale = math.sqrt(odim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) * self.xscale


class RelPositionAttention(KVAttention):
    """Multi-head attention with Transformer-XL style relative positions (pos_bias_u/v)."""

    def __init__(self, n_heads: int, d_model: int) -> None:
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.linear_q = nn.Linear(d_model, d_model)
        self.linear_k = nn.Linear(d_model, d_model)
        self.linear_v = nn.Linear(d_model, d_model)
        self.linear_out = nn.Linear(d_model, d_model)
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(n_heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(n_heads, self.d_k))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.h, self.d_k).transpose(1, 2)  # [B, H, T, Dk]

    def forward(self, x: torch.Tensor, span: ChunkSpan, pos: torch.Tensor,
                cache: StepCache | None) -> torch.Tensor:
        """x: [B, T, D] at absolute positions span.start .. span.start+T−1; pos: the level's
        ``relative_positions`` table [1, Tk + T − 1, D] (distances start+T−1 down to −(T−1))."""
        B, T, D = x.shape
        q = self._heads(self.linear_q(x))
        k, v = self.keys_values(self._heads(self.linear_k(x)), self._heads(self.linear_v(x)),
                                cache)
        n_keys = k.shape[2]
        span.check(n_keys)
        ac = torch.matmul(q + self.pos_bias_u[:, None], k.transpose(-2, -1))  # [B, H, T, Tk]
        count = n_keys + T - 1
        p = self.linear_pos(pos).view(1, count, self.h, self.d_k).transpose(1, 2)
        bd_full = torch.matmul(q + self.pos_bias_v[:, None], p.transpose(-2, -1))  # [B,H,T,R]
        bd_full = bd_full.contiguous()
        # query row r needs columns (T−1−r) .. (T−1−r)+Tk−1: a skewed view (the "rel shift")
        bd = bd_full.as_strided((B, self.h, T, n_keys),
                                (self.h * T * count, T * count, count - 1, 1), T - 1)
        scores = (ac + bd) / math.sqrt(self.d_k)
        if span.mask is not None:
            scores = scores.masked_fill(~span.mask, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.linear_out(out.transpose(1, 2).reshape(B, T, D))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, hidden)
        self.w_2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Pre-norm conformer block without convolution module or macaron FF (the MOSS flow)."""

    def __init__(self, d_model: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.self_attn = RelPositionAttention(n_heads, d_model)
        self.feed_forward = FeedForward(d_model, hidden)
        self.norm_mha = nn.LayerNorm(d_model, eps=CONFORMER_LN_EPS)
        self.norm_ff = nn.LayerNorm(d_model, eps=CONFORMER_LN_EPS)

    def forward(self, x: torch.Tensor, span: ChunkSpan, pos: torch.Tensor,
                cache: StepCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), span, pos, cache)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookaheadLayer(nn.Module):
    """conv1 sees the token and the next ``lookahead`` ones, conv2 is causal; residual."""

    def __init__(self, channels: int, lookahead: int) -> None:
        super().__init__()
        self.lookahead = lookahead
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=lookahead + 1)
        self.conv2 = CausalConv1d(channels, channels, kernel_size=3)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None,
                cache: StepCache | None) -> torch.Tensor:
        """x: [B, T, C]; context: [B, ≤lookahead, C] embeddings of the tokens after x (zeros
        stand in for missing ones, as at the end of an utterance)."""
        h = x.transpose(1, 2)
        if context is not None and context.shape[1]:
            h = torch.cat([h, context.transpose(1, 2)], dim=2)
        h = F.pad(h, (0, x.shape[1] + self.lookahead - h.shape[2]))
        h = F.leaky_relu(self.conv1(h))
        return self.conv2(h, cache).transpose(1, 2) + x


class Upsample(nn.Module):
    """Nearest-neighbour repeat ×stride, then a causal conv of kernel 2·stride+1."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = CausalConv1d(channels, channels, kernel_size=2 * stride + 1)

    def forward(self, x: torch.Tensor, cache: StepCache | None) -> torch.Tensor:
        """x: [B, C, T] -> [B, C, stride·T]."""
        return self.conv(torch.repeat_interleave(x, self.stride, dim=2), cache)


class UpsampleConformerEncoder(nn.Module):
    """Tokens at 12.5 Hz -> hidden states at 50 Hz (checkpoint keys under ``encoder.``)."""

    def __init__(self, config: FlowEncoderConfig) -> None:
        super().__init__()
        d = config.output_size
        self.config = config
        self.embed = LinearEmbed(config.input_size, d)
        self.pre_lookahead_layer = PreLookaheadLayer(d, config.pre_lookahead_len)
        self.encoders = nn.ModuleList(ConformerLayer(d, config.attention_heads,
                                                     config.linear_units)
                                      for _ in range(config.num_blocks))
        self.up_layer = Upsample(d, config.upsample_stride)
        self.up_embed = LinearEmbed(d, d)
        self.up_encoders = nn.ModuleList(ConformerLayer(d, config.attention_heads,
                                                        config.linear_units)
                                         for _ in range(config.num_up_blocks))
        self.after_norm = nn.LayerNorm(d, eps=1e-5)

    def forward(self, tokens: torch.Tensor, context: torch.Tensor | None, chunk: int,
                cache: StepCache | None = None) -> torch.Tensor:
        """tokens: [B, T, input_size] embedded tokens at positions cache["tokens"] onward;
        context: embedded lookahead tokens or None; chunk: tokens per attention chunk (0 =
        full attention). Returns [B, stride·T, D]."""
        start = cache.get("tokens", 0) if cache is not None else 0
        x = self.embed(tokens)
        ctx = self.embed(context) if context is not None and context.shape[1] else None
        x = self.pre_lookahead_layer(x, ctx, cache)
        x = self._conformers(self.encoders, x, start, chunk, cache)
        stride = self.config.upsample_stride
        x = self.up_layer(x.transpose(1, 2), cache).transpose(1, 2)
        x = self.up_embed(x)
        x = self._conformers(self.up_encoders, x, start * stride, chunk * stride, cache)
        if cache is not None:
            cache["tokens"] = start + tokens.shape[1]
        return self.after_norm(x)

    @staticmethod
    def _conformers(layers: nn.ModuleList, x: torch.Tensor, start: int, chunk: int,
                    cache: StepCache | None) -> torch.Tensor:
        """The conformer blocks of one rate; their chunk mask and relative-position table
        depend only on the positions, which all blocks share, so they are built once here."""
        if not len(layers):
            return x
        T, D = x.shape[1], x.shape[2]
        first = cast(ConformerLayer, layers[0]).self_attn
        span = ChunkSpan.build(first, cache, start, T, chunk, x.device)
        pos = relative_positions(start + T - 1, span.n_keys + T - 1, D, x.device, x.dtype)
        for layer in layers:
            x = layer(x, span, pos, cache)
        return x
