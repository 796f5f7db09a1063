"""Banner wording: true for the situation, in words for people."""

from __future__ import annotations

from app.events import ErrorReported
from app.ui.errors import banner_key, describe_error


def test_engine_categories_have_a_title_and_the_right_button() -> None:
    text, button = describe_error(ErrorReported("voice_prompt", "No voice prompt is set.",
                                                "Choose a recording."))
    assert text.startswith("<b>No voice is chosen yet.</b> No voice prompt is set.")
    assert button == "Choose a voice"
    text, button = describe_error(ErrorReported("voice_prompt", "voice.wav is 0.5 s long."))
    assert text.startswith("<b>The voice cannot be used.</b>")
    text, button = describe_error(ErrorReported("slow_device", "Runs on the CPU.", ""))
    assert text.startswith("<b>Replies will be slow.</b>") and button == ""


def test_a_folder_never_chosen_is_not_a_folder_that_cannot_be_used() -> None:
    text, button = describe_error(ErrorReported("model_invalid", "no model folder is set."))
    assert text.startswith("<b>MOSS-Speech is not set up yet.</b>") and "cannot" not in text
    assert button == "Set up the model"
    text, button = describe_error(ErrorReported("model_invalid", "model: config.json is "
                                                "missing."))
    assert text.startswith("<b>The model folder cannot be used.</b>")
    assert button == "Open the model manager"


def test_exception_names_are_details_not_the_message() -> None:
    text, button = describe_error(ErrorReported("engine", "RuntimeError: CUBLAS failed"))
    assert "RuntimeError" not in text and "went wrong inside the engine" in text
    assert "conversation so far is kept" in text and button == "Reload the engine"
    text, _ = describe_error(ErrorReported("engine", "The engine raised RuntimeError."))
    assert "RuntimeError" not in text and "went wrong inside the engine" in text
    text, _ = describe_error(ErrorReported("out_of_memory", "OutOfMemoryError: CUDA out of "
                                           "memory. Tried to allocate 2.00 GiB"))
    assert "<b>The GPU ran out of memory.</b> CUDA out of memory" in text


def test_each_audio_cause_has_its_own_banner() -> None:
    keys = {banner_key(ErrorReported("audio", message)) for message in (
        "No microphone is available (none).", "No speaker is available (none).",
        "No audio devices: PortAudio library not found.")}
    assert keys == {"error-audio-input", "error-audio-output", "error-audio"}
