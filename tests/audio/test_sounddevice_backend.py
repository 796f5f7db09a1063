"""The PortAudio backend against a fake ``sounddevice`` module (injected, never patched)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from voice_helpers import FakeSd

from app.audio.backend import AudioUnavailableError, DeviceUnavailableError, find_device
from app.audio.probe import probe_audio
from app.audio.sounddevice_backend import SounddeviceBackend


def dev(name: str, api: int, inputs: int, outputs: int, rate: float = 48000.0) -> dict:
    return {"name": name, "hostapi": api, "max_input_channels": inputs,
            "max_output_channels": outputs, "default_samplerate": rate}


def windows_sd(**kwargs: Any) -> FakeSd:
    apis = [{"name": "MME", "default_input_device": 0, "default_output_device": 1},
            {"name": "Windows DirectSound", "default_input_device": 2,
             "default_output_device": 3},
            {"name": "Windows WASAPI", "default_input_device": 4, "default_output_device": 5},
            {"name": "Windows WDM-KS", "default_input_device": 6, "default_output_device": 7}]
    devices = [dev("Microphone (USB Audio Device", 0, 2, 0, 44100),  # MME truncates names
               dev("Speakers (Realtek High Defini", 0, 0, 2, 44100),
               dev("Microphone (USB Audio Device)", 1, 2, 0),
               dev("Speakers (Realtek High Definition Audio)", 1, 0, 2),
               dev("Microphone (USB Audio Device)", 2, 1, 0),
               dev("Speakers (Realtek High Definition Audio)", 2, 0, 2),
               dev("Microphone (USB Audio Device)", 3, 2, 0),
               dev("Speakers (Realtek High Definition Audio)", 3, 0, 8)]
    return FakeSd(apis, devices, default=(0, 1), **kwargs)


def test_windows_lists_each_physical_device_once_through_wasapi() -> None:
    devices = SounddeviceBackend(windows_sd()).list_devices()
    assert [(d.name, d.host_api, d.index) for d in devices] == [
        ("Microphone (USB Audio Device)", "Windows WASAPI", 4),
        ("Speakers (Realtek High Definition Audio)", "Windows WASAPI", 5)]
    assert devices[0].is_default_input and devices[1].is_default_output


def test_linux_hides_oss_when_alsa_is_there_and_keeps_one_entry_per_name() -> None:
    apis = [{"name": "ALSA", "default_input_device": 1, "default_output_device": 1},
            {"name": "OSS", "default_input_device": 3, "default_output_device": 3},
            {"name": "JACK Audio Connection Kit", "default_input_device": -1,
             "default_output_device": -1}]
    devices = [dev("HDA Intel PCH: ALC3246 Analog (hw:0,0)", 0, 2, 2),
               dev("default", 0, 32, 32), dev("default", 0, 32, 32),
               dev("/dev/dsp", 1, 16, 16), dev("system", 2, 2, 2)]
    listed = SounddeviceBackend(FakeSd(apis, devices, default=(1, 1))).list_devices()
    assert [(d.name, d.host_api) for d in listed] == [
        ("HDA Intel PCH: ALC3246 Analog (hw:0,0)", "ALSA"), ("default", "ALSA"),
        ("system", "JACK Audio Connection Kit")]
    assert find_device(listed, None, "input").name == "default"


def test_no_devices_is_a_normal_state_with_a_clear_message() -> None:
    backend = SounddeviceBackend(FakeSd([{"name": "ALSA"}, {"name": "OSS"}], []))
    assert backend.list_devices() == []
    with pytest.raises(DeviceUnavailableError, match="no microphone found"):
        backend.open_input(None, None, 10, lambda b, t: None, lambda: None)


def test_a_name_saved_from_the_truncated_mme_list_still_finds_the_device() -> None:
    devices = SounddeviceBackend(windows_sd()).list_devices()
    assert find_device(devices, "Microphone (USB Audio Device", "input").index == 4
    assert find_device(devices, "speakers (realtek high definition audio)", "output").index == 5
    with pytest.raises(DeviceUnavailableError, match="'Headset' is not connected"):
        find_device(devices, "Headset", "output")


def test_streams_open_low_latency_with_wasapi_auto_convert() -> None:
    sd = windows_sd()
    handle = SounddeviceBackend(sd).open_output(None, 24000, 10.0, lambda o, t: None,
                                                lambda: None)
    kwargs = sd.streams[0].kwargs
    assert kwargs["device"] == 5 and kwargs["samplerate"] == 24000
    assert kwargs["blocksize"] == 240 and kwargs["latency"] == "low"
    assert kwargs["dtype"] == "float32" and kwargs["channels"] == 2
    assert kwargs["extra_settings"].auto_convert is True
    assert handle.sample_rate_hz == 24000 and handle.latency_s == 0.012
    handle.start()
    assert sd.streams[0].state == "started"


def test_an_unsupported_rate_is_reported_not_raised_raw() -> None:
    backend = SounddeviceBackend(windows_sd(fail_open=True))
    with pytest.raises(DeviceUnavailableError, match="Invalid sample rate"):
        backend.open_input(None, 12345, 10, lambda b, t: None, lambda: None)


def time_info(current: float, adc: float = 0.0, dac: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(currentTime=current, inputBufferAdcTime=adc, outputBufferDacTime=dac)


def test_input_timestamps_move_portaudio_adc_time_onto_the_monotonic_clock() -> None:
    sd = windows_sd()
    got: list[tuple[np.ndarray, float]] = []
    SounddeviceBackend(sd).open_input(None, None, 10, lambda b, t: got.append((b, t)),
                                      lambda: None)
    callback = sd.streams[0].kwargs["callback"]
    block = np.ones((480, 2), np.float32)
    before = time.monotonic()
    callback(block, 480, time_info(current=500.0, adc=499.97), None)
    after = time.monotonic()
    assert before - 0.03 - 1e-9 <= got[0][1] <= after - 0.03 + 1e-9
    callback(block, 480, time_info(current=500.0, adc=0.0), None)  # host gives no ADC time
    assert got[1][1] <= time.monotonic() - 480 / 48000 + 1e-9


def test_output_callback_gets_mono_and_the_dac_time() -> None:
    sd = windows_sd()
    seen: list[float] = []

    def fill(out: np.ndarray, dac: float) -> None:
        seen.append(dac)
        out[:] = 0.25

    SounddeviceBackend(sd).open_output(None, None, 10, fill, lambda: None)
    callback = sd.streams[0].kwargs["callback"]
    outdata = np.zeros((480, 2), np.float32)
    before = time.monotonic()
    callback(outdata, 480, time_info(current=10.0, dac=10.05), None)
    assert np.all(outdata == 0.25)
    assert seen[0] >= before + 0.05 - 1e-9


def test_a_stream_that_finishes_by_itself_reports_the_loss_once() -> None:
    sd = windows_sd()
    lost: list[str] = []
    handle = SounddeviceBackend(sd).open_input(None, None, 10, lambda b, t: None,
                                               lambda: lost.append("lost"))
    finished = sd.streams[0].kwargs["finished_callback"]
    finished()
    finished()
    assert lost == ["lost"]
    other = SounddeviceBackend(sd).open_input(None, None, 10, lambda b, t: None,
                                              lambda: lost.append("other"))
    other.close()
    sd.streams[1].kwargs["finished_callback"]()  # finishing because we closed it is no loss
    assert lost == ["lost"] and sd.streams[1].state == "closed"
    assert handle.stalled_for_s() >= 0.0


def test_probe_reports_devices_from_the_same_listing() -> None:
    report = probe_audio(SounddeviceBackend(windows_sd()))
    assert report["available"] is True and report["reason"] == ""
    assert [i["name"] for i in report["inputs"]] == ["Microphone (USB Audio Device)"]
    assert report["outputs"][0]["default"] is True
    assert "Windows WASAPI" in report["host_apis"]


def test_probe_without_portaudio_says_what_to_install() -> None:
    class NoAudio:
        def list_devices(self) -> list:
            raise AudioUnavailableError("PortAudio library not found; install it")

        def host_apis(self) -> list:
            return []

    report = probe_audio(NoAudio())
    assert report["available"] is False and "install it" in report["reason"]
