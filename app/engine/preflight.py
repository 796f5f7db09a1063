"""VRAM preflight: how much GPU memory each weight precision needs, before anything is loaded.

One plan for everything that asks (the engine build, the model manager's "On this GPU" column,
the settings panel, ``python -m app memory-plan``): :func:`estimate` adds up the parts of
:mod:`app.engine.vram_parts`, computed from module sizes (tied to the meta-device build of the
published layout by the tests) and bounded transients, at the settings that decide them:

    AR weights on the GPU (embedding tables on the host; heads int8 in int8/int4)
    + codec (tokenizer + streaming flow in fp16, HiFT fp32; no offline flow)
    + KV cache (context + the transcript pass's rows)
    + flow cache (the codec's streaming state, up to ``[streaming] flow_cache_budget_mib``)
    + prefill transient + codec transient (bounded attention, one layer at a time)
    + runtime (workspaces, CUDA-graph pool, allocator slack: an estimate until measured)

Torch-free; only :func:`query_gpu_memory` imports torch, lazily, and the UI calls it off the
GUI thread. The flow cache is ~8.8 MiB per code of voice prompt + reply in fp16 (17.6 in fp32),
up to the budget (the voice prompt's reused state lives inside it), or, with no budget, for the
whole voice prompt and the longest reply.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.vram_parts import (
    CODEC_ACCELERATOR_DTYPE,
    DENSE_BYTES,
    DEQUANT_BUDGET_BYTES,
    ELEMENT_BYTES,
    EMBEDDING_UNITS,
    GIB,
    HEAD_PRECISION,
    HEAD_UNITS,
    INT4_BYTES_PER_GROUP,
    INT4_GROUP_SIZE,
    INT8_SCALE_BYTES_PER_ROW,
    KV_BYTES,
    MIB,
    PRECISIONS,
    RUNTIME_FIXED_BYTES,
    TRANSCRIPT_KV_ROWS,
    CodecSizes,
    ModelDims,
    codec_dtype_name,
    dequant_rows,
    dequant_transient_bytes,
    embeddings_on_host,
    linear_bytes,
    lm_weight_bytes,
    prefill_transient_bytes,
    runtime_bytes,
    unit_format,
)
from app.settings import Settings

__all__ = [  # re-exported: the engine, the UI and the tests import them from here
    "DENSE_BYTES", "DEQUANT_BUDGET_BYTES", "EMBEDDING_UNITS", "GIB", "HEAD_PRECISION",
    "HEAD_UNITS", "INT4_BYTES_PER_GROUP", "INT4_GROUP_SIZE", "INT8_SCALE_BYTES_PER_ROW",
    "KV_BYTES", "MIB", "PRECISIONS", "TRANSCRIPT_KV_ROWS", "CodecSizes", "ModelDims",
    "codec_dtype_name", "dequant_rows", "dequant_transient_bytes", "embeddings_on_host",
    "linear_bytes", "lm_weight_bytes", "prefill_transient_bytes",
    "unit_format",
]

CODES_PER_SECOND = 12.5  # voice-prompt and reply codes (one per grid row)
VOICE_SECONDS_ASSUMED = 20.0  # the longest recommended voice prompt, when its file is unknown
CODEC_SIZES = CodecSizes()  # the published codec (contract §3)
# Headroom a live change must leave free (engine.refuse_growth, the warm-up's voice state):
# the widest transients of the published model at the default context, and the fixed runtime.
WORKING_MARGIN_BYTES = (prefill_transient_bytes(ModelDims(), 4096 + TRANSCRIPT_KV_ROWS, "bf16")
                        + CODEC_SIZES.transient_bytes(CODEC_ACCELERATOR_DTYPE)
                        + RUNTIME_FIXED_BYTES)

# Preference order when recommending: best quality first. fp32 is never recommended: the
# checkpoint is bf16, so fp32 only doubles memory.
RECOMMENDATION_ORDER = ("bf16", "int8", "int4")

DEVICE_TYPES = ("cpu", "cuda", "npu")


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
    flow, contract §3.4, in the codec's accelerator dtype). codec/flow_stream.py computes the
    same from the loaded config; a test ties the two."""

    estimator_attention_blocks: int = 56  # n_blocks · (2 + num_mid_blocks) = 4 · 14
    estimator_attention_width: int = 512  # num_heads · attention_head_dim = 8 · 64
    cfg_branches: int = 2  # conditional and unconditional, every Euler step
    n_timesteps: int = 10
    encoder_blocks: int = 6  # at the code rate
    encoder_up_blocks: int = 4  # at the mel rate
    encoder_width: int = 512
    token_mel_ratio: int = 4
    element_bytes: int = ELEMENT_BYTES[CODEC_ACCELERATOR_DTYPE]
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


