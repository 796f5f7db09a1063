"""Measurements behind ``python -m app bench engine`` (see app/cli/bench_engine.py)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from app.engine.folders import expected_lm_shapes
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.generate import GenerationSession, RowSampler
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.quantize import weight_bytes
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.weights import load_model, random_model

BYTES_PER_WEIGHT = {"bf16": 2.0, "fp32": 4.0, "int8": 1.0, "int4": 0.5}
WORKING_MARGIN_BYTES = 2 * 2**30  # activations, allocator slack, the unit being converted
# Quantised builds stage each unit in bf16 first; on CPU the allocator kept ~4.5 GiB of that
# staging memory (full int8: 15.7 GiB peak RSS measured against 11.2 GiB of weights + KV + margin).
QUANTISED_STAGING_BYTES = 4 * 2**30
GiB = 2**30
CPU_RAM_SHARE = 0.75  # the most of the machine's RAM a CPU benchmark may plan to use


def size_config(size: str) -> MossSpeechConfig:
    return MossSpeechConfig.full() if size == "full" else MossSpeechConfig.tiny()


def overhead_config(base: MossSpeechConfig) -> MossSpeechConfig:
    """Same layer structure, near-zero FLOPs: what remains of a decode step is dispatch."""
    return base.with_(hidden_size=32, intermediate_size=32, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, vocab_size=1024, audio_vocab_size=640,
                      pad_token_id=1000, im_start_token_id=1001, im_end_token_id=1002,
                      sosp_token_id=1003, modality_pad_token_id=1004, eosp_token_id=512,
                      audio_pad_token_id=100)


def estimate_bytes(config: MossSpeechConfig, precision: str, rows: int) -> int:
    """Device memory for weights (embeddings stay bf16/fp32), KV cache and a working margin."""
    shapes = expected_lm_shapes(config.to_dict())
    dense = 4.0 if precision == "fp32" else 2.0
    total = 0.0
    for name, shape in shapes.items():
        per = dense if ("embed" in name or len(shape) == 1) else BYTES_PER_WEIGHT[precision]
        total += math.prod(shape) * per
    total += rows * config.kv_bytes_per_row * (2 if precision == "fp32" else 1)
    if precision in ("int8", "int4"):
        total += QUANTISED_STAGING_BYTES
    return int(total + WORKING_MARGIN_BYTES)


def memory_refusal(size: str, precision: str, device: torch.device, rows: int,
                   available: int | None = None) -> str | None:
    """Why the full model cannot be built here, or None when it fits."""
    if size != "full":
        return None
    need = estimate_bytes(MossSpeechConfig.full(), precision, rows)
    if available is None and device.type == "cuda":
        available = torch.cuda.mem_get_info(device)[0]
    elif available is None:  # leave a quarter of RAM to the OS and everything else running
        import psutil

        memory = psutil.virtual_memory()
        available = min(memory.available, int(CPU_RAM_SHARE * memory.total))
    if need <= available:
        return None
    return (f"the full model in {precision} needs about {need / GiB:.1f} GiB on {device} "
            f"(weights + KV + {WORKING_MARGIN_BYTES / GiB:.0f} GiB working memory) but "
            f"{available / GiB:.1f} GiB is available to it; use a GPU or a smaller --precision")


def audio_prompt(config: MossSpeechConfig, rows: int) -> torch.Tensor:
    """A speech-to-speech-shaped prompt: text header, an audio segment, sosp at the end."""
    rows = max(rows, 8)
    generator = torch.Generator().manual_seed(0)
    n_codes = rows - 6
    codes = torch.randint(0, config.eosp_token_id, (n_codes,), generator=generator)
    grid = [(7, config.audio_pad_token_id), (8, config.audio_pad_token_id),
            (config.sosp_token_id, config.audio_pad_token_id)]
    grid += [(config.modality_pad_token_id, int(c)) for c in codes]
    grid += [(config.modality_pad_token_id, config.eosp_token_id),
             (9, config.audio_pad_token_id), (config.sosp_token_id, config.audio_pad_token_id)]
    return torch.tensor(grid, dtype=torch.int64)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_ms(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def decode_ms_per_row(session: GenerationSession, prompt: torch.Tensor, rows: int,
                      warmup_rows: int) -> tuple[float, float]:
    """(ms per row after warm-up, ms of the warm-up rows); stays in audio mode throughout."""
    session.reset()
    session.prefill(prompt)
    sampling = Sampling(max_new_rows=rows + warmup_rows, min_new_rows=rows + warmup_rows)
    device = session.model.device
    iterator = session.rows(sampling, seed=0)
    start = time.perf_counter()
    for _ in range(warmup_rows):
        next(iterator)
    warm_ms = (time.perf_counter() - start) * 1000
    _sync(device)
    start = time.perf_counter()
    count = sum(1 for _ in iterator)
    _sync(device)
    return (time.perf_counter() - start) * 1000 / max(count, 1), warm_ms


def measure_bandwidth_gbs(device: torch.device) -> float:
    """Device memory bandwidth from large copies (read + write bytes per second)."""
    n_bytes = (1 * GiB) if device.type == "cuda" else (256 * 2**20)
    src = torch.empty(n_bytes // 2, dtype=torch.bfloat16, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src), device, repeats=5)
    return 2 * n_bytes / (ms / 1000) / 1e9


def bytes_read_per_audio_row(model: MossSpeechModel) -> int:
    """Weights read by one audio-mode step: every layer, the audio head; not the text head."""
    modules: list[nn.Module] = [model.model.shared_block, model.model.text_block,
                                model.model.audio_block, model.model.audio_norm,
                                model.audio_lm_head]
    return sum(weight_bytes(m) for m in modules)


def run_bench(size: str, device: str, precision: str, model_dir: str | None, prompt_rows: int,
              decode_rows: int, decode_path: str) -> dict[str, Any]:
    dev = torch.device(device)
    config = size_config(size)
    start = time.perf_counter()
    model = (load_model(Path(model_dir), dev, precision) if model_dir
             else random_model(config, dev, precision))
    result: dict[str, Any] = {"size": size if not model_dir else "checkpoint", "device": str(dev),
                              "precision": precision, "decode_path_requested": decode_path,
                              "build_s": round(time.perf_counter() - start, 2)}
    result.update(measure_model(model, prompt_rows, decode_rows, decode_path,
                                bandwidth=size == "full" or model_dir is not None))
    del model  # free the weights before the overhead twin is built
    result.update(python_overhead(config, dev, decode_path))
    return result


def measure_model(model: MossSpeechModel, prompt_rows: int, decode_rows: int,
                  decode_path: str, bandwidth: bool) -> dict[str, Any]:
    """Prefill ms, decode rows/s (audio mode), peak CUDA memory, ratio to the bandwidth floor."""
    dev = model.device
    prompt = audio_prompt(model.config, prompt_rows)
    session = GenerationSession(model, max_rows=prompt_rows + decode_rows + 16,
                                decode_path=decode_path)
    session.prefill(prompt[:16])  # warm-up

    def prefill() -> None:
        session.reset()
        session.prefill(prompt)

    result: dict[str, Any] = {**decode_fields(session, ""), "prefill_rows": int(prompt.shape[0]),
                              "prefill_ms": round(timed_ms(prefill, dev, repeats=3), 1)}
    row_ms, warm_ms = decode_ms_per_row(session, prompt, decode_rows, warmup_rows=4)
    result["decode_ms_per_row"] = round(row_ms, 2)
    result["decode_rows_per_s"] = round(1000 / row_ms, 1)
    result["warmup_rows_ms"] = round(warm_ms, 1)
    result["realtime_factor_audio"] = round((1000 / row_ms) / 12.5, 2)  # ≥ 1: keeps up
    if dev.type == "cuda":
        result["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated(dev) / 2**20, 1)
    if bandwidth:
        gbs = measure_bandwidth_gbs(dev)
        read = bytes_read_per_audio_row(model)
        floor_ms = read / (gbs * 1e9) * 1000
        result.update({"bandwidth_gbs": round(gbs, 1), "weights_read_per_row_gb":
                       round(read / 1e9, 2), "bandwidth_floor_ms": round(floor_ms, 2),
                       "ratio_to_floor": round(row_ms / floor_ms, 2)})
    return result


def decode_fields(session: GenerationSession, prefix: str) -> dict[str, Any]:
    """Which decode step ran, why the ones before it did not, and what choosing it cost."""
    decode = session.decode
    return {f"{prefix}decode_path": decode.path, f"{prefix}decode_notes": decode.notes,
            f"{prefix}decode_setup_ms": round(decode.setup_ms, 1)}


def python_overhead(config: MossSpeechConfig, device: torch.device,
                    decode_path: str) -> dict[str, Any]:
    """Decode time per row of the near-zero-FLOP twin with the same number of layers.

    Runs on one intra-op thread: the twin's kernels are far too small to parallelise, and
    spreading them over cores only adds synchronisation to what we want to measure (dispatch).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _twin_overhead(config, device, decode_path)
    finally:
        torch.set_num_threads(threads)


