"""The engine and the codec's flow-cache budget: the setting reaches the stream decoder, a
reply past the budget sounds the same, the VRAM preflight and live changes count it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine.base import UserTurn
from app.engine.factory import EngineUnavailableError
from app.engine.moss_speech import device as dev
from app.engine.moss_speech.build import build_engine
from app.engine.moss_speech.parts import EngineInputError
from app.engine.preflight import (
    MIB,
    WORKING_MARGIN_BYTES,
    dims_from_folder,
    estimate,
    flow_cache_bytes_for,
)
from tests.engine.moss_speech.engine_helpers import (
    audio_of,
    make_engine,
    question,
    respond,
    settings_for,
)

ROWS = {"sampling__max_new_rows": 24, "sampling__min_new_rows": 24, "sampling__seed": 3,
        "transcript__text_branch": False}


def test_a_reply_past_the_budget_sounds_the_same_as_one_within_it(engine_folder: Path) -> None:
    engine = make_engine(engine_folder, streaming__flow_cache_budget_mib=0, **ROWS)
    pcm = question(1.0, seed=4)
    unbounded = audio_of(respond(engine, UserTurn(1, pcm)))
    first = engine.last_reply
    assert first is not None and first.flow is not None
    assert first.flow.bounded_from_code is None
    assert len(first.codes) >= 15 and len(unbounded) == 1920 * len(first.codes)
    engine.reset()  # the same prompt again, now with a 1 MiB budget (less than the prompt)
    engine.apply_settings(engine.settings.with_value("streaming.flow_cache_budget_mib", 1))
    assert engine.policy.flow_cache_budget_bytes == MIB
    bounded = audio_of(respond(engine, UserTurn(2, pcm)))
    second = engine.last_reply
    assert second is not None and second.codes == first.codes
    assert second.flow is not None and second.flow.bounded_from_code is not None
    assert second.flow.peak_nbytes < first.flow.peak_nbytes
    assert bounded.shape == unbounded.shape
    assert np.sqrt(np.mean(unbounded ** 2)) > 1e-4
    assert np.allclose(bounded, unbounded, rtol=0, atol=1e-6)


def test_the_vram_preflight_counts_the_flow_cache_budget(engine_folder: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU with room for everything but the default 1 GiB flow cache refuses it and names the
    budget; a smaller budget fits."""
    settings = settings_for(engine_folder, **ROWS)
    small = settings.with_value("streaming.flow_cache_budget_mib", 128)
    without = estimate("fp32", settings.engine.context_max_rows,
                       dims_from_folder(settings.engine.model_dir),
                       flow_cache_bytes=flow_cache_bytes_for(small, "fp32"))
    monkeypatch.setattr(dev, "free_memory_bytes", lambda device: without.total_bytes)
    with pytest.raises(EngineUnavailableError) as refused:
        build_engine(settings)
    assert refused.value.category == "out_of_memory"
    assert "Flow cache budget" in refused.value.action
    engine = build_engine(small)
    assert engine.policy.flow_cache_budget_bytes == 128 * MIB
    engine.close()


def test_a_larger_budget_that_the_gpu_cannot_hold_is_refused_live(
        engine_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(engine_folder, streaming__flow_cache_budget_mib=128, **ROWS)
    unbounded = engine.settings.with_value("streaming.flow_cache_budget_mib", 0)
    growth = flow_cache_bytes_for(unbounded) - flow_cache_bytes_for(engine.settings)
    assert growth > 256 * MIB  # the reply's whole flow state instead of 128 MiB of it
    free = WORKING_MARGIN_BYTES + growth // 2  # the margin, and only half of the growth
    monkeypatch.setattr(dev, "free_memory_bytes", lambda device: free)
    with pytest.raises(EngineInputError) as refused:
        engine.apply_settings(unbounded)
    assert refused.value.category == "out_of_memory" and "Flow cache budget" in refused.value.action
    assert engine.settings.streaming.flow_cache_budget_mib == 128  # nothing changed
    smaller = engine.settings.with_value("streaming.flow_cache_budget_mib", 64)
    engine.apply_settings(smaller)  # less memory: always allowed
    assert engine.policy.flow_cache_budget_bytes == 64 * MIB
    assert engine.policy.max_codes == 24
