"""Build the MOSS-Speech engine from settings: check, load, warm up.

Cheap checks first, so a person hears what is wrong in milliseconds and nothing big is loaded
for a setting that cannot work: folders set and verified (file list, headers, shapes), a voice
prompt for spoken replies, the device, the precision for that device, the VRAM preflight. Then
the model, tokenizer, codec and voice load; the engine chooses its decode step (on CUDA:
torch.compile, else CUDA graphs captured by hand, else eager; each validated against eager,
:mod:`.decode_policy`), and :func:`warm_up` runs it and primes the codec so the first reply
does not pay for first use.

Every failure is an :class:`~app.engine.factory.EngineUnavailableError` whose ``category`` picks
the banner (``model_invalid``, ``voice_prompt``, ``out_of_memory``) and whose ``action`` says
what to do.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import torch

from app.engine import build_progress
from app.engine.factory import EngineUnavailableError
from app.engine.folders import FolderError, verify_codec_folder
from app.engine.moss_speech import device as dev
from app.engine.moss_speech.codec import CodecConfigError, CodecLoadError, load_codec
from app.engine.moss_speech.codec.voice import VoiceFileError, check_voice_file
from app.engine.moss_speech.engine import MossSpeechEngine
from app.engine.moss_speech.parts import EngineInputError, EngineParts
from app.engine.moss_speech.quantize import PrecisionError, check_precision
from app.engine.moss_speech.tokenizer import load_tokenizer
from app.engine.moss_speech.weights import Checkpoint, load_model, verify_checkpoint
from app.engine.preflight import WORKING_MARGIN_BYTES, codec_dtype_name, flow_cache_bytes_for
from app.settings import Settings

log = logging.getLogger(__name__)

MODEL_ACTION = "Choose or download the model in the model manager."
MODEL_CLI_ACTION = ("Pass the folders with --model-dir and --codec-dir (the app's model manager "
                    "downloads them).")
VOICE_ACTION = ("Choose a 3–20 s WAV or FLAC recording of a voice in Settings → Engine → Voice "
                "prompt (the app ships no voice of its own).")
VOICE_CLI_ACTION = ("Pass a 3–20 s WAV or FLAC recording of a voice with --voice FILE (the app "
                    "ships no voice of its own).")


def folder_unavailable(exc: FolderError) -> EngineUnavailableError:
    """A bad model or codec folder as the engine's error: the folder's own advice (e.g. download
    it again) when it has one, else where to choose it, in the app or on the command line."""
    advice, kind = getattr(exc, "advice", ""), getattr(exc, "kind", "")
    cli_advice = (f"Download the {kind} again, or pass another folder with --{kind}-dir."
                  if advice and kind else advice)
    return EngineUnavailableError(str(exc), "model_invalid", advice or MODEL_ACTION,
                                  cli_advice or MODEL_CLI_ACTION)


def voice_unavailable(message: str) -> EngineUnavailableError:
    return EngineUnavailableError(message, "voice_prompt", VOICE_ACTION, VOICE_CLI_ACTION)


def build_engine(settings: Settings) -> MossSpeechEngine:
    """Load and warm up the engine the settings describe (on the engine worker thread)."""
    parts = load_parts(settings)
    build_progress.report(0.85, "preparing the conversation")
    engine = MossSpeechEngine(parts, settings)
    build_progress.report(0.9, "warming up")
    warm_up(engine)
    return engine


def load_parts(settings: Settings) -> EngineParts:
    e = settings.engine
    build_progress.report(0.02, "checking the folders and the voice")
    model_dir, codec_dir = _folders(settings)
    if e.output_modality == "audio" and e.voice_prompt is None:
        raise voice_unavailable("no voice prompt is set: MOSS-Speech speaks in the voice of a "
                                "recording you choose")
    if e.output_modality == "audio" and e.voice_prompt is not None:
        try:  # the header only (size, rate, channels, length): milliseconds
            check_voice_file(Path(e.voice_prompt))
        except VoiceFileError as exc:
            raise voice_unavailable(str(exc)) from exc
    choice = dev.choose_device(e.device)
    try:
        check_precision(e.precision, choice.device)
    except PrecisionError as exc:
        raise EngineUnavailableError(str(exc), action=dev.PRECISION_ACTION) from exc
    try:
        checked = verify_checkpoint(model_dir)  # read once: the preflight and the load use it
        verify_codec_folder(codec_dir).raise_if_bad()
    except FolderError as exc:
        raise folder_unavailable(exc) from exc
    dev.check_fits(dev.free_memory_bytes(choice.device), e.precision, e.context_max_rows,
                   checked[0].dims(),
                   flow_cache_bytes=flow_cache_bytes_for(settings, e.precision))
    try:
        return _load(settings, choice, model_dir, codec_dir, checked)
    except (FolderError, CodecLoadError, CodecConfigError) as exc:
        raise folder_unavailable(exc) from exc
    except EngineInputError as exc:
        if exc.category == "voice_prompt":
            raise voice_unavailable(str(exc)) from exc
        raise EngineUnavailableError(str(exc), exc.category, exc.action) from exc
    except Exception as exc:
        if not dev.is_out_of_memory(exc):
            raise
        dev.release_memory(choice.device)
        raise EngineUnavailableError(
            f"the model does not fit the free memory of {choice.device} ({exc})",
            "out_of_memory", dev.PRECISION_ACTION) from exc


def _folders(settings: Settings) -> tuple[Path, Path]:
    e = settings.engine
    missing = [name for name, folder in (("model", e.model_dir), ("codec", e.codec_dir))
               if folder is None]
    if missing:
        raise EngineUnavailableError(f"no {' and no '.join(missing)} folder is set",
                                     "model_invalid", MODEL_ACTION, MODEL_CLI_ACTION)
    assert e.model_dir is not None and e.codec_dir is not None
    return Path(e.model_dir), Path(e.codec_dir)


def _load(settings: Settings, choice: dev.DeviceChoice, model_dir: Path, codec_dir: Path,
          checked: Checkpoint) -> EngineParts:
    e = settings.engine
    build_progress.report(0.1, "reading the model weights")
    model = load_model(model_dir, choice.device, e.precision, checked=checked)
    tokenizer = load_tokenizer(model_dir, model.config)
    build_progress.report(0.6, "loading the codec")
    codec = load_codec(codec_dir, choice.device, codec_dtype(choice.device, e.precision),
                       verified=True,
                       streaming_chunks=(settings.streaming.chunk_codes,))
    voice = None
    if e.voice_prompt is not None:
        build_progress.report(0.75, "preparing the voice")
        try:
            voice = codec.voice(e.voice_prompt)
        except VoiceFileError as exc:
            raise EngineInputError(str(exc), VOICE_ACTION, "voice_prompt") from exc
    return EngineParts(model, tokenizer, codec, voice, choice, e.voice_prompt)


def codec_dtype(device: torch.device, precision: str) -> torch.dtype:
    """The codec networks' dtype by the plan's rule (preflight.codec_dtype_name)."""
    name = codec_dtype_name(device.type, precision)
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def warm_up(engine: MossSpeechEngine) -> None:
    """Run the decode step (both modes) and build the voice state before the first turn.

    If the chosen decode step fails here the engine falls back to the eager step with a logged
    warning; if the voice-prefix state leaves less than the working margin free on the GPU, it
    is dropped."""
    engine.warm_decode()
    _warm_codec(engine)


def _warm_codec(engine: MossSpeechEngine) -> None:
    voice = engine.voice
    if voice is None:
        return
    policy = replace(engine.policy, final="causal", reuse_voice_prefix=True)
    decoder = policy.open(engine.codec, voice)  # builds the voice state in the reply buffers
    try:
        if engine.device.type != "cpu":  # prime the kernels; on a CPU this would take seconds
            decoder.push([0] * (decoder.next_hop() + decoder.lookahead))
    finally:
        decoder.close()
    free = dev.free_memory_bytes(engine.device)
    if free is not None and free < WORKING_MARGIN_BYTES:
        log.warning("the voice-prefix state (%.0f MiB, held in the flow cache budget) leaves "
                    "too little GPU memory free; it is dropped, so the first chunk of each reply "
                    "takes longer (a smaller Settings → Streaming → Flow cache budget keeps it)",
                    engine.codec.cache_nbytes() / 2**20)
        engine.set_reuse_voice_prefix(False)
