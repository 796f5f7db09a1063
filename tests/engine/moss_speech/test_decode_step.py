"""The decode steps and their validated selection, on the CPU: static input buffers, the
position as a device tensor, the equality check against eager and the fall-back chain. The
real CUDA-graph capture is tested in test_compiled_and_gpu.py (opt-in, needs a GPU)."""

from __future__ import annotations

import logging

import pytest
import torch

from app.engine.moss_speech.decode_policy import PlannedPath
from app.engine.moss_speech.decode_step import (
    DecodeStep,
    EagerStep,
    StaticStep,
    compare_logits,
    select_decode_step,
)
from app.engine.moss_speech.generate import GenerationSession
from app.engine.moss_speech.kv_cache import KVCaches
from app.engine.moss_speech.model import Logits, MossSpeechModel
from app.engine.moss_speech.tokenizer import MossTokenizer
from tests.engine.moss_speech.decode_helpers import conversation_rows, switches_of

GRAPH_THEN_EAGER = [PlannedPath("graph"), PlannedPath("eager")]


class BakedPositionStep(StaticStep):
    """What a capture that froze the first row's position as a constant would do."""

    def load(self, row: torch.Tensor, position: int) -> None:
        if not hasattr(self, "baked"):
            self.baked = position
        super().load(row, self.baked)


class StaleRowStep(StaticStep):
    """What a graph whose input buffer was replaced after capture would do."""

    def load(self, row: torch.Tensor, position: int) -> None:
        if not hasattr(self, "first_row"):
            self.first_row = row.clone()
        super().load(self.first_row, position)


def no_compiler(model: MossSpeechModel, caches: KVCaches) -> DecodeStep:
    raise RuntimeError("inductor: no C compiler found\n(long traceback text)")


def capture_broken(model: MossSpeechModel, caches: KVCaches) -> DecodeStep:
    """As a capture that synced fails: the first error, then another when the capture ends."""
    try:
        raise RuntimeError("operation not permitted when stream is capturing")
    except RuntimeError:
        raise RuntimeError("capture invalidated") from None


def test_static_step_equals_eager_over_50_rows_with_switches_and_a_truncate(
        switchy_model: MossSpeechModel, tokenizer: MossTokenizer) -> None:
    static = GenerationSession(switchy_model, max_rows=256, decode_path="static")
    eager = GenerationSession(switchy_model, max_rows=256)
    assert static.decode.path == "static" and not static.decode.notes
    assert isinstance(static.decode.step, StaticStep) and static.caches.length == 0
    rows = conversation_rows(static, tokenizer)
    assert len(rows) >= 50 and switches_of(rows, static) == {"sosp", "eosp"}
    assert rows == conversation_rows(eager, tokenizer)
    assert static.caches.length == eager.caches.length == len(static.history)


def test_static_buffers_keep_their_addresses_and_hold_the_position_on_the_device(
        tiny_model: MossSpeechModel) -> None:
    caches = tiny_model.new_caches(16)
    step = StaticStep(tiny_model, caches)
    tiny_model.forward_rows(torch.tensor([[(1, 512), (2, 512)]]), caches, 0)
    addresses = (step.embedded.data_ptr(), step.position.data_ptr())
    for position, row in ((2, (3, 512)), (3, (151667, 9))):
        text, audio = step(torch.tensor([row]), position, text_head=position == 2)
        assert (step.embedded.data_ptr(), step.position.data_ptr()) == addresses
        assert step.position.tolist() == [position]
        assert torch.equal(step.embedded, tiny_model.embed_rows(torch.tensor([[row]])))
        assert caches.length == position + 1 and audio.shape == (1, 16512)
        assert (text is None) == (position == 3)
    with pytest.raises(ValueError, match="holds 16"):
        step(torch.tensor([(3, 512)]), 16, text_head=False)


