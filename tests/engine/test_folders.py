from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from app.engine.folders import (
    CODEC_REQUIRED_FILES,
    FolderError,
    expected_lm_shapes,
    read_safetensors_header,
    verify_codec_folder,
    verify_model_folder,
)

REAL_CONFIG = {  # contract §1.1
    "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
    "num_shared_layers": 32, "num_modality_layers": 4, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151680, "audio_vocab_size": 16512,
    "rms_norm_eps": 1e-6, "rope_theta": 1e6,
}
SMALL_CONFIG = {**REAL_CONFIG, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
                "num_shared_layers": 1, "num_modality_layers": 1, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 32, "audio_vocab_size": 16}


def test_real_config_manifest_has_446_keys_with_contract_shapes() -> None:
    shapes = expected_lm_shapes(REAL_CONFIG)
    assert len(shapes) == 446
    assert shapes["model.embed_tokens.weight"] == (151680, 4096)
    assert shapes["model.audio_embed.weight"] == (16512, 4096)
    assert shapes["model.shared_block.layers.31.self_attn.k_proj.weight"] == (1024, 4096)
    assert shapes["model.text_block.layers.3.mlp.down_proj.weight"] == (4096, 12288)
    assert shapes["model.audio_block.layers.0.self_attn.q_norm.weight"] == (128,)
    assert "model.shared_block.layers.32.input_layernorm.weight" not in shapes


def write_model(folder: Path, config: dict | None = None, shards: int = 1,
                tokenizer: bool = True) -> Path:
    config = config or SMALL_CONFIG
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    tensors = {k: np.zeros(s, dtype=np.float32) for k, s in expected_lm_shapes(config).items()}
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in names[i::shards]}
        save_file(part, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("shards", [1, 3])
def test_good_model_folder_verifies(tmp_path: Path, shards: int) -> None:
    check = verify_model_folder(write_model(tmp_path / "m", shards=shards))
    assert check.ok, check.problems
    assert check.total_bytes > 0


def test_missing_shard_is_named(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m", shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    check = verify_model_folder(folder)
    assert not check.ok and "model-00002-of-00002.safetensors" in check.problems[0]


def test_truncated_file_is_named(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
    check = verify_model_folder(folder)
    assert "model.safetensors: file is truncated" in check.problems[0]


def test_missing_extra_and_misshaped_keys(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m")
    from safetensors.numpy import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.text_norm.weight"]
    tensors["model.bogus.weight"] = np.zeros(3, dtype=np.float32)
    tensors["audio_lm_head.weight"] = np.zeros((17, 8), dtype=np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    problems = "\n".join(verify_model_folder(folder).problems)
    assert "model.text_norm.weight" in problems
    assert "model.bogus.weight" in problems
    assert "'audio_lm_head.weight' has shape [17, 8], config.json expects [16, 8]" in problems


def test_config_contradictions_and_missing_keys(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m")
    bad = {**SMALL_CONFIG, "num_hidden_layers": 5}
    del bad["vocab_size"]
    (folder / "config.json").write_text(json.dumps(bad))
    problems = verify_model_folder(folder).problems
    assert problems == ["config.json: missing key 'vocab_size'"]
    bad["vocab_size"] = 32
    (folder / "config.json").write_text(json.dumps(bad))
    assert "num_shared_layers + num_modality_layers (1 + 1) != num_hidden_layers (5)" in (
        verify_model_folder(folder).problems[0])


def test_config_that_does_not_match_the_weights(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps({**SMALL_CONFIG, "hidden_size": 16}))
    assert any("config.json expects" in p for p in verify_model_folder(folder).problems)


def test_non_safetensors_file(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"PK\x03\x04 this is a zip, not safetensors")
    with pytest.raises(FolderError, match=r"model\.safetensors: not a safetensors file"):
        read_safetensors_header(folder / "model.safetensors")
    assert "not a safetensors file" in verify_model_folder(folder).problems[0]


def test_missing_folder_and_tokenizer(tmp_path: Path) -> None:
    assert "does not exist" in verify_model_folder(tmp_path / "none").problems[0]
    folder = write_model(tmp_path / "m", tokenizer=False)
    assert verify_model_folder(folder).problems == [
        "tokenizer.json: missing; download the model again"]
    assert verify_model_folder(folder, need_tokenizer=False).ok


def write_codec(folder: Path) -> Path:
    for name in CODEC_REQUIRED_FILES:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".json"):
            path.write_text("{}")
        elif name.endswith(".safetensors"):
            save_file({"encoder.x": np.zeros(2, dtype=np.float32)}, str(path))
        elif name.endswith(".pt"):
            with zipfile.ZipFile(path, "w") as archive:
                archive.writestr("flow/data.pkl", b"\x80\x02}q\x00.")
        else:
            path.write_bytes(b"x")
    return folder


def test_codec_folder_checks(tmp_path: Path) -> None:
    folder = write_codec(tmp_path / "c")
    assert verify_codec_folder(folder).ok
    (folder / "flow" / "hift.pt").write_bytes(b"PK\x03\x04 cut")
    (folder / "flow" / "campplus.onnx").unlink()
    problems = verify_codec_folder(folder).problems
    assert any(p.startswith("flow/hift.pt: damaged or truncated") for p in problems)
    assert "flow/campplus.onnx: missing; download the codec again" in problems
