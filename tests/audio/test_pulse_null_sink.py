"""Real PortAudio streams through a PulseAudio null sink (userspace, no sound card needed).

Skipped when pulseaudio is not installed. The sink's monitor is the microphone, so what the
output stream plays comes back through the input stream.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CLIENT = r"""
import json, threading, time
import numpy as np
from app.audio.sounddevice_backend import SounddeviceBackend

backend = SounddeviceBackend()
devices = backend.list_devices()
phase = [0]
captured, stamps = [], []
lock = threading.Lock()

def play(out, dac_s):
    n = len(out)
    out[:] = 0.3 * np.sin(2 * np.pi * 440 * (phase[0] + np.arange(n)) / 48000)
    phase[0] += n

def record(block, adc_s):
    with lock:
        captured.append(block[:, 0].copy())
        stamps.append((adc_s, time.monotonic()))

out = backend.open_output(None, 48000, 10, play, lambda: None)
inp = backend.open_input(None, 48000, 10, record, lambda: None)
out.start(); inp.start()
time.sleep(2.0)
inp.close(); out.close()
with lock:
    audio = np.concatenate(captured[len(captured) // 2:])
spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
peak_hz = float(np.argmax(spectrum) * 48000 / len(audio))
print(json.dumps({"devices": [d.name for d in devices], "peak_hz": peak_hz,
                  "level": float(np.max(np.abs(audio))),
                  "adc_before_callback": all(a <= c for a, c in stamps),
                  "adc_increasing": all(b[0] > a[0] for a, b in zip(stamps, stamps[1:]))}))
"""


def start_null_sink(runtime: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    env = {**os.environ, "HOME": str(runtime), "XDG_RUNTIME_DIR": str(runtime / "run")}
    (runtime / "run").mkdir(mode=0o700)
    daemon = subprocess.Popen(
        ["pulseaudio", "--daemonize=no", "--exit-idle-time=-1", "--disallow-exit", "-n",
         "--load=module-native-protocol-unix",
         "--load=module-null-sink sink_name=vsink rate=48000", "--load=module-always-sink"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = threading.Event()
    for _ in range(100):
        if subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0:
            return daemon, env
        ready.wait(0.1)
    daemon.terminate()
    pytest.skip("pulseaudio did not start here")


@pytest.mark.audio
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pulseaudio") is None or shutil.which("pactl") is None,
                    reason="pulseaudio is not installed")
def test_a_tone_played_to_the_null_sink_comes_back_from_its_monitor(tmp_path: Path) -> None:
    daemon, env = start_null_sink(tmp_path)
    try:
        result = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True,
                                text=True, timeout=60, check=False)
    finally:
        daemon.terminate()
        daemon.wait(10)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"], "PortAudio saw no device through PulseAudio"
    assert report["level"] > 0.1
    assert abs(report["peak_hz"] - 440) < 5
    assert report["adc_before_callback"] and report["adc_increasing"]
