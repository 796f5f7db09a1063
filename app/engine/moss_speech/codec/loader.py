"""Load a codec folder: verify it, read the configs, load the weights safely.

The folder is verified first (:mod:`app.engine.codec_folder`: every checkpoint's pickle is
scanned without unpickling it, every shape checked against the configs). ``.pt`` files are then
read only with ``torch.load(weights_only=True)`` and only on a torch where that is safe (2.6 or
later: CVE-2025-32434 bypasses weights_only on 2.5.1 and older). Weight-norm pairs
(``weight_g``/``weight_v`` or ``parametrizations.weight.original0/1``) are folded into plain
weights. Modules are built on the meta device and take the loaded tensors directly, so no
second copy of the weights is made. Like upstream (which loads flow.pt with ``strict=False``)
a flow checkpoint may carry extra tensors: they are skipped and named once in the log; missing
or mis-shaped tensors are refused everywhere.
"""

from __future__ import annotations

import hashlib
import logging
import pickle  # nosec B403
import re
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from app.engine.codec_folder import WHISPER_PREFIXES
from app.engine.folders import FolderError, verify_codec_folder
from app.engine.moss_speech.codec.codec import MossSpeechCodec
from app.engine.moss_speech.codec.config import CodecConfig, read_codec_config
from app.engine.moss_speech.codec.flow import Flow
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder

log = logging.getLogger(__name__)

_WEIGHT_NORM_PAIRS = (("parametrizations.weight.original0", "parametrizations.weight.original1"),
                      ("weight_g", "weight_v"))
SAFE_TORCH = (2, 6)  # the first torch whose weights_only unpickler is not bypassable


class CodecLoadError(FolderError):
    """The codec cannot be loaded; the message names the file, ``advice`` says what to do."""


