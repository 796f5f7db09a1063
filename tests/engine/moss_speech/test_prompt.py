from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.engine.folders import FolderError
from app.engine.moss_speech.prompt import DEFAULT_SYSTEM_PROMPTS, Turn, build_prompt
from app.engine.moss_speech.reply import ReplyStream, reply_codes, reply_text
from app.engine.moss_speech.tokenizer import MossTokenizer, load_tokenizer

PAD, IM_START, IM_END, SOSP, MPAD, EOSP, APAD = 151643, 151644, 151645, 151646, 151667, 16384, 512


def text(tokenizer: MossTokenizer, s: str) -> list[tuple[int, int]]:
    return [(t, APAD) for t in tokenizer.encode(s)]


def test_special_tokens_carry_the_real_ids(tokenizer: MossTokenizer) -> None:
    assert tokenizer.encode("<|im_start|>user\n") == [IM_START, *list(b"user\n")]
    assert tokenizer.encode("<|im_end|><|endoftext|><|object_ref_start|>") == [IM_END, PAD, SOSP]


def test_tokenizer_with_wrong_special_id_is_refused(tiny_dir: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(tiny_dir, tmp_path / "m"))
    data = json.loads((folder / "tokenizer.json").read_text())
    data["model"]["vocab"]["<|im_end|>"] = 151600
    for token in data["added_tokens"]:
        if token["content"] == "<|im_end|>":
            token["id"] = 151600
    (folder / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(FolderError, match=r"tokenizer\.json: <\|im_end\|> has id 151600, the "
                                          r"model expects 151645"):
        load_tokenizer(folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FolderError, match=r"tokenizer\.json: missing"):
        load_tokenizer(folder)


def test_text_conversation_layout_with_default_system_appended_after_turns(
        tokenizer: MossTokenizer) -> None:
    grid = build_prompt(tokenizer, [{"role": "user", "content": "Hi"}], "text")
    expected = (text(tokenizer, "<|im_start|>user\n") + text(tokenizer, "Hi")
                + text(tokenizer, "<|im_end|>\n") + text(tokenizer, "<|im_start|>system\n")
                + text(tokenizer, DEFAULT_SYSTEM_PROMPTS["text"])
                + text(tokenizer, "<|im_end|>\n") + text(tokenizer, "<|im_start|>assistant\n"))
    assert grid.dtype.is_floating_point is False and grid.shape == (len(expected), 2)
    assert [tuple(r) for r in grid.tolist()] == expected


def test_explicit_system_turn_is_kept_first_and_no_default_added(
        tokenizer: MossTokenizer) -> None:
    grid = build_prompt(tokenizer, [Turn("system", "Be brief."), Turn("user", "Hi")], "audio")
    rows = [tuple(r) for r in grid.tolist()]
    assert rows[:len(text(tokenizer, "<|im_start|>system\nBe brief."))] == (
        text(tokenizer, "<|im_start|>system\n") + text(tokenizer, "Be brief."))
    assert DEFAULT_SYSTEM_PROMPTS["audio"] not in tokenizer.decode(r[0] for r in rows)
    assert "Be brief." in tokenizer.decode(r[0] for r in rows)
    assert rows[-1] == (SOSP, APAD)  # speech reply: assistant prefix ends with sosp


def test_audio_segment_has_n_plus_2_rows_and_turns_mix(tokenizer: MossTokenizer) -> None:
    codes = [5, 0, 16383, 512]
    conversation = [Turn("system", "S"), Turn("user", tuple(codes)),
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": np.array([9, 8])}]
    rows = [tuple(r) for r in build_prompt(tokenizer, conversation, "text").tolist()]
    header = text(tokenizer, "<|im_start|>user\n")
    first = len(text(tokenizer, "<|im_start|>system\nS<|im_end|>\n")) + len(header)
    segment = rows[first:first + len(codes) + 2]
    assert segment == [(SOSP, APAD)] + [(MPAD, c) for c in codes] + [(MPAD, EOSP)]
    assert rows[first + len(codes) + 2:first + len(codes) + 4] == text(tokenizer, "<|im_end|>\n")
    tail = len(text(tokenizer, "<|im_end|>\n<|im_start|>assistant\n"))
    assert rows[-tail - 4:-tail] == [(SOSP, APAD), (MPAD, 9), (MPAD, 8), (MPAD, EOSP)]
    assert rows[-1] != (SOSP, APAD)  # text reply: no sosp


@pytest.mark.parametrize(("conversation", "modality", "message"), [
    ([Turn("user", "x")], "both", "output_modality"),
    ([Turn("robot", "x")], "text", "role"),
    ([Turn("user", (1, 16384))], "text", r"audio codes must lie in \[0, 16384\)"),
])
def test_bad_prompts_are_refused(tokenizer: MossTokenizer, conversation, modality,
                                 message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_prompt(tokenizer, conversation, modality)


def test_decode_drops_last_row_and_takes_codes_up_to_eosp(tokenizer: MossTokenizer) -> None:
    cfg = tokenizer.config
    speech = [(MPAD, 11), (MPAD, 12), (MPAD, EOSP), (IM_END, 3)]
    assert reply_codes(speech, cfg) == [11, 12]
    assert reply_codes([(MPAD, 11), (MPAD, 12)], cfg) == [11]  # cut by max rows: last dropped
    assert reply_text(tokenizer, speech) == ""  # modality_pad (<think> here) never leaks
    rows = [(t, 7) for t in tokenizer.encode("Hi<|empty|>")] + [(IM_END, 7)]
    assert reply_text(tokenizer, rows) == "Hi."
    assert reply_text(tokenizer, [(t, 7) for t in tokenizer.encode("abc")]) == "ab"


def test_reply_stream_equals_offline_decode(tokenizer: MossTokenizer) -> None:
    cfg = tokenizer.config
    rows = ([(t, 3) for t in tokenizer.encode("ok ")] + [(SOSP, 9)]
            + [(MPAD, c) for c in (4, 5, 6)] + [(MPAD, EOSP), (MPAD, 8), (IM_END, 1)])
    stream = ReplyStream(cfg)
    released_codes: list[int] = []
    for row in rows:
        released_codes += stream.push(row)[0]
    assert released_codes == stream.codes == reply_codes(rows, cfg) == [4, 5, 6]
    assert tokenizer.decode(stream.text_ids) == reply_text(tokenizer, rows)
