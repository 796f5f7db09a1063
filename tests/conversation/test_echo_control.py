"""EchoControl on its own: half-duplex deafness, live mode switches, the acoustic check's
events, the stored delay per device pair and the status report. A recording listener and audio
I/O stand in for the voice loop (both are injected); the canceller is a real AecStage with a
stand-in AEC3 kernel. The whole loop in a room is tests/conversation/test_echo_scenarios.py."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.audio.acoustic_check import CHIRP_S, LEAD_S, LISTEN_S, TIMEOUT_S, AcousticCheckStore
from app.audio.aec import AecStage
from app.audio.echo_canceller import PassThroughEchoCanceller
from app.conversation.echo_control import EchoControl
from app.events import AcousticCheckFinished, ErrorReported
from app.settings import Settings

INF = float("inf")
CHECK_RATE_HZ = 16000  # the speaker's rate in these tests: the sweep loops back unresampled


class Kernel:
    """Stands in for AEC3: never asked to process here."""

    name = "test-aec3"

    def reset(self) -> None:
        pass


def broken_kernel() -> Kernel:
    raise OSError("boom")


class RecordingListener:
    def __init__(self, echo_canceller: object) -> None:
        self.echo_canceller = echo_canceller
        self.raw_taps: list[Any] = []
        self.deaf: list[tuple[float | None, float]] = []

    def set_deaf(self, from_s: float | None, until_s: float = INF) -> None:
        self.deaf.append((from_s, until_s))


@dataclass
class Device:
    device_name: str
    latency_s: float = 0.0
    sample_rate_hz: int = CHECK_RATE_HZ


class RecordingIO:
    def __init__(self, mic: Device | None = None, speaker: Device | None = None) -> None:
        self.input, self.output = mic, speaker
        self.mixers: list[Any] = []

    def add_output_mixer(self, mixer: Any) -> None:
        self.mixers.append(mixer)

    def remove_output_mixer(self, mixer: Any) -> None:
        self.mixers.remove(mixer)


@dataclass
class Room:
    control: EchoControl
    listener: RecordingListener
    io: RecordingIO
    stage: AecStage
    store: AcousticCheckStore


MIC, SPEAKER = Device("Mic"), Device("Speaker")


def room(tmp_path: Path, mode: str = "automatic", mic: Device | None = MIC,
         speaker: Device | None = SPEAKER, **stage_options: Any) -> Room:
    stage = AecStage(mode, kernel_factory=Kernel, **stage_options)  # type: ignore[arg-type]
    listener, io = RecordingListener(stage), RecordingIO(mic, speaker)
    store = AcousticCheckStore(tmp_path / "checks.json")
    control = EchoControl(Settings().with_value("echo.mode", mode), listener,  # type: ignore
                          io, store)  # type: ignore[arg-type]
    return Room(control, listener, io, stage, store)


def store_entry(store: AcousticCheckStore, mic: str, speaker: str, **entry: object) -> None:
    data = {f"{mic} → {speaker}": entry}
    store.path.write_text(json.dumps(data), encoding="utf-8")


# ---- half-duplex --------------------------------------------------------------------------

def test_half_duplex_is_deaf_from_the_first_reply_sample_to_its_echo_and_reverb(
        tmp_path: Path) -> None:
    r = room(tmp_path, "half_duplex")
    r.control.reply_audible(1.0)
    assert r.listener.deaf == [(1.0, INF)]
    r.control.reply_over(3.0)
    assert r.listener.deaf[-1] == (1.0, pytest.approx(3.0 + 0.2 + 0.15))  # default way back


@pytest.mark.parametrize(("stored_delay_ms", "way_back_s"), [(120.0, 0.12), (-30.0, 0.0)])
def test_half_duplex_waits_for_the_measured_echo_delay(tmp_path: Path, stored_delay_ms: float,
                                                       way_back_s: float) -> None:
    r = room(tmp_path, "half_duplex")
    store_entry(r.store, "Mic", "Speaker", delay_ms=stored_delay_ms, echo_detected=True)
    r.control.poll(0.0)
    r.control.reply_audible(1.0)
    r.control.reply_over(3.0)
    assert r.listener.deaf[-1] == (1.0, pytest.approx(3.0 + way_back_s + 0.15))


def test_other_modes_never_make_the_listener_deaf_for_a_reply(tmp_path: Path) -> None:
    r = room(tmp_path, "automatic")
    r.control.reply_audible(1.0)
    r.control.reply_over(3.0)
    assert r.listener.deaf == []


def test_a_reply_end_without_a_reply_start_changes_nothing(tmp_path: Path) -> None:
    r = room(tmp_path, "half_duplex")
    r.control.reply_over(3.0)
    r.control.reply_audible(4.0)
    r.control.reply_over(5.0)
    r.control.reply_over(6.0)  # the reply's deafness was already bounded
    assert r.listener.deaf == [(4.0, INF), (4.0, pytest.approx(5.35))]


def test_switching_out_of_half_duplex_mid_reply_hears_again(tmp_path: Path) -> None:
    r = room(tmp_path, "half_duplex")
    r.control.reply_audible(1.0)
    assert r.control.apply(Settings().with_value("echo.mode", "automatic")) == []
    assert r.listener.deaf[-1] == (None, INF)
    assert r.stage.mode == "automatic" and r.control.mode == "automatic"
    calls = len(r.listener.deaf)
    r.control.apply(Settings().with_value("echo.mode", "half_duplex"))  # deaf only from a reply
    r.control.reply_over(2.0)  # the reply began before half-duplex: nothing to bound
    assert len(r.listener.deaf) == calls and r.stage.mode == "half_duplex"


def test_the_same_mode_again_changes_nothing(tmp_path: Path) -> None:
    r = room(tmp_path, "half_duplex")
    r.control.reply_audible(1.0)
    assert r.control.apply(Settings().with_value("echo.mode", "half_duplex")) == []
    assert r.listener.deaf == [(1.0, INF)]


def test_the_acoustic_check_keeps_the_listener_deaf_whatever_the_reply_and_mode_do(
        tmp_path: Path) -> None:
    r = room(tmp_path, "half_duplex")
    r.control.reply_audible(1.0)
    assert r.control.start_check(2.0) == []
    assert r.listener.deaf[-1] == (2.0, INF)  # the sweep must not start a turn
    r.control.reply_over(2.5)
    r.control.reply_audible(2.6)
    r.control.apply(Settings().with_value("echo.mode", "automatic"))
    r.control.apply(Settings().with_value("echo.mode", "half_duplex"))
    assert r.listener.deaf[-1] == (2.0, INF)


# ---- the canceller ------------------------------------------------------------------------

def test_an_unavailable_canceller_is_reported_once_with_what_to_do(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stage = AecStage("headset", kernel_factory=broken_kernel)
    control = EchoControl(Settings(), RecordingListener(stage),  # type: ignore[arg-type]
                          RecordingIO(), AcousticCheckStore(tmp_path / "c.json"))  # type: ignore
    with caplog.at_level(logging.WARNING, logger="app.conversation.echo_control"):
        events = control.start()
    assert events == [ErrorReported(
        "audio", "Echo cancellation is not available: echo cancellation could not start (boom).",
        "Use a headset, or choose half-duplex under Settings → Echo handling.")]
    assert [r.getMessage() for r in caplog.records] == [
        "echo cancellation could not start (boom)"]


def test_without_an_aec_stage_there_is_no_canceller_to_drive(tmp_path: Path) -> None:
    control = EchoControl(Settings(), RecordingListener(PassThroughEchoCanceller()),  # type: ignore
                          RecordingIO(), AcousticCheckStore(tmp_path / "c.json"))  # type: ignore
    assert control.start() == [] and control.stage is None and not control.echo_guard
    assert control.apply(Settings().with_value("echo.mode", "headset")) == []
    assert control.status() == {"mode": "headset", "canceller": None, "measured_delay_ms": None,
                                "coarse_delay_ms": None, "estimated_delay_ms": None,
                                "far_active_s": None, "echo_heard": None, "erle_db": None}


def test_status_reports_the_canceller_and_its_figures(tmp_path: Path) -> None:
    r = room(tmp_path, "automatic", delay_ms=40.0)
    r.control.start()
    assert r.control.status() == {"mode": "automatic", "canceller": "test-aec3",
                                  "measured_delay_ms": None, "coarse_delay_ms": 40.0,
                                  "estimated_delay_ms": None, "far_active_s": 0.0,
                                  "echo_heard": None, "erle_db": None}
    store_entry(r.store, "Mic", "Speaker", delay_ms=150.0, echo_detected=True)
    r.control.poll(0.0)
    r.stage.detector.delay_ms = 87.5
    r.stage.near_energy, r.stage.out_energy = 10 ** 1.23456, 1.0  # ERLE 12.3456 dB
    r.stage._far_active_samples = 12345  # 0.7715625 s far-active
    assert r.control.status() == {"mode": "automatic", "canceller": "test-aec3",
                                  "measured_delay_ms": 150.0, "coarse_delay_ms": 90.0,
                                  "estimated_delay_ms": 87.5, "far_active_s": 0.772,
                                  "echo_heard": True, "erle_db": 12.3}
    r.control.apply(Settings().with_value("echo.mode", "headset"))
    assert r.control.status()["canceller"] is None  # the stage passes the microphone through


# ---- the stored delay per device pair -----------------------------------------------------

def test_the_stored_result_for_the_devices_in_use_feeds_the_canceller(tmp_path: Path) -> None:
    r = room(tmp_path)
    store_entry(r.store, "Mic", "Speaker", delay_ms=100, echo_detected=False)
    assert r.control.poll(0.0) == []
    assert r.control.measured_delay_ms == 100
    assert r.stage.delay_ms == 40.0  # 60 ms below the measured delay
    assert r.stage.detector.prior is False


@pytest.mark.parametrize(("entry", "coarse_ms", "prior"), [
    ({"delay_ms": 30.0, "echo_detected": True}, 0.0, True),  # below the margin: no shift
    ({"delay_ms": "100", "echo_detected": "yes"}, 0.0, None),  # damaged entries count as none
])
def test_stored_values_are_bounded_and_checked(tmp_path: Path, entry: dict, coarse_ms: float,
                                               prior: bool | None) -> None:
    r = room(tmp_path)
    store_entry(r.store, "Mic", "Speaker", **entry)
    r.control.poll(0.0)
    assert r.stage.delay_ms == coarse_ms and r.stage.detector.prior is prior


def test_without_devices_the_canceller_keeps_its_delay(tmp_path: Path) -> None:
    r = room(tmp_path, mic=None, speaker=None, delay_ms=100.0)
    r.control.poll(0.0)
    assert r.stage.delay_ms == 100.0 and r.control.measured_delay_ms is None


@pytest.mark.parametrize("missing", ["mic", "speaker"])
def test_a_device_that_goes_away_forgets_the_pairs_delay(tmp_path: Path, missing: str) -> None:
    r = room(tmp_path)
    store_entry(r.store, "Mic", "Speaker", delay_ms=100.0, echo_detected=True)
    r.control.poll(0.0)
    setattr(r.io, "input" if missing == "mic" else "output", None)
    r.control.poll(0.1)
    assert r.control.measured_delay_ms is None
    assert r.stage.delay_ms == 0.0 and r.stage.detector.prior is None


def test_the_store_is_read_when_the_devices_change_not_on_every_poll(tmp_path: Path) -> None:
    r = room(tmp_path)
    store_entry(r.store, "Mic", "Speaker", delay_ms=100.0, echo_detected=True)
    r.control.poll(0.0)
    store_entry(r.store, "Mic", "Speaker", delay_ms=300.0, echo_detected=True)
    r.control.poll(0.1)
    assert r.control.measured_delay_ms == 100.0
    r.io.output = Device("Other speaker")
    r.control.poll(0.2)
    assert r.control.measured_delay_ms is None
    r.io.output = Device("Speaker")
    r.control.poll(0.3)
    assert r.control.measured_delay_ms == 300.0


# ---- the acoustic check -------------------------------------------------------------------

QUIET = "Someone was talking; the check needs a quiet moment. Run it again."
NO_DEVICES = ("The acoustic check needs a microphone and a speaker; connect them (or choose "
              "them in the settings) and run it again.")
NO_SOUND = ("The check got no sound through: the speaker or the microphone stopped. Check the "
            "devices in the settings and run it again.")


def test_no_check_while_someone_talks(tmp_path: Path) -> None:
    r = room(tmp_path)
    assert r.control.start_check(1.0, talking=True) == [
        AcousticCheckFinished(False, "Mic", "Speaker", message=QUIET)]
    assert r.io.mixers == [] and r.listener.deaf == []


@pytest.mark.parametrize(("mic", "speaker"), [(None, Device("Speaker")), (Device("Mic"), None),
                                              (None, None)])
def test_no_check_without_a_microphone_and_a_speaker(tmp_path: Path, mic: Device | None,
                                                     speaker: Device | None) -> None:
    r = room(tmp_path, mic=mic, speaker=speaker)
    assert r.control.start_check(1.0) == [AcousticCheckFinished(
        False, mic and mic.device_name, speaker and speaker.device_name, message=NO_DEVICES)]
    assert r.io.mixers == [] and r.listener.raw_taps == []


def ended_cleanly(r: Room) -> bool:
    return r.io.mixers == [] and r.listener.raw_taps == [] and r.listener.deaf[-1] == (None, INF)


def test_a_check_that_hears_nothing_times_out(tmp_path: Path) -> None:
    r = room(tmp_path)
    assert r.control.start_check(1.0) == [] and len(r.io.mixers) == 1
    assert r.control.start_check(1.5) == []  # one at a time
    assert len(r.io.mixers) == 1 and len(r.listener.raw_taps) == 1
    assert r.control.poll(1.0 + TIMEOUT_S + CHIRP_S + LISTEN_S) == []
    assert r.control.poll(1.01 + TIMEOUT_S + CHIRP_S + LISTEN_S) == [
        AcousticCheckFinished(False, "Mic", "Speaker", message=NO_SOUND)]
    assert ended_cleanly(r)


@pytest.mark.parametrize("lost", ["mic", "speaker"])
def test_a_check_ends_when_a_device_stops(tmp_path: Path, lost: str) -> None:
    r = room(tmp_path)
    r.control.start_check(1.0)
    setattr(r.io, "input" if lost == "mic" else "output", None)
    assert r.control.poll(1.1) == [AcousticCheckFinished(False, "Mic", "Speaker",
                                                         message=NO_SOUND)]
    assert ended_cleanly(r)


def play_and_record(r: Room, echo_gain: float, delay_samples: int,
                    late_mic_s: float = 0.0) -> list[object]:
    """Run the sweep through the mixer and hear it back (scaled, delayed) on the microphone,
    10 ms blocks on one clock, until the check answers; ``late_mic_s`` starts the recording
    that much late."""
    block, t_s = 160, 0.0
    played = np.zeros(0, np.float32)
    while t_s < 5.0:
        out = np.zeros(block, np.float32)
        for mixer in list(r.io.mixers):
            mixer(out, t_s, CHECK_RATE_HZ)
        played = np.concatenate([played, out])
        heard = echo_gain * played[len(played) - block - delay_samples:][:block]
        if len(played) - block - delay_samples < 0:
            heard = np.zeros(block, np.float32)
        if t_s >= late_mic_s:
            for tap in list(r.listener.raw_taps):
                tap(heard.astype(np.float32), t_s)
        events = r.control.poll(t_s)
        if events:
            return list(events)
        t_s += block / CHECK_RATE_HZ
    raise AssertionError("the check gave no answer in 5 s")


def test_a_check_that_hears_its_sweep_measures_stores_and_applies_the_delay(
        tmp_path: Path) -> None:
    r = room(tmp_path, mic=Device("Mic", latency_s=0.01), speaker=Device("Speaker", 0.02))
    r.control.start_check(0.0)
    (done,) = play_and_record(r, echo_gain=0.5, delay_samples=1600)  # 100 ms
    assert isinstance(done, AcousticCheckFinished)
    assert done.ok and done.echo_detected and (done.input_device, done.output_device) == (
        "Mic", "Speaker")
    assert done.delay_ms == pytest.approx(100.0, abs=2.0)
    assert done.round_trip_ms == pytest.approx(done.delay_ms + 30.0)
    assert r.control.measured_delay_ms == done.delay_ms
    assert r.stage.delay_ms == pytest.approx(done.delay_ms - 60.0, abs=0.1)
    assert r.stage.detector.prior is True
    assert r.store.get("Mic", "Speaker")["delay_ms"] == done.delay_ms  # type: ignore[index]
    assert ended_cleanly(r)


def test_a_check_on_a_headset_finds_no_echo_and_no_round_trip(tmp_path: Path) -> None:
    r = room(tmp_path)
    r.control.start_check(0.0)
    (done,) = play_and_record(r, echo_gain=0.0, delay_samples=0)
    assert isinstance(done, AcousticCheckFinished)
    assert done.ok and not done.echo_detected
    assert done.delay_ms is None and done.round_trip_ms is None
    assert r.stage.detector.prior is False and ended_cleanly(r)


def test_a_recording_that_misses_the_sweep_fails_the_check_and_says_why(tmp_path: Path) -> None:
    r = room(tmp_path)
    r.control.start_check(0.0)
    assert play_and_record(r, 0.5, 0, late_mic_s=LEAD_S + LISTEN_S + 0.1) == [
        AcousticCheckFinished(
        False, "Mic", "Speaker", message="The check failed: the microphone recording does not "
        "cover the sweep and its echo.")]
    assert ended_cleanly(r)
