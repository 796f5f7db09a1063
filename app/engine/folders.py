"""Check a model or codec folder before anything big is loaded.

Torch-free (json, zipfile and the safetensors header format only), so the doctor, the model
manager UI and the loaders share one verdict. Every problem names the file and what to do.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

LM_REQUIRED_CONFIG_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_shared_layers",
    "num_modality_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "audio_vocab_size",
    "rms_norm_eps",
    "rope_theta",
)
LM_INDEX_FILE = "model.safetensors.index.json"
LM_SINGLE_FILE = "model.safetensors"
CODEC_REQUIRED_FILES = (
    "model.safetensors",
    "config.json",
    "preprocessor_config.json",
    "flow/config.yaml",
    "flow/flow.pt",
    "flow/flow-chunk-5.pt",
    "flow/flow-chunk-25.pt",
    "flow/hift.pt",
    "flow/campplus.onnx",
)
_LAYER_KEYS = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


class FolderError(ValueError):
    """A model or codec folder cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    file: Path


@dataclass
class FolderCheck:
    path: Path
    kind: Literal["model", "codec"]
    problems: list[str] = field(default_factory=list)
    total_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_bad(self) -> None:
        if self.problems:
            raise FolderError(f"The {self.kind} folder {self.path} cannot be used:\n- "
                              + "\n- ".join(self.problems))

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "ok": self.ok, "problems": list(self.problems),
                "total_bytes": self.total_bytes}


