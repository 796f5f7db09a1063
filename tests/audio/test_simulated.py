from __future__ import annotations

import numpy as np
import pytest

from app.audio.backend import DeviceUnavailableError
from app.audio.simulated import (
    DeviceFailure,
    SimulatedBackend,
    SimulatedMicrophone,
    read_wav,
    write_wav,
)


def ramp_mic(rate: int = 8000, channels: int = 2, seconds: float = 0.5) -> SimulatedMicrophone:
    frames = int(rate * seconds)
    pcm = np.stack([np.arange(frames, dtype=np.float32) / frames * (c + 1)
                    for c in range(channels)], axis=1)
    return SimulatedMicrophone(pcm, rate)


def test_microphone_reads_any_channels_and_is_silent_after_the_end() -> None:
    mic = ramp_mic(rate=8000, channels=2, seconds=0.5)
    block = mic.read(3990, 20)
    assert block.shape == (20, 2)
    np.testing.assert_allclose(block[:10, 1], 2 * np.arange(3990, 4000) / 4000)
    assert not np.any(block[10:])


def test_microphone_can_repeat_its_recording() -> None:
    mic = SimulatedMicrophone(np.arange(4, dtype=np.float32), 4, repeat=3)
    assert mic.duration_s == 3.0
    assert mic.read(2, 8)[:, 0].tolist() == [2, 3, 0, 1, 2, 3, 0, 1]
    assert mic.read(11, 3)[:, 0].tolist() == [3, 0, 0]


def test_wav_round_trip_keeps_rate_and_channels(tmp_path) -> None:
    pcm = np.stack([np.linspace(-0.5, 0.5, 441), np.zeros(441)], axis=1).astype(np.float32)
    write_wav(tmp_path / "x.wav", pcm, 44100)
    back, rate = read_wav(tmp_path / "x.wav")
    assert rate == 44100 and back.shape == (441, 2)
    np.testing.assert_allclose(back, pcm, atol=1 / 32000)
    with pytest.raises(ValueError, match="is not a sound file this app can decode"):
        (tmp_path / "bad.wav").write_text("nope")
        read_wav(tmp_path / "bad.wav")


def test_callbacks_carry_device_clock_timestamps() -> None:
    backend = SimulatedBackend(ramp_mic(rate=8000), output_rate_hz=24000, output_latency_ms=15)
    captured, rendered = [], []
    mic = backend.open_input(None, None, 10, lambda b, t: captured.append((len(b), t)),
                             lambda: None)
    spk = backend.open_output(None, None, 10,
                              lambda out, t: (rendered.append((len(out), t)), out.fill(0.5)),
                              lambda: None)
    mic.start()
    spk.start()
    for step in range(1, 4):
        backend.deliver_input(step * 0.01)
        backend.render_output(step * 0.01, 0.01)
    assert captured == [(80, 0.0), (80, 0.01), (80, 0.02)]
    assert [n for n, _ in rendered] == [240, 240, 240]
    assert [t for _, t in rendered] == pytest.approx([0.025, 0.035, 0.045])
    room = backend.room.to_array()
    assert len(room) == round(0.055 * 24000) and np.all(room[round(0.025 * 24000):] == 0.5)


def test_stopped_or_closed_streams_get_no_callbacks() -> None:
    backend = SimulatedBackend(ramp_mic())
    calls: list[float] = []
    stream = backend.open_input(None, None, 10, lambda b, t: calls.append(t), lambda: None)
    backend.deliver_input(0.01)
    stream.start()
    backend.deliver_input(0.02)
    stream.close()
    backend.deliver_input(0.03)
    assert calls == [0.0]  # created stopped: the first block's audio went nowhere


def test_devices_are_found_by_name_and_a_failure_unplugs_one() -> None:
    failure = DeviceFailure("output", "Headset", at_s=0.02)
    backend = SimulatedBackend(ramp_mic(), output_devices=("Speaker", "Headset"),
                               failures=(failure,))
    names = [d.name for d in backend.list_devices() if d.max_output_channels]
    assert names == ["Speaker", "Headset"]
    lost: list[str] = []
    played: list[float] = []
    headset = backend.open_output("headset", None, 10, lambda o, t: played.append(t),
                                  lambda: lost.append("headset"))
    assert headset.device_name == "Headset"
    headset.start()
    backend.deliver_input(0.01)
    backend.render_output(0.01, 0.01)
    backend.deliver_input(0.02)
    backend.render_output(0.02, 0.01)
    assert lost == ["headset"] and len(played) == 1
    assert [d.name for d in backend.list_devices() if d.max_output_channels] == ["Speaker"]
    with pytest.raises(DeviceUnavailableError, match="Headset"):
        backend.open_output("Headset", None, 10, lambda o, t: None, lambda: None)
    assert backend.open_output(None, None, 10, lambda o, t: None,
                               lambda: None).device_name == "Speaker"


def test_the_microphone_only_opens_at_its_own_rate() -> None:
    backend = SimulatedBackend(ramp_mic(rate=8000))
    with pytest.raises(DeviceUnavailableError, match="8000"):
        backend.open_input(None, 16000, 10, lambda b, t: None, lambda: None)
