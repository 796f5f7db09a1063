from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.events import (
    ReplyFinished,
    ReplyStarted,
    TranscriptUpdated,
    UserSpeechStarted,
    UserTurnDropped,
    UserTurnEnded,
)
from app.ui.transcript_model import TranscriptModel
from app.ui.transcript_view import TranscriptView


def test_turns_stay_in_conversation_order_when_text_arrives_late() -> None:
    model = TranscriptModel()
    for event in (UserSpeechStarted(1, 0.0), UserTurnEnded(1, 1.5, 1.2), ReplyStarted(1, 2.0),
                  UserSpeechStarted(2, 4.0),  # next turn starts before the texts arrive
                  TranscriptUpdated(1, "assistant", "Hello there.", final=True),
                  TranscriptUpdated(1, "user", "Hi.", final=True)):
        model.apply(event)
    assert [(e.turn_id, e.role) for e in model.entries] == [
        (1, "user"), (1, "assistant"), (2, "user")]
    assert [e.text for e in model.entries] == ["Hi.", "Hello there.", ""]
    assert model.entries[2].status_text() == "listening…"
    assert model.entries[0].duration_s == 1.2


def test_text_fills_in_place_and_interruptions_are_marked(qtbot: QtBot) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.apply(UserSpeechStarted(1, 0.0))
    view.apply(UserTurnEnded(1, 1.0, 1.0))
    assert "transcribing" in view.bubble_texts()[0]
    view.apply(TranscriptUpdated(1, "user", "Tell me", final=False))
    view.apply(TranscriptUpdated(1, "user", "Tell me about Mars.", final=True))
    assert view.bubble_texts()[0] == "Tell me about Mars."
    view.apply(ReplyStarted(1, 2.0))
    assert "speaking" in view.bubble_texts()[1]
    view.apply(ReplyFinished(1, interrupted=True, heard_ms=1600.0))
    view.apply(TranscriptUpdated(1, "assistant", "Mars is the fourth", True, heard_ms=1600.0))
    texts = view.bubble_texts()
    assert len(texts) == 2  # filled in place, not appended
    assert "Mars is the fourth" in texts[1] and "interrupted after 1.6 s" in texts[1]
    assert view.model.to_text().splitlines()[1] == (
        "Assistant: Mars is the fourth [interrupted after 1.6 s]")


def test_text_replies_are_labelled(qtbot: QtBot) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.apply(TranscriptUpdated(3, "assistant", "A text answer.", final=True))
    bubble = view._bubbles[0]
    assert "text reply" in bubble.header.text()
    assert view.placeholder.isHidden()


def test_copy_and_export(qtbot: QtBot, tmp_path: Path) -> None:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.apply(TranscriptUpdated(1, "user", "Hi.", final=True))
    view.apply(TranscriptUpdated(1, "assistant", "Hello.", final=True))
    view.copy_to_clipboard()
    assert QApplication.clipboard().text() == "You: Hi.\nAssistant: Hello.\n"
    data = json.loads(view.export(tmp_path / "c.json").read_text(encoding="utf-8"))
    assert [(t["role"], t["text"]) for t in data["turns"]] == [("user", "Hi."),
                                                              ("assistant", "Hello.")]
    markdown = view.export(tmp_path / "c.md").read_text(encoding="utf-8")
    assert "**You:** Hi." in markdown and "**Assistant:** Hello." in markdown
    assert view.export(tmp_path / "c.txt").read_text(encoding="utf-8").startswith("You: Hi.")
    view.clear()
    assert view.model.entries == [] and not view.placeholder.isHidden()


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_every_transcribing_resolves_and_dropped_turns_are_said(qtbot: QtBot) -> None:
    clock = FakeClock()
    view = TranscriptView(model=TranscriptModel(clock=clock, wait_s=45.0))
    qtbot.addWidget(view)
    for event in (UserSpeechStarted(1, 0.0), UserTurnEnded(1, 1.0, 1.0), ReplyStarted(1, 1.5),
                  ReplyFinished(1, False, 2000.0), UserSpeechStarted(2, 3.0),
                  UserTurnDropped(2, 3.4)):
        view.apply(event)
    assert "transcribing" in view.bubble_texts()[0] and "transcribing" in view.bubble_texts()[1]
    assert "dropped (no reply)" in view.bubble_texts()[2]  # not "listening…" forever
    assert view.expiry_timer.isActive()
    clock.now_s += 44.0
    view.expire()
    assert "transcribing" in view.bubble_texts()[0]  # still within the wait
    view.apply(TranscriptUpdated(1, "assistant", "", final=True))  # the branch found nothing
    assert "no transcript" in view.bubble_texts()[1]
    clock.now_s += 2.0
    view.expire()
    assert "no transcript" in view.bubble_texts()[0]
    assert not view.expiry_timer.isActive()  # nothing waits any more
    view.apply(TranscriptUpdated(1, "user", "Late, but here.", final=True))
    assert view.bubble_texts()[0] == "Late, but here."  # text that comes later still shows
