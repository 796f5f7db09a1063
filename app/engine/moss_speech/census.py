"""Module sizes counted on the meta device: the ground truth of the VRAM plan.

The plan (app/engine/vram_parts.py) is torch-free closed forms; this builds the real modules in
the published layout on the meta device (no memory), applies the loader's placement and
quantisation rule per unit (``preflight.unit_format``, ``embeddings_on_host``) and counts what
each would allocate. Tests and ``python -m app memory-plan`` require the two to agree byte for
byte. Packed int8/int4 sizes come from ``preflight.linear_bytes``, which a test ties to the
tensors torchao really allocates (int8 on the CPU; int4 has the tinygemm layout's formula).
"""

from __future__ import annotations

import torch

from app.engine.moss_speech.codec.config import CodecConfig
from app.engine.moss_speech.codec.flow import Flow
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.weights import load_units
from app.engine.preflight import (
    DENSE_BYTES,
    EMBEDDING_UNITS,
    CodecSizes,
    embeddings_on_host,
    linear_bytes,
    unit_format,
)


def lm_census(config: MossSpeechConfig, precision: str, device_type: str = "cuda"
              ) -> tuple[int, int]:
    """(bytes on the device, bytes in host memory) of the AR model as the loader would place
    and quantise it, counted unit by unit on the meta-device build."""
    with torch.device("meta"):
        model = MossSpeechModel(config)
    on_device = on_host = 0
    for prefix, module in load_units(model):
        fmt = unit_format(prefix, precision)
        size = 0
        for tensor in module.state_dict().values():
            if fmt in ("int8", "int4") and tensor.ndim == 2:
                size += linear_bytes(tensor.shape[0], tensor.shape[1], fmt)
            else:
                size += tensor.numel() * DENSE_BYTES[precision]
        if prefix in EMBEDDING_UNITS and embeddings_on_host(device_type):
            on_host += size
        else:
            on_device += size
    return on_device, on_host


def _elements(module: torch.nn.Module) -> tuple[int, int]:
    """(parameter elements, buffer elements) of a module."""
    return (sum(p.numel() for p in module.parameters()),
            sum(b.numel() for b in module.buffers()))


def codec_census(config: CodecConfig, chunk: int = 5) -> CodecSizes:
    """Element counts of the resident codec modules: the Whisper-VQ tokenizer, one streaming
    flow and HiFT, built on the meta device (the buffers they make on the CPU are counted)."""
    with torch.device("meta"):
        encoder = WhisperVQEncoder(config.whisper)
        flow = Flow(config.flow, chunk=chunk)
        hift = HiFTGenerator(config.hift)
    whisper = config.whisper
    flow_params, flow_buffers = _elements(flow)
    hift_params, hift_buffers = _elements(hift)
    return CodecSizes(
        whisper_params=_elements(encoder)[0], codebook_rows=whisper.quantize_vocab_size,
        flow_params=flow_params, flow_buffer_elements=flow_buffers, hift_params=hift_params,
        hift_buffer_elements=hift_buffers, whisper_d_model=whisper.d_model,
        whisper_ffn=whisper.encoder_ffn_dim, whisper_layers=whisper.quantize_position,
        whisper_positions=whisper.max_source_positions)
