"""The native MOSS-Speech codec: speech ↔ 12.5 Hz codes (contract §3).

Whisper-VQ tokenizer (whole and incremental), voice conditioning (prompt codes, 24 kHz prompt
mel, CAM++ x-vector via onnxruntime), CosyVoice2-style flow decoder (offline and chunk-streaming
with caches) and the HiFT vocoder. Plain PyTorch, no torchaudio, no Qt. Start at ``load_codec``.
"""

from app.engine.moss_speech.codec.codec import MossSpeechCodec
from app.engine.moss_speech.codec.config import CodecConfig, CodecConfigError
from app.engine.moss_speech.codec.loader import CodecLoadError, load_codec
from app.engine.moss_speech.codec.streaming import StreamDecoder
from app.engine.moss_speech.codec.tokenizer import StreamEncoder
from app.engine.moss_speech.codec.voice import VoiceConditioning, VoiceFileError

__all__ = [
    "CodecConfig",
    "CodecConfigError",
    "CodecLoadError",
    "MossSpeechCodec",
    "StreamDecoder",
    "StreamEncoder",
    "VoiceConditioning",
    "VoiceFileError",
    "load_codec",
]
