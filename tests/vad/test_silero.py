from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from voice_helpers import RATE, speech, track

from app.vad.base import FRAME_SAMPLES, Segmenter
from app.vad.silero import SileroScorer, silero_model_path


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


def test_model_is_found_without_importing_silero_vad_or_torch() -> None:
    out = run_python(
        "import sys, numpy as np\n"
        "from app.vad.silero import SileroScorer, silero_model_path\n"
        "p = silero_model_path(); s = SileroScorer(); s.score(np.zeros(512, np.float32))\n"
        "print(p.name, 'silero_vad' in sys.modules, 'torch' in sys.modules)")
    assert out == "silero_vad.onnx False False"


def test_using_the_vad_leaves_torchs_thread_count_alone() -> None:
    """Our scorer keeps torch's setting; importing silero_vad (what we avoid) would not."""
    out = run_python(
        "import torch, numpy as np\n"
        "torch.set_num_threads(3)\n"
        "from app.vad.silero import SileroScorer\n"
        "s = SileroScorer(); [s.score(np.zeros(512, np.float32)) for _ in range(3)]\n"
        "ours = torch.get_num_threads()\n"
        "import silero_vad\n"
        "print(ours, torch.get_num_threads())")
    assert out == "3 1"


def segment(pcm: np.ndarray) -> list[tuple[str, float]]:
    scorer, segmenter, found = SileroScorer(), Segmenter(), []
    for index in range(0, len(pcm) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        start = index / RATE
        update = segmenter.update(scorer.score(pcm[index:index + FRAME_SAMPLES]), start,
                                  start + FRAME_SAMPLES / RATE)
        if update.event in ("onset", "endpoint"):
            found.append((update.event, update.onset_s if update.event == "onset"
                          else update.last_voiced_s))
    return found


def test_speech_is_found_where_it_was_placed() -> None:
    clip = speech("question")
    pcm = track([(1.0, clip)], 4.0)
    found = segment(pcm)
    assert [e for e, _ in found] == ["onset", "endpoint"]
    assert found[0][1] == pytest.approx(1.0, abs=0.1)
    assert found[1][1] == pytest.approx(1.0 + len(clip) / RATE, abs=0.15)


@pytest.mark.parametrize("kind", ["silence", "white_noise", "hum"])
def test_silence_and_steady_noise_are_not_speech(kind: str) -> None:
    rng = np.random.default_rng(1)
    t = np.arange(4 * RATE) / RATE
    pcm = {"silence": np.zeros(4 * RATE),
           "white_noise": rng.normal(0, 0.05, 4 * RATE),
           "hum": 0.2 * np.sin(2 * np.pi * 100 * t)}[kind].astype(np.float32)
    assert segment(pcm) == []


def test_frames_must_be_512_samples() -> None:
    with pytest.raises(ValueError, match="512"):
        SileroScorer().score(np.zeros(256, np.float32))
    assert silero_model_path().is_file()
