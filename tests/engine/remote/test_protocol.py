"""The wire format as plain data: SSE events parsed into what they mean, requests built, error
bodies read, and PCM deltas joined into whole samples."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from app.engine.remote.protocol import (
    Chunk,
    Done,
    Ignored,
    PcmAssembler,
    Sampling,
    ServerFailure,
    Usage,
    error_detail,
    float_to_s16le,
    parse_event,
    request_body,
    request_json,
    s16le_to_float,
)


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> str:
    data = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1,
            "model": "moss-speech",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        data["usage"] = usage
    return json.dumps(data)


def test_the_documented_chunks_parse_into_role_audio_text_finish_and_usage() -> None:
    pcm = float_to_s16le(np.linspace(-1, 1, 960, dtype=np.float32))
    audio = {"id": "audio-r", "data": base64.b64encode(pcm).decode()}
    assert parse_event(chunk({"role": "assistant", "audio": audio})) == Chunk(
        role="assistant", audio=pcm)
    assert parse_event(chunk({"content": "Hi"})) == Chunk(text="Hi")
    final = parse_event(chunk({}, "length", {"prompt_tokens": 30, "completion_tokens": 512,
                                            "total_tokens": 542}))
    assert final == Chunk(finish_reason="length", usage=Usage(30, 512, 542))
    assert parse_event("[DONE]") == Done()
    error = {"error": {"message": "Generation failed during streaming.",
                       "type": "server_error", "code": "stream_error"}}
    assert parse_event(json.dumps(error)) == ServerFailure(
        "Generation failed during streaming.", "server_error", "stream_error")


@pytest.mark.parametrize(("data", "event"), [
    ("{not json", "message"), ("[1, 2]", "message"), ('{"object": "x"}', "message"),
    ("{}", "ping"), (chunk({"audio": {"id": "a", "data": "@@@"}}), "message"),
])
def test_lines_this_client_does_not_understand_are_ignored(data: str, event: str) -> None:
    assert isinstance(parse_event(data, event), Ignored)


def test_unknown_delta_fields_are_an_empty_chunk() -> None:
    assert parse_event(chunk({"tool_calls": []})) == Chunk()


def test_odd_length_deltas_are_joined_into_whole_samples() -> None:
    samples = np.arange(-500, 500, dtype="<i2").tobytes()
    assembler = PcmAssembler()
    joined = b"".join(assembler.push(samples[i:i + 7]) for i in range(0, len(samples), 7))
    assert joined == samples and assembler.pending_bytes == 0 and assembler.odd_deltas > 0
    assert assembler.push(b"\x01") == b"" and assembler.pending_bytes == 1


def test_pcm_round_trips_and_clips() -> None:
    pcm = np.array([0.0, 0.5, -0.5, 1.5, -1.5], np.float32)
    back = s16le_to_float(float_to_s16le(pcm))
    np.testing.assert_allclose(back, np.clip(pcm, -1, 1), atol=1 / 32767)


def test_the_request_asks_for_a_pcm_stream_with_the_servers_sampling_names() -> None:
    body = request_body([{"role": "user", "content": "hi"}], "moss-speech", "audio",
                        Sampling(0.0, 1.0, 0, 1.05, 9000, None), "rid")
    assert body == {"model": "moss-speech", "messages": [{"role": "user", "content": "hi"}],
                    "stream": True, "modalities": ["audio"], "request_id": "rid",
                    "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                    "repetition_penalty": 1.05, "max_tokens": 512, "audio": {"format": "pcm"}}
    spliced = request_json(json.dumps([{"role": "user", "content": "hi"}]).encode(),
                           "moss-speech", "audio", Sampling(0.0, 1.0, 0, 1.05, 9000, None), "rid")
    assert json.loads(spliced) == body
    text = request_body([], "", "text", Sampling(seed=3), "rid")
    assert "audio" not in text and "model" not in text and text["seed"] == 3
    assert text["modalities"] == ["text"]


def test_error_bodies_give_the_servers_message() -> None:
    assert error_detail(b'{"detail": "Invalid model request: x"}') == (
        "Invalid model request: x")
    fastapi_422 = {"detail": [{"type": "missing", "loc": ["body", "messages"],
                               "msg": "Field required"},
                              {"type": "float_parsing", "loc": ["body", "top_p"],
                               "msg": "Input should be a valid number"}]}
    assert error_detail(json.dumps(fastapi_422).encode()) == (
        "messages: Field required; top_p: Input should be a valid number")
    assert error_detail(b'{"error": {"message": "bad key"}}') == "bad key"
    assert error_detail(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
