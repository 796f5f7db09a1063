"""The parts of GPU memory a MOSS-Speech turn needs, from module sizes and transient bounds.

Torch-free (the settings panel and the model manager ask on the GUI thread), so the sizes are
closed forms over the model's config and the codec's published module sizes; the tests build
the real modules on the meta device (app/engine/moss_speech/census.py) and require these numbers
byte for byte, for the published and the tiny layouts, so they cannot drift from the code.

Placement (the loader follows it, the plan counts it):
- the 40 decoder layers take the chosen precision; int8/int4 quantise both LM heads to int8;
- on an accelerator both embedding tables stay in host memory (a row reads 8 KiB of 1.28 GiB);
- the codec's tokenizer and flow run in ``CODEC_ACCELERATOR_DTYPE`` on an accelerator (float32
  with an fp32 model or on the CPU); HiFT, the VQ distances and the CFM state stay float32; only
  the streaming flow is resident (the offline ``flow.pt`` loads when ``codec.decode`` is used).

Transients are bounds of the code as written: attention over more than 64 MiB of fp32 scores is
split into blocks of query rows (layers.py, codec/layers.py), prefill runs in chunks of 1,024
rows, and the other activations are counted per decoder layer (one layer's are alive at a time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
PRECISIONS = ("bf16", "int8", "int4", "fp32")

EMBEDDING_UNITS = ("model.embed_tokens", "model.audio_embed")
HEAD_UNITS = ("text_lm_head", "audio_lm_head")
HEAD_PRECISION = {"int8": "int8", "int4": "int8"}
# torchao's Int8Tensor keeps an fp32 scale and an int8 zero point per output channel
# (measured; tests/engine/moss_speech/test_quantize.py ties this to the loaded model).
INT8_SCALE_BYTES_PER_ROW = 5
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_GROUP = 4  # bf16 scale + bf16 zero point per group of 128 inputs
# torchao's int8 weight-only linear multiplies by a bf16 copy of the whole weight, made at every
# call (measured on the CPU: 1,185 MiB for the text head); weights whose copy would be larger
# than this are multiplied a block of output rows at a time (quantize.RowChunkedInt8Linear).
DEQUANT_BUDGET_BYTES = 128 * MIB
DENSE_BYTES = {"fp32": 4, "bf16": 2, "int8": 2, "int4": 2}  # non-quantised tensors
KV_BYTES = {"fp32": 4, "bf16": 2, "int8": 2, "int4": 2}  # the KV cache is never quantised
CODEC_ACCELERATOR_DTYPE = "fp16"  # see docs/memory.md, "Codec precision"
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

PREFILL_CHUNK_ROWS = 1024  # GenerationSession.prefill_chunk_rows
TRANSCRIPT_KV_ROWS = 1280  # the transcript pass's own cache: ~72 s of speech + 256 text rows
SCORE_BUDGET_BYTES = 64 * MIB  # layers.SCORE_BUDGET_BYTES, codec/layers.SCORE_BUDGET_BYTES
# Not from module sizes: cuBLAS/cuDNN workspaces and the decode step's CUDA-graph pool (fixed),
# plus the caching allocator's rounding and fragmentation (a share of what it holds). An
# estimate until `make gpu-report` measures reserved − allocated on a real card.
RUNTIME_FIXED_BYTES = 256 * MIB
ALLOCATOR_SLACK = 0.02


def embeddings_on_host(device_type: str) -> bool:
    """True when the model runs on an accelerator (the tables then stay in host memory)."""
    return device_type != "cpu"


def unit_format(prefix: str, precision: str) -> str:
    """The storage format of a loaded unit (a checkpoint prefix): "fp32", "bf16", "int8" or
    "int4" (weights.py quantises by this)."""
    if precision in ("int8", "int4"):
        if prefix in HEAD_UNITS:
            return HEAD_PRECISION[precision]
        if ".layers." in prefix:
            return precision
        return "bf16"
    return precision


def codec_dtype_name(device_type: str, precision: str) -> str:
    """The codec networks' dtype: float32 on the CPU or with an fp32 model, else the
    accelerator dtype."""
    return "fp32" if device_type == "cpu" or precision == "fp32" else CODEC_ACCELERATOR_DTYPE


@dataclass(frozen=True)
class ModelDims:
    """The config.json dimensions that decide memory (defaults: MOSS-Speech, contract §1.1)."""

    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_shared_layers: int = 32
    num_modality_layers: int = 4
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    vocab_size: int = 151680
    audio_vocab_size: int = 16512

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelDims:
        """Dimensions from a MOSS-Speech config.json mapping (raises KeyError when incomplete)."""
        H = int(config["hidden_size"])
        n_heads = int(config["num_attention_heads"])
        return cls(
            hidden_size=H,
            intermediate_size=int(config["intermediate_size"]),
            num_shared_layers=int(config["num_shared_layers"]),
            num_modality_layers=int(config["num_modality_layers"]),
            num_attention_heads=n_heads,
            num_key_value_heads=int(config["num_key_value_heads"]),
            head_dim=int(config.get("head_dim") or H // n_heads),
            vocab_size=int(config["vocab_size"]),
            audio_vocab_size=int(config["audio_vocab_size"]),
        )

    @property
    def num_decoder_layers(self) -> int:
        """Layers holding weights and KV: the shared trunk plus the text and the audio branch."""
        return self.num_shared_layers + 2 * self.num_modality_layers

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of every quantisable linear layer of one decoder layer."""
        H, inter = self.hidden_size, self.intermediate_size
        q_dim = self.num_attention_heads * self.head_dim
        kv_dim = self.num_key_value_heads * self.head_dim
        return [(q_dim, H), (kv_dim, H), (kv_dim, H), (H, q_dim),
                (inter, H), (inter, H), (H, inter)]

    def table_shapes(self) -> list[tuple[int, int]]:
        """(rows, width) of the two embedding tables, and (out, in) of the two heads."""
        return [(self.vocab_size, self.hidden_size), (self.audio_vocab_size, self.hidden_size)]

    def norm_params(self) -> int:
        """Every RMSNorm weight: two per layer, q/k norms, the two final norms."""
        per_layer = 2 * self.hidden_size + 2 * self.head_dim
        return per_layer * self.num_decoder_layers + 2 * self.hidden_size

    def dense_params(self) -> int:
        """Parameters outside the decoder linears: embeddings, heads and every norm."""
        return 2 * sum(o * i for o, i in self.table_shapes()) + self.norm_params()

    def param_count(self) -> int:
        linear = sum(o * i for o, i in self.linear_shapes()) * self.num_decoder_layers
        return linear + self.dense_params()

    def kv_bytes_per_row(self, precision: str = "bf16") -> int:
        """K and V of every decoder layer for one grid row (160 KiB in bf16 for MOSS-Speech)."""
        return (self.num_decoder_layers * 2 * self.num_key_value_heads * self.head_dim
                * KV_BYTES[precision])


