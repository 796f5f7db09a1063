"""Loading a codec folder: entry point, config parsing, safe .pt loading, clear errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from app.engine.folders import FolderError
from app.engine.moss_speech.codec import CodecConfig, CodecConfigError, CodecLoadError, load_codec
from app.engine.moss_speech.codec.config import read_codec_config


class NotATensor:
    """A custom class: unpickling it would import and run code from this module."""

    def __init__(self) -> None:
        self.payload = [1, 2, 3]


@pytest.fixture
def folder_copy(tiny_codec_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_codec_dir, tmp_path / "codec"))


def test_load_codec_is_exported_by_the_engine_package(tiny_codec_dir: Path,
                                                      tmp_path: Path) -> None:
    from app.engine.moss_speech import load_codec as exported

    state = torch.get_rng_state()
    codec = exported(tiny_codec_dir, voice_cache_dir=tmp_path, streaming_chunks=(5,))
    assert torch.equal(torch.get_rng_state(), state)  # building the flow leaves it alone
    assert codec.sample_rate_hz == 24000 and codec.samples_per_code == 1920
    assert sorted(codec._flows) == [5]  # streaming only: flow.pt is not loaded up front
    assert codec.flow(5).chunk == 5 and codec.flow(0).chunk == 0
    assert sorted(codec._flows) == [0, 5]  # ... but on first use (offline decode)


def test_the_offline_flow_loads_up_front_only_when_asked(tiny_codec_dir: Path,
                                                         tmp_path: Path) -> None:
    codec = load_codec(tiny_codec_dir, voice_cache_dir=tmp_path, offline_flow=True)
    assert sorted(codec._flows) == [0]


def test_tiny_config_round_trips_through_the_published_files(tiny_codec_dir: Path) -> None:
    assert read_codec_config(tiny_codec_dir) == CodecConfig.tiny()


def test_full_size_yaml_references_resolve(folder_copy: Path) -> None:
    text = (folder_copy / "flow" / "config.yaml").read_text()
    text = text.replace("output_size: 32", "output_size: 512").replace("channels: [32]",
                                                                       "channels: [256]")
    (folder_copy / "flow" / "config.yaml").write_text(text)
    config = read_codec_config(folder_copy)
    assert config.flow.encoder.output_size == 512
    assert config.flow.estimator.channels == (256,)
    assert config.hift.sampling_rate == 24000  # !ref <sample_rate>


def test_a_pickle_with_code_is_refused(folder_copy: Path, tmp_path: Path) -> None:
    torch.save({"conv_pre.weight": torch.zeros(1), "extra": NotATensor()},
               folder_copy / "flow" / "hift.pt")
    with pytest.raises(FolderError, match="could run code") as caught:  # found by verification
        load_codec(folder_copy, voice_cache_dir=tmp_path)
    assert "flow/hift.pt" in str(caught.value)
    from app.engine.moss_speech.codec.loader import read_pt

    with pytest.raises(CodecLoadError, match="could run code"):  # and by the loader itself
        read_pt(folder_copy / "flow" / "hift.pt", "flow/hift.pt")


def test_weights_that_do_not_match_the_config_are_named(folder_copy: Path,
                                                        tmp_path: Path) -> None:
    path = folder_copy / "flow" / "flow.pt"
    state = torch.load(path, weights_only=True)
    state["encoder_proj.weight"] = torch.zeros(80, 7)
    del state["spk_embed_affine_layer.bias"]
    torch.save(state, path)
    with pytest.raises(FolderError) as caught:  # verification finds it before anything loads
        load_codec(folder_copy, voice_cache_dir=tmp_path)
    message = str(caught.value)
    assert "flow/flow.pt" in message and "encoder_proj.weight" in message
    assert "spk_embed_affine_layer.bias" in message


def test_missing_and_broken_files(folder_copy: Path, tmp_path: Path) -> None:
    (folder_copy / "flow" / "flow-chunk-25.pt").unlink()
    with pytest.raises(FolderError, match=r"flow-chunk-25\.pt: missing"):
        load_codec(folder_copy, voice_cache_dir=tmp_path)
    shutil.copy(folder_copy / "flow" / "flow-chunk-5.pt", folder_copy / "flow" / "flow-chunk-25.pt")
    (folder_copy / "flow" / "config.yaml").write_text("flow: [unclosed\n")
    with pytest.raises(FolderError, match=r"flow/config\.yaml: not readable YAML"):
        load_codec(folder_copy, voice_cache_dir=tmp_path)
    (folder_copy / "flow" / "config.yaml").write_text("hift: {}\n")
    (folder_copy / "config.json").write_text('{"d_model": 64}')
    with pytest.raises(FolderError, match=r"config\.json: missing key"):
        load_codec(folder_copy, voice_cache_dir=tmp_path)
    with pytest.raises(CodecConfigError, match=r"config\.json: missing key"):
        read_codec_config(folder_copy)


def test_a_non_causal_tokenizer_is_refused(folder_copy: Path, tmp_path: Path) -> None:
    text = (folder_copy / "config.json").read_text()
    (folder_copy / "config.json").write_text(
        text.replace('"encoder_causal_attention": true', '"encoder_causal_attention": false'))
    with pytest.raises(FolderError, match="non-causal"):
        load_codec(folder_copy, voice_cache_dir=tmp_path)


@pytest.mark.parametrize("version", ["2.5.1", "2.5.1+cu121", "2.4.0", "1.13.1", "garbage"])
def test_pt_files_are_refused_on_a_torch_with_cve_2025_32434(folder_copy: Path, tmp_path: Path,
                                                             version: str) -> None:
    from app.engine.moss_speech.codec.loader import read_pt

    with pytest.raises(CodecLoadError, match=rf"torch {re.escape(version)} can be tricked into "
                                             r"running code .*CVE-2025-32434") as caught:
        load_codec(folder_copy, voice_cache_dir=tmp_path, torch_version=version)
    assert caught.value.advice == "Install torch 2.6 or later (make setup)."
    with pytest.raises(CodecLoadError, match=r"flow/hift\.pt: torch"):
        read_pt(folder_copy / "flow" / "hift.pt", "flow/hift.pt", torch_version=version)


@pytest.mark.parametrize("version", ["2.6.0", "2.13.0+cpu", "3.0.0a0"])
def test_pt_files_load_on_a_safe_torch(folder_copy: Path, version: str) -> None:
    from app.engine.moss_speech.codec.loader import read_pt

    assert read_pt(folder_copy / "flow" / "hift.pt", "flow/hift.pt", torch_version=version)
