"""The acoustic check's measurement, recommendation and per-device-pair store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.audio.acoustic_check import (
    LEAD_S,
    AcousticCheckRun,
    AcousticCheckStore,
    analyse,
    log_sweep,
    recommend,
)
from app.audio.simulated_echo import room_impulse_response

RATE = 16000


def recording(delay_ms: float, gain_db: float, noise_dbfs: float = -60.0,
              total_s: float = 2.0, sweep_at_s: float = 0.4) -> np.ndarray:
    """The microphone: noise, plus the sweep through a room, ``delay_ms`` after it played."""
    rng = np.random.default_rng(7)
    mic = rng.normal(0, 10 ** (noise_dbfs / 20), int(total_s * RATE))
    if gain_db is not None:
        wet = np.convolve(log_sweep(RATE), room_impulse_response(RATE, 60.0, 3))
        start = int((sweep_at_s + delay_ms / 1000) * RATE)
        mic[start:start + len(wet)] += wet[:len(mic) - start] * 10 ** (gain_db / 20)
    return mic.astype(np.float32)


@pytest.mark.parametrize(("delay_ms", "gain_db"), [(15, 0.0), (80, -6.0), (300, -20.0)])
def test_delay_and_echo_return_loss_are_measured(delay_ms: float, gain_db: float) -> None:
    m = analyse(recording(delay_ms, gain_db), mic_start_s=10.0, sweep_dac_s=10.4)
    assert m.echo_detected and not m.clipped
    assert m.delay_ms == pytest.approx(delay_ms, abs=1.0)
    assert m.echo_return_loss_db == pytest.approx(-gain_db, abs=1.5)
    assert m.recommended_mode == "automatic"
    assert m.noise_floor_dbfs == pytest.approx(-60, abs=1)


def test_a_headset_gives_no_echo_and_the_headset_mode() -> None:
    m = analyse(recording(0, None), mic_start_s=0.0, sweep_dac_s=0.4)  # type: ignore[arg-type]
    assert not m.echo_detected and m.delay_ms is None and m.echo_return_loss_db is None
    assert m.recommended_mode == "headset"
    faint = analyse(recording(40, -70.0, noise_dbfs=-50), 0.0, 0.4)  # buried in the noise
    assert not faint.echo_detected


def test_an_overwhelming_or_clipped_echo_recommends_half_duplex() -> None:
    loud = analyse(recording(40, 14.0, total_s=2.0) * 0.5, 0.0, 0.4)  # 8 dB over, no clipping
    assert loud.echo_detected and loud.echo_return_loss_db < -6
    assert recommend(True, -13.0, False)[0] == "half_duplex"
    assert recommend(True, -11.0, False)[0] == "automatic"
    clipped = np.clip(recording(40, 12.0), -1.0, 1.0)
    m = analyse(clipped, 0.0, 0.4)
    assert m.clipped and m.recommended_mode == "half_duplex"
    assert "volume" in m.reason


def test_the_run_mixes_the_sweep_after_the_lead_and_collects_the_microphone() -> None:
    run = AcousticCheckRun(48000, started_s=5.0)
    blocks = []
    for k in range(200):
        out = np.full(480, 0.01, np.float32)  # whatever else plays is kept
        run.fill(out, 5.01 + k * 0.01)
        blocks.append(out)
    played = np.concatenate(blocks) - 0.01
    lead = int(LEAD_S * 48000)
    sweep = log_sweep(48000)
    assert not np.any(np.abs(played[:lead]) > 1e-6)
    np.testing.assert_allclose(played[lead:lead + len(sweep)], sweep, atol=1e-6)
    assert not np.any(np.abs(played[lead + len(sweep):]) > 1e-6)
    assert run.sweep_dac_s == pytest.approx(5.01 + LEAD_S)
    assert not run.done()
    run.feed_mic(np.zeros(16000 * 2, np.float32), 5.0)
    assert run.done() and not run.timed_out(7.0)


def test_results_are_kept_per_device_pair_and_a_damaged_file_is_not_fatal(
        tmp_path: Path) -> None:
    store = AcousticCheckStore(tmp_path / "checks.json")
    assert store.get("Mic", "Speakers") is None
    store.put("Mic", "Speakers", analyse(recording(80, -6.0), 0.0, 0.4))
    store.put("Mic", None, analyse(recording(0, None), 0.0, 0.4))  # type: ignore[arg-type]
    entry = store.get("Mic", "Speakers")
    assert entry is not None and entry["delay_ms"] == pytest.approx(80, abs=1)
    assert entry["recommended_mode"] == "automatic" and "measured_at" in entry
    assert store.get("Mic", None)["echo_detected"] is False  # type: ignore[index]
    assert len(json.loads((tmp_path / "checks.json").read_text())) == 2
    (tmp_path / "checks.json").write_text("{not json")
    assert store.get("Mic", "Speakers") is None
    store.put("Mic", "Speakers", analyse(recording(80, -6.0), 0.0, 0.4))
    assert store.get("Mic", "Speakers") is not None
