"""The codec benchmark runs end to end at the tiny size (numbers are not asserted)."""

from __future__ import annotations

import json

import pytest

from app.cli import main


def test_bench_codec_tiny_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "codec", "--size", "tiny", "--chunks", "2", "--steps", "2",
                 "--utterance-seconds", "1.5", "--voice-seconds", "1.2", "--threads", "1",
                 "--reuse-voice-prefix", "--reference", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["size"] == "tiny" and result["chunk"] == 5
    for key in ("stream", "stream_reference"):
        chunks = result[key]["chunks"]
        assert [c["chunk"] for c in chunks] == [0, 1, 2]
        assert all(c["ms"] > 0 for c in chunks)
    assert result["stream"]["voice_prefix_mib"] > 0
    assert result["encode_ms_per_audio_s"] > 0 and result["offline_decode_ms"] > 0
