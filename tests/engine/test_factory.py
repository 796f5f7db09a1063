from __future__ import annotations

import sys
import types

import pytest

from app.engine.echo import EchoEngine
from app.engine.factory import ENGINE_MODULES, EngineUnavailableError, build_engine
from app.settings import Settings


def test_the_default_engine_is_the_echo_demo() -> None:
    assert isinstance(build_engine(Settings()), EchoEngine)


def test_moss_speech_fails_clearly_until_its_package_exists() -> None:
    if "app.engine.moss_speech" in sys.modules or _importable("app.engine.moss_speech"):
        pytest.skip("the MOSS-Speech engine package is present in this build")
    with pytest.raises(EngineUnavailableError, match="--engine echo"):
        build_engine(Settings(), "moss_speech")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_an_engine_package_plugs_in_with_build_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_engine_pkg")
    module.build_engine = lambda settings: EchoEngine(chunk_ms=settings.vad.min_speech_ms)
    monkeypatch.setitem(sys.modules, "fake_engine_pkg", module)
    monkeypatch.setitem(ENGINE_MODULES, "moss_speech", "fake_engine_pkg")
    engine = build_engine(Settings().with_value("vad.min_speech_ms", 100), "moss_speech")
    assert isinstance(engine, EchoEngine) and engine.chunk_samples == 2400
    module.build_engine = lambda settings: object()
    with pytest.raises(EngineUnavailableError, match="not an Engine"):
        build_engine(Settings(), "moss_speech")