def pt_loading_refusal(torch_version: str) -> str | None:
    """Why ``.pt`` files must not be loaded with this torch, or None when it is safe."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    if match and (int(match[1]), int(match[2])) >= SAFE_TORCH:
        return None
    return (f"torch {torch_version} can be tricked into running code while loading a .pt "
            "checkpoint (CVE-2025-32434), so the codec's flow/*.pt files are not loaded")


def read_pt(path: Path, label: str, torch_version: str | None = None) -> dict[str, torch.Tensor]:
    """Tensors of a torch.save checkpoint, loaded with weights_only=True (no code runs) on a
    torch where that holds (``torch_version``: injected by tests, else this torch's)."""
    refusal = pt_loading_refusal(torch_version or torch.__version__)
    if refusal:
        raise CodecLoadError(f"{label}: {refusal}", "Install torch 2.6 or later (make setup).")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise CodecLoadError(
            f"{label} contains Python objects other than tensors, so it was not loaded (loading "
            f"it could run code). Detail: {str(exc).splitlines()[0]}",
            "Download the codec again from the official repository.") from exc
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise CodecLoadError(f"{label} is damaged or not a PyTorch checkpoint ({exc})",
                             "Download the codec again.") from exc
    if isinstance(data, Mapping) and isinstance(data.get("state_dict"), Mapping):
        data = data["state_dict"]
    if not isinstance(data, Mapping):
        raise CodecLoadError(f"{label} does not hold a state dict", "Download the codec again.")
    # chunk checkpoints also store counters such as epoch/step: keep the tensors only
    return {str(k): v for k, v in data.items() if isinstance(v, torch.Tensor)}


def fold_weight_norm(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace every weight-norm (g, v) pair by weight = g · v / ‖v‖ (norm over all but dim 0)."""
    out = dict(state)
    for g_name, v_name in _WEIGHT_NORM_PAIRS:
        for key in [k for k in state if k == g_name or k.endswith("." + g_name)]:
            prefix = key[: -len(g_name)]  # "" or "module.path."
            g, v = out.pop(key), out.pop(prefix + v_name, None)
            if v is None:
                raise CodecLoadError(f"weight-norm pair incomplete for '{prefix}weight'")
            if v.ndim == 0 or tuple(g.shape) != (v.shape[0],) + (1,) * (v.ndim - 1):
                raise CodecLoadError(f"weight-norm pair for '{prefix}weight' has shapes "
                                     f"{list(g.shape)} and {list(v.shape)}")
            norm = v.float().norm(2, dim=tuple(range(1, v.ndim)), keepdim=True)
            out[prefix + "weight"] = (v.float() * (g.float() / norm)).to(v.dtype)
    return out


def load_into(module: nn.Module, state: Mapping[str, torch.Tensor], label: str,
              config_file: str = "flow/config.yaml", extra_allowed: bool = False) -> None:
    """Load with every key and shape checked; problems are listed by name. With
    ``extra_allowed`` (upstream's strict=False) unexpected tensors are skipped and logged once."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    wrong = [f"'{k}' is {list(state[k].shape)}, expected {list(expected[k].shape)}"
             for k in sorted(set(expected) & set(state)) if state[k].shape != expected[k].shape]
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensor(s) missing, e.g. {', '.join(missing[:5])}")
    if extra and not extra_allowed:
        problems.append(f"{len(extra)} unexpected tensor(s), e.g. {', '.join(extra[:5])}")
    if wrong:
        problems.append("shapes differ from the config: " + "; ".join(wrong[:5]))
    if problems:
        raise CodecLoadError(f"{label} does not match {config_file}: " + " | ".join(problems),
                             f"Download the codec again ({label} and {config_file} must come "
                             "from the same download).")
    if extra:
        log.warning("%s: %d extra tensor(s) not used by the codec, skipped (upstream loads this "
                    "file with strict=False): %s", label, len(extra), ", ".join(extra))
        state = {k: v for k, v in state.items() if k in expected}
    module.load_state_dict(dict(state), strict=True, assign=True)


def _place(module: nn.Module, device: torch.device | str, dtype: torch.dtype) -> nn.Module:
    return module.to(device=device, dtype=dtype).eval().requires_grad_(False)


def load_whisper(path: Path, config: CodecConfig, device: torch.device | str,
                 dtype: torch.dtype) -> WhisperVQEncoder:
    with torch.device("meta"):
        encoder = WhisperVQEncoder(config.whisper)
    wanted = set(encoder.state_dict())
    state: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a dict)
                for prefix in WHISPER_PREFIXES:
                    if key.startswith(prefix) and key[len(prefix):] in wanted:
                        state[key[len(prefix):]] = handle.get_tensor(key)
    except Exception as exc:  # safetensors raises its own error types
        raise CodecLoadError(f"model.safetensors cannot be read ({exc})",
                             "Download the codec again.") from exc
    load_into(encoder, state, "model.safetensors (speech tokenizer)", "config.json")
    return _place(encoder, device, dtype)  # type: ignore[return-value]


def load_flow(path: Path, config: CodecConfig, chunk: int, device: torch.device | str,
              dtype: torch.dtype, torch_version: str | None = None) -> Flow:
    label = f"flow/{path.name}"
    state = read_pt(path, label, torch_version)
    if state and all(k.startswith("flow.") for k in state):
        state = {k[len("flow."):]: v for k, v in state.items()}
    with torch.device("meta"):
        flow = Flow(config.flow, chunk=chunk)
    load_into(flow, state, label, extra_allowed=True)
    return _place(flow, device, dtype)  # type: ignore[return-value]


def load_hift(path: Path, config: CodecConfig, device: torch.device | str,
              torch_version: str | None = None) -> HiFTGenerator:
    state = fold_weight_norm(read_pt(path, "flow/hift.pt", torch_version))
    with torch.device("meta"):
        hift = HiFTGenerator(config.hift)
    load_into(hift, state, "flow/hift.pt")
    return _place(hift, device, torch.float32)  # type: ignore[return-value]


def codec_fingerprint(folder: Path, config: CodecConfig) -> str:
    """Identifies a codec download for the voice cache (config + weight file sizes/times)."""
    digest = hashlib.sha256(repr(config).encode())
    for name in ("model.safetensors", "flow/campplus.onnx"):
        stat = (folder / name).stat()
        digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def load_codec(codec_dir: Path | str, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32, *, voice_cache_dir: Path | None = None,
               streaming_chunks: tuple[int, ...] = (), offline_flow: bool = False,
               torch_version: str | None = None, verified: bool = False) -> MossSpeechCodec:
    """Load the codec folder (verified first). ``dtype`` applies to the tokenizer and flow
    networks; the front ends, the VQ distances, the CFM solve output and HiFT stay float32.
    Flows load on first use, or now: the chunk-trained ones of ``streaming_chunks``, and the
    offline ``flow.pt`` with ``offline_flow`` (only ``codec.decode`` uses it; the engine
    streams, so it never pays its memory). ``torch_version`` (tests) stands in for this torch's
    version in the CVE-2025-32434 check; ``verified``: the caller has just verified the folder
    (it is not checked twice). Raises FolderError, CodecConfigError or
    CodecLoadError with a message a person can act on."""
    from app.engine.moss_speech.codec.voice import SpeakerEmbedder

    folder = Path(codec_dir)
    refusal = pt_loading_refusal(torch_version or torch.__version__)
    if refusal:
        raise CodecLoadError(f"{folder}: {refusal}", "Install torch 2.6 or later (make setup).")
    if not verified:
        verify_codec_folder(folder).raise_if_bad()
    config = read_codec_config(folder)
    device = torch.device(device)

    def flow_loader(chunk: int) -> Flow:
        name = "flow.pt" if chunk == 0 else f"flow-chunk-{chunk}.pt"
        path = folder / "flow" / name
        if not path.is_file():
            raise CodecLoadError(f"flow/{name} is missing; streaming with {chunk}-code chunks "
                                 "needs it", "Download the codec again.")
        return load_flow(path, config, chunk, device, dtype, torch_version)

    encoder = load_whisper(folder / "model.safetensors", config, device, dtype)
    hift = load_hift(folder / "flow" / "hift.pt", config, device, torch_version)
    try:
        speaker = SpeakerEmbedder(folder / "flow" / "campplus.onnx")
    except ValueError as exc:
        raise CodecLoadError(str(exc), "Download the codec again.") from exc
    codec = MossSpeechCodec(config, encoder, hift, speaker, flow_loader=flow_loader,
                            fingerprint=codec_fingerprint(folder, config),
                            voice_cache_dir=voice_cache_dir)
    for chunk in ((0,) if offline_flow else ()) + tuple(streaming_chunks):
        codec.flow(chunk)
    return codec
