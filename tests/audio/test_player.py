from __future__ import annotations

import numpy as np
import pytest

from app.audio.player import PlaybackNotice, Player

RATE = 48000
BLOCK = 480  # 10 ms


class Speaker:
    """Calls fill like an output callback; keeps what was played and the notices."""

    def __init__(self, player_kwargs: dict | None = None, block: int = BLOCK) -> None:
        self.notices: list[PlaybackNotice] = []
        self.player = Player(RATE, notify=self.notices.append,
                             **({"start_threshold_ms": 80.0} | (player_kwargs or {})))
        self.block = block
        self.played: list[np.ndarray] = []
        self.t_s = 0.0

    def run(self, blocks: int) -> np.ndarray:
        """Play ``blocks`` more blocks; returns just those."""
        first = len(self.played)
        for _ in range(blocks):
            out = np.full(self.block, 9.0, np.float32)  # fill must overwrite everything
            self.player.fill(out, self.t_s)
            self.played.append(out.copy())
            self.t_s += self.block / RATE
        return np.concatenate(self.played[first:])

    def everything(self) -> np.ndarray:
        return np.concatenate(self.played)

    def kinds(self) -> list[str]:
        return [n.kind for n in self.notices]


def tone(seconds: float, level: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_playback_waits_for_the_start_threshold() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.05))  # 50 ms < 80 ms threshold
    assert not np.any(speaker.run(3))
    speaker.player.enqueue(1, tone(0.05))
    played = speaker.run(1)
    assert np.any(played[-BLOCK:])
    assert speaker.kinds() == ["audible"] and speaker.notices[0].t_s == pytest.approx(0.03)


def test_a_complete_short_reply_plays_without_reaching_the_threshold() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.02))
    speaker.player.end_reply(1)
    played = speaker.run(4)
    np.testing.assert_array_equal(played[:960], tone(0.02))
    assert speaker.kinds() == ["audible", "played_out"]
    done = speaker.notices[-1]
    assert done.heard_samples == 960 and done.t_s == pytest.approx(0.02)


def test_played_audio_is_bit_exact_and_in_order() -> None:
    speaker = Speaker()
    reply = tone(0.33)
    speaker.player.begin_reply(7)
    for start in range(0, len(reply), 1000):
        speaker.player.enqueue(7, reply[start:start + 1000])
    speaker.player.end_reply(7)
    played = speaker.run(40)
    np.testing.assert_array_equal(played[: len(reply)], reply)
    assert not np.any(played[len(reply):])
    assert speaker.notices[-1].heard_samples == len(reply)


@pytest.mark.parametrize("block", [BLOCK, 128])
def test_flush_fades_out_within_10_ms_without_a_click(block: int) -> None:
    speaker = Speaker(block=block)
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(1.0, level=0.9))
    before = speaker.run(20 * BLOCK // block)
    steady_step = np.max(np.abs(np.diff(before[-BLOCK:])))
    speaker.player.flush(now_s=speaker.t_s)
    flush_at = len(before)
    speaker.run(10 * BLOCK // block)
    played = speaker.everything()
    tail = played[flush_at:]
    silent_from = np.flatnonzero(tail)[-1] + 1
    assert silent_from <= 0.010 * RATE  # silent within 10 ms
    assert np.max(np.abs(np.diff(played[flush_at - 1:]))) <= steady_step * 1.05  # no click
    silenced = speaker.notices[-1]
    assert silenced.kind == "silenced"
    # the fade's last sample is an exact zero, so the notice may count one more sample
    assert silenced.t_s == pytest.approx((flush_at + silent_from) / RATE, abs=1.5 / RATE)
    assert silenced.heard_samples - (flush_at + silent_from) in (0, 1)


def test_a_hard_cut_would_have_clicked() -> None:
    """Guards the click test above: the same signal cut without fade exceeds the bound."""
    signal = tone(0.1, level=0.9)
    steady_step = np.max(np.abs(np.diff(signal)))
    peak = int(np.argmax(np.abs(signal[:200])))
    cut_at_peak = np.concatenate([signal[: peak + 1], np.zeros(500, np.float32)])
    assert np.max(np.abs(np.diff(cut_at_peak))) > steady_step * 1.05


def test_flush_before_anything_is_audible_silences_at_once() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(3)
    speaker.player.enqueue(3, tone(0.02))  # below threshold: not started
    speaker.player.flush(now_s=1.25)
    assert speaker.kinds() == ["silenced"]
    assert speaker.notices[0].t_s == 1.25 and speaker.notices[0].heard_samples == 0
    speaker.player.enqueue(3, tone(0.5))  # late audio after the flush is ignored
    assert not np.any(speaker.run(5))


def test_underrun_is_counted_and_playback_rebuffers() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.085))
    speaker.run(10)
    assert speaker.player.underruns == 1
    speaker.player.enqueue(1, tone(0.04))  # below the threshold again: waits
    assert not np.any(speaker.run(2))
    speaker.player.enqueue(1, tone(0.05))
    speaker.player.end_reply(1)
    speaker.run(12)
    assert speaker.notices[-1].kind == "played_out"
    assert speaker.notices[-1].underruns == 1
    assert speaker.notices[-1].heard_samples == int(0.175 * RATE)


def test_ducking_lowers_the_level_with_a_ramp_and_restores_it() -> None:
    speaker = Speaker(player_kwargs={"duck_gain": 0.25})
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, np.full(RATE, 0.8, np.float32))
    speaker.run(2)
    speaker.player.set_ducked(True)
    ducked = speaker.run(3)[-BLOCK:]
    assert np.allclose(ducked, 0.2)
    first_ducked_block = speaker.played[2]
    assert first_ducked_block[0] > 0.7 and np.all(np.diff(first_ducked_block) <= 1e-7)
    speaker.player.set_ducked(False)
    assert np.allclose(speaker.run(3)[-BLOCK:], 0.8)


def test_fade_must_be_at_most_10_ms() -> None:
    with pytest.raises(ValueError):
        Player(RATE, 80, notify=lambda n: None, fade_ms=12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_samples_that_are_not_numbers_are_played_as_silence(
        bad: float, caplog: pytest.LogCaptureFixture) -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    reply = tone(0.3)
    reply[1000:3970] = bad  # 2,970 samples, as in the report that found it
    speaker.player.enqueue(1, reply)
    speaker.player.enqueue(1, np.full(480, bad, np.float32))
    speaker.player.end_reply(1)
    played = speaker.run(50)
    assert np.all(np.isfinite(played)) and np.max(np.abs(played)) <= 0.5
    assert np.count_nonzero(played == 0.0) >= 2970 + 480
    assert speaker.player.non_finite_samples == 2970 + 480
    assert sum("not numbers" in r.message for r in caplog.records) == 1  # once per reply


def test_a_reply_at_plus_6_dbfs_never_clips() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.5, level=2.0))
    speaker.player.end_reply(1)
    played = speaker.run(60)
    assert np.max(np.abs(played)) < 0.99 and speaker.player.limiter.limited_samples > 0
    assert np.count_nonzero(np.abs(played) > 0.9) > 1000  # turned down, not silenced


def test_what_is_mixed_in_goes_through_the_limiter_too() -> None:
    speaker = Speaker()
    out = np.zeros(BLOCK, np.float32)

    def loud_tone(block: np.ndarray) -> None:
        block += tone(BLOCK / RATE, level=3.0)

    for _ in range(5):
        speaker.player.fill(out, 0.0, loud_tone)
        assert np.max(np.abs(out)) < 0.99
