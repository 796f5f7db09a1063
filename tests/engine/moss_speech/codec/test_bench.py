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
    stream = result["stream"]
    assert stream["cache_peak_mib"] > 0 and stream["used_mib_per_audio_s"] > 0
    assert stream["bounded_from_code"] is None and not any(c["bounded"] for c in chunks)


def test_bench_codec_reports_where_the_flow_cache_budget_is_reached(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "codec", "--size", "tiny", "--chunks", "3", "--steps", "2",
                 "--utterance-seconds", "1", "--voice-seconds", "1.2", "--threads", "1",
                 "--flow-cache-budget-mib", "0.3", "--final", "causal"])
    assert code == 0
    out = capsys.readouterr().out
    assert "bounded from reply code" in out and "yes" in out


def test_bench_codec_counts_the_operators_of_one_chunk(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "codec", "--size", "tiny", "--chunks", "1", "--steps", "2",
                 "--voice-seconds", "1.2", "--threads", "1", "--stream-only", "--count-ops",
                 "--json"])
    assert code == 0
    profile = json.loads(capsys.readouterr().out)["chunk_profile"]
    assert profile["chunk_ms"] > 0 and profile["cuda_kernels"] is None
    # the estimator's linears, once per Euler step and transformer block at least
    assert profile["most_frequent_ops"]["aten::linear"] >= 2 and profile["aten_ops"] > 100
