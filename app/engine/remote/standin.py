"""A stand-in for sglang-omni's MOSS-Speech server, for tests and ``bench remote``: the same
endpoints, checks, status codes and SSE chunk shapes (docs/remote-engine.md lists them), with
the reply audio made by the echo engine, and a switch for every fault the client must survive.

Loopback only (127.0.0.1, a free port); every stream loop is bounded. It needs the dev extra
(starlette, sse-starlette, uvicorn), which the app itself never imports.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.engine.remote.protocol import CODES_PER_S, REPLY_RATE_HZ
from app.engine.remote.standin_checks import (
    ChatRequest,
    Refused,
    check_request,
    echo_reply,
)

HOP_SAMPLES = 5 * 1920  # one codec hop: 5 codes × 1,920 samples = 400 ms at 24 kHz
STALL_MAX_S = 120.0  # a stalled stream waits at most this long for the client to give up
MALFORMED_LINES = (  # what a proxy, a newer server or a broken one might send
    b": keep-alive comment\n\n",
    b"event: ping\ndata: {}\n\n",
    b"data: {not json\n\n",
    b"data: [1, 2, 3]\n\n",
    b'data: {"object": "something.else"}\n\n',
    b"id: 7\nretry: 1000\n\n",
    b"a line without a colon\n\n",
    b'data: {"choices": [{"index": 0, "delta": {"tool_calls": []}, "finish_reason": null}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {"audio": {"id": "a", "data": "@@@"}}}]}\n\n',
)


@dataclass
class StandInFaults:
    """Switches; change them between requests (they are read when a request arrives)."""

    health_status: int = 200  # 503: "unhealthy" (still loading)
    api_key: str | None = None  # requests need "Authorization: Bearer <key>" (as a proxy would)
    forbidden: bool = False  # 403 even with the right key
    busy_responses: int = 0  # the next N chat requests get 503 (queue full)
    retry_after_s: float | None = None  # sent with those 503s
    reject: tuple[int, Any] | None = None  # (status, detail) for every chat request
    first_audio_delay_s: float = 0.0
    realtime_factor: float = 0.0  # > 0: each 400 ms hop takes hop × factor (1 = real time)
    stall_after_chunks: int | None = None  # then send nothing (until the client gives up)
    disconnect_after_chunks: int | None = None  # then drop the connection mid-stream
    error_after_chunks: int | None = None  # then the in-stream error object, no [DONE]
    malformed_lines: bool = False  # unknown and malformed SSE lines between the chunks
    odd_audio_bytes: bool = False  # audio deltas of odd byte length (splitting samples)
    role_chunk_alone: bool = False  # the first chunk carries only the role
    text_deltas: bool = False  # audio replies also stream text content deltas
    finish_reason: str = "stop"


@dataclass
class RequestRecord:
    """One chat request as the stand-in saw it."""

    body: dict[str, Any]
    headers: dict[str, str]
    status: int = 200
    chunks_sent: int = 0
    aborted: threading.Event = field(default_factory=threading.Event)  # the client went away
    completed: threading.Event = field(default_factory=threading.Event)  # [DONE] was sent
    aborted_s: float | None = None  # perf_counter when the abort was seen


def _split(audio: bytes, odd: bool) -> list[bytes]:
    """400 ms hops; with ``odd``, hop sizes alternate +1/-1 byte so samples straddle deltas."""
    size, pieces, start, index = HOP_SAMPLES * 2, [], 0, 0
    while start < len(audio):
        step = size + (1 if index % 2 == 0 else -1) if odd else size
        pieces.append(audio[start:start + step])
        start, index = start + step, index + 1
    return pieces


class StandInServer:
    """``with StandInServer() as server: ... server.url ...``; ``faults`` may change between
    requests; ``records`` holds every chat request in arrival order."""

    def __init__(self, faults: StandInFaults | None = None, context_rows: int = 512,
                 model_name: str = "moss-speech") -> None:
        self.faults = faults or StandInFaults()
        self.context_rows = context_rows
        self.model_name = model_name
        self.records: list[RequestRecord] = []
        self._arrived = threading.Condition()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandInServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._started.set()
            yield

        app = Starlette(routes=[Route("/health", self._health),
                                Route("/v1/models", self._models),
                                Route("/v1/chat/completions", self._chat, methods=["POST"])],
                        lifespan=lifespan)
        config = uvicorn.Config(app, log_level="critical", access_log=False,
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="standin-server", daemon=True)
        self._thread.start()
        if not self._started.wait(60):
            raise RuntimeError("the stand-in server did not start")
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(30)

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def wait_for_requests(self, count: int, timeout_s: float = 60.0) -> list[RequestRecord]:
        """Block until ``count`` chat requests have arrived (returns them all)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.records) >= count, timeout_s):
                raise TimeoutError(f"{len(self.records)} of {count} requests arrived")
            return list(self.records)

    # ---- endpoints ---------------------------------------------------------------------------

    def _denied(self, request: Request) -> Response | None:
        key = self.faults.api_key
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            return JSONResponse({"detail": "Invalid or missing API key"}, 401)
        if self.faults.forbidden:
            return JSONResponse({"detail": "This key may not use this model"}, 403)
        return None

    async def _health(self, request: Request) -> Response:
        if (denied := self._denied(request)) is not None:
            return denied
        ok = self.faults.health_status == 200
        return JSONResponse({"status": "healthy" if ok else "unhealthy", "running": ok},
                            self.faults.health_status)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "sglang-omni",
             "root": self.model_name}]})

    async def _chat(self, request: Request) -> Response:
        record = RequestRecord({}, dict(request.headers))
        with self._arrived:
            self.records.append(record)
            self._arrived.notify_all()
        response = self._refuse(request, record) or await self._parse(request, record)
        if isinstance(response, Response):
            record.status = response.status_code
            record.completed.set()
            return response
        req, audios = response
        rid = req.request_id or str(uuid.uuid4())
        return EventSourceResponse(self._stream(record, req, rid, audios), sep="\n", ping=0)

    def _refuse(self, request: Request, record: RequestRecord) -> Response | None:
        faults = self.faults
        if (denied := self._denied(request)) is not None:
            return denied
        if faults.busy_responses > 0:
            faults.busy_responses -= 1
            headers = ({"Retry-After": f"{faults.retry_after_s:g}"}
                       if faults.retry_after_s is not None else None)
            return JSONResponse({"detail": "Request queue is full (20 waiting)"}, 503, headers)
        if faults.reject is not None:
            status, detail = faults.reject
            return JSONResponse({"detail": detail}, status)
        return None

    async def _parse(self, request: Request, record: RequestRecord
                     ) -> Response | tuple[ChatRequest, list[np.ndarray]]:
        try:
            record.body = json.loads(await request.body())
            req = ChatRequest.model_validate(record.body)
        except ValueError as exc:  # bad JSON, or the request model's validation (FastAPI: 422)
            errors: list[Any] = exc.errors() if isinstance(exc, ValidationError) else [
                {"type": "json_invalid", "loc": (), "msg": str(exc), "input": None}]
            detail = [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]}
                      for e in errors]
            return JSONResponse({"detail": detail}, 422)
        try:
            audios = await asyncio.to_thread(check_request, req, self.context_rows)
        except Refused as exc:
            return JSONResponse({"detail": f"Invalid model request: {exc}"}, 400)
        return req, audios

    # ---- the stream ------------------------------------------------------------------------------

    async def _stream(self, record: RequestRecord, req: ChatRequest, rid: str,
                      audios: list[np.ndarray]) -> AsyncIterator[Any]:
        """The reply, made after the headers are out (as the real server generates it)."""
        # Everything runs inside the try: a client that goes away while the reply is still
        # being made (under load that can take a while) is an abort too.
        try:
            faults, created = self.faults, int(time.time())
            model = req.model or self.model_name
            text_only = req.modalities == ["text"]
            last_is_audio = not isinstance(req.messages[-1].get("content"), str)
            reply = await asyncio.to_thread(echo_reply, audios, last_is_audio)

            def chunk(delta: dict[str, Any], finish: str | None = None,
                      usage: dict[str, int] | None = None) -> ServerSentEvent:
                data: dict[str, Any] = {"id": f"chatcmpl-{rid}", "object": "chat.completion.chunk",
                                        "created": created, "model": model, "choices": [
                                            {"index": 0, "delta": delta, "finish_reason": finish}]}
                if usage is not None:
                    data["usage"] = usage
                return ServerSentEvent(json.dumps(data))

            seconds = len(reply) / 2 / REPLY_RATE_HZ
            words = f"(stand-in) You said {seconds:.1f} seconds of something.".split(" ")
            pieces: list[bytes | str] = (list(_split(reply, faults.odd_audio_bytes))
                                         if not text_only else [w + " " for w in words])
            if faults.first_audio_delay_s:
                await asyncio.sleep(faults.first_audio_delay_s)
            if faults.role_chunk_alone:
                yield chunk({"role": "assistant"})
            for index, piece in enumerate(pieces):
                if faults.stall_after_chunks == index:
                    await asyncio.sleep(STALL_MAX_S)
                if faults.disconnect_after_chunks == index:
                    raise ConnectionAbortedError("stand-in: dropping the connection")
                if faults.error_after_chunks == index:
                    yield {"data": json.dumps({"error": {
                        "message": "Generation failed during streaming.",
                        "type": "server_error", "code": "stream_error"}})}
                    return
                if index and faults.realtime_factor:
                    await asyncio.sleep(HOP_SAMPLES / REPLY_RATE_HZ * faults.realtime_factor)
                delta: dict[str, Any] = {} if index or faults.role_chunk_alone else {
                    "role": "assistant"}
                if isinstance(piece, str):
                    delta["content"] = piece
                else:
                    delta["audio"] = {"id": f"audio-{rid}",
                                      "data": base64.b64encode(piece).decode("ascii")}
                    if faults.text_deltas and index < len(words):
                        delta["content"] = words[index] + " "
                yield chunk(delta)
                record.chunks_sent += 1
                if faults.malformed_lines:
                    yield MALFORMED_LINES[index % len(MALFORMED_LINES)]
            prompt = len(json.dumps(record.body)) // 5000 + 20  # a rough stand-in figure
            completion = math.ceil(seconds * CODES_PER_S) + 2
            yield chunk({}, faults.finish_reason, {"prompt_tokens": prompt,
                                                   "completion_tokens": completion,
                                                   "total_tokens": prompt + completion})
            yield {"data": "[DONE]"}
            record.completed.set()
        finally:
            if not record.completed.is_set():
                record.aborted_s = time.perf_counter()
                record.aborted.set()
