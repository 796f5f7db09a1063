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
The decoder layers' linears take the precision and both LM heads int8
(``weights.quantised_format``); embeddings and norms stay bf16. The VRAM preflight
(app/engine/preflight.py) counts memory by the same rule.

torchao's int8 weight-only linear multiplies by a bf16 copy of the *whole* weight, made at every
call: 1.16 GiB for the text head (measured on the CPU with torch.profiler), held in the CUDA
graph's pool once captured: int8 and int4 overshot the plan on an H200 (peak reserved 13.2 /
10.1 GiB), and with the blocks below they peak at 11.1 / 7.9 GiB, under it (make gpu-report,
2026-11-27). A weight whose copy would exceed ``DEQUANT_BUDGET_BYTES`` is therefore multiplied
``RowChunkedInt8Linear``-wise: the same arithmetic, a block of output rows at a time.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from app.engine.preflight import (
    DEQUANT_BUDGET_BYTES,
    INT4_GROUP_SIZE,
    dequant_rows,
    precision_problem,
)

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


def quantize_linears(module: nn.Module, precision: str,
                     dequant_budget_bytes: int = DEQUANT_BUDGET_BYTES) -> nn.Module:
    """Replace the weight of every nn.Linear in ``module`` by an int8/int4 weight-only tensor;
    returns ``module``, or what replaced it if it is itself a large int8 linear.

    The module must already hold bf16 weights on its final device; the original weights are
    freed as each layer is converted. int8 linears whose bf16 working copy would exceed
    ``dequant_budget_bytes`` become :class:`RowChunkedInt8Linear` (same state-dict keys).
    """
    if precision not in ("int8", "int4"):
        raise PrecisionError(f"cannot quantise to {precision!r}; use 'int8' or 'int4'")
    quantize_, int8_config, int4_config = _torchao()
    if precision == "int8":
        config = int8_config()
    else:
        config = int4_config(group_size=INT4_GROUP_SIZE, int4_packing_format="tile_packed_to_4d")
    quantize_(module, config, filter_fn=lambda m, _name: isinstance(m, nn.Linear))
    if precision == "int8":
        return _bound_dequant(module, dequant_budget_bytes)
    return module


class RowChunkedInt8Linear(nn.Module):
    """An int8 weight-only linear (torchao's Int8Tensor, per-row scales, no bias) computed as
    torchao computes it, ``(x @ W_int8.t().to(x.dtype)) * scale``, but ``rows`` output rows at a
    time, so the bf16 working copy of the weight is one block, not the whole table."""

    in_features: int
    out_features: int
    rows: int
    weight: nn.Parameter  # torchao's Int8Tensor: .qdata [N, K] int8, .scale [N, 1] fp32

    def __init__(self, linear: nn.Linear, rows: int) -> None:
        super().__init__()
        weight = linear.weight
        if linear.bias is not None or getattr(weight, "act_quant_kwargs", None) is not None:
            raise ValueError("only a bias-free int8 weight-only linear can be chunked")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = weight  # the same parameter: the state dict keeps its key
        self.rows = rows

    def forward(self, x: Tensor) -> Tensor:
        q, scale = self.weight.qdata, self.weight.scale  # type: ignore[attr-defined]
        flat = x.reshape(-1, self.in_features)  # [M, K]
        parts = []
        for start in range(0, self.out_features, self.rows):
            block = slice(start, start + self.rows)
            m = torch.mm(flat, q[block].t().to(x.dtype))  # [M, rows]; the copy: rows × K
            parts.append(m * scale[block].to(m.dtype).flatten())
        return torch.cat(parts, dim=1).reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rows={self.rows}"


def _bound_dequant(module: nn.Module, budget_bytes: int) -> nn.Module:
    """Swap every int8 linear whose bf16 copy exceeds ``budget_bytes`` (``module`` included)."""
    def bounded(linear: nn.Module) -> nn.Module:
        if not isinstance(linear, nn.Linear):
            return linear
        rows = dequant_rows(linear.out_features, linear.in_features, budget_bytes)
        return RowChunkedInt8Linear(linear, rows) if rows < linear.out_features else linear

    for name, child in list(module.named_modules())[1:]:
        swapped = bounded(child)
        if swapped is not child:
            module.set_submodule(name, swapped)
    return bounded(module)


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
