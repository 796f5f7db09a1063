"""Whisper-VQ speech tokenizer network: causal convolutions and attention, layers up to
``quantize_position``, average pooling ×4 and nearest-codebook quantisation (contract §3.2).

Everything is causal, so the same ``step`` encodes a whole segment or the next few tokens of a
growing one: the state holds each layer's keys and values, and the two causal convolutions get
their left context from the (stored) feature frames. Whole-segment encoding is ``step`` from
token 0 with an empty state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.moss_speech.codec.config import WhisperVQConfig
from app.engine.moss_speech.codec.layers import KVCache, attention

MEL_FRAMES_PER_TOKEN = 8  # conv2 stride 2 × average pooling 4
CONV_CONTEXT_FRAMES = 2  # kernel 3, causal: two frames of left context per convolution


class SelfAttentionProjections(nn.Module):
    """Whisper's attention weights (k_proj has no bias); the math is in EncoderLayer."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)


class EncoderLayer(nn.Module):
    """Pre-LN Whisper encoder layer with causal self-attention."""

    def __init__(self, d_model: int, n_heads: int, ffn_dim: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.self_attn = SelfAttentionProjections(d_model)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, cache: KVCache, allowed: torch.Tensor) -> torch.Tensor:
        """x: [1, T, D] new positions; cache: keys/values of earlier positions (extended);
        allowed: the causal mask from ``causal_mask`` (the same for every layer of a rate)."""
        B, T, D = x.shape
        attn = self.self_attn
        h = self.self_attn_layer_norm(x)
        q, k, v = (proj(h).view(B, T, self.n_heads, -1).transpose(1, 2)
                   for proj in (attn.q_proj, attn.k_proj, attn.v_proj))  # [B, H, T, Dh]
        k, v = cache.append(k, v)
        assert allowed.shape == (T, k.shape[2]), "mask built for another cache length"
        out = attention(q, k, v, allowed)
        x = x + attn.out_proj(out.transpose(1, 2).reshape(B, T, D))
        h = self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return x + h


def causal_mask(n_queries: int, past: int, device: torch.device) -> torch.Tensor:
    """[n_queries, past + n_queries] bool: query i (absolute past + i) sees keys 0 .. past + i."""
    return torch.ones(n_queries, past + n_queries, dtype=torch.bool, device=device).tril(past)


@dataclass
class EncoderState:
    """Per-segment state of an incremental encode: tokens done and per-layer keys/values."""

    n_tokens: int = 0
    kv: list[KVCache] = field(default_factory=list)

    def truncate(self, n_tokens: int, pooling_position: int, pooled_ratio: int) -> None:
        """Forget everything from token ``n_tokens`` on (causality makes the rest valid)."""
        for index, cache in enumerate(self.kv):
            cache.truncate(n_tokens if index >= pooling_position else n_tokens * pooled_ratio)
        self.n_tokens = min(self.n_tokens, n_tokens)


class WhisperVQEncoder(nn.Module):
    """The quantising part of the Whisper-VQ encoder (checkpoint keys under ``encoder.``)."""

    def __init__(self, config: WhisperVQConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.conv1 = nn.Conv1d(config.num_mel_bins, d, kernel_size=3)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2)
        self.embed_positions = nn.Embedding(config.max_source_positions, d)
        self.layers = nn.ModuleList(
            EncoderLayer(d, config.encoder_attention_heads, config.encoder_ffn_dim)
            for _ in range(config.quantize_position))
        self.codebook = nn.Embedding(config.quantize_vocab_size, d)

    @property
    def max_tokens(self) -> int:
        """Tokens one segment can hold (positions are learned up to max_source_positions)."""
        return self.config.max_source_positions // self.config.pooling_kernel_size

    def new_state(self) -> EncoderState:
        return EncoderState(kv=[KVCache() for _ in self.layers])

    def truncate(self, state: EncoderState, n_tokens: int) -> None:
        state.truncate(n_tokens, self.config.pooling_position, self.config.pooling_kernel_size)

    def _embed(self, features: torch.Tensor, first: int, last: int) -> torch.Tensor:
        """Conv front end for tokens [first, last) of a segment: [1, 4·(last−first), D]."""
        start, end = first * MEL_FRAMES_PER_TOKEN, last * MEL_FRAMES_PER_TOKEN
        lo = max(0, start - 2 * CONV_CONTEXT_FRAMES)
        window = features[:, lo:end].to(self.conv1.weight.dtype)[None]  # [1, n_mels, t]
        if start == 0:  # segment start: both convolutions see zero padding
            h = F.gelu(self.conv1(F.pad(window, (CONV_CONTEXT_FRAMES, 0))))
            h = F.gelu(self.conv2(F.pad(h, (CONV_CONTEXT_FRAMES, 0))))
        else:  # left context from the frames before `start` (conv1 needs 2, conv2 needs 2 more)
            h = F.gelu(self.conv1(window))  # outputs for frames start−2 .. end−1
            h = F.gelu(self.conv2(h))
        positions = torch.arange(start // 2, end // 2, device=features.device)
        return h.transpose(1, 2) + self.embed_positions(positions)[None]

    @torch.inference_mode()
    def step(self, state: EncoderState, features: torch.Tensor, last: int) -> torch.Tensor:
        """Encode tokens [state.n_tokens, last) of a segment whose normalised log-mel
        features are ``features`` [n_mels, ≥ 8·last]; returns their codes [last − first]."""
        first = state.n_tokens
        if last <= first:
            return torch.zeros(0, dtype=torch.long, device=features.device)
        if last > self.max_tokens:
            raise ValueError(f"a segment holds at most {self.max_tokens} tokens")
        x = self._embed(features, first, last)
        pool = self.config.pooling_kernel_size
        # every layer of one rate holds the same positions, so one mask serves them all
        allowed = causal_mask(x.shape[1], state.kv[0].length if state.kv else 0, x.device)
        for index, layer in enumerate(self.layers):
            x = layer(x, state.kv[index], allowed)
            if index + 1 == self.config.pooling_position:
                x = F.avg_pool1d(x.transpose(1, 2), pool).transpose(1, 2)  # [1, T/4, D]
                if index + 1 < len(self.layers):
                    allowed = causal_mask(x.shape[1], state.kv[index + 1].length, x.device)
        state.n_tokens = last
        return self.quantize(x[0])

    def quantize(self, hidden: torch.Tensor) -> torch.Tensor:
        """Nearest codebook entry (squared L2, the reference's addmm form): [T, D] -> [T]."""
        codebook, norms = self._codebook_tables()
        hidden = hidden.float()
        distances = torch.addmm(norms + hidden.pow(2).sum(1, keepdim=True),
                                hidden, codebook.t(), alpha=-2.0, beta=1.0)
        return distances.argmin(dim=1)

    def _codebook_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 codebook and ‖c‖² per code, computed once per weight version (reading
        16384×1280 every step costs more than the step itself; a bf16 codebook would be
        converted every step)."""
        weight = self.codebook.weight
        key = (weight.data_ptr(), weight._version, weight.device, weight.dtype)
        if getattr(self, "_tables_key", None) != key:
            codebook = weight.float()
            self._tables = (codebook, codebook.pow(2).sum(1))
            self._tables_key = key
        return self._tables
