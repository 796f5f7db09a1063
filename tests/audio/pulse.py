"""Real PortAudio through a PulseAudio null sink started for the tests (userspace, no sound
card): its monitor is the microphone, so what is played comes back as input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest


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


needs_pulseaudio = pytest.mark.skipif(
    shutil.which("pulseaudio") is None or shutil.which("pactl") is None
    or shutil.which("paplay") is None, reason="pulseaudio is not installed")


def run_client(code: str, env: dict[str, str], *args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                            text=True, timeout=90, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
