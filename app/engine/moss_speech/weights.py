"""Load a MOSS-Speech checkpoint folder: verify everything first, then stream tensor by tensor.

Order matters for a 17 GiB checkpoint on a 24 GB machine:
1. verify config.json, every safetensors header, the key set, every shape and dtype
   (``app.engine.folders``; nothing is allocated, a bad folder fails in milliseconds);
2. build the model on the meta device (no memory);
3. per unit (one decoder layer, one embedding, one head): read its tensors from the
   safetensors files, move them to the device in the target dtype, ``load_state_dict(assign=True)``
   and, for int8/int4, quantise that unit at once. Peak extra memory is one unit, never a second
   copy of the model.

On an accelerator the two embedding tables stay in host memory (1.28 GiB of bf16 that a row
lookup reads 8 KiB of; :meth:`MossSpeechModel.embed_rows` gathers on the host and copies the
rows), and int8/int4 also quantise both LM heads (to int8: ``preflight.HEAD_PRECISION``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from app.engine.folders import (
    FLOAT_DTYPES,
    FolderCheck,
    FolderError,
    TensorInfo,
    dtype_problems,
    expected_lm_shapes,
    lm_tensor_inventory,
    load_json,
    weight_problems,
)
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.quantize import check_precision, quantize_linears
from app.engine.preflight import (
    DEQUANT_BUDGET_BYTES,
    EMBEDDING_UNITS,
    HEAD_UNITS,
    embeddings_on_host,
    unit_format,
)

__all__ = ["FLOAT_DTYPES", "Checkpoint", "load_model", "random_model", "verify_checkpoint"]

Progress = Callable[[str, float], None]  # (stage, fraction done) stages: verify, build, load
# (unit, name, meta tensor, dtype, device) -> the tensor, allocated there
TensorFor = Callable[[str, str, Tensor, torch.dtype, torch.device], Tensor]
Checkpoint = tuple[MossSpeechConfig, dict[str, TensorInfo]]  # verified config, tensor inventory


def verify_checkpoint(folder: Path) -> Checkpoint:
    """Config and tensor inventory of a model folder, or FolderError listing every problem."""
    if not folder.is_dir():
        raise FolderError(f"The model folder {folder} does not exist")
    raw = load_json(folder / "config.json")
    config = MossSpeechConfig.from_dict(raw)
    inventory = lm_tensor_inventory(folder)
    check = FolderCheck(folder, "model")
    check.problems += weight_problems(expected_lm_shapes(config.to_dict()), inventory,
                                      config=raw)
    check.problems += dtype_problems(inventory)
    check.raise_if_bad()
    return config, inventory


def load_model(model_dir: Path | str, device: str | torch.device = "cpu",
               precision: str = "bf16", progress: Progress | None = None,
               checked: Checkpoint | None = None,
               host_embeddings: bool | None = None) -> MossSpeechModel:
    """Load the AR model from ``config.json`` + safetensors (sharded with an index, or single).

    precision: "bf16" (default), "fp32", or weight-only "int8" / "int4" (bf16 compute).
    Raises FolderError (naming the file) before any model memory is allocated. ``checked``:
    what :func:`verify_checkpoint` already returned for this folder (not read again).
    ``host_embeddings``: keep the embedding tables in host memory (None: on accelerators).
    """
    device = torch.device(device)
    check_precision(precision, device)
    report = progress or (lambda stage, fraction: None)
    report("verify", 0.0)
    config, inventory = checked or verify_checkpoint(Path(model_dir))
    with ExitStack() as stack:
        handles: dict[Path, Any] = {}  # safetensors file → its open handle

        def read(prefix: str, name: str, meta: Tensor, dtype: torch.dtype,
                 to: torch.device) -> Tensor:
            info = inventory[f"{prefix}.{name}"]
            if info.file not in handles:
                handles[info.file] = stack.enter_context(
                    safe_open(str(info.file), framework="pt", device="cpu"))
            return handles[info.file].get_tensor(f"{prefix}.{name}").to(device=to, dtype=dtype)

        return _build(config, device, precision, read, report, host_embeddings)


def _build(config: MossSpeechConfig, device: torch.device, precision: str, tensor_for: TensorFor,
           report: Progress, host_embeddings: bool | None,
           dequant_budget_bytes: int = DEQUANT_BUDGET_BYTES) -> MossSpeechModel:
    """Build on the meta device, then per unit: its tensors from ``tensor_for`` in the target
    dtype where the unit lives, assigned, and quantised at once (peak extra memory: one
    unit)."""
    report("build", 0.0)
    with torch.device("meta"):
        model = MossSpeechModel(config)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    on_host = (embeddings_on_host(device.type) if host_embeddings is None
               else host_embeddings)
    units = load_units(model)
    for i, (prefix, module) in enumerate(units):
        where = torch.device("cpu") if on_host and prefix in EMBEDDING_UNITS else device
        state = {name: tensor_for(prefix, name, meta, dtype, where)
                 for name, meta in module.state_dict().items()}
        module.load_state_dict(state, assign=True, strict=True)
        del state
        quantised = quantised_format(prefix, precision)
        if quantised:
            done = quantize_linears(module, quantised, dequant_budget_bytes)
            if done is not module:  # a head, its int8 product computed in blocks of rows
                model.set_submodule(prefix, done)
        report("load", (i + 1) / len(units))
    return finish(model, precision)


def load_units(model: MossSpeechModel) -> list[tuple[str, nn.Module]]:
    """The modules loaded (and quantised) one at a time, by checkpoint prefix."""
    units: list[tuple[str, nn.Module]] = [("model.embed_tokens", model.model.embed_tokens),
                                          ("model.audio_embed", model.model.audio_embed)]
    for block in ("shared_block", "text_block", "audio_block"):
        for i, layer in enumerate(getattr(model.model, block).layers):
            units.append((f"model.{block}.layers.{i}", layer))
    units += [("model.text_norm", model.model.text_norm),
              ("model.audio_norm", model.model.audio_norm),
              ("text_lm_head", model.text_lm_head), ("audio_lm_head", model.audio_lm_head)]
    return units


def is_quantised_unit(prefix: str) -> bool:
    """int8/int4 quantise the linear layers of the 40 decoder layers and the two LM heads;
    embeddings and norms stay bf16 (the tables live on the host on an accelerator). The VRAM
    preflight (app/engine/preflight.py) counts memory by the same rule."""
    return ".layers." in prefix or prefix in HEAD_UNITS


def quantised_format(prefix: str, precision: str) -> str | None:
    """The weight-only format of a unit at ``precision`` (``preflight.unit_format``, the rule
    the plan counts): the layers take the precision, the heads int8 (int4 heads cost logit
    fidelity for 0.3 GiB, docs/memory.md), everything else None (kept as loaded)."""
    fmt = unit_format(prefix, precision)
    return fmt if fmt in ("int8", "int4") else None


def finish(model: MossSpeechModel, precision: str) -> MossSpeechModel:
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:  # only reachable through a bug in load_units: every key was verified present
        raise RuntimeError(f"weights were not loaded for {left[:4]}")
    model.precision = precision
    return model.eval().requires_grad_(False)


def random_model(config: MossSpeechConfig, device: str | torch.device = "cpu",
                 precision: str = "bf16", seed: int = 0, std: float = 0.02,
                 host_embeddings: bool | None = None,
                 dequant_budget_bytes: int = DEQUANT_BUDGET_BYTES) -> MossSpeechModel:
    """A model with random weights built directly where it lives, unit by unit (benchmarks).

    Like ``load_model`` it never holds two copies: each unit is initialised in the target dtype
    on its device and quantised before the next one is created. ``dequant_budget_bytes``: see
    :func:`~app.engine.moss_speech.quantize.quantize_linears`.
    """
    device = torch.device(device)
    check_precision(precision, device)
    generators: dict[torch.device, torch.Generator] = {}

    def draw(prefix: str, name: str, meta: Tensor, dtype: torch.dtype,
             to: torch.device) -> Tensor:
        if name.endswith("norm.weight") or "layernorm" in name:
            return torch.ones(meta.shape, device=to, dtype=dtype)
        if to not in generators:
            generators[to] = torch.Generator(device=to).manual_seed(seed)
        tensor = torch.empty(meta.shape, device=to, dtype=dtype)
        return tensor.normal_(0.0, std, generator=generators[to])

    return _build(config, device, precision, draw, lambda stage, fraction: None,
                  host_embeddings, dequant_budget_bytes)
