from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from app.engine.folders import expected_lm_shapes
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.layers import AttentionContext, DecoderLayer, attend, rope_tables
from app.engine.moss_speech.model import MossSpeechModel


def test_real_config_key_manifest_through_meta_tensors() -> None:
    config = MossSpeechConfig.full()
    with torch.device("meta"):
        model = MossSpeechModel(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert len(shapes) == 446
    assert shapes == expected_lm_shapes(config.to_dict())
    assert sum(math.prod(s) for s in shapes.values()) > 9.0e9  # ~9.10 B parameters


def grid_of(rows: list[tuple[int, int]]) -> torch.Tensor:
    return torch.tensor([rows], dtype=torch.int64)


def test_embedding_is_a_selection_per_row_type(tiny_model: MossSpeechModel) -> None:
    cfg = tiny_model.config
    emb, audio_emb = tiny_model.model.embed_tokens.weight, tiny_model.model.audio_embed.weight
    rows = [(42, 512), (42, 77), (cfg.sosp_token_id, 512), (cfg.modality_pad_token_id, 77),
            (cfg.modality_pad_token_id, cfg.eosp_token_id), (cfg.modality_pad_token_id, 512)]
    out = tiny_model.embed_rows(grid_of(rows))[0]
    assert torch.equal(out[0], emb[42]) and torch.equal(out[1], emb[42])  # audio value ignored
    assert torch.equal(out[2], emb[cfg.sosp_token_id])  # the sosp row is a text row
    assert torch.equal(out[3], audio_emb[77])
    assert torch.equal(out[4], audio_emb[cfg.eosp_token_id])
    assert torch.equal(out[5], audio_emb[512])


def random_grid(cfg: MossSpeechConfig, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, 1000, (length,), generator=g)
    audio = torch.full((length,), cfg.audio_pad_token_id)
    audio_rows = torch.rand(length, generator=g) < 0.5
    text[audio_rows] = cfg.modality_pad_token_id
    audio[audio_rows] = torch.randint(0, 16384, (int(audio_rows.sum()),), generator=g)
    return torch.stack([text, audio], dim=-1)[None]  # [1, L, 2]


def test_forward_grid_shapes_and_causality(tiny_model: MossSpeechModel) -> None:
    cfg = tiny_model.config
    grid = random_grid(cfg, 12)
    text, audio = tiny_model.forward_grid(grid)
    assert text.shape == (1, 12, cfg.vocab_size) and audio.shape == (1, 12, cfg.audio_vocab_size)
    assert text.dtype == audio.dtype == torch.float32
    changed = grid.clone()
    changed[0, 8:, 0] = 7  # change only later rows
    text2, audio2 = tiny_model.forward_grid(changed)
    torch.testing.assert_close(text2[:, :8], text[:, :8])
    torch.testing.assert_close(audio2[:, :8], audio[:, :8])
    assert not torch.allclose(audio2[:, 8:], audio[:, 8:])


def test_cached_decoding_equals_forward_grid(tiny_model: MossSpeechModel) -> None:
    grid = random_grid(tiny_model.config, 24, seed=3)
    ref_text, ref_audio = tiny_model.forward_grid(grid)
    caches = tiny_model.new_caches(32)
    with torch.no_grad():
        outputs = {9: tiny_model.forward_rows(grid[:, :10], caches, 0)}  # prefill
        outputs[15] = tiny_model.forward_rows(grid[:, 10:16], caches, 10)  # chunk after prefix
        for i in range(16, 20):  # single rows, eager slices
            outputs[i] = tiny_model.forward_rows(grid[:, i:i + 1], caches, i)
        for i in range(20, 24):  # single rows, static shapes (compile target)
            outputs[i] = tiny_model.decode_static(tiny_model.embed_rows(grid[:, i:i + 1]),
                                                  torch.tensor([i]), caches, text_head=True)
            caches.length = i + 1
    assert caches.length == 24
    for i, (text, audio) in outputs.items():
        torch.testing.assert_close(text[0], ref_text[0, i], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(audio[0], ref_audio[0, i], rtol=1e-5, atol=1e-5)


def test_text_head_is_skipped_on_request(tiny_model: MossSpeechModel) -> None:
    grid = random_grid(tiny_model.config, 4)
    with torch.no_grad():
        text, audio = tiny_model.forward_rows(grid, tiny_model.new_caches(8), 0, text_head=False)
    assert text is None and audio.shape == (1, tiny_model.config.audio_vocab_size)


def test_rope_tables_are_computed_in_fp32() -> None:
    positions = torch.arange(30000, 30004)
    cos, sin = rope_tables(positions, 128, 1e6, torch.bfloat16)
    inv_freq = 1.0 / (1e6 ** (torch.arange(0, 128, 2, dtype=torch.float64) / 128))
    angle = positions.double()[:, None] * inv_freq[None]
    ref = torch.cat([angle, angle], -1)
    assert cos.dtype == torch.bfloat16
    torch.testing.assert_close(cos.float(), ref.cos().to(torch.bfloat16).float(), atol=8e-3,
                               rtol=0)
    torch.testing.assert_close(sin.float(), ref.sin().to(torch.bfloat16).float(), atol=8e-3,
                               rtol=0)


def reference_layer(layer: DecoderLayer, x: torch.Tensor, cfg: MossSpeechConfig) -> torch.Tensor:
    """Contract §1.3 written out plainly: q/k norm before RoPE, GQA by repeating k/v."""
    def rms(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps))

    def rope(t: torch.Tensor) -> torch.Tensor:
        L, D = t.shape[2], t.shape[3]
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2).float() / D))
        ang = torch.arange(L).float()[:, None] * inv[None]
        ang = torch.cat([ang, ang], -1)
        rot = torch.cat([-t[..., D // 2:], t[..., :D // 2]], -1)
        return t * ang.cos() + rot * ang.sin()

    a = layer.self_attn
    B, L, _ = x.shape
    D, nh, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    h = rms(x, layer.input_layernorm.weight)
    q = rms(a.q_proj(h).view(B, L, nh, D), a.q_norm.weight).transpose(1, 2)
    k = rms(a.k_proj(h).view(B, L, nkv, D), a.k_norm.weight).transpose(1, 2)
    v = a.v_proj(h).view(B, L, nkv, D).transpose(1, 2)
    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, nh * D)
    x = x + a.o_proj(attn)
    m = layer.mlp
    h = rms(x, layer.post_attention_layernorm.weight)
    return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


def test_decoder_layer_matches_plain_qwen3_math(tiny_model: MossSpeechModel) -> None:
    cfg = tiny_model.config
    layer = tiny_model.model.shared_block.layers[1]
    x = torch.randn(1, 9, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    cos, sin = rope_tables(torch.arange(9), cfg.head_dim, cfg.rope_theta, torch.float32)
    with torch.no_grad():
        ours = layer(x, AttentionContext(cos, sin), None)
        ref = reference_layer(layer, x, cfg)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_one_row_attention_folds_query_groups_without_copying_the_cache() -> None:
    """Decode rows fold each GQA group into the query axis; same result as repeating k/v."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 16, generator=generator)  # [B, H, 1, D]
    k, v = (torch.randn(1, 2, 12, 16, generator=generator) for _ in range(2))  # [B, n_kv, S, D]
    mask = torch.arange(12)[None, :] <= 6  # [1, S]: rows past position 6 are not valid yet
    ctx = AttentionContext(torch.ones(1, 16), torch.zeros(1, 16), causal=False, mask=mask)
    k_rep, v_rep = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)  # head h → h // 4
    scores = (q @ k_rep.transpose(-1, -2)) / 4.0  # / sqrt(D)
    expected = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v_rep
    torch.testing.assert_close(attend(q, k, v, ctx), expected, rtol=1e-5, atol=1e-6)
    unmasked = AttentionContext(torch.ones(1, 16), torch.zeros(1, 16), causal=False)
    torch.testing.assert_close(attend(q, k, v, unmasked), scores.softmax(-1) @ v_rep,
                               rtol=1e-5, atol=1e-6)
