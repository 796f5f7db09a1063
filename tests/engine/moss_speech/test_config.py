from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.folders import FolderError
from app.engine.moss_speech.config import MossSpeechConfig


def test_full_and_tiny_presets_round_trip_through_config_json() -> None:
    for preset in (MossSpeechConfig.full(), MossSpeechConfig.tiny()):
        assert MossSpeechConfig.from_dict(json.loads(json.dumps(preset.to_dict()))) == preset
    full = MossSpeechConfig.full()
    assert full.kv_layers == 40 and full.kv_bytes_per_row == 160 * 1024  # contract §1.4


def test_head_dim_defaults_to_hidden_over_heads() -> None:
    raw = MossSpeechConfig.tiny().to_dict()
    del raw["head_dim"]
    assert MossSpeechConfig.from_dict(raw).head_dim == 64 // 4


def test_missing_key_is_named() -> None:
    raw = MossSpeechConfig.tiny().to_dict()
    del raw["num_key_value_heads"]
    with pytest.raises(FolderError, match="missing key 'num_key_value_heads'"):
        MossSpeechConfig.from_dict(raw)


@pytest.mark.parametrize(("change", "message"), [
    ({"num_hidden_layers": 4}, r"num_shared_layers \+ num_modality_layers \(2 \+ 1\) != "
                               r"num_hidden_layers \(4\)"),
    ({"audio_vocab_size": 1000}, r"'eosp_token_id' \(16384\) is outside audio_vocab_size"),
    ({"vocab_size": 151000}, r"'sosp_token_id' \(151646\) is outside vocab_size"),
    ({"rope_scaling": {"type": "yarn"}}, "rope_scaling"),
    ({"attention_bias": True}, "attention_bias"),
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),
    ({"hidden_size": 64.5}, "'hidden_size' must be an integer"),
])
def test_contradictions_are_named(change: dict, message: str) -> None:
    with pytest.raises(FolderError, match=message):
        MossSpeechConfig.from_dict({**MossSpeechConfig.tiny().to_dict(), **change})


def test_from_folder_reads_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(MossSpeechConfig.tiny().to_dict()))
    assert MossSpeechConfig.from_folder(tmp_path) == MossSpeechConfig.tiny()
    with pytest.raises(FolderError, match=r"config\.json: missing"):
        MossSpeechConfig.from_folder(tmp_path / "nowhere")


def test_package_import_is_lazy() -> None:
    import subprocess
    import sys

    code = ("import sys, app.engine.moss_speech as m; assert 'torch' not in sys.modules; "
            "m.build_prompt; assert 'torch' in sys.modules; print(sorted(m.__all__)[:2])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
