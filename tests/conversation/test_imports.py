from __future__ import annotations

import subprocess
import sys


def test_the_voice_loop_and_headless_demo_load_no_torch_qt_or_sounddevice() -> None:
    """A machine without PortAudio, a GPU stack or a display still runs the voice loop."""
    code = ("import sys, app.conversation.pipeline, app.conversation.simulation, "
            "app.cli.converse, app.cli.bench_voice_loop, app.engine.echo, app.engine.factory; "
            "print(sorted(m for m in ('torch', 'PySide6', 'sounddevice', 'silero_vad') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()
    assert out == "[]"
