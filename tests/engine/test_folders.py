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

from app.engine.file_limits import MAX_TOKENIZER_JSON_BYTES
from app.engine.folders import (
    FolderError,
    expected_lm_shapes,
    lm_tensor_inventory,
    read_safetensors_header,
    tokenizer_problems,
    verify_codec_folder,
    verify_model_folder,
    weight_problems,
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


# ---- what each check says, exactly (mutation testing: docs/mutation.md) ----------------------

def test_the_manifest_is_the_models_state_dict_for_a_small_config_too() -> None:
    """expected_lm_shapes also writes the tiny test checkpoints, so a wrong manifest would
    verify its own folders: the model's parameters are the reference."""
    from app.engine.moss_speech.model import MossSpeechModel

    with torch.device("meta"):
        model = MossSpeechModel(SMALL)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == expected_lm_shapes(SMALL.to_dict())


@pytest.mark.parametrize(("changes", "said"), [
    ({"vocab_size": 151700}, "vocab_size 151700 in config.json, 151680 in the weights"),
    ({"audio_vocab_size": 16600}, "audio_vocab_size 16600 in config.json, 16512 in the weights"),
    ({"intermediate_size": 64}, "intermediate_size 64 in config.json, 32 in the weights"),
    ({"num_attention_heads": 4}, "num_attention_heads 4 in config.json, 2 in the weights"),
    ({"num_key_value_heads": 2}, "num_key_value_heads 2 in config.json, 1 in the weights"),
    ({"num_modality_layers": 2, "num_hidden_layers": 4},
     "num_modality_layers 2 in config.json, 1 in the weights"),
    ({"hidden_size": 32, "intermediate_size": 64},
     "hidden_size 32 in config.json, 16 in the weights; intermediate_size 64 in config.json, 32 "
     "in the weights"),
])
def test_each_size_the_weights_show_is_compared_with_config_json(
        model: Path, changes: dict, said: str) -> None:
    edit_config(model, **changes)
    summary = verify_model_folder(model).problems[0]
    assert summary.startswith("config.json and the weights disagree: ")
    assert summary.endswith(f" tensors have other shapes than config.json describes ({said})")


def test_without_head_dim_in_config_json_it_is_hidden_size_over_heads(tmp_path: Path) -> None:
    folder = write_tiny_checkpoint(tmp_path / "m", config=SMALL.with_(head_dim=4))
    config = json.loads((folder / "config.json").read_text())
    del config["head_dim"]
    (folder / "config.json").write_text(json.dumps(config))
    assert "(head_dim 8 in config.json, 4 in the weights)" in verify_model_folder(
        folder).problems[0]


def test_shape_mismatches_without_a_size_to_name_have_a_plain_summary(model: Path) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    tensors["audio_lm_head.weight"] = torch.zeros(17, 16)
    save_file(tensors, str(model / "model.safetensors"))
    assert verify_model_folder(model).problems == [
        "config.json and the weights disagree: 1 of 50 tensors have other shapes than "
        "config.json describes",
        "model.safetensors: 'audio_lm_head.weight' has shape [17, 16], config.json expects "
        "[16512, 16]"]


@pytest.mark.parametrize("name", [
    "model.embed_tokens.weight", "model.audio_embed.weight",
    "model.shared_block.layers.0.mlp.gate_proj.weight",
    "model.shared_block.layers.0.self_attn.q_norm.weight",
    "model.shared_block.layers.0.self_attn.q_proj.weight",
    "model.shared_block.layers.0.self_attn.k_proj.weight",
])
def test_a_missing_tensor_that_shows_a_size_is_reported_missing(model: Path, name: str) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    del tensors[name]
    save_file(tensors, str(model / "model.safetensors"))
    assert verify_model_folder(model).problems == [f"1 tensor(s) missing, e.g. {name}"]


def test_missing_and_extra_tensors_are_listed_up_to_eight(model: Path) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    names = sorted(n for n in tensors if n.startswith("model.audio_block.layers.0."))
    for name in names:
        del tensors[name]
    tensors["x.a"], tensors["x.b"] = torch.zeros(1), torch.zeros(1)
    save_file(tensors, str(model / "model.safetensors"))
    assert len(names) == 11
    assert verify_model_folder(model).problems == [
        "11 tensor(s) missing, e.g. " + ", ".join(names[:8]),
        "2 unexpected tensor(s) in model.safetensors, e.g. x.a, x.b"]


def test_weight_problems_without_a_config_compares_shapes_only(model: Path) -> None:
    inventory = lm_tensor_inventory(model)
    expected = expected_lm_shapes(SMALL.to_dict())
    assert weight_problems(expected, inventory) == []
    assert weight_problems(expected | {"model.extra": (1,)}, inventory) == [
        "1 tensor(s) missing, e.g. model.extra"]


def test_the_inventory_reads_the_files_it_is_given(sharded: Path) -> None:
    first = sharded / "model-00001-of-00003.safetensors"
    everything = lm_tensor_inventory(sharded)
    assert len(everything) == 50
    only_first = lm_tensor_inventory(sharded, [first])
    assert only_first and set(only_first) < set(everything)
    assert {info.file for info in only_first.values()} == {first}


def test_at_most_four_dtype_problems_are_listed(model: Path) -> None:
    tensors = load_file(str(model / "model.safetensors"))
    names = sorted(tensors)[:5]
    for name in names:
        tensors[name] = tensors[name].to(torch.int8)
    save_file(tensors, str(model / "model.safetensors"))
    problems = verify_model_folder(model).problems
    assert [p.split("'")[1] for p in problems] == names[:4]


def write_index(folder: Path, index: object) -> None:
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("name", ["", "a\0b", "../model.safetensors", "..\\model.safetensors",
                                  "/model.safetensors", "\\model.safetensors",
                                  "C:model.safetensors", "C:\\model.safetensors"])
def test_an_index_naming_a_file_outside_the_folder_is_refused(model: Path, name: str) -> None:
    write_index(model, {"weight_map": {"model.text_norm.weight": name}})
    assert verify_model_folder(model).problems == [
        f"model.safetensors.index.json: refers to {name!r}, which is not inside the model "
        "folder; it was not opened"]


def test_the_refused_name_is_the_first_cut_to_80_characters(model: Path) -> None:
    names = ["../" + "b" * 100, "../" + "a" * 100]
    write_index(model, {"weight_map": {"x": names[0], "y": names[1]}})
    assert verify_model_folder(model).problems == [
        f"model.safetensors.index.json: refers to {('../' + 'a' * 77)!r}, which is not inside "
        "the model folder; it was not opened"]


@pytest.mark.parametrize(("index", "problem"), [
    ([], "no 'weight_map' table of tensor → file"),
    ({"weight_map": {}}, "no 'weight_map' table of tensor → file"),
    ({"weight_map": {"a": 5, "b": 6}}, "'weight_map' values must be file names, found '5'"),
    ({"weight_map": {"a": ["x" * 100]}},
     f"'weight_map' values must be file names, found {str(['x' * 100])[:40]!r}"),
])
def test_an_index_without_a_usable_weight_map_is_refused(model: Path, index: object,
                                                         problem: str) -> None:
    write_index(model, index)
    assert verify_model_folder(model).problems == [f"model.safetensors.index.json: {problem}"]


def test_an_unreadable_index_says_so(model: Path) -> None:
    (model / "model.safetensors.index.json").write_text("{not json")
    (problem,) = verify_model_folder(model).problems
    assert problem.startswith("model.safetensors.index.json: unreadable (")


def test_up_to_four_missing_shards_are_named(model: Path) -> None:
    shards = [f"model-0000{i}-of-00005.safetensors" for i in range(1, 6)]
    write_index(model, {"weight_map": {f"t{i}": name for i, name in enumerate(shards)}})
    assert verify_model_folder(model).problems == [
        "missing weight shard(s) listed in model.safetensors.index.json: " + ", ".join(shards[:4])]


def test_no_weights_at_all(model: Path) -> None:
    (model / "model.safetensors").unlink()
    assert verify_model_folder(model).problems == [
        "no weights: neither model.safetensors.index.json nor model.safetensors is present"]


def test_up_to_three_pickle_checkpoints_are_named(model: Path) -> None:
    (model / "model.safetensors").unlink()
    for name in ("a.bin", "b.pt", "c.pth", "d.ckpt"):
        (model / name).write_bytes(b"PK")
    (problem,) = verify_model_folder(model).problems
    assert problem.startswith("only PyTorch pickle checkpoints here (a.bin, b.pt, c.pth): ")
    assert "(model-0000N-of-00004.safetensors and model.safetensors.index.json)" in problem


@pytest.mark.parametrize(("text", "problem"), [
    (None, "config.json: missing"),
    ("[1, 2]", "config.json: not a JSON object"),
    ("{oops", "config.json: not valid JSON ("),
])
def test_config_json_missing_not_an_object_or_not_json(model: Path, text: str | None,
                                                       problem: str) -> None:
    if text is None:
        (model / "config.json").unlink()
    else:
        (model / "config.json").write_text(text)
    (found,) = verify_model_folder(model).problems
    assert found.startswith(problem) if problem.endswith("(") else found == problem


def test_a_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(FolderError) as caught:
        read_safetensors_header(tmp_path)  # a folder, not a file
    assert str(caught.value) == f"{tmp_path.name}: cannot be read (Is a directory)"


def test_the_published_special_ids_apply_when_config_json_has_none(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    for key in ("pad_token_id", "im_start_token_id", "im_end_token_id", "sosp_token_id"):
        del config[key]
    (model / "config.json").write_text(json.dumps(config))
    assert verify_model_folder(model).ok, verify_model_folder(model).problems


def test_tokenizer_problems_on_its_own(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    assert tokenizer_problems(model, config) == []
    (model / "tokenizer.json").unlink()
    assert tokenizer_problems(model, config) == ["tokenizer.json: missing"]


def test_an_oversized_tokenizer_is_named(model: Path) -> None:
    with (model / "tokenizer.json").open("r+b") as handle:
        handle.truncate(MAX_TOKENIZER_JSON_BYTES + 1)  # sparse: nothing is written
    assert verify_model_folder(model).problems == [
        f"tokenizer.json: unreadable ({MAX_TOKENIZER_JSON_BYTES + 1:,} bytes is too large for "
        f"tokenizer.json (at most {MAX_TOKENIZER_JSON_BYTES:,}))"]


def test_a_long_tokenizer_error_is_cut_to_200_characters(model: Path) -> None:
    from tokenizers import Tokenizer

    (model / "tokenizer.json").write_text(json.dumps({"version": "x" * 300}))
    with pytest.raises(Exception) as caught:
        Tokenizer.from_file(str(model / "tokenizer.json"))
    assert len(str(caught.value)) > 200
    assert verify_model_folder(model).problems == [
        f"tokenizer.json: unreadable ({str(caught.value)[:200]})"]


def test_the_check_names_its_folder_and_raises_with_kind_and_advice(model: Path) -> None:
    (model / "tokenizer.json").unlink()
    (model / "config.json").write_text("[]")
    check = verify_model_folder(str(model), need_tokenizer=False)
    assert check.path == model and check.kind == "model"
    assert check.as_dict() == {"path": str(model), "ok": False,
                               "problems": ["config.json: not a JSON object"],
                               "advice": check.advice, "total_bytes": 0}
    with pytest.raises(FolderError) as caught:
        check.raise_if_bad()
    assert str(caught.value) == (f"The model folder {model} cannot be used:\n"
                                 "- config.json: not a JSON object")
    assert caught.value.kind == "model" and caught.value.advice == check.advice
    check.problems.append("second")
    with pytest.raises(FolderError, match=r"object\n- second$"):
        check.raise_if_bad()


def test_a_folder_error_has_no_advice_or_kind_unless_given() -> None:
    error = FolderError("broken")
    assert (str(error), error.advice, error.kind) == ("broken", "", "")


def test_a_codec_folder_is_checked_as_a_codec(tmp_path: Path) -> None:
    check = verify_codec_folder(str(tmp_path / "codec"))
    assert (check.path, check.kind, check.folder_missing) == (tmp_path / "codec", "codec", True)
    assert check.as_dict()["ok"] is False
