"""The history the remote engine sends: system turn first, exchanges cut at what was heard, the
request bounded like the server bounds it, memory bounded in a long session."""

from __future__ import annotations

import base64
import io

import numpy as np
import soundfile

from app.engine.remote.history import (
    Exchange,
    History,
    Turn,
    audio_rows,
    heard_reply,
    user_turn,
)
from app.engine.remote.protocol import DEFAULT_SYSTEM_PROMPTS, float_to_s16le


def tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def decoded(message: dict) -> tuple[np.ndarray, int]:
    data = base64.b64decode(message["content"][0]["input_audio"]["data"])
    return soundfile.read(io.BytesIO(data), dtype="float32")


def test_the_heard_part_of_a_reply_is_kept_at_16_khz() -> None:
    reply = float_to_s16le(tone(2.0, 24000))
    turn = heard_reply(reply, 12000, "")
    assert turn is not None and turn.role == "assistant"
    assert turn.audio_s == 0.5
    assert heard_reply(reply, 0, "") is None
    assert heard_reply(b"", 0, " spoken text ") == Turn("assistant", text="spoken text")
    assert heard_reply(b"", 0, "") is None
    long = heard_reply(float_to_s16le(tone(40.0, 24000)), 40 * 24000, "")
    assert long is not None and long.audio_s == 30.0  # the server takes 30 s a turn


def test_messages_put_the_system_turn_first_and_reuse_each_turns_wav() -> None:
    history = History(512, system_prompt="", modality="audio")
    first = user_turn(tone(1.0, 16000))
    history.commit(Exchange(first, heard_reply(float_to_s16le(tone(1.0, 24000)), 24000, "")))
    new = user_turn(np.zeros(0, np.float32), text="typed")
    messages = history.messages(new)
    assert messages[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPTS["audio"]}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1] == {"role": "user", "content": "typed"}
    pcm, rate = decoded(messages[1])
    assert rate == 16000 and len(pcm) == 16000
    assert history.messages(new)[1]["content"][0] is messages[1]["content"][0]  # made once
    history.system_prompt = "Be brief."
    assert history.messages(new)[0]["content"] == "Be brief."


def test_a_request_never_exceeds_the_row_budget_and_memory_stays_bounded() -> None:
    history = History(300)
    for _ in range(200):  # a long session
        history.commit(Exchange(user_turn(tone(2.0, 16000)),
                                heard_reply(float_to_s16le(tone(2.0, 24000)), 48000, "")))
    assert len(history.exchanges) <= 4 and history.dropped >= 196
    new = user_turn(tone(2.0, 16000))
    messages = history.messages(new)
    rows = (history.system_turn.rows + 5
            + sum(Turn(m["role"], pcm_16k=float_to_s16le(decoded(m)[0])).rows
                  for m in messages[1:]))
    assert rows <= 300 and len(messages) >= 4
    # a turn that alone outgrows the budget still goes (the server says what is wrong), alone
    huge = user_turn(tone(30.0, 16000))
    assert audio_rows(30.0) > 300
    assert [m["role"] for m in history.messages(huge)] == ["system", "user"]
    assert len(history.exchanges) >= 1  # nothing was forgotten for it