def flow_cache_bytes_for(settings: Settings, precision: str | None = None) -> int:
    """``flow_cache_bytes`` for the settings (the voice prompt's length read from its file),
    with the flow in the codec dtype of ``precision`` on a GPU (None: the accelerator dtype;
    only fp32 differs, and only past the budget)."""
    codec_dtype = codec_dtype_name("cuda", precision or "bf16")
    return flow_cache_bytes(settings.streaming.flow_cache_budget_mib,
                            settings.sampling.max_new_rows,
                            voice_seconds(settings.engine.voice_prompt),
                            FlowDims(element_bytes=ELEMENT_BYTES[codec_dtype]))


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
    return flow_cache_bytes_default(CODEC_ACCELERATOR_DTYPE)


def flow_cache_bytes_default(codec_dtype: str) -> int:
    """The flow cache under the default settings with the flow in ``codec_dtype``."""
    defaults = Settings()
    return flow_cache_bytes(defaults.streaming.flow_cache_budget_mib,
                            defaults.sampling.max_new_rows,
                            dims=FlowDims(element_bytes=ELEMENT_BYTES[codec_dtype]))


def weight_bytes(dims: ModelDims, precision: str) -> int:
    """Bytes of all the AR model's weights at ``precision`` (device and host together)."""
    return sum(lm_weight_bytes(dims, precision))


# (name in the plan, VramEstimate field): the parts of the total, in the order they are shown
PARTS = (("lm_weights", "weights_bytes"), ("codec_weights", "codec_bytes"),
         ("kv_cache", "kv_cache_bytes"), ("flow_cache", "flow_cache_bytes"),
         ("prefill_transient", "prefill_transient_bytes"),
         ("dequant_transient", "dequant_transient_bytes"),
         ("codec_transient", "codec_transient_bytes"), ("runtime", "margin_bytes"))


@dataclass(frozen=True)
class VramEstimate:
    precision: str
    weights_bytes: int  # AR weights on the GPU
    codec_bytes: int
    kv_cache_bytes: int
    flow_cache_bytes: int
    margin_bytes: int  # runtime: workspaces, CUDA-graph pool, allocator slack
    prefill_transient_bytes: int = 0
    dequant_transient_bytes: int = 0  # an int8 weight's bf16 working copy, one block at most
    codec_transient_bytes: int = 0
    host_bytes: int = 0  # AR weights kept in host memory (not part of the total)
    kv_rows: int = 0
    codec_dtype: str = field(default=CODEC_ACCELERATOR_DTYPE)

    @property
    def total_bytes(self) -> int:
        return sum(self.parts_bytes().values())

    def parts_bytes(self) -> dict[str, int]:
        return {name: int(getattr(self, attr)) for name, attr in PARTS}

    def fits(self, free_bytes: int) -> bool:
        return self.total_bytes <= free_bytes

    def breakdown(self) -> str:
        """One line a person can read, e.g. for a tooltip."""
        inner = " + ".join(f"{name.replace('_', ' ')} {gib(value)}"
                           for name, value in self.parts_bytes().items())
        return f"{self.precision}: {gib(self.total_bytes)} = {inner}"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def estimate(precision: str, context_max_rows: int, dims: ModelDims | None = None,
             flow_cache_bytes: int | None = None, codec: CodecSizes | None = None
             ) -> VramEstimate:
    """GPU memory needed to run MOSS-Speech at ``precision`` with a context bound of
    ``context_max_rows`` (the transcript pass's rows are added here) and ``flow_cache_bytes`` of
    codec streaming state (None: the default settings'), on an accelerator."""
    dims = dims or ModelDims()
    codec = codec or CODEC_SIZES
    codec_dtype = codec_dtype_name("cuda", precision)
    kv_rows = int(context_max_rows) + TRANSCRIPT_KV_ROWS
    device_bytes, host_bytes = lm_weight_bytes(dims, precision, "cuda")
    flow = (flow_cache_bytes_default(codec_dtype) if flow_cache_bytes is None
            else int(flow_cache_bytes))
    resident = (device_bytes + codec.weight_bytes(codec_dtype)
                + dims.kv_bytes_per_row(precision) * kv_rows + flow)
    return VramEstimate(
        precision=precision, weights_bytes=device_bytes,
        codec_bytes=codec.weight_bytes(codec_dtype),
        kv_cache_bytes=dims.kv_bytes_per_row(precision) * kv_rows, flow_cache_bytes=flow,
        margin_bytes=runtime_bytes(resident),
        prefill_transient_bytes=prefill_transient_bytes(dims, kv_rows, precision),
        dequant_transient_bytes=dequant_transient_bytes(dims, precision),
        codec_transient_bytes=codec.transient_bytes(codec_dtype),
        host_bytes=host_bytes, kv_rows=kv_rows, codec_dtype=codec_dtype)


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
