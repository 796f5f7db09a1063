"""The user's turn as it arrives: encode while the user talks.

``feed_user_audio`` hands 16 kHz audio over in small pieces (one VAD frame or so). The stream
encoder runs the whole Whisper-VQ network once per push, so pieces are gathered until
``push_samples`` (0.4 s: five codes) before a push; at the end of the turn only that remainder
and the final padding are left to encode. A speculative reply takes the codes of the audio so
far from a *fork* of the encoder, so the original goes on if the user resumes.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from app.engine.moss_speech.codec import MossSpeechCodec, StreamEncoder

log = logging.getLogger(__name__)

PUSH_S = 0.4  # gather this much audio per encoder push (5 codes)


class UserAudio:
    """The fed audio of one user turn and its incremental encoder."""

    def __init__(self, turn_id: int, codec: MossSpeechCodec, push_s: float = PUSH_S) -> None:
        self.turn_id = turn_id
        self.encoder: StreamEncoder = codec.stream_encoder()
        self.push_samples = max(1, int(push_s * codec.input_sample_rate_hz))
        self.total_samples = 0  # everything fed
        self._pending: list[np.ndarray] = []  # fed, not yet pushed
        self._pending_samples = 0

    def add(self, pcm_16k: np.ndarray) -> bool:
        """Keep a piece of audio; push to the encoder once enough gathered (True if pushed)."""
        pcm = np.asarray(pcm_16k, dtype=np.float32).reshape(-1)
        if len(pcm) == 0:
            return False
        self._pending.append(pcm)
        self._pending_samples += len(pcm)
        self.total_samples += len(pcm)
        if self._pending_samples < self.push_samples:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        """Push whatever is gathered."""
        if self._pending:
            self.encoder.push(np.concatenate(self._pending))
            self._pending, self._pending_samples = [], 0

    @property
    def codes_so_far(self) -> list[int]:
        """Codes of the pushed audio (the last ones may still be revised)."""
        return self.encoder.codes.tolist()

    def matches(self, n_samples: int) -> bool:
        """Whether the turn handed to ``respond`` is exactly the audio fed here."""
        return n_samples == self.total_samples

    def finish(self, speculative: bool) -> list[int]:
        """All codes of the turn; a speculative turn finishes a fork and keeps the encoder."""
        self.flush()
        encoder = self.encoder.fork() if speculative else self.encoder
        return encoder.finish().tolist()


def encode_whole(codec: MossSpeechCodec, pcm_16k: np.ndarray) -> list[int]:
    """Codes of a turn that was not fed (typed turns, or audio that differs from the feed)."""
    pcm = torch.from_numpy(np.asarray(pcm_16k, dtype=np.float32).reshape(-1))
    return codec.encode(pcm, codec.input_sample_rate_hz).tolist()
