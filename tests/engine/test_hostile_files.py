"""Hostile files in a model or codec folder (issue 21, items 4 and 5): each is refused with one
clear error naming the file, in bounded time and memory, and nothing outside the folder is
opened. The timeouts are guards against a hang (the old code took minutes), not timings."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from app.engine.codec_config import CodecConfigError, read_flow_yaml, read_whisper
from app.engine.folders import (
    FolderError,
    lm_weight_files,
    load_json,
    read_safetensors_header,
    verify_codec_folder,
    verify_model_folder,
)
from app.engine.moss_speech.codec.onnx_writer import _field_bytes, _field_varint, _tensor
from app.engine.moss_speech.codec.testing import write_tiny_codec
from app.engine.onnx_header import OnnxFormatError, read_onnx
from app.engine.torch_checkpoint import (
    CheckpointFormatError,
    UnsafeCheckpointError,
    read_checkpoint,
)

ALIAS_BOMB = "\n".join(
    [f"{c}: &{c} [" + ",".join(["*" + p] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi",
                                                                      strict=True)])
ALIAS_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + ALIAS_BOMB + "\n"


@pytest.fixture(scope="module")
def tiny_codec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_codec(tmp_path_factory.mktemp("codec") / "codec")


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flow" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---- flow/config.yaml ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_380_byte_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    assert len(ALIAS_BOMB) < 400
    with pytest.raises(CodecConfigError, match=r"flow/config\.yaml: it expands to more than "
                                               r"50,000 values \(a YAML alias bomb\?\)"):
        read_flow_yaml(write_yaml(tmp_path, ALIAS_BOMB))


def test_benign_aliases_still_read(tmp_path: Path) -> None:
    text = "widths: &w [3, 7, 11]\nhift:\n  resblock_kernel_sizes: *w\n"
    _flow, hift = read_flow_yaml(write_yaml(tmp_path, text))
    assert hift.resblock_kernel_sizes == (3, 7, 11)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("text", "message"), [
    ("a: " + "[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ("a: &a [*a]\n", "refers to itself|cannot be read|not readable"),
    ("a: 1" + "0" * 5000 + "\n", "a value cannot be read"),
    ("a: 1.0e+300\nflow:\n  vocab_size: !ref <a> * <a>\n", "gives a number too large"),
    ("a: 123456789012345678901\nflow:\n  vocab_size: !ref <a> * 1000\n",
     "gives a number too large"),
    ("a: !ref <b>\nb: !ref <a>\nflow:\n  vocab_size: !ref <a>\n", "circular !ref"),
    ("flow:\n  vocab_size: 99999999999\n", r"'vocab_size' = 99999999999 is not a valid int"),
    ("flow:\n  encoder:\n    num_blocks: 1000000\n", r"'num_blocks' = 1000000 is not a valid"),
    ("hift:\n  upsample_rates: [8, 5]\n", "upsample_rates and upsample_kernel_sizes differ"),
    ("hift:\n  upsample_rates: [" + "2, " * 40 + "2]\n", "not a list of at most 16"),
    ("flow:\n  decoder:\n    estimator:\n      channels: [256, 256]\n", "multi-level estimator"),
    ("a" * (1 << 20) + ": 1\n", "too large for flow/config.yaml"),
])
def test_hostile_yaml_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CodecConfigError, match=message) as caught:
        read_flow_yaml(write_yaml(tmp_path, text))
    assert str(caught.value).startswith("flow/config.yaml")


# ---- config.json files --------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ('{"d_model": 1' + "0" * 5000 + "}", "a number with 5001 digits"),
    ('{"d_model": NaN}', "'NaN' is not a number JSON allows"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("{}" + " " * (5 << 20), "too large for this file"),
])
def test_hostile_json_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(FolderError, match=message):
        load_json(tmp_path / "config.json")


@pytest.mark.parametrize(("change", "message"), [
    ({"d_model": 1e6}, r"'d_model' = 1000000.0 is not a valid int \(outside 1 .. 65,536\)"),
    ({"quantize_position": 10**6}, r"'quantize_position' = 1000000 is not a valid int"),
    ({"d_model": [64]}, "'d_model' = \\[64\\] is not a valid int"),
    ({"d_model": 65}, "d_model 65 is not a multiple of encoder_attention_heads 4"),
])
def test_codec_config_json_sizes_are_bounded(tiny_codec: Path, tmp_path: Path, change: dict,
                                             message: str) -> None:
    folder = Path(shutil.copytree(tiny_codec, tmp_path / "codec"))
    config = {**json.loads((folder / "config.json").read_text()), **change}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CodecConfigError, match=message):
        read_whisper(folder / "config.json")
    assert [p for p in verify_codec_folder(folder).problems if p.startswith("config.json: ")]


@pytest.mark.timeout(60)
def test_a_million_shared_layers_are_refused_before_anything_is_listed(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1_000_001,
              "num_shared_layers": 1_000_000, "num_modality_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 151680,
              "audio_vocab_size": 16512, "rms_norm_eps": 1e-6, "rope_theta": 1e6}
    (folder / "config.json").write_text(json.dumps(config))
    assert verify_model_folder(folder, need_tokenizer=False).problems == [
        "config.json: 'num_hidden_layers' is 1000001; it must be between 1 and 1,024",
        "config.json: 'num_shared_layers' is 1000000; it must be between 1 and 1,024"]


# ---- safetensors headers -------------------------------------------------------------------------


def raw_safetensors(path: Path, header: bytes, declared: int | None = None) -> Path:
    path.write_bytes(struct.pack("<Q", len(header) if declared is None else declared) + header)
    return path


@pytest.mark.parametrize(("header", "declared", "message"), [
    (b"{}", 1 << 40, "bad header length"),
    (b"[" * 100_000 + b"]" * 100_000, None, "nested too deeply"),
    (b'{"a": {"dtype": "F32", "shape": [1' + b"0" * 100 + b'], "data_offsets": [0, 4]}}', None,
     "a number with 101 digits"),
    (b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', None,
     "damaged entry for tensor 'a'"),
    (b'{"a": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}}', None,
     "damaged entry for tensor 'a'"),
    (b'{"a": {"dtype": "X9", "shape": [1], "data_offsets": [0, 4]}}', None, "unknown dtype"),
    (b'{"a": [1, 2]}', None, "damaged entry for tensor 'a'"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}', None,
     r"offsets \(0, 8\) do not hold \[1\] F32"),
    (b'{"__metadata__": {"x": 1}}', None, "damaged __metadata__"),
])
def test_hostile_safetensors_headers(tmp_path: Path, header: bytes, declared: int | None,
                                     message: str) -> None:
    path = raw_safetensors(tmp_path / "model.safetensors", header, declared)
    with pytest.raises(FolderError, match=message) as caught:
        read_safetensors_header(path)
    assert str(caught.value).startswith("model.safetensors: ")


# ---- the shard index ----------------------------------------------------------------------


def index_folder(tmp_path: Path, weight_map: object) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd", "sub/../../x",
                                  "C:\\Windows\\x.safetensors", "..\\x.safetensors",
                                  "\\\\server\\share\\x"])
def test_index_entries_that_leave_the_folder_are_refused(tmp_path: Path, name: str) -> None:
    outside = tmp_path / "outside.safetensors"  # a real file there, so only the check stops it
    from safetensors.numpy import save_file

    save_file({"x": __import__("numpy").zeros(1, "float32")}, str(outside))
    folder = index_folder(tmp_path, {"model.embed_tokens.weight": name})
    with pytest.raises(FolderError, match="is not inside the model folder; it was not opened"):
        lm_weight_files(folder)


@pytest.mark.parametrize("weight_map", [
    ["model.safetensors"], "model.safetensors", {"a": ["x.safetensors"]}, {"a": 5},
    {"a": None}, {"a": {"b": "c"}}, {}, None])
def test_a_malformed_weight_map_is_one_clear_error(tmp_path: Path, weight_map: object) -> None:
    folder = index_folder(tmp_path, weight_map)
    with pytest.raises(FolderError, match=r"model\.safetensors\.index\.json: "):
        lm_weight_files(folder)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert verify_model_folder(folder, need_tokenizer=False).problems  # no TypeError


def test_the_index_may_not_be_a_list_either(tmp_path: Path) -> None:
    folder = index_folder(tmp_path, {})
    (folder / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(FolderError, match="no 'weight_map' table"):
        lm_weight_files(folder)


# ---- torch checkpoints ----------------------------------------------------------------------


def archive_with_pickle(path: Path, pickle_bytes: bytes, storages: dict[str, bytes] | None = None
                        ) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        for key, data in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", data)
    return path


@pytest.mark.parametrize(("pickle_bytes", "named"), [
    (b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85R.", "os.system"),
    (b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93X\x04\x00\x00\x00'ok'\x85R.", "builtins.eval"),
    (b"(S'ls'\nios\nsystem\n.", "pickle opcode INST"),
    (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n)\x81.", "pickle opcode NEWOBJ"),
])
def test_a_pickle_that_would_run_code_is_refused_by_name(tmp_path: Path, pickle_bytes: bytes,
                                                         named: str) -> None:
    path = archive_with_pickle(tmp_path / "x.pt", pickle_bytes)
    with pytest.raises(UnsafeCheckpointError, match=named.replace(".", r"\.")):
        read_checkpoint(path)


@pytest.mark.timeout(60)
def test_a_shared_container_bomb_is_walked_once(tmp_path: Path) -> None:
    value: list = [torch.zeros(1)]
    for _ in range(40):  # 2**40 paths through the memo, one object per level
        value = [value, value]
    path = tmp_path / "bomb.pt"
    torch.save({"x": value}, path)
    checkpoint = read_checkpoint(path)
    assert checkpoint.storages == {"0": 4}


@pytest.mark.parametrize(("data", "message"), [
    (b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01", "damaged|no end"),
    (b"\x80\x02]q\x00(]q\x01", "damaged|no end"),
    (pickle.dumps({"w": ("storage", 1)}, protocol=2), ""),
])
def test_damaged_pickles_are_format_errors(tmp_path: Path, data: bytes, message: str) -> None:
    path = archive_with_pickle(tmp_path / "x.pt", data)
    if not message:  # plain data without tensors: fine for the scanner
        assert read_checkpoint(path).root == {"w": ("storage", 1)}
        return
    with pytest.raises(CheckpointFormatError, match=message):
        read_checkpoint(path)


def test_a_missing_storage_is_named(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"w": torch.zeros(4)}, path)
    with zipfile.ZipFile(path) as archive:
        entries = [(i, archive.read(i)) for i in archive.infolist() if "/data/" not in i.filename]
    with zipfile.ZipFile(path, "w") as archive:
        for info, data in entries:
            archive.writestr(info, data)
    with pytest.raises(CheckpointFormatError, match="storage 0 is missing"):
        read_checkpoint(path)


# ---- ONNX -------------------------------------------------------------------------------------


def onnx_with_initializer(path: Path, tensor: bytes) -> Path:
    graph = (_field_bytes(1, _field_bytes(1, "x") + _field_bytes(2, "y") + _field_bytes(4, "Abs"))
             + _field_bytes(5, tensor)
             + _field_bytes(11, _field_bytes(1, "x")) + _field_bytes(12, _field_bytes(1, "y")))
    path.write_bytes(_field_varint(1, 7) + _field_bytes(7, graph))
    return path


def test_an_onnx_model_pointing_at_external_files_is_refused(tmp_path: Path) -> None:
    import numpy as np

    good = onnx_with_initializer(tmp_path / "ok.onnx", _tensor("W", np.zeros(3, np.float32)))
    assert read_onnx(good).initializers == 1
    external = (_field_varint(1, 3) + _field_varint(2, 1) + _field_bytes(8, "W")
                + _field_bytes(13, _field_bytes(1, "location") + _field_bytes(2, "/etc/passwd"))
                + _field_varint(14, 1))
    with pytest.raises(OnnxFormatError, match="external data file"):
        read_onnx(onnx_with_initializer(tmp_path / "ext.onnx", external))


def test_onnx_raw_data_must_match_its_shape(tmp_path: Path) -> None:
    tensor = _field_varint(1, 1000) + _field_varint(2, 1) + _field_bytes(8, "W") + _field_bytes(
        9, bytes(8))
    with pytest.raises(OnnxFormatError, match="has 8 bytes of data, its shape needs 4,000"):
        read_onnx(onnx_with_initializer(tmp_path / "w.onnx", tensor))


@pytest.mark.parametrize("data", [b"\x00" * 64, b"\x0f" + b"\x01" * 10, b"\x08" + b"\xff" * 11,
                                  b"\x08\x07"])
def test_onnx_garbage_is_a_format_error(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "g.onnx").write_bytes(data)
    with pytest.raises(OnnxFormatError):
        read_onnx(tmp_path / "g.onnx")
