"""The simulated room: the speaker comes back into the microphone, delayed, scaled, reverberant."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.simulated import SimulatedBackend, SimulatedMicrophone
from app.audio.simulated_echo import EchoPath, SimulatedEcho, room_impulse_response


def test_parse_and_reject() -> None:
    assert SimulatedEcho.parse("60:-6") == SimulatedEcho(60.0, -6.0)
    assert SimulatedEcho.parse(" 20 : 0 ") == SimulatedEcho(20.0, 0.0)
    for bad in ("60", "sixty:-6", "-5:0", ""):
        with pytest.raises(ValueError, match="DELAY_MS:GAIN_DB"):
            SimulatedEcho.parse(bad)


def test_room_response_has_a_direct_path_and_unit_energy() -> None:
    response = room_impulse_response(16000, 60.0, seed=1)
    assert len(response) == 960 and np.argmax(np.abs(response)) == 0
    assert np.sum(response**2) == pytest.approx(1.0, rel=1e-5)
    assert np.sum(response[480:] ** 2) < 0.01  # it decays


def test_a_click_played_comes_back_after_the_delay_at_the_gain() -> None:
    path = EchoPath(SimulatedEcho(50.0, -6.0), 16000)
    click = np.zeros(480, np.float32)
    click[240] = 1.0  # at 48 kHz: 5 ms into the block
    path.speaker(click, 1.0, 48000)
    for k in range(1, 10):
        path.speaker(np.zeros(480, np.float32), 1.0 + k * 0.01, 48000)
    mic = np.zeros((1600, 1), np.float32)
    path.add_to(mic, 16000)  # capture from 1.0 s
    arrival = int(np.argmax(np.abs(mic[:, 0])))
    assert arrival == pytest.approx(80 + 800, abs=2)  # 5 ms + 50 ms
    direct = room_impulse_response(16000, 60.0, 11)[0] * 10 ** (-6 / 20) / 3  # 48k→16k click
    assert abs(mic[arrival, 0]) == pytest.approx(direct, rel=0.15)


def test_noise_played_comes_back_at_the_chosen_level() -> None:
    backend = SimulatedBackend(SimulatedMicrophone(np.zeros(16000 * 3, np.float32), 16000),
                               echo=SimulatedEcho(30.0, -10.0))
    noise = np.random.default_rng(2).normal(0, 0.1, 48000 * 3).astype(np.float32)
    captured: list[np.ndarray] = []
    position = [0]

    def play(out: np.ndarray, dac_s: float) -> None:
        out[:] = noise[position[0]:position[0] + len(out)]
        position[0] += len(out)

    out_stream = backend.open_output(None, None, 10, play, lambda: None)
    in_stream = backend.open_input(None, None, 10, lambda b, t: captured.append(b.copy()),
                                   lambda: None)
    out_stream.start()
    in_stream.start()
    for step in range(1, 290):
        backend.deliver_input(step * 0.01)
        backend.render_output(step * 0.01, 0.01)
    mic = np.concatenate(captured)[:, 0]
    level_db = 10 * np.log10(np.mean(mic[16000:40000] ** 2) / 0.1**2)
    assert level_db == pytest.approx(-10.0 - 10 * np.log10(3), abs=1.0)  # 3× fewer samples
