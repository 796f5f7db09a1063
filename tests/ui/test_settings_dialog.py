from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile
from pydantic import BaseModel, Field
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from app.engine.preflight import estimate, flow_cache_bytes_for
from app.events import (
    ApplySettings,
    AudioDevicesListed,
    InputLevelMeasured,
    ListAudioDevices,
    MonitorInputLevel,
    PlayTestTone,
    StartVoiceRecording,
    ToneTestFinished,
    VoiceRecordingFinished,
    VoiceRecordingProgressed,
)
from app.settings import Settings
from app.settings_store import load_settings
from app.ui.bridge import UiBridge
from app.ui.settings_dialog import SettingsDialog
from app.ui.settings_form import PathEditor, settings_fields
from app.ui.settings_widgets import DeviceEditor, PrecisionEditor, VoicePromptEditor
from tests.ui.conftest import (
    FakePort,
    done_first_run,
    fake_gpu,
    no_gpu,
    open_window,
    save_after_layout,
)


def open_dialog(qtbot: QtBot, port: FakePort | None = None, gpu=no_gpu,
                settings: Settings | None = None) -> tuple[SettingsDialog, list]:
    bridge = UiBridge(port)
    dialog = SettingsDialog(settings or Settings(), bridge, gpu_query=gpu)
    qtbot.addWidget(dialog)
    applied: list = []
    dialog.applied.connect(lambda s, reload: applied.append((s, reload)))
    dialog.show()
    qtbot.waitExposed(dialog)
    return dialog, applied


def test_every_setting_has_an_editor_with_its_description(qtbot: QtBot,
                                                          screenshot_dir: Path) -> None:
    dialog, _ = open_dialog(qtbot, gpu=fake_gpu(23.0))
    precision = dialog.editors["engine.precision"]
    assert isinstance(precision, PrecisionEditor)
    qtbot.waitUntil(lambda: precision.gpu is not None)
    expected = {f"{g}.{n}" for g, info in Settings.model_fields.items()
                if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
                for n in info.annotation.model_fields}
    assert set(dialog.editors) == expected - {"ui.first_run_done"}  # bookkeeping, not shown
    for key, editor in dialog.editors.items():
        group, name = key.split(".")
        description = type(getattr(Settings(), group)).model_fields[name].description
        assert editor.widget.toolTip().startswith(description), key
        help_line = dialog.rows[key].help  # one line under every field, not only a tooltip
        assert help_line.text() and not help_line.isHidden(), key
        # cut at a sentence's end, never inside parentheses ("at once (higher: … go on")
        assert help_line.text().count("(") == help_line.text().count(")"), key
    labels = {f.key: f.label for fields in settings_fields().values() for f in fields}
    assert labels["vad.endpoint_silence_ms"] == "Endpoint silence (ms)"
    assert labels["engine.context_max_rows"] == "Context length (rows)"
    assert labels["streaming.flow_cache_budget_mib"] == "Flow cache budget (MiB)"
    assert "12.5 rows per second" in dialog.rows["engine.context_max_rows"].help.text()
    kind = dialog.editors["engine.kind"]
    assert [kind.widget.itemText(i) for i in range(kind.widget.count())] == [
        "Echo demo (no AI)", "MOSS-Speech model", "MOSS-Speech server"]
    dialog.show_group("engine")
    save_after_layout(qtbot, dialog, screenshot_dir / "settings_engine.png",
                      (dialog.editors["engine.precision"].widget,))
    dialog.show_group("vad")  # a settings group shows the page it is on
    assert dialog.current_page() == "listening"
    save_after_layout(qtbot, dialog, screenshot_dir / "settings_listening.png",
                      (dialog.editors["vad.endpoint_silence_ms"].widget,))


def test_a_new_field_appears_by_itself() -> None:
    class ExtraGroup(BaseModel):
        loudness_db: float = Field(0.0, ge=-20, le=20, description="Reply loudness.")

    class Extended(Settings):
        extra: ExtraGroup = ExtraGroup()

    fields = settings_fields(Extended)
    assert [f.key for f in fields["extra"]] == ["extra.loudness_db"]
    assert fields["extra"][0].label == "Loudness (dB)" or fields["extra"][0].label.startswith(
        "Loudness")


