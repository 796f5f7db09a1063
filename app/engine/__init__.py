"""Engines turn a user turn into reply events. This package never imports Qt or audio devices.

Importing ``app.engine`` is light (no torch): the heavy native model lives in
``app.engine.moss_speech`` and is imported only when that engine is built.
"""

from app.engine.base import (
    STAGES,
    Engine,
    EngineEvent,
    EngineInfo,
    ReplyAudio,
    ReplyDone,
    ReplyFailed,
    ReplyText,
    StageTimed,
    UserTurn,
)

__all__ = [
    "STAGES",
    "Engine",
    "EngineEvent",
    "EngineInfo",
    "ReplyAudio",
    "ReplyDone",
    "ReplyFailed",
    "ReplyText",
    "StageTimed",
    "UserTurn",
]
