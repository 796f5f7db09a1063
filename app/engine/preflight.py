"""VRAM preflight: how much GPU memory each weight precision needs, before anything is loaded.

Torch-free arithmetic over the config dimensions (so the model manager, the settings panel and
the engine share one estimate); only :func:`query_gpu_memory` imports torch, lazily, and the UI
calls it off the GUI thread. The estimate is

    AR weights (by precision) + codec (fp32) + KV cache (context rows) + flow cache + margin

with the numbers of moss_speech_contract.md §1.1 (≈9.10 B parameters), §1.4 (160 KiB of bf16 KV
per grid row) and §3.6/§5 (full codec ≈2.4 GiB allocated in fp32). The flow cache is the codec's
streaming state (codec/flow_stream.py): ~17.6 MiB per code of voice prompt + reply in fp32, up
to ``[streaming] flow_cache_budget_mib`` (the voice prompt's reused state lives inside it), or,
with no budget, for the whole voice prompt and the longest reply.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.settings import Settings

GIB = 1 << 30
MIB = 1 << 20

# Weight-only quantisation policy the engine must match: the linear layers of the 40 decoder
# layers are quantised; embeddings, norms and the two LM heads stay bf16 (the heads decide every
# sampled token, and the tables are cheap to keep exact).
# torchao's Int8Tensor keeps an fp32 scale and an int8 zero point per output channel
# (measured; tests/engine/moss_speech/test_quantize.py ties this file to the loaded model).
INT8_SCALE_BYTES_PER_ROW = 5
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_GROUP = 4  # bf16 scale + bf16 zero point per group of 128 inputs
DENSE_BYTES = {"fp32": 4, "bf16": 2, "int8": 2, "int4": 2}  # non-quantised tensors
KV_BYTES = {"fp32": 4, "bf16": 2, "int8": 2, "int4": 2}  # the KV cache is never quantised

CODEC_FP32_BYTES = int(2.4 * GIB)  # contract §3.6: full codec ≈2.4 GiB allocated in fp32
# CUDA context (~0.5 GiB), prefill activations and allocator slack. HF's bf16 reference peaks
# 1.6 GiB above its loaded weights (contract §5); this is an estimate, not a measurement.
WORKING_MARGIN_BYTES = int(1.5 * GIB)

CODES_PER_SECOND = 12.5  # voice-prompt and reply codes (one per grid row)
VOICE_SECONDS_ASSUMED = 20.0  # the longest recommended voice prompt, when its file is unknown

# Preference order when recommending: best quality first. fp32 is never recommended: the
# checkpoint is bf16, so fp32 only doubles memory.
RECOMMENDATION_ORDER = ("bf16", "int8", "int4")
PRECISIONS = ("bf16", "int8", "int4", "fp32")


DEVICE_TYPES = ("cpu", "cuda", "npu")
PRECISION_ADVICE = "Choose another precision (Settings → Engine → Precision, or --precision)."


def precision_problem(precision: str, device: str) -> str | None:
    """Why ``precision`` cannot run on ``device`` ("cpu", "cuda", "cuda:1", "npu"; "auto" is
    checked once it is resolved), or None when it can. Torch-free: the command-line checks, the
    engine build and the benchmarks all ask this one function before anything is loaded.

    int4 runs only on CUDA: torchao's int4 weight-only layout (tile-packed for the tinygemm
    kernel in torch) has no CPU or NPU kernel in torchao 0.18; int8 (torchao's Int8Tensor, plain
    torch ops) runs everywhere torch runs."""
    if precision not in PRECISIONS:
        return f"precision {precision!r} is not one of {', '.join(PRECISIONS)}"
    device_type = device.split(":", 1)[0]
    if device_type == "auto":
        return None
    if device_type not in DEVICE_TYPES:
        return f"device {device!r} is not one of auto, {', '.join(DEVICE_TYPES)} (cuda:N allowed)"
    if precision == "int4" and device_type != "cuda":
        return (f"int4 needs a CUDA GPU (its kernel is CUDA-only); on {device_type} choose "
                "int8 or bf16")
    return None


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

    def dense_params(self) -> int:
        """Parameters that are never quantised: embeddings, heads and every norm."""
        H = self.hidden_size
        tables = 2 * (self.vocab_size + self.audio_vocab_size) * H  # embeddings + LM heads
        norms_per_layer = 2 * H + 2 * self.head_dim
        return tables + 2 * H + self.num_decoder_layers * norms_per_layer

    def param_count(self) -> int:
        linear = sum(o * i for o, i in self.linear_shapes()) * self.num_decoder_layers
        return linear + self.dense_params()

    def kv_bytes_per_row(self, precision: str = "bf16") -> int:
        """K and V of every decoder layer for one grid row (160 KiB in bf16 for MOSS-Speech)."""
        return (self.num_decoder_layers * 2 * self.num_key_value_heads * self.head_dim
                * KV_BYTES[precision])


def dims_from_folder(model_dir: Path | str | None) -> ModelDims:
    """Dimensions from ``model_dir/config.json``, or the published ones if it cannot be read."""
    from app.engine.folders import FolderError, load_json

    if model_dir is None:
        return ModelDims()
    try:
        return ModelDims.from_config(load_json(Path(model_dir) / "config.json"))
    except (FolderError, KeyError, TypeError, ValueError):
        return ModelDims()


@dataclass(frozen=True)
class FlowDims:
    """The flow decoder dimensions that decide its streaming state (defaults: the published
    flow, contract §3.4, in the codec's float32). codec/flow_stream.py computes the same from
    the loaded config; a test ties the two."""

    estimator_attention_blocks: int = 56  # n_blocks · (2 + num_mid_blocks) = 4 · 14
    estimator_attention_width: int = 512  # num_heads · attention_head_dim = 8 · 64
    cfg_branches: int = 2  # conditional and unconditional, every Euler step
    n_timesteps: int = 10
    encoder_blocks: int = 6  # at the code rate
    encoder_up_blocks: int = 4  # at the mel rate
    encoder_width: int = 512
    token_mel_ratio: int = 4
    element_bytes: int = 4
    longest_codes: int = 3750  # the fixed noise buffer: 300 s of mel (prompt + reply)

    def estimator_bytes_per_code(self) -> int:
        """Keys and values of every estimator attention block, per Euler step and branch."""
        per_frame = (2 * self.estimator_attention_blocks * self.estimator_attention_width
                     * self.cfg_branches * self.element_bytes)
        return per_frame * self.n_timesteps * self.token_mel_ratio

    def encoder_bytes_per_code(self) -> int:
        positions = self.encoder_blocks + self.encoder_up_blocks * self.token_mel_ratio
        return 2 * self.encoder_width * self.element_bytes * positions


def flow_cache_bytes(budget_mib: int, max_new_rows: int,
                     voice_seconds: float = VOICE_SECONDS_ASSUMED,
                     dims: FlowDims | None = None) -> int:
    """The most memory the codec's streaming state takes: the estimator state of the voice
    prompt and the longest reply, cut at the budget (0: no budget), plus the encoder state."""
    dims = dims or FlowDims()
    codes = min(math.ceil(voice_seconds * CODES_PER_SECOND) + 1 + int(max_new_rows),
                dims.longest_codes)
    per_code = dims.estimator_bytes_per_code()
    kept = codes if budget_mib <= 0 else min(codes, budget_mib * MIB // per_code)
    return kept * per_code + codes * dims.encoder_bytes_per_code()


def flow_cache_bytes_for(settings: Settings) -> int:
    """``flow_cache_bytes`` for the settings (the voice prompt's length read from its file)."""
    return flow_cache_bytes(settings.streaming.flow_cache_budget_mib,
                            settings.sampling.max_new_rows,
                            voice_seconds(settings.engine.voice_prompt))


def voice_seconds(path: Path | str | None) -> float:
    """Duration of a voice-prompt file from its header, or the assumed longest prompt."""
    if path is None:
        return VOICE_SECONDS_ASSUMED
    try:
        return read_voice_seconds(path)
    except Exception:  # missing or not audio: the engine says so when it loads the voice
        return VOICE_SECONDS_ASSUMED


def read_voice_seconds(path: Path | str) -> float:
    """Duration of an audio file from its header; raises when it cannot be read.

    Cached on the file's path, modification time and size: the settings dialog asks on every
    keystroke (the field check and the flow-cache estimate), and the file rarely changes."""
    stat = Path(path).stat()
    return _header_seconds(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _header_seconds(path: str, mtime_ns: int, size_bytes: int) -> float:
    import soundfile

    info = soundfile.info(path)
    if not info.samplerate:
        raise ValueError(f"{path} has no sample rate in its header")
    return float(info.frames / info.samplerate)


def default_flow_cache_bytes() -> int:
    """The flow cache under the default settings (budget, longest reply, assumed voice)."""
    defaults = Settings()
    return flow_cache_bytes(defaults.streaming.flow_cache_budget_mib,
                            defaults.sampling.max_new_rows)


def _linear_bytes(out_features: int, in_features: int, precision: str) -> int:
    if precision == "int8":
        return out_features * in_features + out_features * INT8_SCALE_BYTES_PER_ROW
    if precision == "int4":
        groups = out_features * math.ceil(in_features / INT4_GROUP_SIZE)
        return out_features * in_features // 2 + groups * INT4_BYTES_PER_GROUP
    return out_features * in_features * DENSE_BYTES[precision]


def weight_bytes(dims: ModelDims, precision: str) -> int:
    """Bytes of the AR model's weights at ``precision`` (see the quantisation policy above)."""
    if precision not in DENSE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    per_layer = sum(_linear_bytes(o, i, precision) for o, i in dims.linear_shapes())
    return per_layer * dims.num_decoder_layers + dims.dense_params() * DENSE_BYTES[precision]


@dataclass(frozen=True)
class VramEstimate:
    precision: str
    weights_bytes: int
    codec_bytes: int
    kv_cache_bytes: int
    flow_cache_bytes: int
    margin_bytes: int

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.codec_bytes + self.kv_cache_bytes
                + self.flow_cache_bytes + self.margin_bytes)

    def fits(self, free_bytes: int) -> bool:
        return self.total_bytes <= free_bytes

    def breakdown(self) -> str:
        """One line a person can read, e.g. for a tooltip."""
        parts = (("weights", self.weights_bytes), ("codec", self.codec_bytes),
                 ("KV cache", self.kv_cache_bytes), ("flow cache", self.flow_cache_bytes),
                 ("margin", self.margin_bytes))
        inner = " + ".join(f"{name} {gib(value)}" for name, value in parts)
        return f"{self.precision}: {gib(self.total_bytes)} = {inner}"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def estimate(precision: str, context_max_rows: int, dims: ModelDims | None = None,
             flow_cache_bytes: int | None = None) -> VramEstimate:
    """GPU memory needed to run MOSS-Speech at ``precision`` with a context of that many rows
    and ``flow_cache_bytes`` of codec streaming state (None: the default settings')."""
    dims = dims or ModelDims()
    return VramEstimate(
        precision=precision,
        weights_bytes=weight_bytes(dims, precision),
        codec_bytes=CODEC_FP32_BYTES,
        kv_cache_bytes=dims.kv_bytes_per_row(precision) * int(context_max_rows),
        flow_cache_bytes=(default_flow_cache_bytes() if flow_cache_bytes is None
                          else int(flow_cache_bytes)),
        margin_bytes=WORKING_MARGIN_BYTES,
    )


def estimate_all(context_max_rows: int, dims: ModelDims | None = None,
                 flow_cache_bytes: int | None = None) -> dict[str, VramEstimate]:
    return {p: estimate(p, context_max_rows, dims, flow_cache_bytes) for p in PRECISIONS}


@dataclass(frozen=True)
class Recommendation:
    precision: str | None  # None: nothing fits
    free_bytes: int
    estimates: dict[str, VramEstimate]
    message: str


def recommend(free_bytes: int, context_max_rows: int, dims: ModelDims | None = None,
              flow_cache_bytes: int | None = None) -> Recommendation:
    """The best precision (bf16, then int8, then int4) whose estimate fits in ``free_bytes``."""
    estimates = estimate_all(context_max_rows, dims, flow_cache_bytes)
    for precision in RECOMMENDATION_ORDER:
        needed = estimates[precision].total_bytes
        if needed <= free_bytes:
            message = (f"{precision} fits: needs about {gib(needed)} of the {gib(free_bytes)} "
                       "free on the GPU.")
            return Recommendation(precision, free_bytes, estimates, message)
    smallest = estimates[RECOMMENDATION_ORDER[-1]].total_bytes
    message = (f"Even int4 needs about {gib(smallest)}, but only {gib(free_bytes)} is free on the "
               "GPU. Close other programs that use the GPU, lower the context bound "
               "(Engine → Context max rows) or the flow cache budget (Streaming → Flow cache "
               "budget), or run on the CPU (slow).")
    return Recommendation(None, free_bytes, estimates, message)


def fit_problem(precision: str, free_bytes: int, context_max_rows: int,
                dims: ModelDims | None = None, flow_cache_bytes: int | None = None) -> str | None:
    """None when ``precision`` fits; otherwise why not and which precision would (for refusals)."""
    needed = estimate(precision, context_max_rows, dims, flow_cache_bytes).total_bytes
    if needed <= free_bytes:
        return None
    advice = recommend(free_bytes, context_max_rows, dims, flow_cache_bytes)
    alternative = (f" Choose {advice.precision} instead (Settings → Engine → Precision)."
                   if advice.precision else " " + advice.message)
    return (f"{precision} needs about {gib(needed)} of GPU memory but only {gib(free_bytes)} is "
            f"free.{alternative}")


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class GpuQuery:
    gpus: tuple[GpuMemory, ...]
    note: str  # why the list is empty, or "" when GPUs were found

    @property
    def best(self) -> GpuMemory | None:
        return max(self.gpus, key=lambda g: g.free_bytes) if self.gpus else None


def query_gpu_memory() -> GpuQuery:
    """Free and total memory of each CUDA GPU. Imports torch (seconds): never on the GUI thread.

    Never raises: a missing or broken torch/CUDA becomes an empty list with the reason.
    """
    try:
        import torch
    except Exception as exc:  # a broken CUDA install can raise more than ImportError
        return GpuQuery((), f"torch cannot be imported ({type(exc).__name__}: {exc})")
    try:
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else "no usable CUDA device"
            return GpuQuery((), f"no CUDA GPU (torch {torch.__version__}: {build})")
        gpus = []
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            gpus.append(GpuMemory(index, torch.cuda.get_device_name(index), int(free), int(total)))
        return GpuQuery(tuple(gpus), "")
    except Exception as exc:
        return GpuQuery((), f"CUDA query failed ({type(exc).__name__}: {exc})")
