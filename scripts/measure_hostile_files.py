"""Time and peak memory of refusing each hostile file of issue 21 item 4, and of verifying the tiny
model and codec folders (BENCHMARKS.md, "Folder checks and hostile files").

    PYTHONPATH=. python scripts/measure_hostile_files.py

Peak memory is Python's traced allocations (tracemalloc: numpy buffers included) in a fourth,
traced run; the time is the best of three untraced runs.
"""

from __future__ import annotations

import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile

from app.engine.codec_config import read_flow_yaml
from app.engine.folders import verify_codec_folder, verify_model_folder
from app.engine.moss_speech.codec.testing import write_tiny_codec
from app.engine.moss_speech.codec.voice import check_voice_file
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.testing import write_tiny_checkpoint

ALIAS_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "\n".join(
    f"{c}: &{c} [" + ",".join(["*" + p] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi",
                                                                    strict=True)) + "\n"


def run(check: Callable[[], object]) -> str:
    try:
        result = check()
    except ValueError as exc:
        return f"refused: {str(exc)[:60]}"
    return "ok" if getattr(result, "ok", True) else "refused"


def measure(check: Callable[[], object]) -> tuple[float, float, str]:
    """(best of 3 in ms, peak traced MiB in a 4th run, outcome); tracing slows Python code
    down several times, so the timed runs are not traced."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        outcome = run(check)
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    run(check)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return best * 1000, peak, outcome


def cases(root: Path) -> dict[str, Callable[[], object]]:
    codec = write_tiny_codec(root / "codec")
    config = MossSpeechConfig.tiny().with_(hidden_size=16, intermediate_size=32,
                                           num_attention_heads=2, num_key_value_heads=1,
                                           head_dim=8)
    model = write_tiny_checkpoint(root / "model", config=config)
    bomb = root / "bomb" / "flow" / "config.yaml"
    bomb.parent.mkdir(parents=True)
    bomb.write_text(ALIAS_BOMB)
    layers = root / "layers"
    layers.mkdir()
    raw = json.loads((model / "config.json").read_text())
    (layers / "config.json").write_text(json.dumps({**raw, "num_shared_layers": 1_000_000,
                                                    "num_hidden_layers": 1_000_001}))
    flac = root / "long.flac"
    block = np.zeros((8000, 8), np.float32)
    with soundfile.SoundFile(str(flac), "w", 8000, 8, format="FLAC") as out:
        for _ in range(600):
            out.write(block)
    return {
        "tiny codec folder verified": lambda: verify_codec_folder(codec),
        "tiny model folder verified": lambda: verify_model_folder(model),
        f"YAML alias bomb ({len(ALIAS_BOMB)} bytes)": lambda: read_flow_yaml(bomb),
        "config.json num_shared_layers=1e6": lambda: verify_model_folder(layers),
        f"FLAC 8 ch × 600 s ({flac.stat().st_size // 1024} KB)": lambda: check_voice_file(flac),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for name, check in cases(Path(scratch)).items():
            ms, mib, outcome = measure(check)
            print(f"| {name} | {ms:.1f} ms | {mib:.1f} MiB | {outcome} |")


if __name__ == "__main__":
    main()