def test_pydantic_messages_block_apply_until_fixed(qtbot: QtBot) -> None:
    dialog, applied = open_dialog(qtbot)
    dialog.editors["sampling.top_p"].set_value(0.0)
    assert "greater than 0" in dialog.errors["sampling.top_p"]
    assert not dialog.error_labels["sampling.top_p"].isHidden()
    assert not dialog.apply_button.isEnabled()
    assert "⚠" in dialog.group_list.item(dialog.groups.index("replies")).text()
    assert not dialog.ok_button.isEnabled()
    dialog.editors["sampling.seed"].set_value("abc")
    assert "valid integer" in dialog.errors["sampling.seed"]
    dialog.editors["turn.hold_to_talk_key"].set_value("")
    assert "at least 1 character" in dialog.errors["turn.hold_to_talk_key"]
    dialog.editors["turn.hold_to_talk_key"].set_value("NotAKey")
    assert "not a key name" in dialog.errors["turn.hold_to_talk_key"]
    assert dialog.apply() is False and applied == []
    dialog.editors["sampling.top_p"].set_value(0.9)
    dialog.editors["sampling.seed"].set_value("7")
    dialog.editors["turn.hold_to_talk_key"].set_value("F9")
    assert dialog.errors == {} and dialog.apply_button.isEnabled()
    assert dialog.apply() is True
    settings, reload = applied[-1]
    assert (settings.sampling.top_p, settings.sampling.seed, reload) == (0.9, 7, False)
    assert settings.turn.hold_to_talk_key == "F9"


def test_live_apply_through_the_main_window(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port, gpu_query=no_gpu)
    window.open_settings("vad")
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    dialog.editors["vad.threshold"].set_value(0.65)
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    sent = port.commands_of(ApplySettings)[-1]
    assert sent.settings.vad.threshold == 0.65 and sent.reload_engine is False
    assert load_settings().settings.vad.threshold == 0.65
    assert window.settings.vad.threshold == 0.65


def test_engine_changes_apply_at_once_and_say_the_engine_reloads(qtbot: QtBot) -> None:
    dialog, applied = open_dialog(qtbot)
    dialog.editors["engine.precision"].set_value("int8")
    dialog.editors["vad.min_speech_ms"].set_value(300)
    assert "Applying Precision reloads the engine" in dialog.status.text()
    assert dialog.apply() is True  # no second question, no restart
    settings, _reload = applied[-1]
    assert settings.engine.precision == "int8" and settings.vad.min_speech_ms == 300
    assert "the engine is reloading" in dialog.status.text()
    dialog.editors["sampling.temperature"].set_value(0.8)
    assert "reloads" not in dialog.status.text()  # a live setting: nothing to reload


def test_a_new_voice_reloads_only_an_engine_that_is_not_running(qtbot: QtBot,
                                                               tmp_path: Path) -> None:
    voice = tmp_path / "voice.wav"
    soundfile.write(voice, np.zeros(16000 * 6, np.float32), 16000)
    running = [True]
    dialog = SettingsDialog(Settings().with_value("engine.kind", "moss_speech"), UiBridge(),
                            gpu_query=no_gpu, engine_running=lambda: running[0])
    qtbot.addWidget(dialog)
    dialog.editors["engine.voice_prompt"].set_value(voice)
    assert "reloads" not in dialog.status.text()  # the running model takes a voice in place
    running[0] = False  # the model could not be loaded (e.g. for want of this voice)
    dialog.validate()
    assert "Applying Voice reloads the engine" in dialog.status.text()


def test_restore_defaults_resets_the_shown_page_only(qtbot: QtBot, tmp_path: Path) -> None:
    settings = (Settings().with_value("vad.threshold", 0.8).with_value("sampling.top_k", 5)
                .with_value("engine.model_dir", tmp_path).with_value("engine.precision", "int4"))
    dialog, applied = open_dialog(qtbot, settings=settings)
    dialog.show_group("listening")
    qtbot.mouseClick(dialog.restore_button, Qt.MouseButton.LeftButton)
    assert dialog.value_of("vad.threshold") == 0.5 and dialog.value_of("sampling.top_k") == 5
    assert applied == []  # nothing applies until Apply or OK
    dialog.show_group("engine")
    dialog.restore_defaults()
    assert dialog.value_of("engine.precision") == "bf16"
    assert dialog.value_of("engine.model_dir") == tmp_path  # set-up is kept
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert applied == [] and not dialog.isVisible()  # Cancel drops what was not applied


