"""Voice activity detection: scorers (silero ONNX, energy) and one hysteresis segmenter.

Never imports Qt or torch.
"""

from app.vad.base import (
    FRAME_S,
    FRAME_SAMPLES,
    SAMPLE_RATE_HZ,
    Segmenter,
    SpeechScorer,
    VadFrame,
    VadParams,
    VadState,
    VadUpdate,
)

__all__ = ["FRAME_S", "FRAME_SAMPLES", "SAMPLE_RATE_HZ", "Segmenter", "SpeechScorer",
           "VadFrame", "VadParams", "VadState", "VadUpdate"]
