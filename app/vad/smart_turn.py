"""Semantic end of turn: the smart-turn v3 model says whether the last seconds of a person's
speech sound like a finished turn (issue 23). ONNX through onnxruntime + numpy (no torch).

Model I/O (smart-turn v3.2, BSD-2-Clause, Daily): ``input_features`` [batch, 80, 800], the
Whisper log-mel features of the last 8 s at 16 kHz (zeros in front when there is less), one
output: the probability that the turn is complete.

The model file is taken from the pipecat-ai wheel at set-up (``scripts/fetch_smart_turn.py``,
pinned version and SHA-256; its licence is kept beside it) into ``app/vad/data/``; a bundle
carries the same folder. Where it is missing the app falls back to silence-only endpointing
and ``doctor`` says so. Why not a dependency on pipecat-ai: docs/turn-taking.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

RATE_HZ = 16000
WINDOW_S = 8
WINDOW_SAMPLES = RATE_HZ * WINDOW_S  # what the model hears of a turn: its last 8 s
N_FFT = 400
HOP = 160
N_MELS = 80
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
LICENSE_FILE = "smart-turn-LICENSE.txt"
DATA_DIR = Path(__file__).resolve().parent / "data"
BUNDLE_DIR = ("app", "vad", "data")


class SmartTurnUnavailableError(RuntimeError):
    """The model file is not installed; the message says how to get it."""


def smart_turn_model_path() -> Path:
    """The model in a PyInstaller bundle, in ``app/vad/data``, or in an installed pipecat-ai
    package (found without importing it)."""
    candidates = []
    bundle_root = getattr(sys, "_MEIPASS", None)
    if bundle_root:
        candidates.append(Path(bundle_root).joinpath(*BUNDLE_DIR, MODEL_FILE))
    candidates.append(DATA_DIR / MODEL_FILE)
    import importlib.util

    spec = importlib.util.find_spec("pipecat")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(location) / "audio" / "turn" / "smart_turn" / "data" / MODEL_FILE)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SmartTurnUnavailableError(
        "the smart-turn end-of-turn model is not installed (turns end after a fixed silence); "
        "run make setup, or python scripts/fetch_smart_turn.py")


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear to 1 kHz, logarithmic above."""
    hz = np.asarray(hz, np.float64)
    linear = 3.0 * hz / 200.0
    log = 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    linear = 200.0 * mel / 3.0
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log, linear)


def _mel_filters() -> np.ndarray:
    """[N_FFT // 2 + 1, N_MELS] triangles on Slaney's scale, area-normalised."""
    low, high = _hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(RATE_HZ / 2))
    edges = _mel_to_hz(np.linspace(low, high, N_MELS + 2))
    bins = np.linspace(0, RATE_HZ / 2, N_FFT // 2 + 1)[:, None]  # [201, 1]
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins - lower) / (centre - lower)
    falling = (upper - bins) / (upper - centre)
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    return triangles * (2.0 / (upper - lower))


MEL_FILTERS = _mel_filters()
HANN = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic


def log_mel_features(pcm_16k: np.ndarray) -> np.ndarray:
    """The last ``WINDOW_S`` of ``pcm_16k`` ([T] float) as Whisper log-mel features [80, 800]:
    normalised to zero mean and unit variance, 25 ms Hann frames every 10 ms (centred, reflect
    padded), power spectrum onto 80 mel bands, log10 floored 8 decades under the peak,
    (x + 4) / 4."""
    length = WINDOW_SAMPLES
    x = np.asarray(pcm_16k, np.float32)[-length:]
    x = np.concatenate([np.zeros(length - len(x), np.float32), x]).astype(np.float64)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]  # [801, 400]
    power = np.abs(np.fft.rfft(frames * HANN, axis=-1)) ** 2  # [801, 201]
    mel = power[:-1] @ MEL_FILTERS  # [800, 80]
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).T.astype(np.float32)  # [80, 800]


def default_threads() -> int:
    """Two onnxruntime threads where there are two cores or more: a decision takes about half
    the wall time for the same CPU (on this project's 2-core machine 28 instead of 46 ms, `bench
    end-of-turn`), and it runs only at a pause, once."""
    return min(2, os.cpu_count() or 1)


class SmartTurnModel:
    """One onnxruntime session; ``probability`` is not thread-safe (one caller)."""

    def __init__(self, model_path: Path | None = None, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        # Asked once per pause: its threads sleep in between instead of spinning on the
        # cores the voice loop needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.path = model_path or smart_turn_model_path()
        self._session = ort.InferenceSession(str(self.path), sess_options=options,
                                             providers=["CPUExecutionProvider"])

    def probability(self, pcm_16k: np.ndarray) -> float:
        """Probability that the speech in ``pcm_16k`` (the turn so far) is a finished turn."""
        return self.run(log_mel_features(pcm_16k)[None])

    def run(self, features: np.ndarray) -> float:
        """The model alone on ``features`` [1, 80, 800]: the probability of a finished turn."""
        (output,) = self._session.run(None, {"input_features": features})[:1]
        return float(np.asarray(output).reshape(-1)[0])


def end_of_turn_status() -> dict[str, object]:
    """For ``doctor``: is the end-of-turn model there (the file only; it is loaded by the
    pipeline)?"""
    try:
        path = smart_turn_model_path()
    except SmartTurnUnavailableError as exc:
        return {"available": False, "path": None, "reason": str(exc)}
    return {"available": True, "path": str(path), "reason": None}