def test_precision_choices_show_vram_and_what_fits(qtbot: QtBot) -> None:
    dialog, _ = open_dialog(qtbot, gpu=fake_gpu(16.0))
    editor = dialog.editors["engine.precision"]
    assert isinstance(editor, PrecisionEditor)
    qtbot.waitUntil(lambda: editor.gpu is not None)
    texts = [editor.combo.itemText(i) for i in range(editor.combo.count())]
    bf16 = estimate("bf16", 4096).total_bytes / 2**30
    assert texts[0].startswith(f"bf16 — about {bf16:.1f} GiB") and "too big" in texts[0]
    assert "fits" in texts[1] and texts[1].startswith("int8")
    assert "Recommended: int8" in editor.note.text()
    dialog.editors["engine.context_max_rows"].set_value(40960)  # the KV cache grows
    assert editor.combo.itemText(0) != texts[0]


def test_precision_estimates_follow_the_flow_cache_budget(qtbot: QtBot) -> None:
    """The labels count what the engine's preflight counts: with no budget, the voice decoder's
    state for the longest reply (about 220 MiB per second)."""
    dialog, _ = open_dialog(qtbot, gpu=fake_gpu(23.0))
    editor = dialog.editors["engine.precision"]
    assert isinstance(editor, PrecisionEditor)
    qtbot.waitUntil(lambda: editor.gpu is not None)
    assert "bf16 — about" in editor.combo.itemText(0) and "fits" in editor.combo.itemText(0)
    dialog.editors["streaming.flow_cache_budget_mib"].set_value(0)
    settings, _ = dialog.candidate()
    assert settings is not None
    need = estimate("bf16", 4096, flow_cache_bytes=flow_cache_bytes_for(settings))
    assert editor.combo.itemText(0) == f"bf16 — about {need.total_bytes / 2**30:.1f} GiB  ✗ too big"
    assert "flow cache" in editor.combo.toolTip()


def test_voice_prompt_file_is_checked(qtbot: QtBot, tmp_path: Path) -> None:
    dialog, _ = open_dialog(qtbot)
    editor = dialog.editors["engine.voice_prompt"]
    not_audio = tmp_path / "voice.wav"
    not_audio.write_text("not audio")
    editor.set_value(not_audio)
    assert "not an audio file" in dialog.errors["engine.voice_prompt"]
    short = tmp_path / "short.wav"
    soundfile.write(short, np.zeros(8000, np.float32), 16000)
    editor.set_value(short)
    assert "0.5 s long" in dialog.errors["engine.voice_prompt"]
    good = tmp_path / "good.flac"
    soundfile.write(good, np.zeros(16000 * 6, np.float32), 16000)
    editor.set_value(good)
    assert "engine.voice_prompt" not in dialog.errors


def test_voice_recording_goes_through_the_voice_loop(qtbot: QtBot, port: FakePort,
                                                     tmp_path: Path) -> None:
    dialog, _ = open_dialog(qtbot, port)
    recorder = dialog.open_voice_recorder()
    qtbot.mouseClick(recorder.start_button, Qt.MouseButton.LeftButton)
    start = port.commands_of(StartVoiceRecording)[-1]
    assert (start.min_duration_s, start.max_duration_s) == (5.0, 15.0)
    assert start.path.suffix == ".wav" and start.path.parent.is_dir()
    port.emit(VoiceRecordingProgressed(2.5, -20.0))
    qtbot.waitUntil(lambda: recorder.elapsed.text() == "2.5 s")
    port.emit(VoiceRecordingFinished(None, 3.0, ""))
    qtbot.waitUntil(lambda: "Too short" in recorder.message.text())
    wav = tmp_path / "take.wav"
    soundfile.write(wav, np.zeros(16000 * 7, np.float32), 16000)
    port.emit(VoiceRecordingFinished(wav, 7.0))
    qtbot.waitUntil(lambda: dialog.value_of("engine.voice_prompt") == wav)
    assert "engine.voice_prompt" not in dialog.errors
    assert "Read the text below" in recorder.findChild(QLabel, "recordingScript").parent() \
        .findChildren(QLabel)[0].text()
    qtbot.mouseClick(recorder.play_button, Qt.MouseButton.LeftButton)  # playback of the take
    assert port.commands_of(PlayTestTone)[-1] == PlayTestTone(None, path=wav)
    port.emit(ToneTestFinished(None, True))
    qtbot.waitUntil(recorder.play_button.isEnabled)
    assert "Played back" in recorder.message.text()


