from __future__ import annotations

import sys
import types

import pytest

from app.engine.echo import EchoEngine
from app.engine.factory import ENGINE_MODULES, EngineUnavailableError, build_engine
from app.settings import Settings


def test_the_default_engine_is_the_echo_demo() -> None:
    assert isinstance(build_engine(Settings()), EchoEngine)


def test_moss_speech_without_folders_says_what_is_wrong_and_what_to_do() -> None:
    with pytest.raises(EngineUnavailableError) as raised:
        build_engine(Settings(), "moss_speech")
    error = raised.value
    assert "no model and no codec folder is set" in str(error)
    assert error.category == "model_invalid" and "model manager" in error.action
    assert "--engine" not in str(error) + error.action  # no CLI wording in the app's banners


def test_an_engine_module_that_is_missing_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENGINE_MODULES, "moss_speech", "app.engine.no_such_engine")
    with pytest.raises(EngineUnavailableError, match="not part of this installation"):
        build_engine(Settings(), "moss_speech")


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