def _twin_overhead(config: MossSpeechConfig, device: torch.device,
                   decode_path: str) -> dict[str, Any]:
    twin_config = overhead_config(config)
    twin = random_model(twin_config, device, "fp32" if device.type == "cpu" else "bf16")
    session = GenerationSession(twin, max_rows=400, decode_path=decode_path)
    prompt = audio_prompt(twin_config, 32)
    row_ms, _ = decode_ms_per_row(session, prompt, rows=200, warmup_rows=8)
    return {"overhead_layers": twin_config.kv_layers, **decode_fields(session, "overhead_"),
            "python_overhead_ms_per_row": round(row_ms, 3),
            "sampler_ms_per_row": round(sampler_ms_per_row(twin_config, device), 3)}


def sampler_ms_per_row(config: MossSpeechConfig, device: torch.device, rows: int = 300) -> float:
    """Host time of FSM + both channel samplers per row (what stays on the host per row even
    when the forward is one CUDA-graph replay). Text mode, so both channels are sampled."""
    history = torch.tensor([(7, config.audio_pad_token_id)] * 4)
    sampler = RowSampler(config, Sampling(max_new_rows=10 * rows, min_new_rows=10 * rows),
                         history, seed=0, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    text = torch.randn(rows, config.vocab_size, generator=generator, device=device)
    audio = torch.randn(rows, config.audio_vocab_size, generator=generator, device=device)
    _sync(device)
    start = time.perf_counter()
    for i in range(rows):
        sampler.sample(text[i], audio[i])
    _sync(device)
    return (time.perf_counter() - start) * 1000 / rows
