"""One typed settings model for the whole app.

Each group is a frozen pydantic model; field descriptions double as tooltips in the settings
panel. Reading and writing the TOML file lives in :mod:`app.settings_store`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


EngineKind = Literal["echo", "moss_speech", "remote"]
ComputeDevice = Literal["auto", "cuda", "cpu", "npu"]
Precision = Literal["bf16", "int8", "int4", "fp32"]
OutputModality = Literal["audio", "text"]
ListenMode = Literal["always_listening", "push_to_talk"]
EchoMode = Literal["automatic", "headset", "half_duplex"]
FirstHop = Literal["aggressive", "aligned"]


class EngineSettings(_Group):
    kind: EngineKind = Field(
        "echo",
        description="Which engine answers: 'moss_speech' (the model on this PC), 'remote' (a "
        "MOSS-Speech server, see Server address) or 'echo' (a demo that plays your own words "
        "back; no model needed).",
    )
    model_dir: Path | None = Field(None, description="Folder of OpenMOSS-Team/MOSS-Speech.")
    codec_dir: Path | None = Field(None, description="Folder of OpenMOSS-Team/MOSS-Speech-Codec.")
    voice_prompt: Path | None = Field(
        None, description="WAV or FLAC file (1–60 s) whose voice the replies use."
    )
    device: ComputeDevice = Field(
        "auto", description="Where the model runs; 'auto' picks CUDA, then NPU, then CPU."
    )
    precision: Precision = Field(
        "bf16", description="Weight precision: bf16 (best quality), int8 or int4 (less memory)."
    )
    output_modality: OutputModality = Field(
        "audio", description="Answer in speech ('audio') or in text ('text')."
    )
    system_prompt: str = Field(
        "", description="Instruction given to the model; empty uses the model's default."
    )
    context_max_rows: int = Field(
        4096,
        ge=256,
        le=40960,
        description="Model context bound in grid rows (12.5 rows per second of speech); the "
        "oldest turns leave the model context, never the transcript.",
    )
    speculative_start: bool = Field(
        True, description="Start answering at a short pause; dropped silently if you go on."
    )
    speculative_pause_ms: int = Field(
        150, ge=50, le=2000, description="Pause after which a speculative answer starts."
    )
    # ---- engine.kind = "remote": MOSS-Speech served by sglang-omni (docs/remote-engine.md).
    # The optional API key is kept in the system keyring, never here.
    remote_url: str = Field(
        "",
        title="Server address",
        description="Remote engine: address of the MOSS-Speech server (sglang-omni), e.g. "
        "http://192.168.1.20:8000.",
    )
    remote_model: str = Field(
        "moss-speech", description="Remote engine: model name sent with each request."
    )
    remote_connect_timeout_s: float = Field(
        5.0, ge=0.1, le=120.0, description="Remote engine: how long to wait for a connection."
    )
    remote_first_audio_timeout_s: float = Field(
        60.0,
        ge=0.1,
        le=900.0,
        description="Remote engine: how long a reply may take to start (a busy server queues "
        "requests; about 2.5 s on an idle A800).",
    )
    remote_stall_timeout_s: float = Field(
        15.0,
        ge=0.05,
        le=600.0,
        description="Remote engine: a reply that sends nothing for this long is stopped.",
    )
    remote_busy_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="Remote engine: times a reply is asked again, with growing waits, while "
        "the server's queue is full (HTTP 503).",
    )
    remote_context_rows: int = Field(
        512,
        ge=64,
        le=40960,
        description="Remote engine: prompt rows the server accepts (the sglang-omni preset takes "
        "512, about 35 s of conversation); older turns leave the request beyond it.",
    )

    @field_validator("remote_url")
    @classmethod
    def _check_remote_url(cls, value: str) -> str:
        value = value.strip()
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the server address must start with http:// or https:// and name "
                             "a host, e.g. http://192.168.1.20:8000")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"the server address has a bad port: {exc}") from exc
        return value


class StreamingSettings(_Group):
    chunk_codes: Literal[5, 25] = Field(
        5,
        description="Chunk-trained flow checkpoint: 5 codes (0.4 s, lowest latency) or 25 codes "
        "(2 s, smoother seams).",
    )
    first_hop: FirstHop = Field(
        "aggressive",
        description="'aggressive' decodes the first audio as early as possible; 'aligned' "
        "waits for a full chunk aligned to the voice prompt.",
    )
    flow_cache_budget_mib: int = Field(
        1024,
        ge=0,
        le=131072,
        description="GPU memory (MiB) the voice decoder may keep to speak a reply at an even "
        "pace: about 110 MiB per second of voice prompt plus reply (fp16 on a GPU). Past it the "
        "reply sounds exactly the same, but each further piece takes longer to compute, so very "
        "long replies may stutter on a slow GPU. 0 = no limit (the longest reply's worth is set "
        "aside). The GPU memory check counts it.",
    )


class SamplingSettings(_Group):
    temperature: float = Field(0.6, ge=0.0, le=2.0, description="0 means greedy decoding.")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(20, ge=0, le=1000, description="Keep the k likeliest tokens; 0 = off.")
    repetition_penalty: float = Field(
        1.1, ge=1.0, le=2.0, description="Penalty on tokens already in the conversation."
    )
    max_new_rows: int = Field(
        500, ge=1, le=8192, description="Longest reply in rows (12.5 rows per second of speech)."
    )
    min_new_rows: int = Field(
        10, ge=0, le=1000, description="End of speech is not allowed before this many rows."
    )
    seed: int | None = Field(None, ge=0, description="Fixed seed for reproducible replies.")


class VadSettings(_Group):
    threshold: float = Field(
        0.5, gt=0.0, lt=1.0, description="Speech probability above which a frame is speech."
    )
    min_speech_ms: int = Field(
        250, ge=0, le=2000, description="Shorter bursts (clicks, coughs) do not start a turn, "
        "unless the detector is sure they are speech (a one-word answer)."
    )
    endpoint_silence_ms: int = Field(
        500, ge=100, le=5000, description="Silence that ends your turn (without the "
        "end-of-turn model, or when it answers late)."
    )
    # Off by default, as pipecat's and OpenAI's semantic turn detection are: on the real-speech
    # corpus it keeps 9 of 12 thinking pauses inside the turn (silence alone: 3) and splits 3
    # turns (silence: 9), answers finished turns sooner (448 / 556 ms against 548 / 612; a
    # session's first turns wait smart_warmup_silence_ms), but starts replies it must take back
    # (3 in the dialogues, 1 of 71 unattended ones withdrawn by its own echo), and leaves
    # finished German sentences waiting
    # (BENCHMARKS.md, "Turn-taking on real speech", 2026-11-26/27, sixth to tenth sessions).
    smart_endpoint: bool = Field(
        False, description="Ask the end-of-turn model at each pause whether you have finished: "
        "a finished sentence is answered at once, a thinking pause is waited through."
    )
    smart_pause_ms: int = Field(
        150, ge=60, le=1000, description="Silence after which the end-of-turn model is asked."
    )
    smart_tail_ms: int = Field(
        0, ge=0, le=1000, description="How much of the pause after your last word the "
        "end-of-turn model hears (with more, it takes the silence itself for a finished turn)."
    )
    smart_long_silence_ms: int = Field(
        1800, ge=300, le=10000, description="Longest silence waited when the model is sure you "
        "have not finished."
    )
    smart_threshold: float = Field(
        0.85, gt=0.0, lt=1.0, description="Model probability above which the turn is finished "
        "and answered at once (higher: fewer answers that start at a pause inside a sentence "
        "and stop when you go on; slower answers)."
    )
    # 400: the session's first turns (the canceller warming up) end 100 ms sooner than by
    # silence, past the corpus's longest pause inside a sentence; on the real-speech corpus the
    # median reply after a finished turn went 547 -> 472 ms with no more split turns; 350 and 300
    # answered sooner (422, 378 ms) but 300 split three sentences at 400 ms pauses in rain and
    # echo rooms and 350 took one reply back from its own echo (BENCHMARKS.md, 2026-11-26);
    # measured again once an early end waited for sound coming back (ninth session): 300
    # answered in 362 ms with one split more, 350 in 412 ms with an unattended self-interruption.
    smart_warmup_silence_ms: int = Field(
        400, ge=60, le=2000, description="Silence after which a turn the model calls finished "
        "is answered while the echo canceller is still learning the room (a session's first "
        "replies): then you going on over an early answer might not be heard."
    )
    # 0.3: on the real-speech corpus, with the model hearing the words up to the last one
    # (smart_tail_ms 0), finished sentences scored 0.56-0.98 and half sentences 0.03-0.8;
    # 0.2 -> 0.3 kept 8 thinking pauses of 12 instead of 7 and changed no other figure;
    # 0.35 kept 9 but lost an unattended turn (BENCHMARKS.md, 2026-11-26).
    smart_unfinished_threshold: float = Field(
        0.3, gt=0.0, lt=1.0, description="Model probability under which you have surely not "
        "finished: only then is the longest silence waited (otherwise the endpoint silence)."
    )
    pre_roll_ms: int = Field(
        300, ge=0, le=2000, description="Audio kept from before the detected onset."
    )


class TurnSettings(_Group):
    mode: ListenMode = Field(
        "always_listening", description="Always listening, or push-to-talk (hold a key)."
    )
    barge_in: bool = Field(True, description="Talking over a reply stops it.")
    # 64 (two VAD frames; was 96): on the real-speech corpus every stop came 30 ms sooner
    # (silent at the speaker 150 -> 120 ms median) with the same self-interruptions over 119
    # unattended echo-room replies and, by silence, the same false interruptions (with the
    # end-of-turn model two more, in one room); 32 lost a stop and self-interrupted once more
    # (BENCHMARKS.md, turn-taking, 2026-11-26 fifth session).
    barge_in_min_speech_ms: int = Field(
        64,
        ge=0,
        le=1000,
        description="Speech needed to confirm a barge-in; shorter sounds only duck the reply.",
    )
    hold_to_talk_key: str = Field("Space", min_length=1, description="Key held to talk.")
    max_user_turn_s: float = Field(
        60.0,
        ge=5.0,
        le=600.0,
        description="Longest user turn: past it the turn ends as if you had paused (a stuck "
        "voice detector or a TV in the room cannot hold the floor forever).",
    )


class EchoSettings(_Group):
    mode: EchoMode = Field(
        "automatic",
        description="'automatic' cancels the speaker's echo; 'headset' turns that off; "
        "'half_duplex' never listens while the assistant speaks (no barge-in).",
    )


class AudioSettings(_Group):
    input_device: str | None = Field(None, description="Microphone by name; empty = default.")
    output_device: str | None = Field(None, description="Speaker by name; empty = default.")
    playback_start_ms: int = Field(
        80,
        ge=0,
        le=2000,
        description="Reply audio buffered before playback starts (guards against stutter).",
    )


class TranscriptSettings(_Group):
    text_branch: bool = Field(
        True, description="Fill the transcript with the model's own text branch."
    )
    save_recordings: bool = Field(False, description="Keep WAV recordings of each session.")
    recordings_dir: Path | None = Field(
        None, description="Where recordings go; empty = the app's data folder."
    )


class DownloadSettings(_Group):
    send_hf_token: bool = Field(
        False,
        title="Send Hugging Face token",
        description="Send your Hugging Face login token with model downloads (to huggingface.co, "
        "or to the mirror named in HF_ENDPOINT). The models are public: leave this off unless "
        "your mirror needs a login.",
    )


class UiSettings(_Group):
    first_run_done: bool = Field(False, description="The first-run screen was completed.")


# Settings the engine is built from: changing one of them rebuilds (reloads) the engine on its
# worker while the current one keeps answering. Every other change reaches the running engine
# through ``Engine.apply_settings`` (sampling, system prompt, output modality, context bound,
# streaming chunk and first hop).
ENGINE_BUILD_KEYS = frozenset({"engine.kind", "engine.model_dir", "engine.codec_dir",
                               "engine.device", "engine.precision", "engine.voice_prompt",
                               "engine.remote_url"})
# Build inputs an engine that is already running the wanted model takes in place
# (``Engine.apply_settings``; a voice is seconds to prepare, a model reload much longer).
IN_PLACE_BUILD_KEYS = frozenset({"engine.voice_prompt"})
# Settings that decide whether a build can succeed at all (the voice is needed only for spoken
# replies; the context bound and flow-cache budget count in the memory check): while the wanted
# engine is not running because its build failed, changing one of them tries again.
BUILD_OUTCOME_KEYS = ENGINE_BUILD_KEYS | {"engine.output_modality", "engine.context_max_rows",
                                          "streaming.flow_cache_budget_mib",
                                          "sampling.max_new_rows"}


class Settings(_Group):
    """Everything a person can set. Immutable: use ``model_copy(update=...)`` to change."""

    schema_version: int = Field(1, ge=1)
    engine: EngineSettings = EngineSettings()
    streaming: StreamingSettings = StreamingSettings()
    sampling: SamplingSettings = SamplingSettings()
    vad: VadSettings = VadSettings()
    turn: TurnSettings = TurnSettings()
    echo: EchoSettings = EchoSettings()
    audio: AudioSettings = AudioSettings()
    transcript: TranscriptSettings = TranscriptSettings()
    downloads: DownloadSettings = DownloadSettings()
    ui: UiSettings = UiSettings()

    def with_value(self, dotted_key: str, value: object) -> Settings:
        """Return a validated copy with one ``group.field`` changed (raises ValueError)."""
        return self.with_values({dotted_key: value})

    def with_values(self, values: Mapping[str, object]) -> Settings:
        """Return a validated copy with each ``group.field`` in ``values`` changed (raises
        ValueError): several changes that belong together, validated once."""
        data = self.model_dump()
        for dotted_key, value in values.items():
            group_name, _, field_name = dotted_key.partition(".")
            if group_name not in data or not isinstance(data[group_name], dict):
                raise ValueError(f"{dotted_key}: no such settings group")
            if field_name not in data[group_name]:
                raise ValueError(f"{dotted_key}: no such setting")
            data[group_name][field_name] = value
        return Settings.model_validate(data)


def changed_keys(old: Settings, new: Settings) -> list[str]:
    """The ``group.field`` keys whose values differ between two settings."""
    a, b = old.model_dump(), new.model_dump()
    return [f"{g}.{k}" for g in b if isinstance(b[g], dict)
            for k in b[g] if a.get(g, {}).get(k) != b[g][k]]


def rebuild_keys(old: Settings, new: Settings, engine_running: bool = True) -> list[str]:
    """The changed keys that make going from ``old`` to ``new`` rebuild the engine.

    ``engine_running``: the engine ``old`` names is the one answering (False while the echo demo
    stands in for a model that could not be loaded: then any change that can decide the build's
    outcome tries again, so choosing the missing voice loads the model at once)."""
    wanted = BUILD_OUTCOME_KEYS if not engine_running else ENGINE_BUILD_KEYS - IN_PLACE_BUILD_KEYS
    return [key for key in changed_keys(old, new) if key in wanted]


def needs_engine_rebuild(old: Settings, new: Settings, engine_running: bool = True) -> bool:
    return bool(rebuild_keys(old, new, engine_running))