def test_the_audio_page_says_when_no_device_was_found(qtbot: QtBot, port: FakePort) -> None:
    dialog, _ = open_dialog(qtbot, port)
    port.emit(AudioDevicesListed((), ()))
    mic = dialog.editors["audio.input_device"]
    assert isinstance(mic, DeviceEditor) and mic.meter is not None
    qtbot.waitUntil(lambda: mic.found == ())
    assert "No microphone found" in mic.status.text() and "Refresh" in mic.status.text()
    assert mic.meter.format() == "no microphone"
    qtbot.mouseClick(mic.refresh_button, Qt.MouseButton.LeftButton)
    assert len(port.commands_of(ListAudioDevices)) == 2


def test_devices_meter_and_test_tone_via_the_port(qtbot: QtBot, port: FakePort,
                                                   screenshot_dir: Path) -> None:
    dialog, _ = open_dialog(qtbot, port)
    assert port.commands_of(ListAudioDevices) == [ListAudioDevices()]
    assert port.commands_of(MonitorInputLevel) == [MonitorInputLevel(None, True)]
    port.emit(AudioDevicesListed(("Built-in Mic", "USB Mic"), ("Speakers", "Headset")))
    mic = dialog.editors["audio.input_device"]
    speaker = dialog.editors["audio.output_device"]
    assert isinstance(mic, DeviceEditor) and isinstance(speaker, DeviceEditor)
    qtbot.waitUntil(lambda: mic.combo.count() == 3)
    mic.combo.setCurrentText("USB Mic")
    assert port.commands_of(MonitorInputLevel)[-1] == MonitorInputLevel("USB Mic", True)
    port.emit(InputLevelMeasured("USB Mic", -30.0, -12.0))
    assert mic.meter is not None
    qtbot.waitUntil(lambda: mic.meter.value() == -12)
    assert "Found 2 speakers: Speakers, Headset." in speaker.status.text()
    speaker.combo.setCurrentText("Headset")
    qtbot.mouseClick(speaker.tone_button, Qt.MouseButton.LeftButton)
    assert port.commands_of(PlayTestTone)[-1].device_name == "Headset"
    port.emit(ToneTestFinished("Headset", False, "device busy"))
    qtbot.waitUntil(lambda: "device busy" in speaker.status.text())
    assert "close programs that play sound" in speaker.status.text()  # the next step
    assert "good" in mic.meter.format() and "dBFS" in mic.meter.toolTip()
    dialog.show_group("audio")
    save_after_layout(qtbot, dialog, screenshot_dir / "settings_audio.png",
                      (mic.widget, speaker.status))
    dialog.close()
    assert port.commands_of(MonitorInputLevel)[-1] == MonitorInputLevel("USB Mic", False)
    assert dialog.candidate()[0].audio.input_device == "USB Mic"


def test_changes_made_outside_the_dialog_are_not_undone(qtbot: QtBot, port: FakePort) -> None:
    window = open_window(qtbot, done_first_run(), port, gpu_query=no_gpu)
    window.open_settings("sampling")
    dialog = window.settings_dialog
    assert isinstance(dialog, SettingsDialog)
    dialog.editors["sampling.temperature"].set_value(0.9)  # a pending edit of the person's
    window.controls.always_switch.setChecked(False)  # switched in the main window meanwhile
    assert dialog.value_of("turn.mode") == "push_to_talk"
    assert dialog.value_of("sampling.temperature") == 0.9
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    sent = port.commands_of(ApplySettings)[-1].settings
    assert sent.turn.mode == "push_to_talk" and sent.sampling.temperature == 0.9


def test_pickers_start_where_such_files_live_and_idle_settings_say_so(qtbot: QtBot) -> None:
    from app import paths
    from app.ui.voice_step import VoiceStep

    dialog, _ = open_dialog(qtbot)
    voice = dialog.editors["engine.voice_prompt"]
    model = dialog.editors["engine.model_dir"]
    assert isinstance(voice, VoicePromptEditor) and isinstance(model, PathEditor)
    assert voice.start_folder() == paths.voices_dir()  # not the home or working folder
    assert model.start_folder() == paths.models_dir()
    step = VoiceStep(UiBridge(), None)
    qtbot.addWidget(step)
    assert step.start_folder() == paths.voices_dir()
    recordings = dialog.rows["transcript.save_recordings"]
    assert "Not available yet" in recordings.help.text()  # a setting that does nothing says so
    assert not dialog.editors["transcript.save_recordings"].widget.isEnabled()
