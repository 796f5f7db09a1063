"""The words of the settings panel: page layout, labels, one-line help and choice names.

The settings model (app.settings) stays the source of truth for keys, types, bounds and the
long descriptions (tooltips); this module only says how they read to a person. A field with no
entry here still gets a label from its name and a help line from its description's first
sentence, so a new setting shows up by itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    key: str
    title: str
    intro: str
    groups: tuple[str, ...]


PAGES = (
    Page("engine", "Model and voice", "Which engine answers, where the model is, and the voice "
         "its replies speak in. Changing the folders, voice, device or precision reloads the "
         "engine while the conversation goes on.", ("engine",)),
    Page("replies", "Replies", "How replies are chosen (sampling) and streamed to the speaker.",
         ("sampling", "streaming")),
    Page("listening", "Listening and turns", "When your turn starts and ends, and how you "
         "interrupt the assistant.", ("vad", "turn")),
    Page("echo", "Echo handling", "With speakers, the microphone hears the assistant too. The "
         "app cancels that echo, or you can use a headset.", ("echo",)),
    Page("audio", "Audio devices", "The microphone and speaker the conversation uses.",
         ("audio",)),
    Page("transcript", "Transcript and recordings", "What is written down and kept.",
         ("transcript",)),
)
GROUP_TITLES = {"engine": "Engine", "streaming": "Streaming", "sampling": "Sampling",
                "vad": "Voice detection", "turn": "Turn-taking", "echo": "Echo handling",
                "audio": "Devices", "transcript": "Transcript & recordings",
                "ui": "Interface"}
# Bookkeeping the app sets itself; not a choice a person makes in the panel.
HIDDEN_FIELDS = frozenset({"ui.first_run_done"})
# Settings this version does not act on yet: shown disabled, and the help line says so.
NOT_AVAILABLE = {
    "transcript.save_recordings": "Not available yet: this version does not save session "
                                  "recordings.",
    "transcript.recordings_dir": "Not available yet (see Save recordings).",
}
# Set-up, not preferences: "Restore defaults" leaves them as they are.
KEPT_ON_RESTORE = frozenset({"engine.kind", "engine.model_dir", "engine.codec_dir",
                             "engine.voice_prompt"})

LABELS = {
    "engine.kind": "Engine",
    "engine.voice_prompt": "Voice",
    "engine.device": "Runs on",
    "engine.output_modality": "Reply with",
    "engine.system_prompt": "Instructions",
    "engine.context_max_rows": "Context length (rows)",
    "engine.speculative_start": "Start answering early",
    "engine.speculative_pause_ms": "Early-start pause (ms)",
    "engine.remote_url": "Server address",
    "engine.remote_model": "Server model name",
    "engine.remote_connect_timeout_s": "Connect timeout (s)",
    "engine.remote_first_audio_timeout_s": "First-audio timeout (s)",
    "engine.remote_stall_timeout_s": "Stall timeout (s)",
    "engine.remote_busy_retries": "Retries when busy",
    "engine.remote_context_rows": "Server context (rows)",
    "streaming.chunk_codes": "Voice chunk size",
    "streaming.first_hop": "First audio",
    "sampling.max_new_rows": "Longest reply (rows)",
    "sampling.min_new_rows": "Shortest reply (rows)",
    "vad.threshold": "Speech threshold",
    "vad.min_speech_ms": "Shortest speech (ms)",
    "vad.pre_roll_ms": "Audio kept before speech (ms)",
    "turn.mode": "Listening",
    "turn.barge_in": "Interrupt by talking",
    "turn.barge_in_min_speech_ms": "Speech to interrupt (ms)",
    "turn.hold_to_talk_key": "Talk key",
    "turn.max_user_turn_s": "Longest turn (s)",
    "echo.mode": "Echo handling",
    "audio.input_device": "Microphone",
    "audio.output_device": "Speaker",
    "audio.playback_start_ms": "Buffer before playback (ms)",
    "transcript.text_branch": "Transcribe",
}

HELP = {
    "engine.kind": "The MOSS-Speech model on this PC or on a server answers; the echo demo only "
                   "plays your words back.",
    "engine.model_dir": "Set up in the model manager (Settings → Model manager), which checks "
                        "the folder.",
    "engine.codec_dir": "Turns the model's speech codes into sound; set up in the model manager.",
    "engine.voice_prompt": "A 1–60 s WAV or FLAC recording: replies speak in this voice.",
    "engine.remote_url": "With a MOSS-Speech server: its address, e.g. http://gpu-box:8000.",
    "engine.device": "Automatic picks an NVIDIA GPU, then an Ascend NPU, then the CPU (slow).",
    "engine.precision": "bf16 sounds best; int8 and int4 need less GPU memory.",
    "engine.output_modality": "Spoken replies, or written replies in the transcript.",
    "engine.system_prompt": "Told to the model before the conversation; empty uses its own.",
    "engine.context_max_rows": "How much the model remembers: 12.5 rows per second of speech "
                               "(4096 ≈ 5 min).",
    "engine.speculative_start": "Works on a reply during a short pause; dropped if you go on.",
    "engine.speculative_pause_ms": "The pause after which the early reply starts.",
    "streaming.chunk_codes": "Smaller chunks start speaking sooner; larger ones join more "
                             "smoothly.",
    "streaming.first_hop": "As early as possible gives the first sound soonest; aligned waits "
                           "for a whole chunk.",
    "streaming.flow_cache_budget_mib": "GPU memory the voice decoder keeps for an even pace "
                                       "(0 = no limit).",
    "sampling.temperature": "Higher is more varied; 0 always picks the likeliest (greedy).",
    "sampling.top_p": "Sample only from the likeliest choices that make up this share.",
    "sampling.top_k": "Sample only from this many likeliest choices; 0 = no limit.",
    "sampling.repetition_penalty": "Above 1 discourages repeating what was already said.",
    "sampling.max_new_rows": "Longest reply: 12.5 rows per second (500 ≈ 40 s).",
    "sampling.min_new_rows": "A reply cannot end before this many rows.",
    "sampling.seed": "The same seed gives the same reply; empty = different each time.",
    "vad.threshold": "How sure the detector must be that a sound is speech; raise it when "
                     "noisy.",
    "vad.min_speech_ms": "Shorter sounds (clicks, coughs) do not start a turn; a short word "
                         "the detector is sure of (\"yes\", \"two\") does.",
    "vad.endpoint_silence_ms": "Silence that ends your turn; longer lets you pause to think.",
    "vad.pre_roll_ms": "Kept from before speech was noticed, so the first syllable is not cut.",
    "turn.mode": "Always listening answers when you pause; push-to-talk listens while you hold "
                 "the key.",
    "turn.barge_in": "Talking over a reply stops it.",
    "turn.barge_in_min_speech_ms": "Shorter sounds only lower the reply's volume for a moment.",
    "turn.hold_to_talk_key": "Held to talk in push-to-talk mode: Space, F9, Ctrl+Space…",
    "turn.max_user_turn_s": "A turn ends after this long even without a pause (a TV, a stuck "
                            "detector).",
    "echo.mode": "Automatic suits speakers; choose Headset when the microphone cannot hear "
                 "the reply.",
    "audio.input_device": "The level meter moves when the microphone hears you.",
    "audio.output_device": "Test tone plays a short beep on it.",
    "audio.playback_start_ms": "Reply audio collected before playing; more guards against "
                               "stutter.",
    "transcript.text_branch": "Writes both sides of the conversation down, using the model.",
    "transcript.save_recordings": "Keeps a WAV recording of each session.",
    "transcript.recordings_dir": "Empty = the app's data folder.",
}

CHOICES: dict[str, dict[object, str]] = {
    "engine.kind": {"moss_speech": "MOSS-Speech model", "remote": "MOSS-Speech server",
                    "echo": "Echo demo (no AI)"},
    "engine.device": {"auto": "Automatic", "cuda": "NVIDIA GPU (CUDA)",
                      "npu": "Ascend NPU", "cpu": "CPU (slow)"},
    "engine.output_modality": {"audio": "Speech", "text": "Text"},
    "streaming.chunk_codes": {5: "5 codes (0.4 s, lowest latency)",
                              25: "25 codes (2 s, smoother)"},
    "streaming.first_hop": {"aggressive": "As early as possible",
                            "aligned": "Aligned to the voice (a little later)"},
    "turn.mode": {"always_listening": "Always listening", "push_to_talk": "Push-to-talk"},
    "echo.mode": {"automatic": "Automatic (cancel the echo)",
                  "headset": "Headset (nothing to cancel)",
                  "half_duplex": "Half-duplex (no interrupting while it speaks)"},
}


def first_sentence(text: str) -> str:
    """The description's first sentence: up to the first '. ', else the first '; ', outside
    parentheses (one inside cut "… at once (higher: fewer answers …" off unclosed)."""
    for end in (". ", "; "):
        depth = 0
        for index, char in enumerate(text):
            depth += (char == "(") - (char == ")")
            if depth == 0 and text.startswith(end, index):
                return text[:index] + ("." if end == ". " else "")
    return text


def help_line(key: str, description: str) -> str:
    return HELP.get(key) or first_sentence(description)


def page_of(group_or_page: str) -> str | None:
    """The page that shows a settings group (or the page itself)."""
    for page in PAGES:
        if group_or_page == page.key or group_or_page in page.groups:
            return page.key
    return None
