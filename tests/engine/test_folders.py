"""Model-folder verification on tiny checkpoints in the published layout: what loading would
refuse is refused here first, named by file, with one summary line and the advice once."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from app.engine.folders import (
    FolderError,
    expected_lm_shapes,
    read_safetensors_header,
    verify_model_folder,
)
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.testing import write_tiny_checkpoint

REAL_CONFIG = MossSpeechConfig.full().to_dict()  # contract §1.1
# The tiny test config with a smaller width (the vocabularies stay real, as in the published
# folder, so every special id and the tokenizer check hold): ~10 MB of weights.
SMALL = MossSpeechConfig.tiny().with_(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=8)


def test_real_config_manifest_has_446_keys_with_contract_shapes() -> None:
    shapes = expected_lm_shapes(REAL_CONFIG)
    assert len(shapes) == 446
    assert shapes["model.embed_tokens.weight"] == (151680, 4096)
    assert shapes["model.audio_embed.weight"] == (16512, 4096)
    assert shapes["model.shared_block.layers.31.self_attn.k_proj.weight"] == (1024, 4096)
    assert shapes["model.text_block.layers.3.mlp.down_proj.weight"] == (4096, 12288)
    assert shapes["model.audio_block.layers.0.self_attn.q_norm.weight"] == (128,)
    assert "model.shared_block.layers.32.input_layernorm.weight" not in shapes


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {shards: write_tiny_checkpoint(root / f"m{shards}", shards=shards, config=SMALL)
            for shards in (1, 3)}


@pytest.fixture
def model(written: dict[int, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(written[1], tmp_path / "model"))


@pytest.fixture
def sharded(written: dict[int, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(written[3], tmp_path / "model"))


def edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("shards", [1, 3])
def test_good_model_folder_verifies(written: dict[int, Path], shards: int) -> None:
    check = verify_model_folder(written[shards])
    assert check.ok, check.problems
    assert check.total_bytes > 0 and check.advice == ""


def test_missing_shard_is_named(sharded: Path) -> None:
    (sharded / "model-00002-of-00003.safetensors").unlink()
    check = verify_model_folder(sharded)
    assert not check.ok and "model-00002-of-00003.safetensors" in check.problems[0]


@pytest.mark.parametrize("cut_bytes", [1, 8, 100])
def test_truncated_file_is_named_even_by_a_few_bytes(model: Path, cut_bytes: int) -> None:
    path = model / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - cut_bytes])
    problems = verify_model_folder(model).problems
    assert problems == [f"model.safetensors: file is truncated ({len(data) - cut_bytes:,} bytes, "
                        f"expected {len(data):,})"]


def craft_safetensors(path: Path, entries: list[tuple[str, int, int]], data_bytes: int) -> int:
    """A safetensors file whose header lists F32 tensors in the given order: (name, begin,
    end); returns the size the reader expects."""
    header = {name: {"dtype": "F32", "shape": [(end - begin) // 4], "data_offsets": [begin, end]}
              for name, begin, end in entries}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data_bytes))
    return 8 + len(text) + max(end for _, _, end in entries)


def test_truncation_is_measured_to_the_furthest_tensor_not_the_last_listed(
        tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    entries = [("a", 16, 48), ("b", 0, 16)]  # the last one listed ends first
    expected = craft_safetensors(path, entries, 48)
    with safe_open(str(path), "np") as handle:  # the reader takes the intact file
        assert sorted(handle.keys()) == ["a", "b"]
    assert set(read_safetensors_header(path)) == {"a", "b"}
    craft_safetensors(path, entries, 40)
    with pytest.raises(FolderError, match=rf"truncated \({expected - 8:,} bytes, expected "
                                          rf"{expected:,}\)"):
        read_safetensors_header(path)


@pytest.mark.parametrize(("entries", "data_bytes", "message"), [
    ([("a", 0, 16)], 20, "4 unexpected bytes after the last tensor"),
    ([("a", 0, 16), ("b", 20, 36)], 36, "starts at byte 20, expected 16"),
    ([("a", 0, 16), ("b", 8, 24)], 24, "starts at byte 8, expected 16"),
])
def test_files_the_reader_refuses_are_refused(tmp_path: Path, entries: list, data_bytes: int,
                                              message: str) -> None:
    path = tmp_path / "model.safetensors"
    craft_safetensors(path, entries, data_bytes)
    with pytest.raises(Exception, match=r"(?i)incomplete|offset|invalid"):
        safe_open(str(path), "np")  # what loading would do with it
    with pytest.raises(FolderError, match=message):
        read_safetensors_header(path)


def test_missing_extra_and_misshaped_keys(model: Path) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    del tensors["model.text_norm.weight"]
    tensors["model.bogus.weight"] = torch.zeros(3)
    tensors["audio_lm_head.weight"] = torch.zeros(17, 16)
    save_file(tensors, str(model / "model.safetensors"))
    problems = "\n".join(verify_model_folder(model).problems)
    assert "model.text_norm.weight" in problems
    assert "model.bogus.weight" in problems
    assert "'audio_lm_head.weight' has shape [17, 16], config.json expects [16512, 16]" in problems


def test_a_changed_hidden_size_starts_with_one_summary_line(model: Path) -> None:
    edit_config(model, hidden_size=32)
    problems = verify_model_folder(model).problems
    assert problems[0].startswith("config.json and the weights disagree: ")
    assert "(hidden_size 32 in config.json, 16 in the weights)" in problems[0]
    shape_lines = [p for p in problems[1:] if "has shape" in p]
    assert 1 <= len(shape_lines) <= 3 and len(problems) <= 4


def test_a_changed_layer_count_is_summarised_too(model: Path) -> None:
    edit_config(model, num_shared_layers=3, num_hidden_layers=4)
    problems = verify_model_folder(model).problems
    assert "num_shared_layers 3 in config.json, 2 in the weights" in problems[0]
    assert "tensor(s) missing" in problems[1]


def test_an_explicit_head_dim_is_honoured(tmp_path: Path) -> None:
    config = SMALL.with_(head_dim=4)  # != hidden_size / num_attention_heads (8)
    folder = write_tiny_checkpoint(tmp_path / "m", config=config)
    assert verify_model_folder(folder).ok, verify_model_folder(folder).problems
    edit_config(folder, head_dim=8)
    assert "head_dim 8 in config.json, 4 in the weights" in verify_model_folder(
        folder).problems[0]


def test_a_tensor_in_two_shards_is_named(sharded: Path) -> None:
    first, second = (sharded / f"model-0000{i}-of-00003.safetensors" for i in (1, 2))
    tensors = load_file(str(second))
    name = sorted(load_file(str(first)))[0]
    tensors[name] = load_file(str(first))[name]
    save_file(tensors, str(second))
    problems = verify_model_folder(sharded).problems
    assert problems == [f"{second.name}: tensor '{name}' is also in {first.name}"] or problems == [
        f"{first.name}: tensor '{name}' is also in {second.name}"]


def test_config_contradictions_and_missing_keys(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    del config["vocab_size"]
    config["num_hidden_layers"] = 5
    (model / "config.json").write_text(json.dumps(config))
    assert verify_model_folder(model).problems == ["config.json: missing key 'vocab_size'"]
    edit_config(model, vocab_size=151680)
    assert "num_shared_layers + num_modality_layers (2 + 1) != num_hidden_layers (5)" in (
        verify_model_folder(model).problems[0])


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_act": "gelu"}, "'hidden_act' is 'gelu'"),
    ({"vocab_size": 151000}, r"'sosp_token_id' \(151646\) is outside vocab_size"),
    ({"rope_scaling": {"type": "yarn"}}, "rope_scaling"),
    ({"num_shared_layers": 1e6}, "'num_shared_layers' must be an integer, got 1000000.0"),
    ({"num_shared_layers": 10**6, "num_hidden_layers": 10**6 + 1},
     "'num_shared_layers' is 1000000; it must be between 1 and 1,024"),
    ({"hidden_size": "64"}, "'hidden_size' must be an integer"),
    ({"rms_norm_eps": -1}, "'rms_norm_eps' must be a positive number"),
])
def test_what_the_loader_refuses_in_config_json_is_refused(model: Path, change: dict,
                                                           message: str) -> None:
    """Each of these once showed as verified and failed at load (or took minutes)."""
    edit_config(model, **change)
    assert any(__import__("re").search(message, p) for p in verify_model_folder(model).problems)
    with pytest.raises(FolderError, match=message):
        MossSpeechConfig.from_folder(model)


def test_tokenizer_ids_are_checked_as_the_load_checks_them(model: Path) -> None:
    edit_config(model, im_end_token_id=151644, im_start_token_id=151645)
    assert verify_model_folder(model).problems == [
        "tokenizer.json: <|im_start|> has id 151644, the model expects 151645; <|im_end|> has id "
        "151645, the model expects 151644"]
    (model / "tokenizer.json").write_text("{not json")
    assert verify_model_folder(model).problems[0].startswith("tokenizer.json: unreadable")


def test_a_tensor_the_model_cannot_take_is_named(model: Path) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    tensors["model.text_norm.weight"] = torch.zeros(16, dtype=torch.int8)
    save_file(tensors, str(model / "model.safetensors"))
    assert verify_model_folder(model).problems == [
        "model.safetensors: 'model.text_norm.weight' has dtype I8; expected one of BF16, F16, F32"]


def test_non_safetensors_file(model: Path) -> None:
    (model / "model.safetensors").write_bytes(b"PK\x03\x04 this is a zip, not safetensors")
    with pytest.raises(FolderError, match=r"model\.safetensors: not a safetensors file"):
        read_safetensors_header(model / "model.safetensors")
    assert "not a safetensors file" in verify_model_folder(model).problems[0]


def test_a_pickle_checkpoint_is_not_loaded_and_says_why(model: Path) -> None:
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"PK\x03\x04 a torch.save archive")
    (problem,) = verify_model_folder(model).problems
    assert "pytorch_model.bin" in problem
    assert "pickle checkpoints are not loaded, for safety" in problem
    assert "MOSS-Speech publishes safetensors" in problem


def test_missing_folder_and_tokenizer_and_advice_given_once(model: Path, tmp_path: Path) -> None:
    missing = verify_model_folder(tmp_path / "none")
    assert missing.problems == ["folder does not exist"] and missing.folder_missing
    assert missing.advice == ""  # the caller says where to choose it (app or command line)
    (model / "tokenizer.json").unlink()
    check = verify_model_folder(model)
    assert check.problems == ["tokenizer.json: missing"]
    assert check.advice == "Download the model again, or choose another model folder."
    assert verify_model_folder(model, need_tokenizer=False).ok
    with pytest.raises(FolderError) as caught:
        check.raise_if_bad()
    assert caught.value.advice == check.advice and check.advice not in str(caught.value)
    assert "download" not in " ".join(check.problems).lower()
