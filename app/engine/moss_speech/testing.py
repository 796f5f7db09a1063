"""Tiny random-weight checkpoints in the published folder layouts, for tests and benchmarks."""

from app.engine.moss_speech.codec.testing import write_tiny_codec  # noqa: F401
