"""How far quantised LM heads move the logits from bf16: cosine, top-1 and top-5 agreement.

int8 uses torchao's real Int8Tensor (it runs on the CPU). int4 has no CPU kernel, so its
weights are quantised and dequantised with torchao's own tinygemm primitives (the same scales,
zero points and rounding as the CUDA layout) and multiplied in bf16: the quantisation error is
exactly the kernel's, only the summation order differs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from app.engine.moss_speech.quantize import quantize_linears
from app.engine.preflight import INT4_GROUP_SIZE


def int4_dequantized(weight: Tensor, group_size: int = INT4_GROUP_SIZE) -> Tensor:
    """``weight`` [N, K] bf16 → the bf16 values an int4 tinygemm layout stores for it (groups
    of ``group_size`` inputs; the whole row when K is smaller, as for the tiny model)."""
    group_size = min(group_size, weight.shape[1])
    from torchao.quantization.quant_primitives import (
        MappingType,
        _choose_qparams_affine_tinygemm,
        _dequantize_affine_tinygemm,
        _quantize_affine_tinygemm,
    )

    block = (1, group_size)
    scale, zero = _choose_qparams_affine_tinygemm(
        weight, MappingType.ASYMMETRIC, block, torch.int32, 0, 15, eps=None,
        scale_dtype=weight.dtype, zero_point_dtype=weight.dtype)
    q = _quantize_affine_tinygemm(weight, block, scale, zero, torch.int32, 0, 15)
    return _dequantize_affine_tinygemm(q, block, scale, zero, torch.int32, 0, 15,
                                       output_dtype=weight.dtype)


def quantized_head(head: nn.Linear, precision: str) -> nn.Module:
    """A copy of a bf16 head at ``precision`` (int8: torchao; int4: dequantised int4 values)."""
    copy = nn.Linear(head.in_features, head.out_features, bias=False, device=head.weight.device,
                     dtype=torch.bfloat16)
    with torch.no_grad():
        if precision == "int4":
            copy.weight.copy_(int4_dequantized(head.weight.to(torch.bfloat16)))
            return copy.requires_grad_(False)
        copy.weight.copy_(head.weight)
        return quantize_linears(copy, precision).requires_grad_(False)


def compare(reference: Tensor, test: Tensor) -> dict[str, float]:
    """Logits [S, V] of both: mean and lowest cosine, top-1 and top-5 agreement."""
    cos = F.cosine_similarity(reference.double(), test.double(), dim=-1)
    top1 = (reference.argmax(-1) == test.argmax(-1)).double().mean()
    ref5, test5 = reference.topk(5, -1).indices, test.topk(5, -1).indices
    overlap = torch.tensor([len(set(a.tolist()) & set(b.tolist())) / 5
                            for a, b in zip(ref5, test5, strict=True)]).mean()
    return {"logit_cosine_mean": round(float(cos.mean()), 6),
            "logit_cosine_min": round(float(cos.min()), 6),
            "top1_agreement": round(float(top1), 4), "top5_overlap": round(float(overlap), 4)}


@torch.no_grad()
def head_parity(head: nn.Linear, hidden: Tensor, precision: str) -> dict[str, Any]:
    """Logits of ``hidden`` [S, H] through the head in bf16 and its ``precision`` copy (the
    head itself is left as it is)."""
    bf16 = nn.Linear(head.in_features, head.out_features, bias=False,
                     device=head.weight.device, dtype=torch.bfloat16).requires_grad_(False)
    bf16.weight.copy_(head.weight)
    reference = bf16(hidden.to(torch.bfloat16)).float()
    test = quantized_head(bf16, precision)(hidden.to(torch.bfloat16)).float()
    return {"precision": precision, "vocab": head.out_features, "hidden": head.in_features,
            "states": hidden.shape[0], **compare(reference, test)}


def random_head(vocab: int, hidden: int, seed: int = 0, std: float = 0.02) -> nn.Linear:
    """A full-size-shaped head with N(0, std) weights (the random-weight benchmarks' init)."""
    head = nn.Linear(hidden, vocab, bias=False, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.normal_(0.0, std, generator=generator)
    return head.requires_grad_(False)


def random_states(n: int, hidden: int, seed: int = 1) -> Tensor:
    """RMS-normalised hidden states (what the final norm hands a head): [n, hidden]."""
    h = torch.randn(n, hidden, generator=torch.Generator().manual_seed(seed))
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))
