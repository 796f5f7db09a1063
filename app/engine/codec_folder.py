"""Verify a codec folder as loading it would, from headers and metadata only (torch-free).

What the loader (:mod:`app.engine.moss_speech.codec.loader`) checks, checked here first, each
problem named by file: the three config files parse and describe networks that can be built
(:mod:`app.engine.codec_config`); ``model.safetensors`` holds the tokenizer tensors config.json
describes; each ``flow/*.pt`` is a torch checkpoint whose pickle names nothing but tensors
(:mod:`app.engine.torch_checkpoint`) with the shapes flow/config.yaml describes (extra tensors
are accepted, as upstream loads flow.pt with ``strict=False``; missing or mis-shaped ones are
not); ``hift.pt`` likewise, strictly, after folding its weight-norm pairs; ``campplus.onnx`` is
a well-formed ONNX model without external data whose embedding has the flow's width.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.engine.codec_config import CodecConfig, read_codec_config
from app.engine.codec_shapes import codec_shapes
from app.engine.folders import CODEC_REQUIRED_FILES, FolderCheck, FolderError, TensorInfo
from app.engine.folders import read_safetensors_header as read_safetensors
from app.engine.onnx_header import OnnxFormatError, read_onnx
from app.engine.torch_checkpoint import (
    CheckpointFormatError,
    UnsafeCheckpointError,
    read_checkpoint,
    state_dict_shapes,
)

WHISPER_PREFIXES = ("encoder.", "model.encoder.")
WEIGHT_NORM_PAIRS = (("parametrizations.weight.original0", "parametrizations.weight.original1"),
                     ("weight_g", "weight_v"))
SPEAKER_FBANK_BINS = 80  # the CAM++ model reads 80-bin Kaldi fbank frames
SHAPE_LINES = 3
Shapes = Mapping[str, tuple[int, ...]]


def whisper_state_shapes(inventory: Mapping[str, TensorInfo],
                         wanted: Shapes) -> dict[str, tuple[int, ...]]:
    """The tokenizer tensors the loader takes from model.safetensors (``encoder.`` or
    ``model.encoder.`` keys whose rest is a module key; everything else is skipped)."""
    state: dict[str, tuple[int, ...]] = {}
    for key, info in inventory.items():
        for prefix in WHISPER_PREFIXES:
            if key.startswith(prefix) and key[len(prefix):] in wanted:
                state[key[len(prefix):]] = info.shape
    return state


def folded_shapes(state: Shapes) -> dict[str, tuple[int, ...]]:
    """Shapes after the loader's weight-norm folding: each (g, v) pair becomes ``weight`` with
    v's shape; g must be [v.shape[0], 1, …] (the norm is taken over all but dim 0)."""
    out = dict(state)
    for g_name, v_name in WEIGHT_NORM_PAIRS:
        for key in [k for k in state if k == g_name or k.endswith("." + g_name)]:
            prefix = key[: -len(g_name)]
            g, v = out.pop(key), out.pop(prefix + v_name, None)
            if v is None:
                raise FolderError(f"weight-norm pair incomplete for '{prefix}weight'")
            if not v or g != (v[0],) + (1,) * (len(v) - 1):
                raise FolderError(f"weight-norm pair for '{prefix}weight' has shapes "
                                  f"{list(g)} and {list(v)}")
            out[prefix + "weight"] = v
    return out


def shape_problems(file: str, config_file: str, expected: Shapes, found: Shapes,
                   extra_allowed: bool = False) -> list[str]:
    """One summary line when the file and its config disagree, then a few details."""
    missing = sorted(set(expected) - set(found))
    extra = [] if extra_allowed else sorted(set(found) - set(expected))
    wrong = [k for k in sorted(set(expected) & set(found)) if tuple(found[k]) != expected[k]]
    problems = []
    if wrong:
        problems.append(f"{config_file} and {file} disagree: {len(wrong)} of {len(expected)} "
                        f"tensors have other shapes than {config_file} describes")
    if missing:
        problems.append(f"{file}: {len(missing)} tensor(s) missing, e.g. "
                        + ", ".join(missing[:5]))
    if extra:
        problems.append(f"{file}: {len(extra)} unexpected tensor(s), e.g. "
                        + ", ".join(extra[:5]))
    problems += [f"{file}: '{k}' has shape {list(found[k])}, {config_file} expects "
                 f"{list(expected[k])}" for k in wrong[:SHAPE_LINES]]
    return problems


