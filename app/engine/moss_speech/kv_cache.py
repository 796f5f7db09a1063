"""The three KV caches (shared, text, audio) of contract §1.4, preallocated and in lock-step.

One position per grid row in all three caches: each tail writes KV at every row (also rows of
the other modality) and later reads only its own history. Shapes never change after ``setup``,
so the per-row decode step allocates nothing and can be captured as a CUDA graph.
``truncate`` only moves the length: rows past it are overwritten by the next forward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.layers import LayerKV, rope_tables

BLOCKS = ("shared", "text", "audio")


class KVCaches:
    """Preallocated caches for the shared trunk and both tails; ``length`` rows are valid."""

    def __init__(self, config: MossSpeechConfig, max_rows: int, device: torch.device | str,
                 dtype: torch.dtype, batch_size: int = 1) -> None:
        if max_rows <= 0:
            raise ValueError("max_rows must be positive")
        self.max_rows = max_rows
        self.length = 0
        layers = {"shared": config.num_shared_layers, "text": config.num_modality_layers,
                  "audio": config.num_modality_layers}
        shape = (batch_size, config.num_key_value_heads, max_rows, config.head_dim)
        # One tensor per block and kind: [n_layers, B, n_kv, S_max, D].
        self._k = {b: torch.zeros((n, *shape), device=device, dtype=dtype)
                   for b, n in layers.items()}
        self._v = {b: torch.zeros((n, *shape), device=device, dtype=dtype)
                   for b, n in layers.items()}
        self.layers: dict[str, list[LayerKV]] = {
            b: [(self._k[b][i], self._v[b][i]) for i in range(n)] for b, n in layers.items()}
        # Row positions and their RoPE tables, computed once (same values as per-step tables).
        self.positions = torch.arange(max_rows, device=device)  # [S_max]
        self.cos, self.sin = rope_tables(self.positions, config.head_dim, config.rope_theta,
                                         dtype)  # [S_max, D] each

    def tensors(self) -> list[Tensor]:
        """Every preallocated tensor (caches, positions, RoPE tables)."""
        return [*self._k.values(), *self._v.values(), self.positions, self.cos, self.sin]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self._k.values(), *self._v.values()))

    def check_room(self, start: int, n_rows: int) -> None:
        """Raise a clear error before a forward that would run past the preallocated rows."""
        if start + n_rows > self.max_rows:
            raise ValueError(f"the conversation needs {start + n_rows} rows but the KV cache "
                             f"holds {self.max_rows}; drop old turns or raise the context bound")

    def reset(self) -> None:
        """Forget every row (the memory stays allocated)."""
        self.length = 0

    def truncate(self, n_rows: int) -> None:
        """Keep only the first ``n_rows`` rows in all three caches (barge-in roll-back)."""
        if not 0 <= n_rows <= self.length:
            raise ValueError(f"cannot truncate to {n_rows} rows: the cache holds {self.length}")
        self.length = n_rows

    def rows_view(self, block: str, layer: int) -> tuple[Tensor, Tensor]:
        """The valid keys/values of one layer, [B, n_kv, length, D] (tests, debugging)."""
        k, v = self.layers[block][layer]
        return k[:, :, :self.length], v[:, :, :self.length]
