"""Weight-only int8 / int4 quantisation behind one function, ``quantize_linears``.

Library choice: torchao, not bitsandbytes.
- torchao's int8 weight-only is exactly "int8 weights, per-channel scales, bf16 activations": a
  tensor subclass that runs on every device torch runs on (so the CPU tests exercise the real
  path) and that torch.compile fuses into one dequant-matmul for memory-bound decoding.
  bitsandbytes' 8-bit path is LLM.int8 (int8 activations with outlier decomposition), built for
  training memory and documented as slow for generation (dependencies.md §7).
- torchao's int4 weight-only uses the tinygemm kernel that ships inside torch itself (bf16,
  group-wise scales), fast for batch-1 decode on CUDA; it has no CPU kernel, so int4 is CUDA-only
  and refused up front on other devices.
Only the decoder layers' linears are quantised (``weights.is_quantised_unit``): embeddings, norms
and the two LM heads stay in bf16 (a row reads one embedding row; the heads decide every token).
The VRAM preflight (app/engine/preflight.py) counts memory by the same rule.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from app.engine.preflight import INT4_GROUP_SIZE, precision_problem

# INT4_GROUP_SIZE (128: divides 4096 and 12288; the tinygemm kernel accepts 32..256) and the
# precision/device rule are the VRAM preflight's, so the estimate and the loaded model follow
# one policy.


class PrecisionError(ValueError):
    """The requested precision cannot run on the requested device; the message says why."""


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse impossible precision/device pairs before any file is read
    (:func:`app.engine.preflight.precision_problem`, the one rule)."""
    problem = precision_problem(precision, device.type)
    if problem:
        raise PrecisionError(problem)
    if precision in ("int8", "int4"):
        _torchao()  # fail early with an install hint


def quantize_linears(module: nn.Module, precision: str) -> nn.Module:
    """Replace the weight of every nn.Linear in ``module`` by an int8/int4 weight-only tensor.

    The module must already hold bf16 weights on its final device; the original weights are
    freed as each layer is converted.
    """
    if precision not in ("int8", "int4"):
        raise PrecisionError(f"cannot quantise to {precision!r}; use 'int8' or 'int4'")
    quantize_, int8_config, int4_config = _torchao()
    if precision == "int8":
        config = int8_config()
    else:
        config = int4_config(group_size=INT4_GROUP_SIZE, int4_packing_format="tile_packed_to_4d")
    quantize_(module, config, filter_fn=lambda m, _name: isinstance(m, nn.Linear))
    return module


def weight_bytes(module: nn.Module) -> int:
    """Bytes of all parameters, counting quantised tensors by their packed storage."""
    total = 0
    for p in module.parameters():
        inner = getattr(p, "__tensor_flatten__", None)
        if inner is None:
            total += p.numel() * p.element_size()
            continue
        names, _ = inner()
        for name in names:
            t = getattr(p, name)
            total += t.numel() * t.element_size()
    return total


def _torchao():
    """Import torchao quietly (its optional CUDA extensions log load failures on CPU builds)."""
    logger = logging.getLogger("torchao")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_
    except ImportError as exc:
        raise PrecisionError("int8/int4 need the 'torchao' package: pip install torchao") from exc
    finally:
        logger.setLevel(level)
    return quantize_, Int8WeightOnlyConfig, Int4WeightOnlyConfig
