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

    Nothing is opened until ``start()``, and nothing here raises over the engine or devices:
    - without PortAudio or devices the pipeline still starts and reports the problem as an
      ``ErrorReported`` event;
    - the engine the settings name is built on the engine worker once started (the GPU's one
      thread); until then, and for good if it cannot be built (no or bad model folder, engine
      not in this build), the echo demo answers and an ``ErrorReported("engine_unavailable")``
      says why. ``engine`` skips that and uses the given engine.
    Settings changes that touch what the engine is built from rebuild it the same way.
    """
    from app.audio.sounddevice_backend import SounddeviceBackend
    from app.conversation.pipeline import Pipeline
    from app.engine.echo import EchoEngine
    from app.engine.factory import build_engine

    load = engine is None and settings.engine.kind != "echo"
    return Pipeline(settings, engine or EchoEngine(), backend or SounddeviceBackend(),
                    engine_factory=build_engine, load_engine=load)
