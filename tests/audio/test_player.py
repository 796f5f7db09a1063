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


def steady_reply(player_kwargs: dict | None = None, block: int = BLOCK) -> Speaker:
    """A speaker with reply 1 begun: one second at a constant 0.8."""
    speaker = Speaker(player_kwargs, block)
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, np.full(RATE, 0.8, np.float32))
    return speaker


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
    speaker = steady_reply(player_kwargs={"duck_gain": 0.25})
    speaker.run(2)
    speaker.player.set_ducked(True)
    ducked = speaker.run(3)[-BLOCK:]
    assert np.allclose(ducked, 0.2)
    first_ducked_block = speaker.played[2]
    assert first_ducked_block[0] > 0.7 and np.all(np.diff(first_ducked_block) <= 1e-7)
    speaker.player.set_ducked(False)
    assert np.allclose(speaker.run(3)[-BLOCK:], 0.8)


def test_a_silent_duck_plays_on_unheard_and_comes_back_where_the_reply_is() -> None:
    speaker = steady_reply(player_kwargs={"duck_gain": 0.25})
    speaker.run(2)
    speaker.player.set_ducked(True, silent=True)
    assert not np.any(speaker.run(3)[-BLOCK:])
    speaker.player.set_ducked(False)
    assert np.allclose(speaker.run(3)[-BLOCK:], 0.8)
    speaker.player.set_ducked(True)  # not silent: the duck gain
    assert np.allclose(speaker.run(3)[-BLOCK:], 0.2)


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


def test_audio_after_end_reply_is_not_played() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.02))
    speaker.player.end_reply(1)
    speaker.player.enqueue(1, tone(0.05))  # the reply was declared complete: too late
    played = speaker.run(10)
    assert not np.any(played[960:])
    assert speaker.kinds() == ["audible", "played_out"]
    assert speaker.notices[-1].heard_samples == 960


def test_end_reply_of_another_turn_leaves_the_current_reply_open() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(2)
    speaker.player.enqueue(2, tone(0.02))
    speaker.player.end_reply(1)  # a stale turn's end
    assert not np.any(speaker.run(3))  # still waiting for the start threshold
    assert speaker.kinds() == []


def test_playback_starts_when_exactly_the_threshold_is_buffered() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.08))  # exactly 80 ms = 3840 samples
    played = speaker.run(1)
    np.testing.assert_array_equal(played, tone(0.08)[:BLOCK])
    assert speaker.kinds() == ["audible"] and speaker.notices[0].t_s == 0.0


def test_one_sample_short_of_the_threshold_waits() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.08)[:-1])
    assert not np.any(speaker.run(2)) and speaker.kinds() == []


def test_a_zero_threshold_starts_on_the_first_sample() -> None:
    speaker = Speaker(player_kwargs={"start_threshold_ms": 0.0})
    speaker.player.begin_reply(1)
    assert not np.any(speaker.run(1)) and speaker.kinds() == []  # nothing buffered: no start
    speaker.player.enqueue(1, np.full(1, 0.5, np.float32))
    played = speaker.run(1)
    assert played[0] == 0.5 and not np.any(played[1:])
    assert speaker.kinds() == ["audible"]


def test_played_out_time_includes_the_last_partial_block() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(1000 / RATE))  # 480 + 480 + 40 samples
    speaker.player.end_reply(1)
    speaker.run(4)
    done = speaker.notices[-1]
    assert done.kind == "played_out" and done.heard_samples == 1000
    assert done.t_s == pytest.approx(1000 / RATE, abs=1e-9)
    assert speaker.notices[0].t_s == 0.0  # audible from the first block


def test_flushing_a_drained_buffer_silences_at_once() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(0.08))  # exactly 8 blocks: playing, then nothing buffered
    speaker.run(8)
    speaker.player.flush(now_s=5.0)
    assert speaker.kinds() == ["audible", "silenced"]
    assert speaker.notices[-1].t_s == 5.0 and speaker.notices[-1].heard_samples == 3840
    speaker.player.enqueue(1, tone(0.5))  # the reply is gone: late audio is dropped
    assert not np.any(speaker.run(10))


