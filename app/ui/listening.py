"""What the window says about listening: one place decides, the header, the talk controls and
the status bar all show its answer, so they never contradict each other.

The answer follows the conversation state the voice loop reports, the listening mode, mute,
and the devices that really exist: with no microphone nothing says "Listening" (and holding the
talk key does not pretend "You are speaking"); before the voice loop reported anything, the
window says it is starting, not "Not listening".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.events import ConversationState
from app.settings import ListenMode

STATE_TEXT = {
    ConversationState.IDLE: "Not listening",
    ConversationState.LISTENING: "Listening",
    ConversationState.USER_SPEAKING: "You are speaking",
    ConversationState.ENDPOINTING: "You are speaking",
    ConversationState.RESPONDING: "Thinking",
    ConversationState.SPEAKING: "Speaking",
    ConversationState.INTERRUPTED: "Interrupted",
}
MODE_TEXT = {"always_listening": "Always listening", "push_to_talk": "Push-to-talk"}
GREY, RED = "#8a8a8a", "#c0392b"
STATE_COLORS = {
    ConversationState.IDLE: GREY,
    ConversationState.LISTENING: "#2e9d57",
    ConversationState.USER_SPEAKING: "#1f78d1",
    ConversationState.ENDPOINTING: "#1f78d1",
    ConversationState.RESPONDING: "#d48806",
    ConversationState.SPEAKING: "#8e44ad",
    ConversationState.INTERRUPTED: RED,
}


@dataclass(frozen=True)
class Listening:
    """Everything the listening display depends on."""

    mode: ListenMode = "always_listening"
    hold_key: str = "Space"
    loop: str = "none"  # "none" (no voice loop), "starting", "running"
    state: ConversationState | None = None  # None until the voice loop reported one
    muted: bool = False
    microphone: str | None = None  # the open microphone's name; None = unknown yet
    has_microphone: bool = True  # False once the voice loop said none is open
    has_speaker: bool = True

    def with_state(self, state: ConversationState) -> Listening:
        return replace(self, state=state, loop="running")

    @property
    def can_hear(self) -> bool:
        """A running voice loop with a microphone that is not muted."""
        return self.loop == "running" and self.has_microphone and not self.muted


@dataclass(frozen=True)
class Shown:
    header: str  # the big indicator
    color: str
    status: str  # the status bar's listening field
    tooltip: str


def describe(listening: Listening) -> Shown:
    """The one answer the header, the controls and the status bar show."""
    mode = MODE_TEXT[listening.mode]
    key = listening.hold_key
    if listening.loop == "none":
        return Shown("Not listening", GREY, f"{mode} — not listening",
                     "No voice loop is running, so nothing is heard.")
    if listening.loop == "running" and not listening.has_microphone:
        return Shown("No microphone", RED, f"{mode} — no microphone",
                     "No microphone is open, so nothing can be heard. Connect one or choose "
                     "one in Settings → Audio devices.")
    if listening.muted:
        return Shown("Muted", GREY, f"{mode} — microphone muted",
                     "The microphone is muted: press Unmute microphone to talk.")
    state = listening.state
    if listening.loop == "starting" or state is None:
        return Shown("Starting…", GREY, f"{mode} — starting the microphone…",
                     "The voice loop is opening the microphone and speaker.")
    if state == ConversationState.IDLE:
        if listening.mode == "push_to_talk":
            return Shown(f"Hold {key} to talk", GREY, f"{mode} — hold {key} to talk",
                         f"Push-to-talk: hold {key} (or the Hold to talk button) while you "
                         "speak.")
        return Shown("Paused", GREY, f"{mode} — paused",
                     "Listening is paused for a moment (a recording or the acoustic check).")
    text = STATE_TEXT[state]
    return Shown(text, STATE_COLORS[state], mode if text == "Listening" else f"{mode} — "
                 f"{text.lower()}", f"Conversation state: {state.value}")
