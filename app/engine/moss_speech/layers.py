"""Qwen3 decoder layers as MOSS-Speech uses them (contract §1.3); names equal checkpoint keys.

Pre-norm residual blocks: RMSNorm → attention (q/k per-head RMSNorm before RoPE, GQA, no biases)
→ RMSNorm → SwiGLU MLP. RoPE tables are computed in fp32 and rounded to the compute dtype, as
the reference does. Attention runs through SDPA, or flash-attn when it is installed on CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from app.engine.moss_speech.config import MossSpeechConfig

try:  # optional CUDA kernel (pip install flash-attn); SDPA is used without it
    from flash_attn import flash_attn_func as _flash_attn_func
except Exception:  # ImportError, or a CUDA/ABI mismatch at import
    _flash_attn_func = None

LayerKV = tuple[Tensor, Tensor]  # ([B, n_kv, S_max, D], [B, n_kv, S_max, D]) of one layer


class RMSNorm(nn.Module):
    """Normalise in fp32, round to the input dtype, then scale (Qwen3RMSNorm semantics)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_tables(positions: Tensor, head_dim: int, theta: float,
                dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos, sin [L, D] for rotate-half RoPE; frequencies in fp32 whatever the model dtype."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device)
    inv_freq = 1.0 / (theta ** (exponent.float() / head_dim))  # [D/2]
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [L, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [L, D]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, H, L, D], cos/sin [L, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class AttentionContext:
    """Per-forward facts shared by every layer (built once per step to keep Python work low).

    ``start`` is the position of the first row. With ``input_pos`` set (static shapes for
    torch.compile/CUDA graphs) cache writes go by index and attention covers the whole cache
    under ``mask``; otherwise writes and reads use Python slices up to ``start + L``.
    """

    cos: Tensor  # [L, D]
    sin: Tensor  # [L, D]
    start: int = 0
    causal: bool = True
    mask: Tensor | None = None  # [L, S] bool, True = may attend
    input_pos: Tensor | None = None  # [L] int64, static-shape path only
    prefix_causal: bool = False  # ``mask`` is "row i sees every key up to start + i"

    def write(self, kv: LayerKV, k: Tensor, v: Tensor) -> LayerKV:
        """Store this step's k/v [B, n_kv, L, D]; return the keys/values to attend over."""
        k_cache, v_cache = kv
        if self.input_pos is not None:
            k_cache.index_copy_(2, self.input_pos, k)
            v_cache.index_copy_(2, self.input_pos, v)
            return k_cache, v_cache
        end = self.start + k.shape[2]
        k_cache[:, :, self.start:end] = k
        v_cache[:, :, self.start:end] = v
        return k_cache[:, :, :end], v_cache[:, :, :end]


# The most memory one attention call may spend on its score matrix when SDPA falls back to the
# unfused math kernel (which keeps fp32 scores): a prefill chunk over a long cached prefix is
# split into blocks of query rows under this bound (preflight.attention_transient_bytes counts
# the same). Below it nothing is split, so short prompts run exactly as one call.
SCORE_BUDGET_BYTES = 64 << 20
SCORE_BYTES = 4  # fp32 scores


def attend(q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
    """q [B, H, L, D], k/v [B, n_kv, S, D] → [B, H, L, D]; GQA without copying k/v."""
    if (_flash_attn_func is not None and q.is_cuda and ctx.mask is None
            and q.dtype in (torch.float16, torch.bfloat16)):
        # flash-attn aligns the causal mask bottom-right, which is exactly "row i sees every
        # cached row up to its own position" for prefill chunks and single decode rows alike.
        out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                               causal=True)
        return out.transpose(1, 2)
    B, H, L, D = q.shape
    n_kv = k.shape[1]
    if L == 1 and n_kv != H and not (ctx.causal and ctx.mask is None):
        # One query row (decode): fold each group of query heads into the query axis, so SDPA
        # sees n_kv heads and reads every cached key/value once. With enable_gqa and a mask
        # (the static step) no fused CUDA kernel applies and the math path copies the whole
        # cache once per query head, every row. [B, n_kv, H/n_kv, D] → [B, H, 1, D].
        out = F.scaled_dot_product_attention(q.reshape(B, n_kv, H // n_kv, D), k, v,
                                             attn_mask=ctx.mask)
        return out.reshape(B, H, 1, D)
    if (L > 1 and (ctx.prefix_causal or (ctx.causal and ctx.mask is None))
            and B * H * L * k.shape[2] * SCORE_BYTES > SCORE_BUDGET_BYTES):
        return attend_blocked(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.mask,
                                          is_causal=ctx.causal and ctx.mask is None,
                                          enable_gqa=k.shape[1] != q.shape[1])


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> Tensor:
    """[L, S] bool, bottom-right aligned: query i sees keys 0 .. S − L + i (SDPA's is_causal
    when L = S)."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(n_keys - n_queries)


def block_rows(batch: int, heads: int, n_keys: int, budget: int) -> int:
    """Query rows per block so that one block's fp32 scores stay within ``budget``."""
    return max(1, budget // (batch * heads * n_keys * SCORE_BYTES))


def attend_blocked(q: Tensor, k: Tensor, v: Tensor, budget: int | None = None) -> Tensor:
    """Causal attention of the last L of S positions (row i sees keys 0 .. S − L + i, the only
    multi-row attention the model runs) in blocks of query rows, each over just the keys it
    sees: the math fallback's fp32 scores stay under SCORE_BUDGET_BYTES, and with the query
    heads of a group folded into the query axis (no ``enable_gqa``) a masked call stays eligible
    for a fused kernel and never copies k/v per query head. Row for row the same attention.

    q [B, H, L, D], k/v [B, n_kv, S, D] → [B, H, L, D]."""
    B, H, L, D = q.shape
    n_kv, S = k.shape[1], k.shape[2]
    group = H // n_kv
    out = torch.empty_like(q)
    step = block_rows(B, H, S, SCORE_BUDGET_BYTES if budget is None else budget)
    for first in range(0, L, step):
        last = min(L, first + step)
        n_rows, n_keys = last - first, S - L + last  # this block sees keys [0, n_keys)
        qb = q[:, :, first:last].reshape(B, n_kv, group * n_rows, D)  # [B, n_kv, g·l, D]
        mask = causal_mask(n_rows, n_keys, q.device).repeat(group, 1)  # row j·l + i → row i
        ob = F.scaled_dot_product_attention(qb, k[:, :, :n_keys], v[:, :, :n_keys],
                                            attn_mask=mask)
        out[:, :, first:last] = ob.reshape(B, H, n_rows, D)
    return out


class Attention(nn.Module):
    def __init__(self, config: MossSpeechConfig) -> None:
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.n_heads, self.n_kv, self.head_dim = (config.num_attention_heads,
                                                  config.num_key_value_heads, D)
        self.q_proj = nn.Linear(H, self.n_heads * D, bias=False)
        self.k_proj = nn.Linear(H, self.n_kv * D, bias=False)
        self.v_proj = nn.Linear(H, self.n_kv * D, bias=False)
        self.o_proj = nn.Linear(self.n_heads * D, H, bias=False)
        self.q_norm = RMSNorm(D, config.rms_norm_eps)
        self.k_norm = RMSNorm(D, config.rms_norm_eps)

    def forward(self, x: Tensor, ctx: AttentionContext, kv: LayerKV | None) -> Tensor:
        B, L, _ = x.shape  # x: [B, L, H]
        D = self.head_dim
        q = self.q_norm(self.q_proj(x).view(B, L, self.n_heads, D)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, L, self.n_kv, D)).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.n_kv, D).transpose(1, 2)  # [B, n_kv, L, D]
        q, k = apply_rope(q, ctx.cos, ctx.sin), apply_rope(k, ctx.cos, ctx.sin)
        if kv is not None:
            k, v = ctx.write(kv, k, v)
        out = attend(q, k, v, ctx)  # [B, n_heads, L, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, L, self.n_heads * D))


class MLP(nn.Module):
    def __init__(self, config: MossSpeechConfig) -> None:
        super().__init__()
        H, inter = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: MossSpeechConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, h: Tensor, ctx: AttentionContext, kv: LayerKV | None) -> Tensor:
        h = h + self.self_attn(self.input_layernorm(h), ctx, kv)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderBlock(nn.Module):
    """A stack of decoder layers (``shared_block``, ``text_block`` or ``audio_block``)."""

    def __init__(self, config: MossSpeechConfig, n_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(n_layers))

    def forward(self, h: Tensor, ctx: AttentionContext, cache: list[LayerKV] | None) -> Tensor:
        for i, layer in enumerate(self.layers):
            h = layer(h, ctx, cache[i] if cache is not None else None)
        return h