def _whisper_problems(path: Path, config: CodecConfig | None, expected: Shapes) -> list[str]:
    inventory = read_safetensors(path)
    if config is None:
        return []
    state = whisper_state_shapes(inventory, expected)
    problems = shape_problems("model.safetensors", "config.json", expected, state)
    conv = state.get("conv1.weight")
    if problems and conv and conv[0] != config.whisper.d_model:
        problems[0] += (f" (d_model {config.whisper.d_model} in config.json, {conv[0]} in the "
                        "weights)")
    return problems


def _checkpoint_problems(path: Path, name: str, expected: Shapes | None) -> list[str]:
    try:
        state = state_dict_shapes(read_checkpoint(path))
    except UnsafeCheckpointError as exc:
        return [f"{name}: holds Python objects other than tensors (it names {exc}), so it is "
                "not loaded: unpickling it could run code"]
    except CheckpointFormatError as exc:
        return [f"{name}: damaged or not a PyTorch checkpoint ({exc})"]
    if expected is None:
        return []
    if name == "flow/hift.pt":
        return shape_problems(name, "flow/config.yaml", expected, folded_shapes(state))
    if state and all(k.startswith("flow.") for k in state):
        state = {k[len("flow."):]: v for k, v in state.items()}
    return shape_problems(name, "flow/config.yaml", expected, state, extra_allowed=True)


def _speaker_problems(path: Path, config: CodecConfig | None) -> list[str]:
    try:
        summary = read_onnx(path)
    except OnnxFormatError as exc:
        return [f"flow/campplus.onnx: not a usable ONNX model ({exc})"]
    problems = []
    features = summary.inputs[0][1]
    if features and isinstance(features[-1], int) and features[-1] != SPEAKER_FBANK_BINS:
        problems.append(f"flow/campplus.onnx: its input has {features[-1]} features per frame, "
                        f"the speaker model reads {SPEAKER_FBANK_BINS}")
    embedding = summary.outputs[0][1]
    if (config is not None and embedding and isinstance(embedding[-1], int)
            and embedding[-1] != config.flow.spk_embed_dim):
        problems.append(f"flow/campplus.onnx: its embedding has {embedding[-1]} values, "
                        f"flow/config.yaml expects spk_embed_dim {config.flow.spk_embed_dim}")
    return problems


def _file_problems(folder: Path, name: str, config: CodecConfig | None,
                   shapes: Mapping[str, Shapes]) -> list[str]:
    path = folder / name
    expected = shapes.get(name) if config is not None else None
    try:
        if name == "model.safetensors":
            return _whisper_problems(path, config, expected or {})
        if name.endswith(".pt"):
            return _checkpoint_problems(path, name, expected)
        if name.endswith(".onnx"):
            return _speaker_problems(path, config)
    except FolderError as exc:
        text = str(exc)
        return [text if text.startswith(name) else f"{name}: {text}"]
    except OSError as exc:
        return [f"{name}: cannot be read ({exc.strerror or exc})"]
    return []  # the config files were read with the config


def verify_codec(folder: Path) -> FolderCheck:
    """Verify a codec folder: every file present, intact, safe and consistent with the configs."""
    check = FolderCheck(folder, "codec")
    if not folder.is_dir():
        check.problems.append("folder does not exist")
        check.folder_missing = True
        return check
    present = []
    for name in CODEC_REQUIRED_FILES:
        path = folder / name
        if not path.is_file():
            check.problems.append(f"{name}: missing")
        elif path.stat().st_size == 0:
            check.problems.append(f"{name}: empty file")
        else:
            check.total_bytes += path.stat().st_size
            present.append(name)
    config = None
    if all(n in present for n in ("config.json", "preprocessor_config.json", "flow/config.yaml")):
        try:
            config = read_codec_config(folder)
        except FolderError as exc:
            check.problems.append(str(exc))
    shapes = codec_shapes(config) if config is not None else {}
    for name in present:
        check.problems += _file_problems(folder, name, config, shapes)
    return check
