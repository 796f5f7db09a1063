"""Silero VAD's ONNX model through onnxruntime + numpy (no torch).

The model file comes from the installed ``silero-vad`` package's data folder, located WITHOUT
importing ``silero_vad``: its import loads torch and calls ``torch.set_num_threads(1)`` for the
whole process, which would throttle the model's CPU work.

Model I/O (silero-vad 5/6): ``input`` [1, 64 + 512] (64 samples of context from the previous
frame, then the new frame), ``state`` [2, 1, 128] float32, ``sr`` int64 scalar; outputs the
speech probability [1, 1] and the next state.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from app.vad.base import FRAME_SAMPLES, SAMPLE_RATE_HZ, SpeechScorer

CONTEXT_SAMPLES = 64
MODEL_FILE = "silero_vad.onnx"
PACKAGE_DATA = ("silero_vad", "data")  # the file's folder inside the package, and in a bundle


class VadModelMissingError(RuntimeError):
    """The silero model file is not installed; the message says how to get it."""


def silero_model_path() -> Path:
    """Path of ``silero_vad.onnx`` in the installed package (the package is not imported), or
    in a PyInstaller bundle, which carries the file alone (packaging/moss-voice.spec)."""
    candidates = []
    bundle_root = getattr(sys, "_MEIPASS", None)
    if bundle_root:
        candidates.append(Path(bundle_root).joinpath(*PACKAGE_DATA, MODEL_FILE))
    spec = importlib.util.find_spec(PACKAGE_DATA[0])
    for location in list(spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(location) / PACKAGE_DATA[1] / MODEL_FILE)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise VadModelMissingError("the silero-vad package (which carries the voice-activity model) is "
                          "not installed; run make setup (or pip install silero-vad)")


class SileroScorer(SpeechScorer):
    """Stateful: frames must arrive in order; ``reset`` between unrelated streams."""

    def __init__(self, model_path: Path | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_path or silero_model_path()),
                                             sess_options=options,
                                             providers=["CPUExecutionProvider"])
        self._sr = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
        self._input = np.zeros((1, CONTEXT_SAMPLES + FRAME_SAMPLES), dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)

    def reset(self) -> None:
        self._input.fill(0.0)
        self._state.fill(0.0)

    def score(self, frame: np.ndarray) -> float:
        if len(frame) != FRAME_SAMPLES:
            raise ValueError(f"silero needs {FRAME_SAMPLES}-sample frames, got {len(frame)}")
        self._input[0, CONTEXT_SAMPLES:] = frame
        probability, state = self._session.run(
            None, {"input": self._input, "state": self._state, "sr": self._sr})
        self._state = state
        self._input[0, :CONTEXT_SAMPLES] = frame[-CONTEXT_SAMPLES:]
        return float(probability[0, 0])
