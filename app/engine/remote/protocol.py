"""The wire format of sglang-omni's MOSS-Speech chat endpoint, as plain data (no I/O).

Facts from the server's code (BraveBeter/sglang-omni ``sglang_omni/serve/openai_api.py``,
``sglang_omni/models/moss_speech/request_builders.py``; docs/remote-engine.md has the details):

- a request is ``POST /v1/chat/completions`` with OpenAI-style ``messages``; every turn holds
  one modality: a text string, or one ``input_audio`` content part (a base64 WAV). Earlier
  assistant turns may be audio too: the server re-encodes every audio turn into speech codes,
  so the history is the user's turns and the assistant audio the user really heard;
- the server keeps no state between requests: each one carries the whole conversation;
- ``stream: true`` with ``audio: {"format": "pcm"}`` streams Server-Sent Events ``data:
  {chunk}``: the first chunk carries ``delta.role``, later ones ``delta.content`` (text) and/or
  ``delta.audio.data`` (base64 s16le mono 24 kHz PCM), a final chunk an empty delta with
  ``finish_reason`` and ``usage``, then ``data: [DONE]``. A failure after the headers is
  ``data: {"error": {...}}`` with no ``[DONE]``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import wave
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

REPLY_RATE_HZ = 24000  # the server's PCM deltas: s16le mono 24 kHz
INPUT_RATE_HZ = 16000  # what the server encodes every audio turn at (it resamples to it)
CODES_PER_S = 12.5  # speech codes (grid rows) per second of audio
MAX_REPLY_ROWS = 512  # the MOSS pipeline refuses max_tokens outside [1, 512]
MAX_TURN_AUDIO_S = 30.0  # the server refuses an audio turn longer than this
MAX_TOTAL_AUDIO_S = 120.0  # ... and a request with more audio than this
CHAT_PATH = "/v1/chat/completions"
HEALTH_PATH = "/health"
DONE = "[DONE]"
# The reference's explicit system prompts, used when the setting is empty (as the local engine).
DEFAULT_SYSTEM_PROMPTS = {
    "audio": "You are a helpful voice assistant. Answer the user's questions with spoken "
             "responses.",
    "text": "You are a helpful assistant. Answer the user's questions with text.",
}
Modality = Literal["audio", "text"]


# ---- audio ------------------------------------------------------------------------------------


def float_to_s16le(pcm: np.ndarray) -> bytes:
    """[T] float32 in [-1, 1] → little-endian 16-bit PCM bytes (clipped)."""
    clipped = np.clip(np.asarray(pcm, dtype=np.float32), -1.0, 1.0)
    return np.round(clipped * 32767.0).astype("<i2").tobytes()


def s16le_to_float(data: bytes) -> np.ndarray:
    """Little-endian 16-bit PCM bytes (an even count) → [T] float32."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def wav_bytes(pcm_s16le: bytes, rate_hz: int) -> bytes:
    """A mono 16-bit WAV file holding ``pcm_s16le``."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate_hz)
        wav.writeframes(pcm_s16le)
    return out.getvalue()


def audio_part(wav: bytes) -> dict[str, Any]:
    """The ``input_audio`` content part the server expects for one audio turn."""
    return {"type": "input_audio",
            "input_audio": {"data": base64.b64encode(wav).decode("ascii"), "format": "wav"}}


class PcmAssembler:
    """Joins audio deltas into whole 16-bit samples: a delta may end mid-sample (an odd byte
    count); the spare byte waits for the next delta instead of shifting every later sample."""

    def __init__(self) -> None:
        self._spare = b""
        self.odd_deltas = 0  # deltas that ended mid-sample (seen, and healed)

    def push(self, data: bytes) -> bytes:
        """Whole samples available so far (possibly empty)."""
        if len(data) % 2:
            self.odd_deltas += 1
        data = self._spare + data
        whole = len(data) - len(data) % 2
        self._spare = data[whole:]
        return data[:whole]

    @property
    def pending_bytes(self) -> int:
        """A byte left over at the end of a stream is half a sample: it is dropped."""
        return len(self._spare)


# ---- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """Sampling values as the request sends them (the server's names)."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    repetition_penalty: float = 1.1
    max_tokens: int = 500
    seed: int | None = None

    def fields(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "temperature": self.temperature, "top_p": self.top_p,
            "top_k": self.top_k if self.top_k > 0 else -1,  # our 0 = off is the server's -1
            "repetition_penalty": self.repetition_penalty,
            "max_tokens": max(1, min(self.max_tokens, MAX_REPLY_ROWS)),
        }
        if self.seed is not None:
            data["seed"] = self.seed
        return data


def request_body(messages: list[dict[str, Any]], model: str, modality: Modality,
                 sampling: Sampling, request_id: str) -> dict[str, Any]:
    """The streaming chat request: audio replies come as PCM deltas, text replies as text."""
    body: dict[str, Any] = {"model": model or None, "messages": messages, "stream": True,
                            "modalities": [modality], "request_id": request_id,
                            **sampling.fields()}
    if modality == "audio":
        body["audio"] = {"format": "pcm"}
    return {k: v for k, v in body.items() if v is not None}


def request_json(messages_json: bytes, model: str, modality: Modality, sampling: Sampling,
                 request_id: str) -> bytes:
    """``request_body`` as JSON bytes around an already encoded ``messages`` array."""
    head = json.dumps(request_body([], model, modality, sampling, request_id)).encode()
    return head.replace(b'"messages": []', b'"messages": ' + messages_json, 1)


# ---- the stream ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0  # grid rows of the prompt (template and audio included)
    completion_tokens: int = 0  # grid rows generated
    total_tokens: int = 0


@dataclass(frozen=True)
class Chunk:
    """What one ``chat.completion.chunk`` carried (only the first choice is used)."""

    role: str | None = None
    text: str = ""
    audio: bytes = field(default=b"", repr=False)  # s16le mono 24 kHz, possibly odd length
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class Done:
    """``data: [DONE]``: the reply is complete."""


@dataclass(frozen=True)
class ServerFailure:
    """The in-stream error object: the server failed after the headers (no ``[DONE]``)."""

    message: str
    type: str = ""
    code: str = ""


@dataclass(frozen=True)
class Ignored:
    """A line this client does not understand (malformed JSON, an unknown object or event):
    skipped, so a newer server or a proxy's additions cannot break a reply."""

    reason: str


StreamItem = Chunk | Done | ServerFailure | Ignored


def parse_event(data: str, event: str = "message") -> StreamItem:
    """One SSE event (its ``data`` field, and ``event`` name) → what it means for the reply."""
    if event not in ("", "message"):
        return Ignored(f"unknown event type {event[:40]!r}")
    text = data.strip()
    if text == DONE:
        return Done()
    try:
        payload = json.loads(text)
    except ValueError:
        return Ignored(f"not JSON: {text[:60]!r}")
    if not isinstance(payload, dict):
        return Ignored(f"not a JSON object: {text[:60]!r}")
    if "error" in payload:
        return _failure(payload["error"])
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return Ignored(f"no choices in {text[:60]!r}")
    return _chunk(choices, payload.get("usage"))


def _failure(error: object) -> ServerFailure:
    if isinstance(error, dict):
        return ServerFailure(str(error.get("message") or "the server reported an error"),
                             str(error.get("type") or ""), str(error.get("code") or ""))
    return ServerFailure(str(error))


def _chunk(choices: list[Any], usage: object) -> StreamItem:
    choice = next((c for c in choices if isinstance(c, dict)), None)
    if choice is None:
        return Chunk(usage=_usage(usage))  # a usage-only chunk (OpenAI's include_usage form)
    delta = choice.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    role = delta.get("role") if isinstance(delta.get("role"), str) else None
    content = delta.get("content")
    text = content if isinstance(content, str) else ""
    audio = b""
    audio_delta = delta.get("audio")
    if isinstance(audio_delta, dict) and isinstance(audio_delta.get("data"), str):
        try:
            audio = base64.b64decode(audio_delta["data"], validate=True)
        except (binascii.Error, ValueError):
            return Ignored("an audio delta that is not base64")
    finish = choice.get("finish_reason")
    return Chunk(role, text, audio, finish if isinstance(finish, str) else None, _usage(usage))


def _usage(value: object) -> Usage | None:
    if not isinstance(value, dict):
        return None

    def number(key: str) -> int:
        item = value.get(key)
        return int(item) if isinstance(item, int | float) and math.isfinite(item) else 0

    return Usage(number("prompt_tokens"), number("completion_tokens"), number("total_tokens"))


def error_detail(body: bytes, limit: int = 300) -> str:
    """The server's message in an error response: FastAPI's ``{"detail": str}`` (400, 503),
    its validation list ``{"detail": [{"loc", "msg"}]}`` (422), or an OpenAI-style
    ``{"error": {"message"}}``; else the start of the body."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body[:limit].decode("utf-8", "replace").strip()
    detail: object = payload.get("detail") if isinstance(payload, dict) else None
    if detail is None and isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        detail = payload["error"].get("message")
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg")))
        detail = "; ".join(parts)
    text = str(detail) if detail not in (None, "") else json.dumps(payload)
    return text[:limit]
