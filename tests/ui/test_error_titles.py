"""Banner wording for the engine's own error categories."""

from __future__ import annotations

from app.events import ErrorReported
from app.ui.errors import describe_error


def test_engine_categories_have_a_title_and_the_right_button() -> None:
    text, button = describe_error(ErrorReported("voice_prompt", "No voice prompt is set.",
                                                "Choose a recording."))
    assert text.startswith("<b>The voice prompt cannot be used.</b> No voice prompt is set.")
    assert button == "Engine settings"
    text, button = describe_error(ErrorReported("slow_device", "Runs on the CPU.", ""))
    assert text.startswith("<b>Replies will be slow.</b>") and button == ""
