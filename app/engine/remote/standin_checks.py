"""What the stand-in server checks and answers, as sglang-omni's MOSS-Speech pipeline does:
the request fields its ChatCompletionRequest declares (FastAPI answers 422 when they do not
parse), the pipeline's checks before any model work (400, ``Invalid model request: ...``), and
the reply audio, made by the echo engine from the last user turn.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import threading
from typing import Any

import numpy as np
import soundfile
import soxr
from pydantic import BaseModel, ConfigDict

from app.engine.base import ReplyAudio, UserTurn
from app.engine.echo import EchoEngine
from app.engine.remote.protocol import (
    CODES_PER_S,
    INPUT_RATE_HZ,
    MAX_REPLY_ROWS,
    MAX_TOTAL_AUDIO_S,
    MAX_TURN_AUDIO_S,
    REPLY_RATE_HZ,
    float_to_s16le,
)


class ChatRequest(BaseModel):
    """The request fields sglang-omni's ChatCompletionRequest declares (others are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[dict[str, Any]]
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    request_id: str | None = None


class Refused(ValueError):  # noqa: N818 - reads as "raise Refused(why)"
    """A request the MOSS pipeline refuses: HTTP 400, ``Invalid model request: ...``."""


def check_request(req: ChatRequest, context_rows: int) -> list[np.ndarray]:
    """The MOSS pipeline's checks before any model work; returns each audio turn at 16 kHz."""
    lengths = [v for v in (req.max_tokens, req.max_completion_tokens) if v is not None]
    if any(not 1 <= v <= MAX_REPLY_ROWS for v in lengths) or len(set(lengths)) > 1:
        raise Refused("max_tokens/max_completion_tokens must be within [1, 512] and agree")
    if req.min_p not in (None, 0.0):
        raise Refused("min_p is not supported in V1")
    if ((req.temperature is not None and req.temperature < 0)
            or (req.top_p is not None and not 0 < req.top_p <= 1)
            or (req.repetition_penalty is not None and req.repetition_penalty <= 0)):
        raise Refused("invalid sampling parameters")
    if req.top_k is not None and req.top_k < -1:
        raise Refused("top_k must be -1, 0 or positive")
    if req.stop:
        raise Refused("custom stop strings are not supported in V1")
    if not req.stream:
        raise Refused("this stand-in serves the streaming preset only (stream: true)")
    if req.audio is not None and (set(req.audio) - {"format"}
                                  or req.audio.get("format") not in ("pcm", "wav")):
        raise Refused("request-level voice selection (audio config) is not supported in V1")
    modalities = req.modalities or ["text"]
    if modalities not in (["text"], ["audio"]):
        raise Refused(f"modalities must be exactly one of ['text'] or ['audio']; got "
                      f"{modalities!r}")
    if not req.messages:
        raise Refused("messages must not be empty")
    audios, rows = [], 5  # assistant prefix
    for index, message in enumerate(req.messages):
        kind, value = _turn(index, message)
        rows += 5
        if kind == "audio":
            pcm = _decode_audio(index, value)
            audios.append(pcm)
            rows += math.ceil(len(pcm) / INPUT_RATE_HZ * CODES_PER_S) + 2
        else:
            rows += len(value) // 4 + 1
    if sum(len(a) for a in audios) / INPUT_RATE_HZ > MAX_TOTAL_AUDIO_S:
        raise Refused(f"total audio duration exceeds {MAX_TOTAL_AUDIO_S}s")
    if rows > context_rows:
        raise Refused(f"prompt length {rows} exceeds the context limit {context_rows}")
    return audios


def _turn(index: int, message: dict[str, Any]) -> tuple[str, Any]:
    if message.get("role") not in ("system", "user", "assistant"):
        raise Refused(f"unsupported role {message.get('role')!r} at message {index}")
    content = message.get("content")
    if isinstance(content, str):
        return "text", content
    if not isinstance(content, list):
        raise Refused(f"message {index} content must be string or parts list")
    texts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
    audios = [p for p in content if isinstance(p, dict) and p.get("type") == "input_audio"]
    if len(audios) > 1:
        raise Refused(f"message {index} contains multiple input_audio parts")
    if len(texts) + len(audios) != len(content):
        raise Refused(f"unsupported content part type in message {index}")
    if audios and texts:
        raise Refused(f"message {index} mixes text and audio in one turn; single "
                      "modality per turn required")
    if audios:
        return "audio", str((audios[0].get("input_audio") or {}).get("data", ""))
    return "text", "".join(str(p.get("text", "")) for p in texts)


def _decode_audio(index: int, data: str) -> np.ndarray:
    try:
        raw = base64.b64decode(data, validate=True)
        pcm, rate = soundfile.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    except (binascii.Error, ValueError, RuntimeError, soundfile.LibsndfileError) as exc:
        raise Refused(f"audio turn[{index}] could not be decoded: {exc}") from exc
    if len(pcm) == 0 or not 8000 <= rate <= 48000 or not np.isfinite(pcm).all():
        raise Refused(f"audio turn[{index}] is empty, non-finite or at {rate} Hz")
    if len(pcm) / rate > MAX_TURN_AUDIO_S:
        raise Refused(f"audio turn[{index}] duration {len(pcm) / rate:.1f}s exceeds "
                      f"{MAX_TURN_AUDIO_S}s")
    mono = np.ascontiguousarray(pcm[:, 0])
    return mono if rate == INPUT_RATE_HZ else soxr.resample(mono, rate, INPUT_RATE_HZ).astype(
        np.float32)


def echo_reply(audios: list[np.ndarray], last_is_audio: bool) -> bytes:
    """The reply: the last user turn played back by the echo engine (s16le, 24 kHz); a typed
    turn gets a short tone."""
    if not last_is_audio:
        t = np.arange(int(0.8 * REPLY_RATE_HZ)) / REPLY_RATE_HZ
        return float_to_s16le((0.2 * np.sin(2 * np.pi * 330 * t)).astype(np.float32))
    events = EchoEngine().respond(UserTurn(0, audios[-1]), threading.Event())
    parts = [e.pcm for e in events if isinstance(e, ReplyAudio)]
    return float_to_s16le(np.concatenate(parts)) if parts else b""
