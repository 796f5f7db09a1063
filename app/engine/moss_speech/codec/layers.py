"""Building blocks with explicit streaming state, shared by the flow encoder and estimator.

A ``StepCache`` (a dict) carries the history of one streaming computation: each causal
convolution keeps its last ``kernel − 1`` inputs and each attention layer its keys and values,
stored under the module's ``cache_key`` (its dotted name, set by ``assign_cache_keys``). Passing
``cache=None`` computes a whole sequence from position 0, which is what the offline decode and
the reference-protocol recompute do; passing a cache computes only the new positions and gives
the same numbers, because every mask is chunk-causal and every convolution causal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

StepCache = dict  # cache_key -> tensor / KVCache, plus a few integer offsets


def assign_cache_keys(root: nn.Module) -> None:
    """Give every streaming submodule a unique, stable cache key (its dotted module name)."""
    for name, module in root.named_modules():
        if isinstance(module, (CausalConv1d, KVAttention)):
            module.cache_key = name or "root"


class KVCache:
    """Keys and values of earlier positions: ``append`` returns views over everything so far
    ([B, H, T, D]). With ``capacity`` the buffers are allocated once, at that many positions
    (no growth, no copy, a known bound); without, they grow by doubling.

    Sharing: ``fork`` shares the buffers copy-on-write (either side copies before its next
    write); ``lease`` lends them to one borrower, which writes after the lender's positions
    in place (the lender never sees those writes: its ``length`` does not move). The lender
    must have at most one live borrower at a time."""

    def __init__(self, capacity: int | None = None) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0
        self.capacity = capacity
        self.shared = False  # buffers belong to another cache too: copy before writing
        self.lent_length = 0  # positions below this belong to a lender: never written

    def fork(self) -> KVCache:
        """A cache with the same contents; both sides copy the shared buffers before their
        next append, so neither ever writes into the other (e.g. after a ``truncate``)."""
        other = KVCache(self.capacity)
        other._k, other._v, other.length, other.shared = self._k, self._v, self.length, True
        self.shared = True
        return other

    def lease(self) -> KVCache:
        """A cache with the same contents that appends into the same buffers after them."""
        other = KVCache(self.capacity)
        other._k, other._v, other.length = self._k, self._v, self.length
        other.lent_length = self.length
        return other

    def reader(self) -> FrozenKV:
        """A read-only view: its ``append`` attends over these positions plus the new ones
        without storing anything (the bounded streaming mode)."""
        return FrozenKV(self)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = k.shape[2]
        end = self.length + n
        if (self._k is None or self.shared or self.length < self.lent_length
                or end > self._k.shape[2]):
            self._reallocate(k, v, end)
        assert self._k is not None and self._v is not None
        self._k[:, :, self.length:end] = k
        self._v[:, :, self.length:end] = v
        self.length = end
        return self._k[:, :, :end], self._v[:, :, :end]

    def _reallocate(self, k: torch.Tensor, v: torch.Tensor, needed: int) -> None:
        """Own buffers of ``capacity`` positions (or double what is needed), with the
        positions so far copied in."""
        size = self.capacity if self.capacity and self.capacity >= needed else max(
            2 * needed, 64)
        new_k = k.new_empty(*k.shape[:2], size, k.shape[3])
        new_v = v.new_empty(*v.shape[:2], size, v.shape[3])
        if self._k is not None and self._v is not None and self.length:
            new_k[:, :, :self.length] = self._k[:, :, :self.length]
            new_v[:, :, :self.length] = self._v[:, :, :self.length]
        self._k, self._v, self.shared, self.lent_length = new_k, new_v, False, 0

    def truncate(self, length: int) -> None:
        """Forget positions from ``length`` on (their slots are overwritten by later appends)."""
        self.length = min(self.length, length)

    def nbytes(self) -> int:
        """Bytes allocated (without a capacity, up to twice what is used)."""
        if self._k is None:
            return 0
        return 2 * self._k.element_size() * self._k.numel()

    def used_nbytes(self) -> int:
        """Bytes of the positions held."""
        if self._k is None or not self._k.shape[2]:
            return 0
        return self.nbytes() * self.length // self._k.shape[2]

    def buffer_ptr(self) -> int:
        """Identity of the key buffer (0: none), to count shared buffers once."""
        return 0 if self._k is None else self._k.data_ptr()


class FrozenKV:
    """Read-only stand-in for a KVCache in a StepCache: attends over the cached positions and
    the new ones, stores nothing (a copy of the keys per call instead of a growing cache)."""

    def __init__(self, cache: KVCache) -> None:
        self.cache = cache

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = self.cache
        if cache._k is None or cache._v is None or not cache.length:
            return k, v
        return (torch.cat([cache._k[:, :, :cache.length], k], dim=2),
                torch.cat([cache._v[:, :, :cache.length], v], dim=2))


class CausalConv1d(nn.Conv1d):
    """Conv1d padded on the left only; with a cache, the left context is the previous call's
    last inputs instead of zeros."""

    cache_key = ""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 dilation: int = 1) -> None:
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.context = dilation * (kernel_size - 1)

    def forward(self, x: torch.Tensor, cache: StepCache | None = None) -> torch.Tensor:
        """x: [B, C, T] new frames -> [B, C_out, T]."""
        if cache is None:
            return super().forward(F.pad(x, (self.context, 0)))
        history = cache.get(self.cache_key)
        if history is None:
            history = x.new_zeros(x.shape[0], x.shape[1], self.context)
        x = torch.cat([history, x], dim=2)
        # a copy: a view would keep the whole input (history + every new frame) alive
        cache[self.cache_key] = x[:, :, x.shape[2] - self.context:].clone()
        return super().forward(x)


def chunk_mask(query_start: int, n_queries: int, n_keys: int, chunk: int,
               device: torch.device) -> torch.Tensor | None:
    """Allowed (query, key) pairs when position i sees every key before the end of its chunk
    (all left chunks): [n_queries, n_keys] bool; None when nothing is masked."""
    # The first query's chunk end is the smallest: if it covers every key, nothing is masked
    # (decided on the host, so the common cached step builds no tensor and never syncs).
    if chunk <= 0 or n_queries == 0 or (query_start // chunk + 1) * chunk >= n_keys:
        return None
    queries = torch.arange(query_start, query_start + n_queries, device=device)
    chunk_end = (queries // chunk + 1) * chunk
    keys = torch.arange(n_keys, device=device)
    return keys[None, :] < chunk_end[:, None]


SCORE_BUDGET_BYTES = 64 << 20  # fp32 scores of one attention call (the unfused fallback's)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None) -> torch.Tensor:
    """SDPA, in blocks of query rows when one call's fp32 scores would pass SCORE_BUDGET_BYTES
    (a whole 30 s speech segment, or a flow recompute past the cache budget): if SDPA falls
    back to its unfused kernel the transient stays bounded. Row for row the same attention.

    q [B, H, T, D], k/v [B, H, S, D], mask [T, S] bool or None → [B, H, T, D]."""
    B, H, T, _ = q.shape
    S = k.shape[2]
    rows = max(1, SCORE_BUDGET_BYTES // (B * H * S * 4))
    if rows >= T:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = torch.empty_like(q)
    for first in range(0, T, rows):
        last = min(T, first + rows)
        out[:, :, first:last] = F.scaled_dot_product_attention(
            q[:, :, first:last], k, v, attn_mask=None if mask is None else mask[first:last])
    return out


class KVAttention(nn.Module):
    """Base for attention layers that can keep their keys and values in a StepCache."""

    cache_key = ""

    def keys_values(self, k: torch.Tensor, v: torch.Tensor,
                    cache: StepCache | None) -> tuple[torch.Tensor, torch.Tensor]:
        if cache is None:
            return k, v
        kv = cache.get(self.cache_key)
        if kv is None:
            kv = cache[self.cache_key] = KVCache()
        return kv.append(k, v)

    def past_length(self, cache: StepCache | None) -> int:
        """Positions this layer holds in ``cache`` before its next append."""
        kv = cache.get(self.cache_key) if cache is not None else None
        if isinstance(kv, FrozenKV):
            return kv.cache.length
        return kv.length if isinstance(kv, KVCache) else 0


@dataclass(frozen=True)
class ChunkSpan:
    """Queries and keys of one stack of attention layers at one rate, built once per forward
    instead of once per layer: every layer of the stack holds the same positions (they are
    appended, truncated, forked and frozen together), which ``check`` asserts."""

    start: int  # absolute position of the first query
    n_keys: int  # positions each layer attends over: its cached ones plus the new ones
    mask: torch.Tensor | None  # chunk_mask(start, queries, n_keys, chunk)

    @classmethod
    def build(cls, first: KVAttention | None, cache: StepCache | None, start: int,
              n_queries: int, chunk: int, device: torch.device) -> ChunkSpan:
        """``first``: any attention layer of the stack (None: the stack has none)."""
        n_keys = (first.past_length(cache) if first is not None else 0) + n_queries
        return cls(start, n_keys, chunk_mask(start, n_queries, n_keys, chunk, device))

    def check(self, n_keys: int) -> None:
        assert n_keys == self.n_keys, "an attention layer holds other positions than its stack"
