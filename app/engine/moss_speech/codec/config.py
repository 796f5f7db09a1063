"""Codec configuration: see :mod:`app.engine.codec_config` (torch-free, so folder verification
reads the same configuration without importing the codec)."""

from app.engine.codec_config import (
    CodecConfig,
    CodecConfigError,
    EstimatorConfig,
    FlowConfig,
    FlowEncoderConfig,
    FrontEndConfig,
    HiFTConfig,
    WhisperVQConfig,
    read_codec_config,
    read_flow_yaml,
    read_front_end,
    read_whisper,
)

__all__ = ["CodecConfig", "CodecConfigError", "EstimatorConfig", "FlowConfig",
           "FlowEncoderConfig", "FrontEndConfig", "HiFTConfig", "WhisperVQConfig",
           "read_codec_config", "read_flow_yaml", "read_front_end", "read_whisper"]
