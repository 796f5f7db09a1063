"""Check a model or codec folder before anything big is loaded.

Torch-free (JSON, the safetensors header format, zip directories, pickle opcodes, protobuf wire
format), so the doctor, the model manager UI and the loaders share one verdict. Verification
checks what loading checks, from headers and metadata only: a folder that verifies loads, and a
folder that would not load never shows as verified. Every problem names its file; the one piece
of advice (what to do) is :attr:`FolderCheck.advice`, given once. Every reader is bounded in
time and memory (:mod:`app.engine.file_limits`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

from app.engine.file_limits import (
    MAX_CONFIG_JSON_BYTES,
    MAX_TOKENIZER_JSON_BYTES,
    check_size,
    read_json_bounded,
)
from app.engine.lm_config_rules import LM_REQUIRED_CONFIG_KEYS, lm_config_problems
from app.engine.safetensors_header import HeaderError, read_header

__all__ = ["CODEC_REQUIRED_FILES", "LM_REQUIRED_CONFIG_KEYS", "FolderCheck", "FolderError",
           "TensorInfo", "expected_lm_shapes", "lm_config_problems", "lm_tensor_inventory",
           "lm_weight_files", "load_json", "read_safetensors_header", "verify_codec_folder",
           "verify_model_folder", "weight_problems"]

LM_INDEX_FILE = "model.safetensors.index.json"
LM_SINGLE_FILE = "model.safetensors"
FLOAT_DTYPES = ("BF16", "F16", "F32")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
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
# token string → config field holding its id (contract §1.6); the tokenizer must agree
SPECIAL_TOKENS = {
    "<|endoftext|>": "pad_token_id",
    "<|im_start|>": "im_start_token_id",
    "<|im_end|>": "im_end_token_id",
    "<|object_ref_start|>": "sosp_token_id",
}
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
SHAPE_LINES = 3  # shape mismatches listed after the summary line


class FolderError(ValueError):
    """A model or codec folder cannot be used; the message says which file and why,
    ``advice`` (may be empty) what to do in the app; ``kind`` is "model" or "codec" when
    known (the command line words its advice with it)."""

    def __init__(self, message: str, advice: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.advice = advice
        self.kind = kind


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
    folder_missing: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def advice(self) -> str:
        """What to do, once (empty when the folder is fine or missing: the caller knows whether
        to say "choose" or "pass --model-dir")."""
        if self.ok or self.folder_missing:
            return ""
        return f"Download the {self.kind} again, or choose another {self.kind} folder."

    def raise_if_bad(self) -> None:
        if self.problems:
            raise FolderError(f"The {self.kind} folder {self.path} cannot be used:\n- "
                              + "\n- ".join(self.problems), self.advice, self.kind)

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "ok": self.ok, "problems": list(self.problems),
                "advice": self.advice, "total_bytes": self.total_bytes}


def expected_lm_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every checkpoint key of the AR model and its shape, from config.json (contract §1.2).
    ``config`` must have passed :func:`lm_config_problems` (sizes are bounded there)."""
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


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes of a safetensors file, checked as the safetensors reader
    checks them (offsets tile the data, the file ends at the furthest tensor end)."""
    try:
        entries, _header_len, _size = read_header(path)
    except HeaderError as exc:
        raise FolderError(f"{path.name}: {exc}") from exc
    except OSError as exc:
        raise FolderError(f"{path.name}: cannot be read ({exc.strerror or exc})") from exc
    return {name: TensorInfo(e.dtype, e.shape, path) for name, e in entries.items()}


def _inside_folder(name: str) -> bool:
    """A relative path that stays inside the folder (no '..', no drive, no root), on every
    platform: an index written on Windows is read on Linux and the other way round."""
    if not name or "\0" in name:
        return False
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    return not (posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root
                or ".." in posix.parts or ".." in windows.parts)


def _shard_names(index: Any) -> list[str]:
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise FolderError(f"{LM_INDEX_FILE}: no 'weight_map' table of tensor → file")
    bad = [v for v in weight_map.values() if not isinstance(v, str)]
    if bad:
        raise FolderError(f"{LM_INDEX_FILE}: 'weight_map' values must be file names, found "
                          f"{str(bad[0])[:40]!r}")
    names = sorted(set(weight_map.values()))
    outside = [n for n in names if not _inside_folder(n)]
    if outside:
        raise FolderError(f"{LM_INDEX_FILE}: refers to {outside[0][:80]!r}, which is not inside "
                          "the model folder; it was not opened")
    return names


def lm_weight_files(folder: Path) -> list[Path]:
    """The safetensors files of an AR model folder (index first, then a single file)."""
    index = folder / LM_INDEX_FILE
    if index.is_file():
        try:
            names = _shard_names(read_json_bounded(index, MAX_CONFIG_JSON_BYTES))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, FolderError):
                raise
            raise FolderError(f"{LM_INDEX_FILE}: unreadable ({exc})") from exc
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise FolderError(f"missing weight shard(s) listed in {LM_INDEX_FILE}: "
                              + ", ".join(missing[:4]))
        return [folder / n for n in names]
    single = folder / LM_SINGLE_FILE
    if single.is_file():
        return [single]
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise FolderError(
            f"only PyTorch pickle checkpoints here ({', '.join(pickles[:3])}): pickle "
            "checkpoints are not loaded, for safety (unpickling one can run code); MOSS-Speech "
            "publishes safetensors files (model-0000N-of-00004.safetensors and "
            f"{LM_INDEX_FILE})")
    raise FolderError(f"no weights: neither {LM_INDEX_FILE} nor {LM_SINGLE_FILE} is present")


def load_json(path: Path, missing_hint: str = "",
              error: type[FolderError] = FolderError) -> dict[str, Any]:
    """A JSON object from a model/codec folder (bounded size, depth and numbers); ``error``
    names each problem by file."""
    try:
        data = read_json_bounded(path, MAX_CONFIG_JSON_BYTES)
    except FileNotFoundError as exc:
        raise error(f"{path.name}: missing{missing_hint}") from exc
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and BoundsError are ValueErrors
        raise error(f"{path.name}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise error(f"{path.name}: not a JSON object")
    return data


def lm_tensor_inventory(folder: Path, files: list[Path] | None = None) -> dict[str, TensorInfo]:
    """All tensors of an AR model folder, by name, from the safetensors headers."""
    inventory: dict[str, TensorInfo] = {}
    for file in files if files is not None else lm_weight_files(folder):
        for name, info in read_safetensors_header(file).items():
            if name in inventory:
                raise FolderError(f"{file.name}: tensor '{name}' is also in "
                                  f"{inventory[name].file.name}")
            inventory[name] = info
    return inventory


def _dims_from_weights(inventory: Mapping[str, TensorInfo]) -> dict[str, int]:
    """The config.json sizes the weights imply (where the tensors that show them exist)."""
    def shape(name: str) -> tuple[int, ...]:
        info = inventory.get(name)
        return info.shape if info is not None else ()

    dims: dict[str, int] = {}
    embed, layer = shape("model.embed_tokens.weight"), "model.shared_block.layers.0."
    if len(embed) == 2:
        dims.update(vocab_size=embed[0], hidden_size=embed[1])
    if len(shape("model.audio_embed.weight")) == 2:
        dims["audio_vocab_size"] = shape("model.audio_embed.weight")[0]
    if len(shape(layer + "mlp.gate_proj.weight")) == 2:
        dims["intermediate_size"] = shape(layer + "mlp.gate_proj.weight")[0]
    head_dim = shape(layer + "self_attn.q_norm.weight")
    if len(head_dim) == 1 and head_dim[0]:
        dims["head_dim"] = head_dim[0]
        for key, proj in (("num_attention_heads", "q_proj"), ("num_key_value_heads", "k_proj")):
            if len(shape(f"{layer}self_attn.{proj}.weight")) == 2:
                dims[key] = shape(f"{layer}self_attn.{proj}.weight")[0] // head_dim[0]
    for key, block in (("num_shared_layers", "shared_block"),
                       ("num_modality_layers", "text_block")):
        prefix = f"model.{block}.layers."
        indices = {n[len(prefix):].split(".", 1)[0] for n in inventory if n.startswith(prefix)}
        numbers = [int(i) for i in indices if i.isdigit()]
        if numbers:
            dims[key] = max(numbers) + 1
    return dims


def _disagreement(config: Mapping[str, Any], inventory: Mapping[str, TensorInfo]) -> list[str]:
    said = dict(config)
    said.setdefault("head_dim", int(config["hidden_size"]) // int(config["num_attention_heads"]))
    return [f"{key} {said[key]} in config.json, {value} in the weights"
            for key, value in _dims_from_weights(inventory).items()
            if key in said and said[key] != value]


def weight_problems(expected: Mapping[str, tuple[int, ...]],
                    inventory: Mapping[str, TensorInfo], limit: int = 8,
                    config: Mapping[str, Any] | None = None) -> list[str]:
    """Missing keys, extra keys and wrong shapes, naming the file of each. When config.json
    and the weights disagree, one summary line comes first (with the sizes that differ, when the
    weights show them), then at most a few shape lines."""
    problems: list[str] = []
    missing = sorted(set(expected) - set(inventory))
    extra = sorted(set(inventory) - set(expected))
    wrong = [name for name in sorted(set(expected) & set(inventory))
             if inventory[name].shape != tuple(expected[name])]
    differ = _disagreement(config, inventory) if config is not None else []
    if wrong or differ:
        summary = (f"config.json and the weights disagree: {len(wrong)} of {len(expected)} "
                   "tensors have other shapes than config.json describes")
        problems.append(summary + (f" ({'; '.join(differ)})" if differ else ""))
    if missing:
        problems.append(f"{len(missing)} tensor(s) missing, e.g. " + ", ".join(missing[:limit]))
    if extra:
        problems.append(f"{len(extra)} unexpected tensor(s) in "
                        f"{inventory[extra[0]].file.name}, e.g. " + ", ".join(extra[:limit]))
    for name in wrong[:SHAPE_LINES]:
        info = inventory[name]
        problems.append(f"{info.file.name}: '{name}' has shape {list(info.shape)}, config.json "
                        f"expects {list(expected[name])}")
    return problems


def dtype_problems(inventory: Mapping[str, TensorInfo]) -> list[str]:
    """Tensors the model cannot take (it loads BF16, F16 or F32 and converts)."""
    return [f"{info.file.name}: '{name}' has dtype {info.dtype}; expected one of "
            f"{', '.join(FLOAT_DTYPES)}" for name, info in sorted(inventory.items())
            if info.dtype not in FLOAT_DTYPES][:4]


def tokenizer_problems(folder: Path, config: Mapping[str, Any]) -> list[str]:
    """tokenizer.json parsed by ``tokenizers`` (as the load does) with every special id the
    model was trained with (the published ids unless config.json carries its own)."""
    from app.engine.lm_config_rules import DEFAULT_TOKEN_IDS

    path = folder / "tokenizer.json"
    if not path.is_file():
        return ["tokenizer.json: missing"]
    try:
        from tokenizers import Tokenizer

        check_size(path, MAX_TOKENIZER_JSON_BYTES, "tokenizer.json")
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        return [f"tokenizer.json: unreadable ({str(exc)[:200]})"]
    found = []
    for token, key in SPECIAL_TOKENS.items():
        expected, actual = config.get(key, DEFAULT_TOKEN_IDS[key]), tokenizer.token_to_id(token)
        if actual != expected:
            found.append(f"{token} has id {actual}, the model expects {expected}")
    return ["tokenizer.json: " + "; ".join(found)] if found else []


def verify_model_folder(folder: Path | str, need_tokenizer: bool = True) -> FolderCheck:
    """Verify an AR model folder as loading it would: config keys and sizes, tokenizer and its
    special ids, weight files, key set, every shape and dtype (headers only)."""
    folder = Path(folder)
    check = FolderCheck(folder, "model")
    if not folder.is_dir():
        check.problems.append("folder does not exist")
        check.folder_missing = True
        return check
    try:
        config = load_json(folder / "config.json")
        check.problems += lm_config_problems(config)
        if need_tokenizer and not (folder / "tokenizer.json").is_file():
            check.problems.append("tokenizer.json: missing")
        if check.problems:
            return check
        if need_tokenizer:  # its ids are checked against a config that is known to be sound
            check.problems += tokenizer_problems(folder, config)
        files = lm_weight_files(folder)
        inventory = lm_tensor_inventory(folder, files)
        check.total_bytes = sum(f.stat().st_size for f in files)
        check.problems += weight_problems(expected_lm_shapes(config), inventory, config=config)
        check.problems += dtype_problems(inventory)
    except FolderError as exc:
        check.problems.append(str(exc))
    return check


def verify_codec_folder(folder: Path | str) -> FolderCheck:
    """Verify a codec folder as loading it would (see :mod:`app.engine.codec_folder`)."""
    from app.engine.codec_folder import verify_codec

    return verify_codec(Path(folder))
