"""``MossSpeechEngine``: the native model and codec behind the voice loop's engine interface.

Per user turn (all on the engine worker thread, the only one that touches the device):

1. while the user talks, ``feed_user_audio`` encodes their speech incrementally and prefills the
   rows heard so far on top of the cached conversation (:mod:`.user_audio`, :mod:`.memory`);
2. ``respond`` finishes the codes (only the last frames are left), prefills the rest of the
   prompt reusing every cached row, and streams the reply (:mod:`.speak`): rows → codes →
   codec stream decoder → ``ReplyAudio`` as soon as the first chunk exists;
3. ``reply_heard`` keeps what the user really heard: the heard audio is re-encoded into codes
   (as the reference re-encodes replies), the KV cache is rolled back to the prompt (the shared
   prefix) and only the heard turn is appended. A speculative reply that was dropped never
   reaches this point, so nothing of it stays in the history;
4. in idle moments the transcript passes run (:mod:`.transcripts`).

Nothing here is shared between threads; ``cancel`` is the only cross-thread signal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from app.engine.base import (
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyDone,
    ReplyFailed,
    StageTimed,
    UserTurn,
)
from app.engine.moss_speech import device as dev
from app.engine.moss_speech.codec import (
    CodecLoadError,
    VoiceConditioning,
    VoiceFileError,
)
from app.engine.moss_speech.codec.codec import OUTPUT_SAMPLE_RATE_HZ
from app.engine.moss_speech.decode_step import ms_since
from app.engine.moss_speech.generate import open_session, warm_session
from app.engine.moss_speech.memory import ContextFullError, ConversationMemory
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.parts import (
    EngineInputError,
    EngineParts,
    PrefillStat,
    no_voice_error,
)
from app.engine.moss_speech.prompt import Turn
from app.engine.moss_speech.sampling import Sampling
from app.engine.moss_speech.speak import ReplyRecord, StreamPolicy, speak, write
from app.engine.moss_speech.transcripts import TRANSCRIPT_MAX_ROWS, Transcriber
from app.engine.moss_speech.user_audio import UserAudio, encode_whole
from app.engine.preflight import flow_cache_bytes_for
from app.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A reply waiting for ``reply_heard`` (or to be dropped, if it was speculative)."""

    turn_id: int
    user: Turn
    prompt_rows: int  # rows shared by the prompt and the history that will follow
    modality: str
    record: ReplyRecord = field(default_factory=ReplyRecord)


def capacity_rows(settings: Settings, model: MossSpeechModel) -> int:
    return min(settings.engine.context_max_rows, model.config.max_position_embeddings)


