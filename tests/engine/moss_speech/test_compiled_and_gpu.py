"""The static-shape decode step under torch.compile, and the CUDA paths (opt-in, need a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.engine.moss_speech.generate import GenerationSession
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.prompt import Turn, build_prompt
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.tokenizer import MossTokenizer
from app.engine.moss_speech.weights import load_model

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def rows_of(model: MossSpeechModel, prompt: torch.Tensor, compile: bool) -> list:
    session = GenerationSession(model, max_rows=prompt.shape[0] + 32, compile=compile)
    session.prefill(prompt)
    return list(session.rows(Sampling(max_new_rows=12, min_new_rows=2), seed=5))


@pytest.mark.slow
def test_compiled_static_decode_equals_eager(switchy_model: MossSpeechModel,
                                             tokenizer: MossTokenizer) -> None:
    prompt = build_prompt(tokenizer, [Turn("system", "Hi"), Turn("user", "Hey")], "text")
    assert rows_of(switchy_model, prompt, compile=True) == rows_of(switchy_model, prompt, False)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["bf16", "int8", "int4"])
def test_cuda_precisions_track_fp32(tiny_dir: Path, tiny_model: MossSpeechModel,
                                    precision: str) -> None:
    model = load_model(tiny_dir, device="cuda", precision=precision)
    grid = torch.tensor([[(t, 512) for t in range(100, 140)]])
    text, audio = model.forward_grid(grid)
    ref_text, ref_audio = tiny_model.forward_grid(grid)
    for ours, ref in ((text.cpu(), ref_text), (audio.cpu(), ref_audio)):
        cosine = torch.nn.functional.cosine_similarity(ours.flatten(1), ref.flatten(1)).item()
        assert cosine > (0.98 if precision == "int4" else 0.99)


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_decode_equals_eager(tiny_dir: Path, tokenizer: MossTokenizer) -> None:
    model = load_model(tiny_dir, device="cuda", precision="fp32")
    prompt = build_prompt(tokenizer, [Turn("user", "Hey")], "audio")
    assert rows_of(model, prompt, compile=True) == rows_of(model, prompt, compile=False)
