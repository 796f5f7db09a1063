"""Session-wide tiny checkpoint and models (written and loaded once per test run)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.testing import write_tiny_checkpoint
from app.engine.moss_speech.tokenizer import MossTokenizer, load_tokenizer
from app.engine.moss_speech.weights import load_model


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The tiny model's kernels are too small to split; on a shared 2-core machine a second
    OpenMP thread only adds spin-waiting (measured 4x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path) -> MossSpeechModel:
    """fp32 so cached/uncached comparisons are tight."""
    return load_model(tiny_dir, precision="fp32")


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path) -> MossTokenizer:
    return load_tokenizer(tiny_dir)


@pytest.fixture(scope="session")
def switchy_model(tiny_model: MossSpeechModel) -> MossSpeechModel:
    """The tiny model with sosp, eosp and im_end made likely at some steps, so generation
    really switches modes and stops (random weights alone almost never emit them)."""
    model = copy.deepcopy(tiny_model)
    cfg: MossSpeechConfig = model.config
    generator = torch.Generator().manual_seed(1)
    H = cfg.hidden_size
    with torch.no_grad():
        for head, token, gain in ((model.text_lm_head, cfg.sosp_token_id, 25.0),
                                  (model.audio_lm_head, cfg.eosp_token_id, 14.0),
                                  (model.text_lm_head, cfg.im_end_token_id, 15.0)):
            direction = torch.randn(H, generator=generator)
            head.weight[token] = gain * direction / direction.norm()
    return model


@pytest.fixture(scope="session")
def engine_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random model, codec and voice prompt for the voice-loop engine (written once)."""
    from app.engine.moss_speech.testing import tiny_engine_settings

    folder = tmp_path_factory.mktemp("engine")
    tiny_engine_settings(folder)
    return folder