@pytest.mark.parametrize(("block", "left"), [(BLOCK, 100), (99, 100), (BLOCK, 1)])
def test_the_fade_is_cut_to_what_is_buffered(block: int, left: int) -> None:
    """With fewer samples left than the 8 ms fade, the fade reaches zero on the last of them
    (over one callback or two)."""
    speaker = Speaker(block=block)
    played_before = block * -(-3840 // block)  # whole blocks, at least the start threshold
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, np.full(played_before + left, 0.8, np.float32))
    speaker.run(played_before // block)
    speaker.player.flush(now_s=speaker.t_s)
    faded = speaker.run(2)[:left]
    assert np.all(np.diff(faded) < 0) and faded[-1] == 0.0
    assert left == 1 or faded[0] > 0.79
    silenced = speaker.notices[-1]
    assert speaker.kinds() == ["audible", "silenced"]
    assert silenced.heard_samples == played_before + left
    assert silenced.t_s == pytest.approx((played_before + left) / RATE, abs=1e-9)


def test_a_second_flush_during_the_fade_changes_nothing() -> None:
    speaker = steady_reply(block=128)
    speaker.run(40)
    speaker.player.flush(now_s=speaker.t_s)
    speaker.run(1)  # the fade (384 samples) is under way
    speaker.player.flush(now_s=99.0)
    speaker.run(5)
    assert speaker.kinds() == ["audible", "silenced"]
    assert speaker.notices[-1].t_s < 1.0 and speaker.notices[-1].heard_samples == 40 * 128 + 384


def test_the_default_fade_lasts_8_ms_whatever_the_callback_size() -> None:
    """384 samples at 48 kHz over callbacks of 300: the second callback takes only the 84
    samples the fade has left, and the fade's gain never rises again."""
    speaker = steady_reply(block=300)
    speaker.run(13)  # 3,900 samples: started
    speaker.player.flush(now_s=speaker.t_s)
    fade = speaker.run(3)
    k = np.arange(1, 385)
    expected = 0.8 * 0.5 * (1.0 + np.cos(np.pi * k / 384))
    assert np.allclose(fade[:384], expected, atol=1e-6)
    assert not np.any(fade[384:])
    assert speaker.notices[-1].heard_samples == 13 * 300 + 384


@pytest.mark.parametrize(("rate", "fade_ms", "fade_samples"),
                         [(96000, 8.0, 768), (48000, 10.0, 480), (48000, 0.001, 1)])
def test_the_fade_takes_fade_ms_at_the_device_rate(rate: int, fade_ms: float,
                                                    fade_samples: int) -> None:
    """(a fade shorter than one sample still takes one)"""
    notices: list[PlaybackNotice] = []
    player = Player(rate, 0.0, notify=notices.append, fade_ms=fade_ms)
    player.begin_reply(1)
    player.enqueue(1, np.full(rate, 0.5, np.float32))
    out = np.zeros(1000, np.float32)
    player.fill(out, 0.0)
    player.flush(0.0)
    while not notices or notices[-1].kind != "silenced":
        player.fill(out, 0.0)
    assert notices[-1].heard_samples == 1000 + fade_samples


@pytest.mark.parametrize("fade_ms", [0.0, -1.0, 10.001])
def test_a_fade_outside_0_to_10_ms_is_refused(fade_ms: float) -> None:
    with pytest.raises(ValueError, match=r"fade_ms must be in \(0, 10.0\]"):
        Player(RATE, 80, notify=lambda n: None, fade_ms=fade_ms)


@pytest.mark.parametrize("fade_ms", [0.5, 10.0])
def test_fades_from_under_one_ms_to_10_ms_are_accepted(fade_ms: float) -> None:
    Player(RATE, 80, notify=lambda n: None, fade_ms=fade_ms)


def test_the_default_duck_is_a_quarter_reached_and_left_with_10_ms_ramps() -> None:
    """Gain 1 → 0.25 and back, one 10 ms full-scale ramp (1/480 per sample at 48 kHz), even
    across callbacks of 128 samples."""
    speaker = steady_reply(block=128)
    speaker.run(30)
    speaker.player.set_ducked(True)
    down = speaker.run(4)  # 512 samples
    ramp_down = np.maximum(1.0 - np.arange(1, 513) / 480, 0.25)
    assert np.allclose(down, 0.8 * ramp_down, atol=1e-6)
    speaker.player.set_ducked(False)
    up = speaker.run(4)
    ramp_up = np.minimum(0.25 + np.arange(1, 513) / 480, 1.0)
    assert np.allclose(up, 0.8 * ramp_up, atol=1e-6)


def test_a_zero_ms_duck_ramp_ducks_on_the_next_sample() -> None:
    speaker = steady_reply(player_kwargs={"duck_ramp_ms": 0.0})
    speaker.run(8)
    speaker.player.set_ducked(True)
    assert np.allclose(speaker.run(1), 0.2)


def test_a_flush_while_ducked_fades_from_the_ducked_level() -> None:
    speaker = steady_reply()
    speaker.run(8)
    speaker.player.set_ducked(True)
    speaker.run(2)
    speaker.player.flush(now_s=speaker.t_s)
    fade = speaker.run(1)[:384]
    assert fade[0] == pytest.approx(0.2, abs=0.001) and fade[-1] == 0.0


def test_an_empty_complete_reply_is_played_out_at_the_next_callback() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(4)
    speaker.player.end_reply(4)
    speaker.run(3)
    (notice,) = speaker.notices
    assert notice == PlaybackNotice("played_out", 4, 0.0, 0, RATE, 0)
    assert speaker.player.active_turn_id is None


def test_notices_carry_the_turn_and_the_device_rate() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(9)
    speaker.player.enqueue(9, tone(0.1))
    speaker.player.end_reply(9)
    speaker.run(12)
    assert [(n.kind, n.turn_id, n.sample_rate_hz) for n in speaker.notices] == [
        ("audible", 9, RATE), ("played_out", 9, RATE)]


def test_underruns_are_counted_per_reply_and_in_total() -> None:
    speaker = Speaker(player_kwargs={"start_threshold_ms": 0.0})
    for turn in (1, 2):
        speaker.player.begin_reply(turn)
        for _ in range(2):  # two underruns in each reply
            speaker.player.enqueue(turn, tone(0.005))
            speaker.run(1)
        speaker.player.end_reply(turn)
        speaker.run(1)
    ends = [n for n in speaker.notices if n.kind == "played_out"]
    assert [n.underruns for n in ends] == [2, 2] and speaker.player.underruns == 4


def test_after_an_underrun_only_new_audio_counts_toward_the_threshold() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, tone(4000 / RATE))
    speaker.run(9)  # 8 blocks and 160 samples: an underrun
    assert speaker.player.underruns == 1
    speaker.player.enqueue(1, tone(3700 / RATE))  # < 3,840 of new audio
    assert not np.any(speaker.run(1))
    speaker.player.enqueue(1, tone(140 / RATE))  # now exactly the threshold
    assert np.any(speaker.run(1))


