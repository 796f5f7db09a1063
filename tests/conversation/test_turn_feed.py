"""The turn's audio as the end-of-turn model hears it: the tail of what was fed up to a time,
joined from the pumped parts (not from the whole turn)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from app.conversation.listener import TurnFeed

RATE = 16000


class StubListener:
    """16 kHz capture with sample ``i`` = ``i``; ``written`` samples have arrived."""

    def __init__(self) -> None:
        self.history = SimpleNamespace(total_written=0)

    def index_at(self, t_s: float) -> int:
        return round(t_s * RATE)

    def audio(self, start: int, end: int) -> np.ndarray:
        return np.arange(start, end, dtype=np.float32)


def fed_turn(parts: list[int], from_s: float = 0.25) -> TurnFeed:
    listener = StubListener()
    feed = TurnFeed(listener, lambda turn_id, pcm: None)  # type: ignore[arg-type]
    feed.begin(from_s)
    listener.history.total_written = listener.index_at(from_s)
    for length in parts:
        listener.history.total_written += length
        feed.pump(1)
    return feed


@pytest.mark.parametrize("until_s", [0.25, 0.3, 0.5, 0.7512, 0.9, 2.0])
@pytest.mark.parametrize("last", [1, 160, 3000, 100_000])
def test_the_tail_up_to_a_time_is_the_whole_turns_audio_cut_there(until_s: float,
                                                                   last: int) -> None:
    feed = fed_turn([1600, 7, 3200, 4000])  # 0.25 s to 0.78 s, in four uneven parts
    whole = feed.audio()
    end = max(0, round(until_s * RATE) - round(0.25 * RATE))
    expected = whole[:end][-last:] if end else whole[:0]
    got = feed.audio_until(until_s, last)
    assert got.dtype == np.float32 and np.array_equal(got, expected)


def test_before_anything_was_fed_it_is_empty() -> None:
    assert len(fed_turn([]).audio_until(1.0, RATE)) == 0


@pytest.mark.parametrize("from_s", [0.0, 0.25, 0.3, 0.55, 0.78, 1.0])
def test_none_of_it_comes_from_before_a_given_time(from_s: float) -> None:
    """The model hears the turn from its onset's pre-roll, which a lead-in may precede."""
    feed = fed_turn([1600, 7, 3200, 4000])  # 0.25 s to 0.78 s
    whole = feed.audio()
    end = round(0.7 * RATE) - round(0.25 * RATE)
    skip = min(end, max(0, round(from_s * RATE) - round(0.25 * RATE)))
    got = feed.audio_until(0.7, 5000, from_s)
    assert np.array_equal(got, whole[max(skip, end - 5000):end])
