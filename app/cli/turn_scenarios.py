"""The turn-taking bench's scenarios (issue 14, 23): real speech from the corpus placed in
dialogues, sentences with pauses and hesitations, a noise that is no speech, in simulated and
``pyroomacoustics`` rooms, at several levels, noises, rates and channel counts; and unattended
sessions in the echo rooms. docs/turn-taking.md describes them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.cli.turn_corpus import (
    Clip,
    Kind,
    Room,
    TurnScenario,
    compose,
    load_corpus,
    reply_start_s,
)


def _dialogue(name: str, a: Clip, b: Clip, c: Clip, d: Clip, room: Room, *,
              into_first_s: float = 0.3, into_later_s: float = 0.6,
              **kwargs: Any) -> TurnScenario:
    """A (turn), B talks over A's reply ``into_first_s`` in (the session's first reply), C
    (turn) after B's reply, D talks over C's reply."""
    at_a = 0.6
    at_b = reply_start_s(at_a + a.speech[-1][1]) + into_first_s
    b_reply_end = reply_start_s(at_b + b.speech[-1][1]) + (b.speech[-1][1] - b.speech[0][0])
    at_c = b_reply_end + 1.2
    at_d = reply_start_s(at_c + c.speech[-1][1]) + into_later_s
    plan = [(at_a, a, "turn"), (at_b - b.speech[0][0], b, "barge_in"), (at_c, c, "turn"),
            (at_d - d.speech[0][0], d, "barge_in")]
    return compose(name, plan, room, **kwargs)  # type: ignore[arg-type]


def _sentence(name: str, clip: Clip, room: Room, **kwargs: Any) -> TurnScenario:
    """One sentence (with its pauses), answered; nobody talks over the reply."""
    return compose(name, [(0.6, clip, "turn")], room, **kwargs)


def _answered_turns(clips: list[Clip], endpoint_s: float, gap_s: float
                    ) -> list[tuple[float, Clip, Kind]]:
    """Each clip a turn, the next ``gap_s`` after the echo engine's reply to it (as long as
    the clip, audible ``endpoint_s`` after its end, see ``reply_start_s``) is over."""
    plan: list[tuple[float, Clip, Kind]] = []
    at = 0.6
    for clip in clips:
        plan.append((at, clip, "turn"))
        length = clip.speech[-1][1] - clip.speech[0][0]
        at = reply_start_s(at + clip.speech[-1][1], endpoint_s) + length + gap_s
    return plan


def _sentences(name: str, clips: list[Clip], room: Room, **kwargs: Any) -> TurnScenario:
    """Sentences one after the other, each answered before the next."""
    return compose(name, _answered_turns(clips, 1.9, 1.2), room, **kwargs)


def _words(name: str, clip: Clip, room: Room, **kwargs: Any) -> TurnScenario:
    """One-word turns (issue 14: "yes", "two"): every word of the clip on its own, answered
    before the next."""
    words = [clip.cut(start, end) for start, end in clip.utterances()]
    return compose(name, _answered_turns(words, 0.5, 0.8), room, one_word=True, **kwargs)


def _noise_then_sentence(name: str, noise: Clip, clip: Clip, room: Room) -> TurnScenario:
    """A loud noise that is no speech (it must not start a turn), then a sentence."""
    at = 0.6 + noise.speech[-1][1] + 1.5
    return compose(name, [(0.6, noise, "ignored"), (at, clip, "turn")], room)


def hesitation_scenarios(k: dict[str, Clip], lengths: tuple[float, ...] = (0.5, 1.0, 1.5)
                         ) -> list[TurnScenario]:
    """Sentences stopped mid-way where they cannot be over (at a word boundary: after "and",
    after "faced", before "table", German "das wird er | vielfach ernten"), a thinking
    pause, then the rest (issue 23): each must stay one turn."""
    points = [(k["slt"], 1.28), (k["slt"], 1.575), (k["slt"], 2.485), (k["de"], 2.48)]
    return [_sentences(f"hesitation_{h:.1f}s", [clip.with_pause_at(at, h) for clip, at in points],
                       NO_ECHO, hesitation_s=h) for h in lengths]


# The third sound event of ar_m_numbers is no speech: a 1.9 s broadband noise burst without
# harmonics (the recording's 'bc_noise'); it is played as a noise that must not start a turn.
AR_NOISE_BURST_SPAN = 2
DIGITS = ("jackson", "nicolas", "theo", "yweweler", "george", "lucas")


def corpus_clips() -> dict[str, Clip]:
    corpus = load_corpus()
    ar = corpus["ar_m_numbers"]
    spans = ar.utterances()
    return {"slt": corpus["en_f_slt_a0009"], "a0001": corpus["en_m_a0001"],
            "welcome": corpus["en_m_welcome"], "de": corpus["de_m_was_der_mensch"],
            "ar_one": ar.cut(*spans[0]), "ar_two": ar.cut(*spans[1]),
            "ar_three": ar.cut(*spans[3]), "ar_tail": ar.cut(*spans[4]),
            "noise_burst": replace(ar.cut(*spans[AR_NOISE_BURST_SPAN]), name="noise_burst"),
            "rain": corpus["noise_rain"], "thunder": corpus["noise_thunder_rain"],
            **{f"digits_{speaker}": corpus[f"en_m_digits_{speaker}"] for speaker in DIGITS}}


NO_ECHO = Room("none")
SIMPLE_60 = Room("simple 60 ms −6 dB", echo_db=-6.0, echo_delay_ms=60.0, simple_echo=True)
SIMPLE_120 = Room("simple 120 ms 0 dB", echo_db=0.0, echo_delay_ms=120.0, simple_echo=True)
ECHO_ROOMS = (
    SIMPLE_60, SIMPLE_120,
    Room("RT60 0.2 s, 0.3 m, 0 dB, clipping", 0.2, talker_m=0.6, speaker_m=0.3, echo_db=0.0,
         loudspeaker_clip=0.3),
    Room("RT60 0.5 s, 1 m, −10 dB, clipping", 0.5, talker_m=1.0, speaker_m=1.0, echo_db=-10.0,
         loudspeaker_clip=0.3),
    Room("RT60 0.8 s, 2 m, −20 dB, clipping", 0.8, talker_m=1.5, speaker_m=2.0, echo_db=-20.0,
         loudspeaker_clip=0.3),
    Room("RT60 0.8 s, 0.5 m, 0 dB, clipping", 0.8, talker_m=0.8, speaker_m=0.5, echo_db=0.0,
         loudspeaker_clip=0.2),
)


def build_scenarios(quick: bool = False) -> list[TurnScenario]:
    k = corpus_clips()
    if quick:
        return [
            _dialogue("clean_16k", k["slt"], k["ar_one"], k["welcome"], k["ar_two"], NO_ECHO),
            _dialogue("echo_simple_60ms_rain_10dB", k["a0001"], k["ar_two"], k["slt"],
                      k["ar_one"], SIMPLE_60, noise=k["rain"], snr_db=10.0),
            _sentence("pauses_400ms", k["slt"].with_pauses(0.4, 1), NO_ECHO),
            _sentence("hesitation_1.0s", k["slt"].with_pause_at(1.575, 1.0), NO_ECHO,
                      hesitation_s=1.0),
        ]
    rooms = ECHO_ROOMS
    out = [
        _dialogue("clean_16k_en_f", k["slt"], k["ar_one"], k["welcome"], k["ar_two"], NO_ECHO),
        _dialogue("clean_48k_stereo_de", k["de"], k["welcome"], k["a0001"], k["ar_one"],
                  NO_ECHO, rate_hz=48000, channels=2),
        _dialogue("clean_8k_ar", k["ar_tail"], k["ar_one"], k["ar_three"], k["ar_two"], NO_ECHO,
                  rate_hz=8000),
        _dialogue("clean_44k_en_m", k["a0001"], k["welcome"], k["slt"], k["ar_one"], NO_ECHO,
                  rate_hz=44100),
        _dialogue("quiet_-40dBFS", k["slt"], k["welcome"], k["a0001"], k["ar_two"], NO_ECHO,
                  talker_dbfs=-40.0),
        _dialogue("loud_-20dBFS", k["a0001"], k["ar_two"], k["de"], k["welcome"], NO_ECHO,
                  talker_dbfs=-20.0),
        _dialogue("rain_20dB", k["de"], k["ar_one"], k["slt"], k["welcome"], NO_ECHO,
                  noise=k["rain"], snr_db=20.0),
        _dialogue("rain_10dB", k["slt"], k["ar_two"], k["a0001"], k["ar_one"], NO_ECHO,
                  noise=k["rain"], snr_db=10.0),
        _dialogue("rain_5dB", k["a0001"], k["welcome"], k["de"], k["ar_two"], NO_ECHO,
                  noise=k["rain"], snr_db=5.0),
        _dialogue("thunder_10dB_-35dBFS", k["ar_tail"], k["welcome"], k["slt"], k["ar_one"],
                  NO_ECHO, noise=k["thunder"], snr_db=10.0, talker_dbfs=-35.0),
    ]
    for index, room in enumerate(rooms):
        a, b, c, d = [("slt", "ar_one", "a0001", "welcome"), ("de", "ar_two", "slt", "ar_one"),
                      ("a0001", "welcome", "ar_tail", "ar_two"),
                      ("slt", "ar_two", "de", "welcome"), ("ar_tail", "ar_one", "a0001", "ar_two"),
                      ("de", "welcome", "slt", "ar_one")][index]
        rate, channels = [(16000, 1), (48000, 2), (44100, 1), (16000, 1), (8000, 1),
                          (48000, 2)][index]
        level = [-26.0, -30.0, -20.0, -35.0, -26.0, -40.0][index]
        noise = {3: (k["rain"], 10.0), 5: (k["rain"], 20.0)}.get(index)
        out.append(_dialogue(f"echo_{room.name}", k[a], k[b], k[c], k[d], room, rate_hz=rate,
                             channels=channels, talker_dbfs=level,
                             noise=noise[0] if noise else None,
                             snr_db=noise[1] if noise else 20.0))
    out += [
        _dialogue("headset_mode", k["slt"], k["ar_two"], k["welcome"], k["ar_one"], NO_ECHO,
                  echo_mode="headset"),
        _dialogue("half_duplex_mode", k["a0001"], k["ar_one"], k["slt"], k["welcome"],
                  rooms[3], echo_mode="half_duplex"),
        _noise_then_sentence("noise_burst_then_en_f", k["noise_burst"], k["slt"], NO_ECHO),
        _sentence("pauses_400ms_en_f", k["slt"].with_pauses(0.4, 2), NO_ECHO),
        _sentence("pauses_250_400ms_de", k["de"].with_pauses(0.25, 2).with_pauses(0.4, 1),
                  NO_ECHO),
        _sentence("pauses_400ms_rain_10dB", k["slt"].with_pauses(0.4, 2), NO_ECHO,
                  noise=k["rain"], snr_db=10.0),
        _sentence("pauses_400ms_echo_room", k["slt"].with_pauses(0.4, 1), rooms[3]),
        *hesitation_scenarios(k),
        _words("words_jackson", k["digits_jackson"], NO_ECHO),
        _words("words_nicolas", k["digits_nicolas"], NO_ECHO),
        _words("words_theo", k["digits_theo"], NO_ECHO),
        _words("words_yweweler_rain_10dB", k["digits_yweweler"], NO_ECHO, noise=k["rain"],
               snr_db=10.0),
        _words("words_george_-40dBFS", k["digits_george"], NO_ECHO, talker_dbfs=-40.0),
        _words("words_lucas_echo_room", k["digits_lucas"], rooms[3]),
    ]
    for scenario in out:
        if scenario.echo_mode == "half_duplex":  # no barge-in there: it talks over nothing
            scenario.utterances = [replace(u, kind="ignored") if u.kind == "barge_in" else u
                                   for u in scenario.utterances]
    return out


def self_interruption_scenarios(sessions: int) -> list[TurnScenario]:
    """Four turns per session, answered, nobody talking over the replies, in every echo room."""
    k = corpus_clips()
    order = ["slt", "a0001", "de", "ar_three", "welcome", "ar_tail"]
    out = []
    for room in ECHO_ROOMS:
        for session in range(sessions):
            clips = [k[order[(session + i) % len(order)]] for i in range(4)]
            out.append(compose(f"self_{room.name}_{session}", _answered_turns(clips, 0.5, 1.0),
                               room))
    return out
