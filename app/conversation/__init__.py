"""The conversation: turn-taking, the engine worker, the wired pipeline, metrics, simulation.

Never imports Qt. The UI talks to a :class:`app.conversation.pipeline.Pipeline` only through
:class:`app.events.ConversationPort`; :func:`create_live_pipeline` builds one on the real
audio devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.audio.backend import AudioBackend
    from app.conversation.pipeline import Pipeline
    from app.engine.base import Engine
    from app.settings import Settings


def create_live_pipeline(settings: Settings, engine: Engine | None = None,
                         backend: AudioBackend | None = None) -> Pipeline:
    """A pipeline on real devices (PortAudio), silero VAD and the engine the settings name.

    Nothing is opened until ``start()``. Without PortAudio or devices the pipeline still starts:
    it reports the problem as an ``ErrorReported`` event and keeps running. ``engine`` defaults
    to :func:`app.engine.factory.build_engine` (which may raise ``EngineUnavailableError``);
    settings changes that touch ``[engine]`` rebuild it on the engine worker.
    """
    from app.audio.sounddevice_backend import SounddeviceBackend
    from app.conversation.pipeline import Pipeline
    from app.engine.factory import build_engine

    return Pipeline(settings, engine or build_engine(settings), backend or SounddeviceBackend(),
                    engine_factory=build_engine)