def test_audio_for_another_turn_is_not_played() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(2)
    speaker.player.enqueue(1, tone(0.2))  # a stale turn's audio
    speaker.player.enqueue(2, tone(0.02))
    speaker.player.end_reply(2)
    speaker.run(10)
    assert speaker.notices[-1].heard_samples == 960


def test_a_single_sample_is_audio_and_an_empty_chunk_is_nothing() -> None:
    speaker = Speaker(player_kwargs={"start_threshold_ms": 0.0})
    speaker.player.begin_reply(1)
    speaker.player.enqueue(1, np.zeros(0, np.float32))
    speaker.player.enqueue(1, np.full(1, 0.3, np.float32))
    speaker.player.end_reply(1)
    played = speaker.run(2)
    assert played[0] == pytest.approx(0.3) and speaker.notices[-1].heard_samples == 1


def test_the_not_a_number_warning_names_the_reply_once_even_after_clean_audio(
        caplog: pytest.LogCaptureFixture) -> None:
    speaker = Speaker()
    speaker.player.begin_reply(5)
    warning = ("reply 5: the engine sent samples that are not numbers (NaN or infinite); they "
               "are played as silence")
    speaker.player.enqueue(5, np.full(10, np.nan, np.float32))
    assert [r.getMessage() for r in caplog.records] == [warning]  # at the first bad chunk
    for chunk in (tone(0.01), np.full(10, np.inf, np.float32)):
        speaker.player.enqueue(5, chunk)
    assert [r.getMessage() for r in caplog.records] == [warning]


def test_flush_and_drop_without_a_reply_do_nothing() -> None:
    speaker = Speaker()
    speaker.player.flush(1.0)
    speaker.player.drop(1.0)
    assert speaker.notices == [] and not np.any(speaker.run(2))


def test_drop_silences_the_reply_at_once_without_a_fade() -> None:
    speaker = Speaker()
    speaker.player.begin_reply(6)
    speaker.player.enqueue(6, tone(0.5))
    speaker.run(10)
    speaker.player.drop(now_s=3.5)
    assert speaker.notices[-1] == PlaybackNotice("silenced", 6, 3.5, 4800, RATE, 0)
    assert speaker.player.active_turn_id is None
    speaker.player.enqueue(6, tone(0.5))
    assert not np.any(speaker.run(10))
