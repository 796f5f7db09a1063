"""The VRAM plan is computed from the real modules: its torch-free closed forms equal what the
modules built on the meta device in the published layout would allocate, byte for byte; the
codec's sizes equal what a loaded codec holds; and ``python -m app memory-plan`` prints the
numbers the preflight and the model manager use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine import preflight
from app.engine.moss_speech.census import codec_census, lm_census
from app.engine.moss_speech.codec import CodecConfig, load_codec
from app.engine.moss_speech.codec.testing import write_tiny_codec
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.vram_parts import CodecSizes, lm_weight_bytes


@pytest.fixture(scope="module")
def tiny_codec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_codec(tmp_path_factory.mktemp("codec") / "codec")


@pytest.mark.parametrize("precision", preflight.PRECISIONS)
@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
@pytest.mark.parametrize("size", ["full", "tiny"])
def test_the_plan_counts_what_the_meta_build_would_allocate(precision: str, device_type: str,
                                                            size: str) -> None:
    config = MossSpeechConfig.full() if size == "full" else MossSpeechConfig.tiny()
    assert lm_census(config, precision, device_type) == lm_weight_bytes(
        config.dims(), precision, device_type)


@settings(max_examples=15, deadline=None)
@given(hidden=st.sampled_from([64, 128, 256]), heads=st.sampled_from([2, 4]),
       kv=st.sampled_from([1, 2]), shared=st.integers(1, 3), modality=st.integers(1, 2),
       inter=st.sampled_from([128, 384]), precision=st.sampled_from(preflight.PRECISIONS))
def test_the_closed_forms_hold_for_other_shapes(hidden: int, heads: int, kv: int, shared: int,
                                                modality: int, inter: int,
                                                precision: str) -> None:
    config = MossSpeechConfig.tiny().with_(
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=hidden // heads, num_shared_layers=shared, num_modality_layers=modality,
        num_hidden_layers=shared + modality, intermediate_size=inter)
    assert lm_census(config, precision) == lm_weight_bytes(config.dims(), precision)


def test_the_published_codec_sizes_are_the_meta_build() -> None:
    assert codec_census(CodecConfig.full()) == CodecSizes() == preflight.CODEC_SIZES


@pytest.mark.parametrize(("dtype", "name"), [(torch.float32, "fp32"), (torch.float16, "fp16"),
                                             (torch.bfloat16, "bf16")])
def test_codec_weight_bytes_equal_a_loaded_codec(tiny_codec_dir: Path, tmp_path: Path,
                                                 dtype: torch.dtype, name: str) -> None:
    """What stays resident after a load and one encode: tokenizer (+ its float32 codebook
    table), the streaming flow, HiFT; the offline flow.pt is not loaded."""
    codec = load_codec(tiny_codec_dir, "cpu", dtype, voice_cache_dir=tmp_path,
                       streaming_chunks=(5,))
    codec.encode(torch.zeros(16000).numpy(), 16000)  # builds the codebook table
    encoder = codec.tokenizer.encoder
    held = sum(t.numel() * t.element_size() for module in (encoder, codec.flow(5), codec.hift)
               for t in (*module.parameters(), *module.buffers()))
    table, norms = encoder._tables  # float32 codebook and its norms, kept by the VQ step
    if table.data_ptr() != encoder.codebook.weight.data_ptr():  # a copy unless float32
        held += table.numel() * table.element_size()
    held += norms.numel() * norms.element_size()
    assert sorted(codec._flows) == [5]
    assert held == codec_census(CodecConfig.tiny()).weight_bytes(name)


def test_memory_plan_prints_the_preflight_numbers() -> None:
    done = subprocess.run([sys.executable, "-m", "app", "memory-plan", "--json",
                           "--free-gib", "22"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    for precision in ("bf16", "int8", "int4", "fp32"):
        row = plan["precisions"][precision]
        need = preflight.estimate(precision, 4096, flow_cache_bytes=preflight.flow_cache_bytes(
            1024, 500, dims=preflight.FlowDims(element_bytes=4 if precision == "fp32" else 2)))
        assert row["total_gib"] == round(need.total_bytes / preflight.GIB, 2)
        assert set(row["parts_gib"]) == {"lm_weights", "codec_weights", "kv_cache",
                                         "flow_cache", "prefill_transient", "dequant_transient",
                                         "codec_transient", "runtime"}
        assert row["fits"] == (need.total_bytes <= 22 * preflight.GIB)
    assert plan["precisions"]["bf16"]["total_gib"] <= 20.0
    assert plan["recommended"] == "bf16" and plan["free_gib"] == 22.0


@pytest.mark.parametrize("value", ["-1", "nan", "lots"])
def test_memory_plan_refuses_a_bad_free_size_in_one_line(value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "memory-plan", "--free-gib", value],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--free-gib" in done.stdout + done.stderr