@pytest.mark.parametrize("broken", [BakedPositionStep, StaleRowStep])
def test_validation_rejects_a_step_that_froze_an_input(
        tiny_model: MossSpeechModel, broken: type[StaticStep],
        caplog: pytest.LogCaptureFixture) -> None:
    caches = tiny_model.new_caches(64)
    choice = select_decode_step(tiny_model, caches, GRAPH_THEN_EAGER,
                                {"graph": broken, "eager": EagerStep})
    assert isinstance(choice.step, EagerStep) and choice.path == "eager"
    assert len(choice.notes) == 1 and choice.notes[0].startswith("graph failed: step 2 at "
                                                                 "position 4")
    assert "decode step 'graph' not used" in caplog.text and caches.length == 0


def test_the_chain_logs_each_failure_and_keeps_the_first_step_that_agrees(
        tiny_model: MossSpeechModel, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    plan = [PlannedPath("compile"), PlannedPath("graph", "needs a CUDA device"),
            PlannedPath("graph"), PlannedPath("static"), PlannedPath("eager")]
    builders = {"compile": no_compiler, "graph": capture_broken, "static": StaticStep,
                "eager": EagerStep}
    caches = tiny_model.new_caches(64)
    choice = select_decode_step(tiny_model, caches, plan, builders)
    assert isinstance(choice.step, StaticStep) and choice.path == "static"
    assert choice.notes == [
        "compile failed: RuntimeError: inductor: no C compiler found",
        "graph skipped: needs a CUDA device",
        "graph failed: RuntimeError: operation not permitted when stream is capturing (then "
        "RuntimeError: capture invalidated)"]
    assert "no C compiler found" in caplog.text and choice.setup_ms > 0
    assert "static-shape step" in choice.summary and "compile failed" in choice.summary


def test_a_cache_too_small_to_validate_falls_back_to_eager(tiny_model: MossSpeechModel) -> None:
    choice = select_decode_step(tiny_model, tiny_model.new_caches(8), GRAPH_THEN_EAGER,
                                {"graph": StaticStep, "eager": EagerStep})
    assert choice.path == "eager"
    assert choice.notes == ["graph failed: the KV cache holds 8 rows, validation needs 9"]
    caches = tiny_model.new_caches(16)
    tiny_model.forward_rows(torch.tensor([[(1, 512)]]), caches, 0)
    with pytest.raises(ValueError, match="before anything is prefilled"):
        select_decode_step(tiny_model, caches, GRAPH_THEN_EAGER)


def test_compare_logits_is_exact_on_ids_and_close_on_values() -> None:
    want = torch.tensor([[1.0, 0.85, -0.5]])  # scale max(1, max |want|) = 1
    assert compare_logits(want.clone(), want, 1e-3) is None
    assert compare_logits(None, None, 1e-3) is None
    assert compare_logits(None, want, 1e-3) == "missing"
    assert compare_logits(torch.tensor([[1.0, float("nan"), 0.0]]), want, 0.1) == "are not finite"
    off = compare_logits(want + torch.tensor([[0, 0, 0.5]]), want, 0.1)
    assert off == "differ by up to 0.5 (allowed 0.1)"
    flipped = torch.tensor([[0.92, 0.93, -0.5]])  # within 0.1 of want, but picks id 1
    assert compare_logits(flipped, want, 0.1) == "pick ids [1] instead of [0]"
    tie = torch.tensor([[1.0, 0.99, -0.5]])
    assert compare_logits(torch.tensor([[0.99, 1.0, -0.5]]), tie, 0.1) is None  # a near-tie


def test_the_validation_compares_both_heads_at_advancing_positions(
        tiny_model: MossSpeechModel) -> None:
    seen: list[tuple[int, bool]] = []

    class Recording(StaticStep):
        def __call__(self, row: torch.Tensor, position: int, text_head: bool) -> Logits:
            seen.append((position, text_head))
            return super().__call__(row, position, text_head)

    choice = select_decode_step(tiny_model, tiny_model.new_caches(64), GRAPH_THEN_EAGER,
                                {"graph": Recording, "eager": EagerStep})
    assert isinstance(choice.step, Recording) and not choice.notes
    assert seen == [(3, True), (4, False), (5, True), (6, False), (7, True), (8, False)]