def expected_lm_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every checkpoint key of the AR model and its shape, from config.json (contract §1.2)."""
    H = int(config["hidden_size"])
    inter = int(config["intermediate_size"])
    n_heads = int(config["num_attention_heads"])
    n_kv = int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or H // n_heads)
    vocab, audio_vocab = int(config["vocab_size"]), int(config["audio_vocab_size"])
    layer_shapes = dict(zip(_LAYER_KEYS, (
        (H,), (n_heads * head_dim, H), (n_kv * head_dim, H), (n_kv * head_dim, H),
        (H, n_heads * head_dim), (head_dim,), (head_dim,), (H,), (inter, H), (inter, H), (H, inter),
    ), strict=True))
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, H),
        "model.audio_embed.weight": (audio_vocab, H),
        "model.text_norm.weight": (H,),
        "model.audio_norm.weight": (H,),
        "text_lm_head.weight": (vocab, H),
        "audio_lm_head.weight": (audio_vocab, H),
    }
    blocks = {"shared_block": int(config["num_shared_layers"]),
              "text_block": int(config["num_modality_layers"]),
              "audio_block": int(config["num_modality_layers"])}
    for block, n_layers in blocks.items():
        for i in range(n_layers):
            for key, shape in layer_shapes.items():
                shapes[f"model.{block}.layers.{i}.{key}"] = shape
    return shapes


def lm_config_problems(config: Mapping[str, Any]) -> list[str]:
    """Missing or contradictory config.json keys, each named."""
    problems = [f"config.json: missing key '{k}'" for k in LM_REQUIRED_CONFIG_KEYS
                if k not in config]
    if problems:
        return problems
    shared, modality = config["num_shared_layers"], config["num_modality_layers"]
    if shared + modality != config["num_hidden_layers"]:
        problems.append(
            f"config.json: num_shared_layers + num_modality_layers ({shared} + {modality}) != "
            f"num_hidden_layers ({config['num_hidden_layers']})")
    if config["num_attention_heads"] % config["num_key_value_heads"]:
        problems.append("config.json: num_attention_heads is not a multiple of "
                        "num_key_value_heads")
    return problems


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes of a safetensors file; checks it is not truncated."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise FolderError(f"{path.name}: not a safetensors file (too short)")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len <= 0 or 8 + header_len > size or header_len > 100_000_000:
            raise FolderError(f"{path.name}: not a safetensors file (bad header length)")
        try:
            header = json.loads(handle.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FolderError(f"{path.name}: not a safetensors file ({exc})") from exc
    if not isinstance(header, dict):
        raise FolderError(f"{path.name}: not a safetensors file (header is not a table)")
    header.pop("__metadata__", None)
    tensors: dict[str, TensorInfo] = {}
    data_end = 0
    for name, entry in header.items():
        try:
            _begin, end = entry["data_offsets"]
            tensors[name] = TensorInfo(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]),
                                       path)
        except (KeyError, TypeError, ValueError) as exc:
            raise FolderError(f"{path.name}: damaged entry for tensor '{name}'") from exc
        data_end = max(data_end, int(end))
    if size < 8 + header_len + data_end:
        raise FolderError(f"{path.name}: file is truncated ({size:,} bytes, expected "
                          f"{8 + header_len + data_end:,}); download it again")
    return tensors


def lm_weight_files(folder: Path) -> list[Path]:
    """The safetensors files of an AR model folder (index first, then a single file)."""
    index = folder / LM_INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FolderError(f"{LM_INDEX_FILE}: unreadable ({exc})") from exc
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise FolderError(f"missing weight shard(s) listed in {LM_INDEX_FILE}: "
                              + ", ".join(missing) + "; download the model again")
        return [folder / n for n in names]
    single = folder / LM_SINGLE_FILE
    if single.is_file():
        return [single]
    raise FolderError(f"no weights: neither {LM_INDEX_FILE} nor {LM_SINGLE_FILE} is present")


def load_json(path: Path, missing_hint: str = "",
              error: type[FolderError] = FolderError) -> dict[str, Any]:
    """A JSON object from a model/codec folder; ``error`` names each problem by file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise error(f"{path.name}: missing{missing_hint}") from exc
    except (OSError, ValueError) as exc:
        raise error(f"{path.name}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise error(f"{path.name}: not a JSON object")
    return data


def lm_tensor_inventory(folder: Path) -> dict[str, TensorInfo]:
    """All tensors of an AR model folder, by name, from the safetensors headers."""
    inventory: dict[str, TensorInfo] = {}
    for file in lm_weight_files(folder):
        for name, info in read_safetensors_header(file).items():
            if name in inventory:
                raise FolderError(f"{file.name}: tensor '{name}' is also in "
                                  f"{inventory[name].file.name}")
            inventory[name] = info
    return inventory


def weight_problems(expected: Mapping[str, tuple[int, ...]],
                    inventory: Mapping[str, TensorInfo], limit: int = 8) -> list[str]:
    """Missing keys, extra keys and wrong shapes, naming the file of each."""
    problems: list[str] = []
    missing = sorted(set(expected) - set(inventory))
    extra = sorted(set(inventory) - set(expected))
    if missing:
        problems.append(f"{len(missing)} tensor(s) missing, e.g. " + ", ".join(missing[:limit]))
    if extra:
        problems.append(f"{len(extra)} unexpected tensor(s) in "
                        f"{inventory[extra[0]].file.name}, e.g. " + ", ".join(extra[:limit]))
    for name in sorted(set(expected) & set(inventory)):
        info = inventory[name]
        if info.shape != tuple(expected[name]):
            problems.append(f"{info.file.name}: '{name}' has shape {list(info.shape)}, config.json "
                            f"expects {list(expected[name])}")
            if len(problems) >= limit:
                break
    return problems


def verify_model_folder(folder: Path | str, need_tokenizer: bool = True) -> FolderCheck:
    """Verify an AR model folder: config keys, weight files, key set and every shape."""
    folder = Path(folder)
    check = FolderCheck(folder, "model")
    if not folder.is_dir():
        check.problems.append("folder does not exist; choose or download the model")
        return check
    try:
        config = load_json(folder / "config.json")
        check.problems += lm_config_problems(config)
        if need_tokenizer and not (folder / "tokenizer.json").is_file():
            check.problems.append("tokenizer.json: missing; download the model again")
        if check.problems:
            return check
        inventory = lm_tensor_inventory(folder)
        check.total_bytes = sum(f.stat().st_size for f in lm_weight_files(folder))
        check.problems += weight_problems(expected_lm_shapes(config), inventory)
    except FolderError as exc:
        check.problems.append(str(exc))
    return check


def verify_codec_folder(folder: Path | str) -> FolderCheck:
    """Verify a codec folder: every file present and intact (headers and archives)."""
    folder = Path(folder)
    check = FolderCheck(folder, "codec")
    if not folder.is_dir():
        check.problems.append("folder does not exist; choose or download the codec")
        return check
    for name in CODEC_REQUIRED_FILES:
        path = folder / name
        if not path.is_file():
            check.problems.append(f"{name}: missing; download the codec again")
            continue
        size = path.stat().st_size
        check.total_bytes += size
        if size == 0:
            check.problems.append(f"{name}: empty file; download the codec again")
            continue
        problem = _codec_file_problem(path, name)
        if problem:
            check.problems.append(problem)
    return check


def _codec_file_problem(path: Path, name: str) -> str | None:
    try:
        if name.endswith(".json"):
            load_json(path)
        elif name.endswith(".safetensors"):
            read_safetensors_header(path)
        elif name.endswith(".pt"):
            # torch.save writes a zip archive; check its directory without unpickling anything.
            with zipfile.ZipFile(path) as archive:
                if not any(n.endswith("data.pkl") for n in archive.namelist()):
                    return f"{name}: not a PyTorch checkpoint archive"
    except FolderError as exc:
        return f"{name}: {exc}" if not str(exc).startswith(name) else str(exc)
    except (zipfile.BadZipFile, OSError) as exc:
        return f"{name}: damaged or truncated ({exc}); download the codec again"
    return None
