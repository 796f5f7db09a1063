"""The settings panel's audio commands on simulated devices: device list, level meter, test
tone, voice-prompt recording (through the whole pipeline, on the virtual clock)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from voice_helpers import duration, speech, track

from app.audio.simulated import SimulatedMicrophone, read_wav
from app.conversation.simulation import SimulationOptions, SimulationResult, run_simulation
from app.engine.echo import EchoEngine
from app.events import (
    AudioDevicesListed,
    ErrorReported,
    InputLevelMeasured,
    ListAudioDevices,
    MonitorInputLevel,
    PlayTestTone,
    ReplyFinished,
    StartVoiceRecording,
    StopVoiceRecording,
    ToneTestFinished,
    UserSpeechStarted,
    VoiceRecordingFinished,
    VoiceRecordingProgressed,
)
from app.settings import Settings
from app.vad.base import FRAME_S

# End of turn by silence: these tests are about other things (the end-of-turn model has
# its own tests in test_smart_endpoint.py and below).
PLAIN = Settings().with_value("vad.smart_endpoint", False)

MICS = ("Simulated microphone", "Second microphone")
SPEAKERS = ("Simulated speaker", "Headphones")
OUT_RATE = 48000


def run(pcm: np.ndarray, *commands: tuple[float, object], **options: object) -> SimulationResult:
    options.setdefault("charge_compute", False)
    return run_simulation(PLAIN, EchoEngine(), SimulatedMicrophone(pcm, 16000),
                          SimulationOptions(commands=tuple(commands), input_devices=MICS,
                                            output_devices=SPEAKERS, **options))  # type: ignore[arg-type]


def of(result: SimulationResult, kind: type) -> list:
    return [e for e in result.events if isinstance(e, kind)]


def tone_frequency_hz(pcm: np.ndarray, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    return float(np.argmax(spectrum) * rate_hz / len(pcm))


def test_the_device_list_names_every_device_and_the_defaults() -> None:
    result = run(np.zeros(8000, np.float32), (0.1, ListAudioDevices()))
    assert of(result, AudioDevicesListed) == [AudioDevicesListed(MICS, SPEAKERS, MICS[0],
                                                                 SPEAKERS[0])]


@pytest.mark.parametrize("device", [None, "Second microphone"])
def test_the_level_meter_follows_the_microphone_ten_times_a_second(device: str | None) -> None:
    clip = speech("question")
    pcm = track([(1.0, clip)], 1.0 + duration("question") + 1.0)
    result = run(pcm, (0.0, MonitorInputLevel(device, True)),
                 (1.0 + duration("question") + 0.5, MonitorInputLevel(device, False)))
    levels = of(result, InputLevelMeasured)
    assert {e.device_name for e in levels} == {device}
    assert len(levels) == pytest.approx((1.0 + duration("question") + 0.5) * 10, abs=2)
    quiet, loud = levels[:8], levels[11:11 + int(duration("question") * 10) - 2]
    assert max(e.peak_dbfs for e in quiet) < -100  # digital silence
    assert min(e.peak_dbfs for e in loud) > -30 and max(e.peak_dbfs for e in loud) > -12
    assert all(e.rms_dbfs < e.peak_dbfs for e in loud)


def test_metering_a_microphone_that_is_not_there_is_reported() -> None:
    result = run(np.zeros(8000, np.float32), (0.1, MonitorInputLevel("USB headset", True)))
    [error] = of(result, ErrorReported)
    assert "USB headset" in error.message and "cannot be measured" in error.message
    assert not of(result, InputLevelMeasured)


@pytest.mark.parametrize("device", [None, "Simulated speaker", "Headphones"])
def test_the_test_tone_plays_a_faded_sine_on_the_chosen_speaker(device: str | None) -> None:
    result = run(np.zeros(3 * 16000, np.float32), (0.5, PlayTestTone(device, 440.0, 500)))
    [finished] = of(result, ToneTestFinished)
    assert finished == ToneTestFinished(device, True, "")
    played = np.flatnonzero(np.abs(result.output) > 1e-4)
    start, end = played[0], played[-1] + 1
    assert (end - start) / OUT_RATE == pytest.approx(0.5, abs=0.002)
    assert start / OUT_RATE == pytest.approx(0.52, abs=0.011)  # next block + 10 ms latency
    tone = result.output[start:end]
    assert tone_frequency_hz(tone, OUT_RATE) == pytest.approx(440, abs=3)
    assert np.max(np.abs(tone)) == pytest.approx(0.25, abs=0.01)
    assert abs(tone[0]) < 0.001 and abs(tone[-1]) < 0.001  # faded: no click
    assert np.max(np.abs(np.diff(tone))) < 0.02


def test_a_tone_on_a_missing_speaker_fails_with_a_reason() -> None:
    result = run(np.zeros(16000, np.float32), (0.2, PlayTestTone("HDMI", 440.0, 300)))
    [finished] = of(result, ToneTestFinished)
    assert not finished.ok and "HDMI" in finished.message and "not connected" in finished.message
    assert not np.any(result.output)


def long_speech(seconds: float) -> np.ndarray:
    clips = [(0.3 + i * 1.7, speech("question")) for i in range(int(seconds / 1.7))]
    return track(clips, seconds + 2.0)


def test_a_voice_recording_is_saved_and_is_not_a_user_turn(tmp_path: Path) -> None:
    path = tmp_path / "voices" / "prompt.wav"
    pcm = long_speech(8.0)
    result = run(pcm, (0.2, StartVoiceRecording(path)), (6.2, StopVoiceRecording()))
    [finished] = of(result, VoiceRecordingFinished)
    assert finished.path == path and finished.duration_s == pytest.approx(6.0, abs=0.02)
    progress = of(result, VoiceRecordingProgressed)
    assert len(progress) == pytest.approx(60, abs=2)
    assert [p.elapsed_s for p in progress] == sorted(p.elapsed_s for p in progress)
    assert max(p.level_dbfs for p in progress) > -12
    recorded, rate = read_wav(path)
    assert rate == 16000 and len(recorded) / rate == pytest.approx(finished.duration_s)
    start = int(0.2 * 16000)
    np.testing.assert_allclose(recorded[:, 0], pcm[start:start + len(recorded)], atol=1e-4)
    # the speech during the recording started no turn; speech after it does
    onsets = [e.t_s for e in of(result, UserSpeechStarted)]
    assert onsets and all(t > 6.2 - FRAME_S for t in onsets)  # the VAD frame at the stop


def test_a_recording_stops_by_itself_at_its_maximum(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    result = run(long_speech(8.0), (0.0, StartVoiceRecording(path, 1.0, 5.0)))
    [finished] = of(result, VoiceRecordingFinished)
    assert finished.path == path and finished.duration_s == pytest.approx(5.0)
    assert len(read_wav(path)[0]) == 5 * 16000


@pytest.mark.parametrize(("stop_at", "keep", "why"), [(2.0, True, "Too short (2.0 s)"),
                                                      (6.0, False, "discarded")])
def test_short_or_discarded_recordings_are_not_kept(tmp_path: Path, stop_at: float, keep: bool,
                                                    why: str) -> None:
    path = tmp_path / "prompt.wav"
    result = run(long_speech(7.0), (0.0, StartVoiceRecording(path)),
                 (stop_at, StopVoiceRecording(keep)))
    [finished] = of(result, VoiceRecordingFinished)
    assert finished.path is None and why in finished.message
    assert not path.exists()


def test_recording_stops_the_reply_that_is_playing(tmp_path: Path) -> None:
    pcm = track([(0.3, speech("question"))], 8.0)
    reply_plays_at = 0.3 + duration("question") + 0.7
    result = run(pcm, (reply_plays_at, StartVoiceRecording(tmp_path / "p.wav", 1.0, 3.0)))
    [finished_reply] = of(result, ReplyFinished)
    assert finished_reply.interrupted and finished_reply.heard_ms < 300
    assert of(result, VoiceRecordingFinished)[0].duration_s == pytest.approx(3.0)


def test_recording_without_a_microphone_says_what_to_do(tmp_path: Path) -> None:
    result = run_simulation(PLAIN, EchoEngine(), SimulatedMicrophone(np.zeros(8000), 16000),
                            SimulationOptions(input_devices=(), charge_compute=False, commands=(
                                (0.1, StartVoiceRecording(tmp_path / "p.wav")),)))
    [finished] = of(result, VoiceRecordingFinished)
    assert finished.path is None and "No microphone" in finished.message
    assert any("No microphone" in e.message for e in of(result, ErrorReported))