def linear_bytes(out_features: int, in_features: int, fmt: str) -> int:
    """Bytes of one [out, in] weight stored as ``fmt`` (packed storage for int8/int4)."""
    if fmt == "int8":
        return out_features * in_features + out_features * INT8_SCALE_BYTES_PER_ROW
    if fmt == "int4":
        groups = out_features * math.ceil(in_features / INT4_GROUP_SIZE)
        return out_features * in_features // 2 + groups * INT4_BYTES_PER_GROUP
    return out_features * in_features * DENSE_BYTES[fmt]


def dequant_rows(out_features: int, in_features: int,
                 budget_bytes: int = DEQUANT_BUDGET_BYTES) -> int:
    """Output rows per block of an int8 weight's bf16 working copy (all of them if it fits)."""
    return min(out_features, max(1, budget_bytes // (2 * in_features)))


def dequant_transient_bytes(dims: ModelDims, precision: str) -> int:
    """The largest bf16 working copy an int8 weight makes during a call: the decoder layers'
    linears in int8 mode and the LM heads in int8 and int4 modes (int4's tinygemm kernel reads
    its packed weight directly)."""
    shapes = list(dims.table_shapes()) if precision in HEAD_PRECISION else []
    if precision == "int8":
        shapes += dims.linear_shapes()
    return max((dequant_rows(o, i) * i * 2 for o, i in shapes), default=0)


def lm_weight_bytes(dims: ModelDims, precision: str, device_type: str = "cuda"
                    ) -> tuple[int, int]:
    """(bytes on the device, bytes in host memory) of the AR model's weights."""
    if precision not in DENSE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    dense = DENSE_BYTES[precision]
    layers = sum(linear_bytes(o, i, precision)
                 for o, i in dims.linear_shapes()) * dims.num_decoder_layers
    head_format = unit_format(HEAD_UNITS[0], precision)
    heads = sum(linear_bytes(o, i, head_format) for o, i in dims.table_shapes())
    tables = sum(o * i for o, i in dims.table_shapes()) * dense
    device = layers + heads + dims.norm_params() * dense
    if embeddings_on_host(device_type):
        return device, tables
    return device + tables, 0


@dataclass(frozen=True)
class CodecSizes:
    """Element counts of the resident codec modules (defaults: the published codec, counted on
    the meta device; tests/engine/test_memory_plan.py recounts them)."""

    whisper_params: int = 343_119_360  # Whisper-VQ layers up to quantize_position + codebook
    codebook_rows: int = 16_384
    flow_params: int = 120_724_464  # one flow (the streaming chunk checkpoint)
    flow_buffer_elements: int = 1_200_000  # the fixed CFM noise (1 × 80 × 15000)
    hift_params: int = 20_806_557
    hift_buffer_elements: int = 16  # the iSTFT window
    whisper_d_model: int = 1280
    whisper_ffn: int = 5120
    whisper_layers: int = 16
    whisper_positions: int = 1500  # one 30 s segment at 50 Hz

    def weight_bytes(self, dtype: str) -> int:
        """Resident bytes with the tokenizer and flow in ``dtype``: their parameters and
        buffers, the float32 codebook table the VQ step keeps (a second copy unless float32),
        and HiFT in float32."""
        el = ELEMENT_BYTES[dtype]
        codebook = self.codebook_rows * (self.whisper_d_model + 1) * 4
        if dtype == "fp32":
            codebook = self.codebook_rows * 4  # only the norms: .float() is the weight itself
        flow = (self.flow_params + self.flow_buffer_elements) * el
        hift = (self.hift_params + self.hift_buffer_elements) * 4
        return self.whisper_params * el + codebook + flow + hift

    def transient_bytes(self, dtype: str) -> int:
        """The largest codec working set: a whole 30 s segment through the tokenizer (the heard
        reply is re-encoded each turn): every layer's keys and values of the segment, one
        layer's activations, and at most two blocks of bounded attention scores. A flow chunk
        step (and a recompute past the cache budget) needs less: its attention is bounded the
        same way and its activations are 256 channels wide."""
        el = ELEMENT_BYTES[dtype]
        T, d = self.whisper_positions, self.whisper_d_model
        state = self.whisper_layers * 2 * T * d * el
        layer = T * (2 * self.whisper_ffn + 6 * d) * el
        features = 2 * T * 128 * 4  # log-mel of the segment, float32
        return state + layer + features + 2 * SCORE_BUDGET_BYTES


def prefill_transient_bytes(dims: ModelDims, kv_rows: int, precision: str,
                            chunk_rows: int = PREFILL_CHUNK_ROWS) -> int:
    """Activations of one prefill chunk at its widest, one decoder layer at a time.

    Residual stream, norm input/output and the RMSNorm's fp32 working copies; then the larger
    of attention (q/k/v with their normed and rotated copies, at most two blocks of fp32 scores
    under SCORE_BUDGET_BYTES, and k/v of the keys seen upcast to fp32 by an unfused fallback)
    and the MLP (gate, up, their product and the activation). The heads read one row."""
    el = DENSE_BYTES[precision]
    C, H = chunk_rows, dims.hidden_size
    q_dim = dims.num_attention_heads * dims.head_dim
    kv_dim = dims.num_key_value_heads * dims.head_dim
    stream = C * H * (4 * el + 3 * 4)
    attention = (3 * C * (q_dim + 2 * kv_dim) * el + 2 * SCORE_BUDGET_BYTES
                 + 2 * kv_rows * kv_dim * 4)
    mlp = 4 * C * dims.intermediate_size * el
    logits = 2 * (dims.vocab_size + dims.audio_vocab_size) * 4
    return stream + max(attention, mlp) + logits


def runtime_bytes(allocated: int) -> int:
    """Workspaces, the CUDA-graph pool and the allocator's slack over ``allocated`` bytes."""
    return RUNTIME_FIXED_BYTES + int(ALLOCATOR_SLACK * allocated)