class MossSpeechEngine(Engine):
    def __init__(self, parts: EngineParts, settings: Settings, *, decode_path: str = "auto",
                 transcript_rows: int = TRANSCRIPT_MAX_ROWS) -> None:
        self.parts = parts
        self.model, self.tokenizer, self.codec = parts.model, parts.tokenizer, parts.codec
        self.device = parts.device.device
        self.device_warning = parts.device.warning
        self.precision = self.model.precision
        self.capacity = capacity_rows(settings, self.model)
        self.session = open_session(self.model, self.capacity, decode_path)
        self._decode_path = self.session.decode.path  # still known after close()
        self.memory = ConversationMemory(self.tokenizer, self.capacity)
        self.transcriber = Transcriber(self.model, self.tokenizer, transcript_rows)
        self.reuse_voice_prefix = True  # the warm-up may turn it off for lack of memory
        self.last_prefill: PrefillStat | None = None  # rows reused / prefilled (diagnostics)
        self.last_reply: ReplyRecord | None = None
        self._voice = parts.voice
        self._voice_path = parts.voice_path
        self._feed: UserAudio | None = None
        self._pending: _Pending | None = None
        self._settings = settings
        self.apply_settings(settings)

    @property
    def info(self) -> EngineInfo:
        voice = f"voice {self._voice.source}" if self._voice is not None else "no voice prompt"
        return EngineInfo(name="MOSS-Speech", is_demo=False, device=str(self.device),
                          precision=self.precision,
                          detail=f"{voice}; context {self.capacity} rows; decode step: "
                                 f"{self.decode_path}",
                          warning=self.device_warning)

    @property
    def decode_path(self) -> str:
        """The decode step in use: compile, graph, static or eager (:mod:`.decode_policy`)."""
        return self._decode_path

    @property
    def voice(self) -> VoiceConditioning | None:
        return self._voice

    @property
    def settings(self) -> Settings:
        return self._settings

    # ---- settings ----------------------------------------------------------------------------

    def apply_settings(self, settings: Settings) -> None:
        """Sampling, prompt, modality, context bound, streaming and voice apply live.

        A voice file or context bound that cannot be used raises before anything changes."""
        engine = settings.engine
        voice = self._voice
        old_policy: StreamPolicy | None = getattr(self, "policy", None)
        policy = StreamPolicy.from_settings(settings, self.reuse_voice_prefix)
        # the voice state is per chunk size and memory bound
        voice_changed = engine.voice_prompt != self._voice_path or (
            old_policy is not None and old_policy != policy)
        if engine.voice_prompt != self._voice_path:
            voice = self._load_voice(engine.voice_prompt)
        if old_policy is not None:
            self._check_flow_cache_growth(settings)
        try:
            self.codec.flow(settings.streaming.chunk_codes)  # loads a new chunk checkpoint
        except CodecLoadError as exc:
            raise EngineInputError(str(exc), "Choose the other chunk size in Settings → "
                                   "Streaming, or download the codec again.", "engine") from exc
        capacity = capacity_rows(settings, self.model)
        if capacity != self.capacity:
            self._resize_context(capacity)
        self._voice, self._voice_path = voice, engine.voice_prompt
        self._settings = settings
        self.sampling = Sampling.coerce(settings.sampling)
        self.seed = settings.sampling.seed
        self.modality = engine.output_modality
        self.memory.configure(engine.system_prompt, engine.output_modality)
        self.policy = policy
        self.codec.release_flows(keep=settings.streaming.chunk_codes)  # only one is resident
        self.transcripts_on = settings.transcript.text_branch
        if not self.transcripts_on:
            self.transcriber.clear()
        dev.set_deterministic(self.device, self.seed is not None)
        if voice_changed:
            self.prepare_voice()

    def _check_flow_cache_growth(self, settings: Settings) -> None:
        """Refuse a flow-cache budget (or longest reply) whose extra memory the GPU does not
        have, before anything changes (the VRAM preflight counted the old one)."""
        growth = flow_cache_bytes_for(settings) - flow_cache_bytes_for(self._settings)
        dev.refuse_growth(self.device, growth, "The voice decoder",
                       "Keep a smaller Settings → Streaming → Flow cache budget or Sampling → "
                       "Max new rows, or choose a smaller precision.")

    def prepare_voice(self) -> None:
        """Build the voice prompt's flow state now (between turns), not in the next reply."""
        if self._voice is None or not self.policy.reuse_voice_prefix:
            self.codec.clear_caches()
            return
        self.policy.open(self.codec, self._voice).close()

    def set_reuse_voice_prefix(self, reuse: bool) -> None:
        """Keep (or stop keeping) the voice prompt's flow state between replies; off frees it
        (the warm-up turns it off when the GPU is short of memory)."""
        if reuse == self.reuse_voice_prefix:
            return
        self.reuse_voice_prefix = reuse
        self.policy = replace(self.policy, reuse_voice_prefix=reuse)
        self.prepare_voice()

    def _load_voice(self, path: Path | None) -> VoiceConditioning | None:
        if path is None:
            return None
        try:
            return self.codec.voice(path)
        except VoiceFileError as exc:
            raise EngineInputError(str(exc), "Choose another file in Settings → Engine → "
                                   "Voice prompt.", "voice_prompt") from exc

    def _resize_context(self, capacity: int) -> None:
        """A new KV cache for a new context bound; the history is kept and re-prefilled by the
        next turn (dropping the oldest turns if it no longer fits)."""
        held = self.session.caches.nbytes
        dev.refuse_growth(self.device, held // self.session.max_rows * capacity - held,
                          f"A context of {capacity} rows", "Keep a smaller Settings → Engine → "
                          "Context max rows, or choose a smaller precision.")
        self._replace_session(capacity, self.decode_path)
        self.capacity = self.memory.capacity_rows = capacity
        self.warm_decode()

    def _replace_session(self, capacity: int, decode_path: str) -> None:
        """Free the old session's KV cache and graphs before building the new one."""
        self.session = None  # type: ignore[assignment]
        dev.release_memory(self.device)
        self.session = open_session(self.model, capacity, decode_path)
        self._decode_path = self.session.decode.path

    def prepare(self) -> None:
        """On the engine thread: record the decode step's graphs again if they were recorded on
        another thread (``converse`` builds the engine before the worker starts); graphs belong
        to the thread and memory pool that recorded them."""
        decode = self.session.decode
        if decode.step.thread_bound and decode.thread != threading.get_ident():
            self._replace_session(self.capacity, decode.path)
            self.warm_decode()

    def warm_decode(self) -> None:
        """On an accelerator, run a few rows of both modes (text head off / on) now, so the
        first reply pays for no first-use kernels. If that fails on a compiled or graphed step,
        fall back to the eager one with a warning."""
        if self.device.type == "cpu":
            return
        try:
            warm_session(self.session, self.tokenizer)
        except Exception as exc:
            if self.decode_path == "eager":
                raise
            log.warning("the %s decode step failed in the warm-up (%s: %s); using the eager "
                        "step, which is slower per row", self.decode_path, type(exc).__name__, exc)
            self._replace_session(self.capacity, "eager")

    # ---- user audio --------------------------------------------------------------------------

    def feed_user_audio(self, turn_id: int, pcm_16k: np.ndarray) -> None:
        """Encode as the user talks; prefill what was said so far on top of the history.

        Audio keeps coming after a speculative reply started (the pause itself, and more if
        the user goes on); a speculative reply is only dropped when a new ``respond`` for the
        same turn replaces it, never here. While any reply waits for ``reply_heard`` the
        prefill waits too: the history it builds on is not final yet."""
        if self._feed is None or self._feed.turn_id != turn_id:
            self._feed = UserAudio(turn_id, self.codec)  # audio never answered is dropped
        try:
            pushed = self._feed.add(pcm_16k)
            if pushed and self._pending is None:
                self._prefill_partial(self._feed)
        except Exception as exc:
            self._feed = None  # respond() encodes the whole turn instead
            self.session.reset()
            if dev.is_out_of_memory(exc):
                self.codec.clear_caches()
                dev.release_memory(self.device)
            raise

    def _prefill_partial(self, feed: UserAudio) -> None:
        codes = feed.codes_so_far
        if not codes:
            return
        try:
            prompt = self.memory.partial_prompt(codes, self._reserve_rows())
        except ContextFullError:
            return  # respond() says so
        self.session.prefill(prompt)

    def _reserve_rows(self) -> int:
        return self.sampling.max_new_rows

    # ---- replies -----------------------------------------------------------------------------

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        try:
            yield from self._respond(turn, cancel)
        except (EngineInputError, ContextFullError) as exc:  # refused before any model work
            self._pending = None
            yield ReplyFailed(turn.turn_id, exc.category, str(exc),  # type: ignore[arg-type]
                              exc.action)
        except Exception as exc:
            self._pending = None
            self.session.reset()  # rows may be half written: the next prompt re-prefills
            if not dev.is_out_of_memory(exc):
                raise  # the worker reports it; the next turn starts clean
            yield self._out_of_memory(turn.turn_id, exc)

    def _respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        if self._pending is not None:  # never confirmed: a speculative reply the user talked
            log.debug("unheard reply to turn %d dropped", self._pending.turn_id)  # past
            self.transcriber.drop(self._pending.turn_id, "user")
            self._pending = None
        if self.modality == "audio" and self._voice is None:
            raise no_voice_error()
        started = time.perf_counter()
        user = self._user_turn(turn)
        yield StageTimed(turn.turn_id, "encode", ms_since(started))
        if cancel.is_set():
            self._pending = _Pending(turn.turn_id, user, 0, self.modality)
            yield ReplyDone(turn.turn_id, cancelled=True)
            return
        if user.is_audio and self.transcripts_on:
            self.transcriber.add(turn.turn_id, "user", list(user.codes))
        started = time.perf_counter()
        prompt = self.memory.prompt(user, self._reserve_rows())
        reused = self.session.prefill(prompt)
        self.last_prefill = PrefillStat(reused, len(prompt))
        yield StageTimed(turn.turn_id, "prefill", ms_since(started))
        pending = self._pending = _Pending(turn.turn_id, user, len(prompt), self.modality)
        self.last_reply = pending.record
        if self.modality == "audio":
            assert self._voice is not None
            yield from speak(self.session, self.codec, self._voice, self.sampling, self.seed,
                             self.policy, cancel, turn.turn_id, pending.record)
        else:
            yield from write(self.session, self.tokenizer, self.sampling, self.seed, cancel,
                             turn.turn_id, pending.record)
        yield ReplyDone(turn.turn_id, cancelled=cancel.is_set())

    def _user_turn(self, turn: UserTurn) -> Turn:
        if turn.text is not None and len(turn.pcm_16k) == 0:
            return Turn("user", turn.text)
        feed = self._feed
        if feed is not None and feed.turn_id == turn.turn_id and feed.matches(len(turn.pcm_16k)):
            codes = feed.finish(speculative=turn.speculative)
            if not turn.speculative:
                self._feed = None
        else:
            codes = encode_whole(self.codec, turn.pcm_16k)
        if not codes:
            raise EngineInputError("The turn held no audio to answer.",
                                   "Speak a little longer, or check the microphone.")
        return Turn("user", tuple(codes))

    def _out_of_memory(self, turn_id: int, exc: BaseException) -> ReplyFailed:
        """Free what a failed turn held (codec state, cached blocks); the app goes on."""
        log.warning("out of memory during turn %d: %s", turn_id, exc)
        self.codec.clear_caches()
        self._feed = None
        dev.release_memory(self.device)
        advice = dev.out_of_memory_advice(self.device, self.model.precision, self.capacity,
                                          self.model.config.dims(),
                                          flow_cache_bytes_for(self._settings))
        return ReplyFailed(turn_id, "out_of_memory", f"The device ran out of memory ({exc}).",
                           advice)

    # ---- what was heard ----------------------------------------------------------------------

    def reply_heard(self, turn_id: int, heard_samples: int, sample_rate_hz: int) -> None:
        pending = self._pending
        if pending is None or pending.turn_id != turn_id:
            return
        self._pending = None
        assistant = self._heard_turn(pending, heard_samples, sample_rate_hz)
        self.memory.commit(pending.user, assistant)
        if pending.prompt_rows:  # roll back to the shared prefix, then add what was heard
            self.session.truncate(min(pending.prompt_rows, len(self.session.history)))
        self.memory.make_room(self._reserve_rows() + len(self.memory.assistant_prefix()))
        rows = self.memory.history_rows()
        reused = self.session.prefill(rows)
        self.last_prefill = PrefillStat(reused, len(rows))
        if assistant is not None and assistant.is_audio and self.transcripts_on:
            self.transcriber.add(turn_id, "assistant", list(assistant.codes))

    def _heard_turn(self, pending: _Pending, heard_samples: int, rate_hz: int) -> Turn | None:
        if pending.modality == "text":
            text = pending.record.text.strip()
            return Turn("assistant", text) if text else None
        samples = round(heard_samples * OUTPUT_SAMPLE_RATE_HZ / max(1, rate_hz))
        pcm = pending.record.heard_pcm(samples)
        if len(pcm) == 0:
            return None
        codes = self.codec.encode(pcm, OUTPUT_SAMPLE_RATE_HZ).tolist()
        return Turn("assistant", tuple(codes)) if codes else None

    # ---- idle work, life cycle ---------------------------------------------------------------

    def has_idle_work(self) -> bool:
        return self.transcripts_on and bool(self.transcriber.jobs)

    def idle_work(self, cancel: threading.Event) -> Iterator[EngineEvent | None]:
        return self.transcriber.run(cancel)

    def reset(self) -> None:
        self.memory.clear()
        self._pending = self._feed = None
        self.transcriber.clear()
        self.session.reset()

    def close(self) -> None:
        """Free the model, caches and codec for good (an engine rebuild needs the memory)."""
        self._pending = self._feed = None
        self.codec.clear_caches()
        for name in ("session", "transcriber", "model", "codec", "parts", "last_reply"):
            setattr(self, name, None)
        dev.release_memory(self.device)

