"""The smart-turn end-of-turn model (issue 23): its features, the real model on real speech,
and where it is looked for."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli.turn_corpus import load_corpus
from app.vad import smart_turn
from app.vad.smart_turn import SmartTurnModel, SmartTurnUnavailableError, log_mel_features


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()  # the real model: make setup puts it in app/vad/data


def test_features_are_whisper_log_mel_of_the_last_eight_seconds() -> None:
    from transformers import WhisperFeatureExtractor

    clip = load_corpus()["en_f_slt_a0009"].pcm
    padded = np.concatenate([np.zeros(128000 - len(clip), np.float32), clip])
    reference = WhisperFeatureExtractor(chunk_length=8)(
        padded, sampling_rate=16000, padding="max_length", max_length=128000, truncation=True,
        do_normalize=True, return_tensors="np").input_features[0]
    ours = log_mel_features(clip)
    assert ours.shape == (80, 800) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, atol=1e-4)
    longer = np.concatenate([np.ones(32000, np.float32) * 0.1, padded])
    np.testing.assert_allclose(log_mel_features(longer), ours, atol=1e-4)  # only the last 8 s


def test_a_finished_sentence_is_finished_and_a_cut_one_is_not(model: SmartTurnModel) -> None:
    clip = load_corpus()["en_f_slt_a0009"]
    silence = np.zeros(int(0.12 * 16000), np.float32)
    whole = np.concatenate([clip.pcm[:int(clip.speech[-1][1] * 16000)], silence])
    cut = np.concatenate([clip.pcm[:int(1.995 * 16000)], silence])  # "...faced Gregson |"
    assert model.probability(whole) > 0.9
    assert model.probability(cut) < 0.5


def test_a_missing_model_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(smart_turn, "DATA_DIR", tmp_path)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # no pipecat either
    with pytest.raises(SmartTurnUnavailableError, match="make setup"):
        smart_turn.smart_turn_model_path()
    status = smart_turn.end_of_turn_status()
    assert status["available"] is False and "fixed silence" in str(status["reason"])


def test_the_decision_bench_without_the_model_says_how_to_get_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main

    monkeypatch.setattr(smart_turn, "DATA_DIR", tmp_path)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # no pipecat either
    assert main(["bench", "end-of-turn", "--decisions", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "make setup" in err and "Traceback" not in err
