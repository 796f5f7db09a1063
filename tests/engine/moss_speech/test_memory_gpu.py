"""The memory levers on a real CUDA device (opt-in: ``pytest -m gpu``, run by make gpu-report):
embedding tables on the host with every decode step, the fp16 codec, and the prefill transient
of a full-size layer within the plan's bound whichever SDPA kernel runs."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from app.engine import preflight
from app.engine.moss_speech.generate import GenerationSession
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.weights import load_model

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("decode_path", ["eager", "graph", "compile"])
def test_host_embeddings_give_the_device_tables_logits(tiny_dir: Path, decode_path: str) -> None:
    hosted = load_model(tiny_dir, "cuda", "bf16")
    resident = load_model(tiny_dir, "cuda", "bf16", host_embeddings=False)
    assert hosted.embed_device.type == "cpu" and hosted.device.type == "cuda"
    assert resident.embed_device.type == "cuda"
    grid = torch.tensor([[(151644, 512), (872, 512), (151646, 512)]
                         + [(151667, c) for c in range(100, 140)]])
    for ours, theirs in zip(hosted.forward_grid(grid), resident.forward_grid(grid), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # a gather is exact
    session = GenerationSession(hosted, max_rows=128, decode_path=decode_path)
    assert session.decode.path == decode_path or decode_path == "compile"  # compile may fall back
    session.prefill(grid[0])
    greedy = Sampling(temperature=0.0, max_new_rows=8, min_new_rows=8)
    rows = list(session.rows(greedy, seed=0))
    reference = GenerationSession(resident, max_rows=128)
    reference.prefill(grid[0])
    assert rows == list(reference.rows(greedy, seed=0))


def test_the_fp16_codec_stays_within_the_parity_bar() -> None:
    from app.engine.moss_speech.codec import CodecConfig
    from app.engine.moss_speech.codec.parity import measure

    result = measure(CodecConfig.tiny(), torch.float16, "cuda", n_codes=20)
    assert result["vq_id_agreement"] >= 0.95
    assert result["mel_cosine"] >= 0.999 and result["wave_snr_db"] >= 30


@pytest.mark.parametrize("math_only", [False, True])
def test_a_full_size_prefill_chunk_stays_within_the_planned_transient(math_only: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.layers import AttentionContext, DecoderLayer, rope_tables

    config = MossSpeechConfig.full()
    layer = DecoderLayer(config).to("cuda", torch.bfloat16).requires_grad_(False)
    chunk, prefix = 1024, 4096 + preflight.TRANSCRIPT_KV_ROWS - 1024
    rows = prefix + chunk
    shape = (1, config.num_key_value_heads, rows, config.head_dim)
    kv = (torch.zeros(shape, device="cuda", dtype=torch.bfloat16),
          torch.zeros(shape, device="cuda", dtype=torch.bfloat16))
    positions = torch.arange(rows, device="cuda")
    cos, sin = rope_tables(positions, config.head_dim, config.rope_theta, torch.bfloat16)
    hidden = torch.randn(1, chunk, config.hidden_size, device="cuda", dtype=torch.bfloat16)
    mask = positions[None, :] <= positions[prefix:, None]
    ctx = AttentionContext(cos[prefix:], sin[prefix:], start=prefix, causal=False, mask=mask,
                           prefix_causal=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]) if math_only else nullcontext():
        out = layer(hidden, ctx, kv)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    bound = preflight.prefill_transient_bytes(preflight.ModelDims(), rows, "bf16")
    assert torch.isfinite(out).all() and extra <= bound, (extra / 2**20, bound / 2**20)


@pytest.mark.parametrize("decode_path", ["eager", "graph"])
def test_the_int8_text_head_holds_one_block_of_its_bf16_copy(decode_path: str) -> None:
    """torchao's int8 linear copies the whole weight to bf16 per call (1.16 GiB for the text
    head); the loader's head multiplies a block of rows at a time: the call's extra allocated
    memory, and what a captured CUDA graph's pool keeps, stay within the plan's block."""
    from torch import nn

    from app.engine.moss_speech.config import MossSpeechConfig
    from app.engine.moss_speech.quantize import quantize_linears

    config = MossSpeechConfig.full()
    linear = nn.Linear(config.hidden_size, config.vocab_size, bias=False, device="cuda",
                       dtype=torch.bfloat16).requires_grad_(False)
    head = quantize_linears(linear, "int8")
    row = torch.randn(1, 1, config.hidden_size, device="cuda", dtype=torch.bfloat16)
    # one block, the output row, and room for cuBLAS's per-stream workspace (tens of MiB):
    # far under the 1.16 GiB copy a whole-weight product makes
    allowed = (preflight.dequant_transient_bytes(preflight.ModelDims(), "int8")
               + 8 * config.vocab_size * 2 + (64 << 20))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as before a capture
        head(row)
    torch.cuda.current_stream().wait_stream(side)
    head(row)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before_allocated, before_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    if decode_path == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            head(row)
        graph.replay()
    else:
        head(row)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before_allocated <= allowed
    assert torch.cuda.max_memory_reserved() - before_reserved <= allowed
