"""Voice conditioning from a WAV/FLAC file (contract §3.3, pitfall 13).

Three tensors describe the voice the replies speak in: the prompt's Whisper-VQ codes (audio
resampled straight to 16 kHz), its 24 kHz 80-bin mel (4 frames per code) and a CAM++ speaker
x-vector (Kaldi fbank of the audio taken to 24 kHz and then to 16 kHz, through onnxruntime).
Results are cached by file content in memory and on disk (safetensors, no pickle).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import torch
from safetensors.torch import load_file, save

from app.engine.moss_speech.codec import dsp
from app.paths import write_private

log = logging.getLogger(__name__)

MIN_VOICE_S = 1.0
MAX_VOICE_S = 60.0
MAX_VOICE_FILE_BYTES = 256 << 20  # a 60 s float WAV of 8 channels at 96 kHz is ~184 MB
MAX_VOICE_CHANNELS = 8
VOICE_RATE_RANGE_HZ = (4_000, 384_000)
# decoded samples (frames × channels) at most: 60 s of 8 channels at 48 kHz, ~92 MB as float32
MAX_VOICE_SAMPLES = int(MAX_VOICE_S * 48_000 * MAX_VOICE_CHANNELS)
HASH_CHUNK_BYTES = 1 << 20
MEMORY_CACHE_SIZE = 4


class VoiceFileError(ValueError):
    """A voice-prompt file cannot be used; the message says why (the caller adds what to do:
    the settings dialog and the command line give different advice)."""


@dataclass(frozen=True)
class VoiceFileInfo:
    frames: int
    rate_hz: int
    channels: int
    size_bytes: int


@dataclass(frozen=True)
class VoiceConditioning:
    """What the flow needs to speak in a voice (all on the CPU, float32 / int64)."""

    prompt_codes: torch.Tensor  # [P] int64 Whisper-VQ codes of the prompt
    prompt_mel: torch.Tensor  # [4·P, 80] float32 log-mel at 24 kHz
    xvector: torch.Tensor  # [192] float32 CAM++ speaker embedding
    source: str = ""  # file name, for messages
    cache_key: str = ""  # keyed content hash (voice cache)

    @property
    def duration_s(self) -> float:
        return self.prompt_mel.shape[0] / 50.0


def check_voice_file(path: Path) -> VoiceFileInfo:
    """Size, rate, channels and length of a voice file from its header, before anything is
    decoded (a 237 KB FLAC of 8 channels × 600 s once took 2.2 GB before the 60 s limit was
    checked); VoiceFileError says what is wrong."""
    name = path.name
    if not path.is_file():
        raise VoiceFileError(f"Voice file {name} does not exist.")
    try:
        size = path.stat().st_size
        if size > MAX_VOICE_FILE_BYTES:
            raise VoiceFileError(f"Voice file {name} is {size / 2**20:.0f} MB; a voice prompt "
                                 f"of at most {MAX_VOICE_S:.0f} s is far smaller.")
        info = soundfile.info(str(path))
    except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError, OSError) as exc:
        if isinstance(exc, VoiceFileError):
            raise
        raise VoiceFileError(f"Voice file {name} is not an audio file this app can read "
                             f"({exc}). Use a WAV or FLAC recording.") from exc
    frames, rate, channels = int(info.frames), int(info.samplerate), int(info.channels)
    low, high = VOICE_RATE_RANGE_HZ
    if not low <= rate <= high or not 1 <= channels <= MAX_VOICE_CHANNELS:
        raise VoiceFileError(f"Voice file {name} has {channels} channel(s) at {rate} Hz; a voice "
                             f"prompt needs 1–{MAX_VOICE_CHANNELS} channels at {low}–{high} Hz.")
    if frames <= 0:
        raise VoiceFileError(f"Voice file {name} is empty. Record 3–20 s of clear speech.")
    seconds = frames / rate
    if seconds > MAX_VOICE_S:
        raise VoiceFileError(f"Voice file {name} is {seconds:.0f} s long; the limit is "
                             f"{MAX_VOICE_S:.0f} s. Trim it (3–20 s works best).")
    if frames * channels > MAX_VOICE_SAMPLES:
        raise VoiceFileError(f"Voice file {name} holds {channels} channels of {seconds:.0f} s "
                             f"at {rate} Hz, more than a voice prompt needs; export it as mono.")
    return VoiceFileInfo(frames, rate, channels, size)


def read_voice_file(path: Path) -> tuple[np.ndarray, int]:
    """Samples [C, T] float32 and rate of a voice file, or a VoiceFileError that explains.
    The header is checked first and decoding stops at the frames it announced."""
    name = path.name
    info = check_voice_file(path)
    try:
        data, rate = soundfile.read(str(path), frames=info.frames, dtype="float32",
                                    always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError, TypeError, ValueError) as exc:
        raise VoiceFileError(f"Voice file {name} is not an audio file this app can read "
                             f"({exc}). Use a WAV or FLAC recording.") from exc
    samples = np.ascontiguousarray(data.T)  # [C, T]
    seconds = samples.shape[1] / rate if rate else 0.0
    if samples.shape[1] == 0:
        raise VoiceFileError(f"Voice file {name} is empty. Record 3–20 s of clear speech.")
    if not np.isfinite(samples).all():
        raise VoiceFileError(f"Voice file {name} contains invalid (NaN or infinite) samples; "
                             "export it again.")
    if seconds < MIN_VOICE_S:
        raise VoiceFileError(f"Voice file {name} is only {seconds:.2f} s long; the voice "
                             f"prompt needs at least {MIN_VOICE_S:.0f} s (3–20 s works best).")
    return samples, int(rate)


class SpeakerEmbedder:
    """CAM++ x-vector through onnxruntime (CPU, one intra-op thread as the reference)."""

    def __init__(self, model: Path | bytes) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self.session = onnxruntime.InferenceSession(
                model if isinstance(model, bytes) else str(model), sess_options=options,
                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ValueError(f"flow/campplus.onnx cannot be loaded ({exc}); download the codec "
                             "again") from exc
        self.input_name = self.session.get_inputs()[0].name

    def __call__(self, pcm_16k: torch.Tensor) -> torch.Tensor:
        feat = dsp.kaldi_fbank(pcm_16k.cpu())
        feat = feat - feat.mean(dim=0, keepdim=True)
        out = self.session.run(None, {self.input_name: feat[None].numpy()})[0]
        return torch.from_numpy(np.asarray(out, dtype=np.float32).reshape(-1))


def compute_voice(samples: np.ndarray, rate: int, encode: Callable[[np.ndarray, int], torch.Tensor],
                  embed_speaker: SpeakerEmbedder, mel_bins: int = 80,
                  source: str = "", cache_key: str = "") -> VoiceConditioning:
    """The three conditioning tensors from samples [C, T] at ``rate``."""
    codes = encode(samples[0], rate)  # channel 0, straight to 16 kHz (as the tokenizer path)
    mono = torch.from_numpy(samples.mean(axis=0))  # channel mean (as CosyVoice's load_wav)
    pcm_24k = dsp.resample(mono, rate, dsp.PROMPT_SAMPLE_RATE_HZ)
    mel = dsp.prompt_mel(pcm_24k, mel_bins)
    xvector = embed_speaker(dsp.resample(pcm_24k, dsp.PROMPT_SAMPLE_RATE_HZ,
                                         dsp.FBANK_SAMPLE_RATE_HZ))
    n_codes = min(mel.shape[0] // 4, len(codes))
    return VoiceConditioning(prompt_codes=codes[:n_codes].to(torch.long).cpu(),
                             prompt_mel=mel[:4 * n_codes].contiguous().cpu(), xvector=xvector,
                             source=source, cache_key=cache_key)


class VoiceCache:
    """Voice conditioning by (file content, codec) in memory and in ``folder`` on disk."""

    def __init__(self, folder: Path | None, codec_fingerprint: str) -> None:
        self.folder = folder
        self.fingerprint = codec_fingerprint
        self._memory: OrderedDict[str, VoiceConditioning] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def key(self, content: bytes) -> str:
        return hashlib.sha256(self.fingerprint.encode() + content).hexdigest()

    def key_of_file(self, path: Path) -> str:
        """:meth:`key` of the file's content, hashed in 1 MiB chunks (same digest, bounded
        memory)."""
        digest = hashlib.sha256(self.fingerprint.encode())
        with path.open("rb") as handle:
            while chunk := handle.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
        return digest.hexdigest()

    def get(self, key: str, source: str) -> VoiceConditioning | None:
        voice = self._memory.get(key)
        if voice is None:
            voice = self._read_disk(key, source)
        if voice is not None:
            self.hits += 1
            self._remember(key, voice)
        else:
            self.misses += 1
        return voice

    def put(self, key: str, voice: VoiceConditioning) -> None:
        self._remember(key, voice)
        if self.folder is None:
            return
        try:  # derived from a person's voice: 0600 in a 0700 folder, as the recording
            data = save({"prompt_codes": voice.prompt_codes, "prompt_mel": voice.prompt_mel,
                         "xvector": voice.xvector})
            write_private(self.folder / f"{key}.safetensors", data)
        except OSError as exc:  # a cache that cannot be written is only slower
            log.warning("voice cache not written (%s)", exc)

    def _remember(self, key: str, voice: VoiceConditioning) -> None:
        self._memory[key] = voice
        self._memory.move_to_end(key)
        while len(self._memory) > MEMORY_CACHE_SIZE:
            self._memory.popitem(last=False)

    def _read_disk(self, key: str, source: str) -> VoiceConditioning | None:
        if self.folder is None:
            return None
        path = self.folder / f"{key}.safetensors"
        if not path.is_file():
            return None
        try:
            tensors = load_file(str(path))
            return VoiceConditioning(tensors["prompt_codes"], tensors["prompt_mel"],
                                     tensors["xvector"], source, key)
        except Exception as exc:  # a damaged cache entry is recomputed, never fatal
            log.warning("voice cache entry %s unreadable (%s); recomputing", path.name, exc)
            return None
