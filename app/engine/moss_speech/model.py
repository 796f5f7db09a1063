"""MossSpeechModel: shared Qwen3 trunk, parallel text and audio tails, two heads (contract §1).

Module names equal the checkpoint keys (§1.2), so loading is a plain ``load_state_dict``:
``model.embed_tokens``, ``model.audio_embed``, ``model.{shared,text,audio}_block.layers.N``,
``model.text_norm``, ``model.audio_norm``, ``text_lm_head``, ``audio_lm_head``.

Three ways in: ``forward_grid`` (the plain reference, no cache, every position),
``forward_rows`` (rows appended to the KV caches, logits of the last row) and ``decode_static``
(one embedded row with static shapes, the torch.compile / CUDA-graph target).

The embedding tables may live in host memory while everything else is on the accelerator (the
loader's choice): ``embed_rows`` then gathers on the host and copies only the rows.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.kv_cache import KVCaches
from app.engine.moss_speech.layers import AttentionContext, DecoderBlock, RMSNorm, rope_tables

Logits = tuple[Tensor | None, Tensor]  # (text [B, V] or None when skipped, audio [B, V_audio])


class MossSpeechBackbone(nn.Module):
    """Everything under the checkpoint prefix ``model.``."""

    def __init__(self, config: MossSpeechConfig) -> None:
        super().__init__()
        H = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, H)
        self.audio_embed = nn.Embedding(config.audio_vocab_size, H)
        self.shared_block = DecoderBlock(config, config.num_shared_layers)
        self.text_block = DecoderBlock(config, config.num_modality_layers)
        self.audio_block = DecoderBlock(config, config.num_modality_layers)
        self.text_norm = RMSNorm(H, config.rms_norm_eps)
        self.audio_norm = RMSNorm(H, config.rms_norm_eps)


class MossSpeechModel(nn.Module):
    def __init__(self, config: MossSpeechConfig) -> None:
        super().__init__()
        self.config = config
        self.model = MossSpeechBackbone(config)
        # Not tied to the embeddings: the checkpoint stores independent tensors (contract §6.6).
        self.text_lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.audio_lm_head = nn.Linear(config.hidden_size, config.audio_vocab_size, bias=False)
        self.precision = "fp32"  # set by the loader: bf16, fp32, int8 or int4

    @property
    def device(self) -> torch.device:
        return self.model.audio_norm.weight.device

    @property
    def embed_device(self) -> torch.device:
        """Where the embedding tables live (the host when the loader kept them there)."""
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (activations, KV cache)."""
        return self.model.audio_norm.weight.dtype

    def embed_rows(self, grid: Tensor) -> Tensor:
        """Selection, not a sum (§1.5): text rows use embed_tokens, audio rows audio_embed.

        grid [B, L, 2] int64 (best on ``embed_device``) → [B, L, H] on ``device``. A row is an
        audio row iff its text id is modality_pad. With host tables the selection runs on the
        host and only the selected rows are copied (same values: a gather is exact).
        """
        grid = grid.to(self.embed_device)
        text, audio = grid[..., 0], grid[..., 1]
        is_audio = text == self.config.modality_pad_token_id  # [B, L]
        text_emb = self.model.embed_tokens(text.masked_fill(is_audio, 0))
        audio_emb = self.model.audio_embed(audio)
        rows = torch.where(is_audio.unsqueeze(-1), audio_emb, text_emb)
        if rows.device == self.device:
            return rows
        if self.device.type == "cuda":  # pinned (cached host blocks): an async copy, no sync
            return rows.pin_memory().to(self.device, non_blocking=True)
        return rows.to(self.device)

    def check_grid(self, grid: Tensor) -> None:
        """Raise ValueError for a grid the embeddings cannot take (once per prompt, not per row)."""
        if grid.dim() != 3 or grid.shape[-1] != 2 or grid.dtype != torch.int64:
            raise ValueError(f"grid must be an int64 tensor [B, L, 2], got {grid.dtype} "
                             f"{list(grid.shape)}")
        if grid.shape[1] == 0:
            raise ValueError("grid has no rows")
        cfg = self.config
        text, audio = grid[..., 0], grid[..., 1]
        if bool((text < 0).any() | (text >= cfg.vocab_size).any()):
            raise ValueError(f"grid text ids must lie in [0, {cfg.vocab_size})")
        if bool((audio < 0).any() | (audio >= cfg.audio_vocab_size).any()):
            raise ValueError(f"grid audio ids must lie in [0, {cfg.audio_vocab_size})")

    @torch.no_grad()
    def forward_grid(self, grid: Tensor) -> tuple[Tensor, Tensor]:
        """Plain reference forward without a cache: fp32 logits for every position.

        grid [B, L, 2] → (text [B, L, vocab_size], audio [B, L, audio_vocab_size]).
        """
        grid = grid.to(self.device)
        self.check_grid(grid)
        positions = torch.arange(grid.shape[1], device=self.device)
        cos, sin = rope_tables(positions, self.config.head_dim, self.config.rope_theta,
                               self.dtype)
        ctx = AttentionContext(cos, sin, start=0, causal=True)
        text_h, audio_h = self._tails(grid, ctx, None)
        return (self.text_lm_head(self.model.text_norm(text_h)).float(),
                self.audio_lm_head(self.model.audio_norm(audio_h)).float())

    def forward_rows(self, rows: Tensor, caches: KVCaches, start: int,
                     text_head: bool = True) -> Logits:
        """Append rows [B, L, 2] at positions start.. to the caches; fp32 logits of the last row.

        ``text_head=False`` skips the text norm and head (the tail still writes its KV), for
        audio-mode steps whose text sample is overwritten anyway.
        """
        L = rows.shape[1]
        caches.check_room(start, L)
        cos, sin = caches.cos[start:start + L], caches.sin[start:start + L]
        if L == 1:  # one new row sees every cached row: no mask
            ctx = AttentionContext(cos, sin, start=start, causal=False)
        elif start == 0:
            ctx = AttentionContext(cos, sin, start=0, causal=True)
        else:  # a chunk after a cached prefix: row i sees rows 0..start+i
            key_pos = caches.positions[:start + L]
            mask = key_pos[None, :] <= caches.positions[start:start + L, None]  # [L, start+L]
            ctx = AttentionContext(cos, sin, start=start, causal=False, mask=mask,
                                   prefix_causal=True)
        text_h, audio_h = self._tails(rows, ctx, caches)
        caches.length = start + L
        return self._heads(text_h[:, -1], audio_h[:, -1], text_head)

    def decode_static(self, embedded: Tensor, input_pos: Tensor, caches: KVCaches,
                      text_head: bool) -> Logits:
        """One embedded row [B, 1, H] (``embed_rows``) at input_pos [1] with static shapes
        (compile / CUDA-graph target; the embedding stays outside, so host tables work).

        Attends over the whole preallocated cache under a mask built on the device, so no
        shape depends on the position and nothing syncs with the host. The caller advances
        ``caches.length``.
        """
        cos, sin = caches.cos[input_pos], caches.sin[input_pos]  # [1, D]
        mask = caches.positions[None, :] <= input_pos[:, None]  # [1, S_max]
        ctx = AttentionContext(cos, sin, causal=False, mask=mask, input_pos=input_pos)
        text_h, audio_h = self._trunk_and_tails(embedded, ctx, caches)
        return self._heads(text_h[:, -1], audio_h[:, -1], text_head)

    def _tails(self, grid: Tensor, ctx: AttentionContext,
               caches: KVCaches | None) -> tuple[Tensor, Tensor]:
        return self._trunk_and_tails(self.embed_rows(grid), ctx, caches)

    def _trunk_and_tails(self, h: Tensor, ctx: AttentionContext,
                         caches: KVCaches | None) -> tuple[Tensor, Tensor]:
        layers = caches.layers if caches is not None else None
        h = self.model.shared_block(h, ctx, layers["shared"] if layers else None)
        # Both tails read the same trunk output and keep their own caches (§1.4).
        text_h = self.model.text_block(h, ctx, layers["text"] if layers else None)
        audio_h = self.model.audio_block(h, ctx, layers["audio"] if layers else None)
        return text_h, audio_h

    def _heads(self, text_h: Tensor, audio_h: Tensor, text_head: bool) -> Logits:
        audio = self.audio_lm_head(self.model.audio_norm(audio_h)).float()  # [B, V_audio]
        if not text_head:
            return None, audio
        return self.text_lm_head(self.model.text_norm(text_h)).float(), audio  # [B, V]

    def new_caches(self, max_rows: int, batch_size: int = 1) -> KVCaches:
        """Preallocated KV caches for this model's device and dtype."""
        return KVCaches(self.config, max_rows, self.device, self.dtype, batch_size)
