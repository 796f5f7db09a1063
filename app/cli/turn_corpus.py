"""The real-speech corpus of ``bench turn-taking`` and the scenarios built from it.

The corpus (tests/fixtures/turn_corpus/, built by scripts/build_turn_corpus.py; sources,
licences and how the truth was labelled: docs/turn-taking.md) holds public recordings of five
speakers in three languages as 16 kHz clips, each with its labelled speech segments, and two
real rain recordings. A scenario places utterances on a timeline (a turn, a barge-in into its
reply, the next turn, ...), sends the talker through a room, adds noise, and converts the
result to the input's rate and channels; the truth moves with every step.

Rooms: ``pyroomacoustics`` shoebox rooms (image sources, RT60 from Sabine) for the talker and
for the loudspeaker's way back to the microphone, or the simple simulated echo
(:mod:`app.audio.simulated_echo`). Responses are cut to start at their direct path, so the
truth (the dry recording's segments) stays the truth at the microphone.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from app.audio.simulated_echo import SimulatedEcho

RATE_HZ = 16000
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "turn_corpus"
UTTERANCE_GAP_S = 0.45  # segments closer than this are one utterance (one turn)
BED_S = 1.0  # a talker's room noise is there this long before they speak (faded in)
BED_FADE_S = 0.1
Kind = Literal["turn", "barge_in", "ignored"]


class CorpusMissingError(RuntimeError):
    """The corpus folder is not there (an installed app has no tests/)."""


@dataclass(frozen=True)
class Clip:
    name: str
    pcm: np.ndarray = field(repr=False)  # [T] float32, 16 kHz
    speech: tuple[tuple[float, float], ...]  # labelled segments in the clip (seconds)
    language: str = ""
    onset: str = ""
    pause_points: tuple[float, ...] = ()  # word boundaries inside segments (e.g. a comma)
    # the recording's own background (room noise, no words), where the clip was cut from a
    # longer recording: its 50 ms margin before the first word is no background (see ``bed``)
    background: np.ndarray | None = field(default=None, repr=False)

    def bed(self) -> np.ndarray:
        """The recording's room noise, to loop before the clip (``_lay_bed``): what it holds
        before its first word. A clip cut from a longer recording keeps the whole recording's:
        the cut's 50 ms margin was looped into a 25 Hz buzz at -31 dBFS (the Arabic numbers'
        margins hold the word's edges), a sound no room makes and silero scored 0.6-0.85 for
        100 ms, which stopped replies with nobody talking."""
        if self.background is not None:
            return self.background
        return self.pcm[:max(0, int((self.speech[0][0] - 0.01) * RATE_HZ))]

    def utterances(self) -> list[tuple[float, float]]:
        """Segments joined across gaps shorter than ``UTTERANCE_GAP_S``."""
        out: list[list[float]] = []
        for start, end in self.speech:
            if out and start - out[-1][1] < UTTERANCE_GAP_S:
                out[-1][1] = end
            else:
                out.append([start, end])
        return [(a, b) for a, b in out]

    def cut(self, start_s: float, end_s: float, margin_s: float = 0.05) -> Clip:
        """The part of the clip from ``start_s`` to ``end_s`` (plus a margin of the
        recording's own background), with the segments inside it."""
        a = max(0, int((start_s - margin_s) * RATE_HZ))
        b = min(len(self.pcm), int((end_s + margin_s) * RATE_HZ))
        shift = a / RATE_HZ
        speech = tuple((max(s, start_s) - shift, min(e, end_s) - shift)
                       for s, e in self.speech if e > start_s and s < end_s)
        points = tuple(p - shift for p in self.pause_points if start_s < p < end_s)
        return Clip(self.name, self.pcm[a:b], speech, self.language, self.onset, points,
                    self.bed())

    def with_pause_at(self, point_s: float, pause_s: float) -> Clip:
        """The clip with ``pause_s`` of silence at ``point_s`` (a gap between segments is
        stretched to it, a word boundary inside a segment gets it inserted)."""
        for index, (_, end) in enumerate(self.speech[:-1]):
            if end <= point_s <= self.speech[index + 1][0]:
                return self._paused([(point_s, end, self.speech[index + 1][0])], pause_s)
        return self._paused([(point_s, point_s, point_s)], pause_s)

    def with_pauses(self, pause_s: float, count: int) -> Clip:
        """The clip with its ``count`` longest gaps between segments stretched to ``pause_s``
        of silence (or, where it has none, ``pause_s`` inserted at its word boundaries)."""
        gaps = sorted(range(len(self.speech) - 1),
                      key=lambda i: self.speech[i][1] - self.speech[i + 1][0])[:count]
        cuts = sorted(((self.speech[i][1] + self.speech[i + 1][0]) / 2,
                       self.speech[i][1], self.speech[i + 1][0]) for i in gaps)
        if not cuts:
            cuts = [(p, p, p) for p in self.pause_points[:count]]
        return self._paused(cuts, pause_s)

    def _paused(self, cuts: list[tuple[float, float, float]], pause_s: float) -> Clip:
        pieces, speech, last, moved = [], list(self.speech), 0, 0.0
        for cut_s, gap_start, gap_end in cuts:
            added = max(0.0, pause_s - (gap_end - gap_start))
            silence = round((pause_s - added) * RATE_HZ / 2)  # the gap's own samples go
            a, b = int(cut_s * RATE_HZ) - silence, int(cut_s * RATE_HZ) + silence
            pieces += [self.pcm[last:a], np.zeros(round(pause_s * RATE_HZ), np.float32)]
            last = b
            shift = pause_s - (b - a) / RATE_HZ
            speech = _split_at(speech, gap_start + moved, gap_end + moved, shift)
            moved += shift
        pieces.append(self.pcm[last:])
        return Clip(f"{self.name}+{len(cuts)}x{pause_s * 1000:.0f}ms", np.concatenate(pieces),
                    tuple(speech), self.language, self.onset, background=self.bed())


def _split_at(speech: list[tuple[float, float]], gap_start_s: float, gap_end_s: float,
              shift_s: float) -> list[tuple[float, float]]:
    """Segments after a gap move by ``shift_s``; one the gap cuts (no gap) splits there."""
    out = []
    for start, end in speech:
        if end <= gap_start_s:
            out.append((start, end))
        elif start >= gap_end_s:
            out.append((start + shift_s, end + shift_s))
        else:
            out += [(start, gap_start_s), (gap_end_s + shift_s, end + shift_s)]
    return out


@functools.cache
def load_corpus(folder: Path = CORPUS) -> dict[str, Clip]:
    """Every clip and noise of the corpus (noises have no speech)."""
    import soundfile as sf

    truth_file = folder / "truth.json"
    if not truth_file.is_file():
        raise CorpusMissingError(f"the turn-taking corpus is not at {folder} (it lives in the "
                                 "source tree under tests/fixtures; run from a checkout)")
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    clips = {}
    for name, info in truth["clips"].items():
        pcm, rate = sf.read(folder / f"{name}.flac", dtype="float32")
        assert rate == RATE_HZ
        clips[name] = Clip(name, pcm, tuple((a, b) for a, b in info["speech"]),
                           info["language"], info["onset"],
                           tuple(info.get("pause_points", ())))
    for name in truth["noises"]:
        pcm, rate = sf.read(folder / f"noise_{name}.flac", dtype="float32")
        clips[f"noise_{name}"] = Clip(f"noise_{name}", pcm, ())
    return clips


# ---- rooms ---------------------------------------------------------------------------------

@functools.cache
def room_response(rt60_s: float, distance_m: float, seed: int = 0) -> np.ndarray:
    """Impulse response (16 kHz) of a 5 × 4 × 2.7 m shoebox with the given RT60 (Sabine), from a
    source ``distance_m`` away to the microphone, cut to start at the direct path."""
    import pyroomacoustics as pra

    dims = [5.0, 4.0, 2.7]
    absorption, order = pra.inverse_sabine(rt60_s, dims)
    room = pra.ShoeBox(dims, fs=RATE_HZ, materials=pra.Material(absorption),
                       max_order=min(order, 60))
    rng = np.random.default_rng(seed)
    mic = np.array([3.2, 1.6 + 0.4 * rng.random(), 1.1])
    angle = rng.uniform(0.6, 2.5)
    source = mic + distance_m * np.array([-np.sin(angle), np.cos(angle) * 0.5, 0.1])
    room.add_source(source.tolist())
    room.add_microphone(mic.tolist())
    room.compute_rir()
    response = np.asarray(room.rir[0][0], np.float64)
    direct = int(np.argmax(np.abs(response)))
    return (response[max(0, direct - 4):] / np.abs(response[direct])).astype(np.float32)


@dataclass(frozen=True)
class Room:
    """Where the talker and the loudspeaker are. ``rt60_s`` None: no talker reverberation."""

    name: str
    rt60_s: float | None = None
    talker_m: float = 1.0
    speaker_m: float = 1.0
    echo_db: float | None = None  # the reply's way back to the microphone (None: no echo)
    echo_delay_ms: float = 10.0
    loudspeaker_clip: float | None = None
    simple_echo: bool = False  # the simple simulated echo room instead of a pyroomacoustics one

    def echo(self) -> SimulatedEcho | None:
        if self.echo_db is None:
            return None
        if self.simple_echo or self.rt60_s is None:
            return SimulatedEcho(self.echo_delay_ms, self.echo_db,
                                 loudspeaker_clip=self.loudspeaker_clip)
        return SimulatedEcho(self.echo_delay_ms, self.echo_db,
                             response=room_response(self.rt60_s, self.speaker_m, seed=1),
                             loudspeaker_clip=self.loudspeaker_clip)

    def talker(self, pcm: np.ndarray) -> np.ndarray:
        if self.rt60_s is None:
            return pcm
        from scipy.signal import fftconvolve

        response = room_response(self.rt60_s, self.talker_m, seed=2)
        return fftconvolve(pcm, response)[:len(pcm)].astype(np.float32)


# ---- scenarios -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Utterance:
    """One placed utterance; ``speech`` in seconds on the input's timeline."""

    clip: str
    kind: Kind
    speech: tuple[tuple[float, float], ...]
    hesitation_s: float = 0.0  # a thinking pause this long inside (one turn all the same)

    @property
    def start_s(self) -> float:
        return self.speech[0][0]

    @property
    def end_s(self) -> float:
        return self.speech[-1][1]


@dataclass
class TurnScenario:
    name: str
    pcm: np.ndarray = field(repr=False)  # [T, C] at rate_hz
    rate_hz: int
    utterances: list[Utterance]
    room: Room
    echo_mode: str = "automatic"
    overrides: tuple[tuple[str, object], ...] = ()
    note: str = ""
    one_word: bool = False  # every turn a single word (the end-of-turn table counts them apart)


def level_dbfs(pcm: np.ndarray, speech: tuple[tuple[float, float], ...]) -> float:
    """RMS level of the speech segments."""
    parts = [pcm[int(a * RATE_HZ):int(b * RATE_HZ)] for a, b in speech]
    power = float(np.mean(np.concatenate(parts).astype(np.float64) ** 2))
    return 10 * np.log10(max(power, 1e-20))


def steady(noise: np.ndarray, window_s: float = 0.03, context_s: float = 1.0,
           fade_db: float = 3.0, most_s: float = 0.3) -> np.ndarray:
    """``noise`` without the fades its recording starts and ends with: leading and trailing
    30 ms windows more than ``fade_db`` under the median of the second beside them, at most
    ``most_s`` at either end (a thunder's rumble dies away more slowly: no fade). Looped
    as recorded, the rain (faded in over 60 ms, out over 200 ms) dipped 16 dB under itself
    every second (-52 dBFS under rain at -36), a quiet no rain has, and the quietest 30 ms of
    a room's last seconds were that dip."""
    size = int(window_s * RATE_HZ)
    count = len(noise) // size
    if count < 3:
        return noise
    levels = 10 * np.log10(np.mean(np.square(
        noise[:count * size].astype(np.float64).reshape(count, size)), axis=1) + 1e-20)
    near, most = max(1, int(context_s / window_s)), int(most_s / window_s)
    first, last = 0, count - 1
    while (first < min(most, last)
           and levels[first] < np.median(levels[first + 1:first + 1 + near]) - fade_db):
        first += 1
    while (last > max(first, count - 1 - most)
           and levels[last] < np.median(levels[max(first, last - near):last]) - fade_db):
        last -= 1
    return noise[first * size:(last + 1) * size]


def looped(noise: np.ndarray, length: int) -> np.ndarray:
    """The noise repeated to ``length`` samples with 50 ms cross-fades (no clicks)."""
    fade = min(len(noise) // 4, RATE_HZ // 20)
    ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
    body = noise[:len(noise) - fade].copy()
    body[:fade] = body[:fade] * ramp + noise[len(noise) - fade:] * (1 - ramp)
    reps = length // len(body) + 1
    return np.tile(body, reps)[:length]


def compose(name: str, plan: list[tuple[float, Clip, Kind]], room: Room, *, tail_s: float = 4.0,
            hesitation_s: float = 0.0,
            talker_dbfs: float = -26.0, noise: Clip | None = None, snr_db: float = 20.0,
            rate_hz: int = RATE_HZ, channels: int = 1, **kwargs: object) -> TurnScenario:
    """Place the clips (each at its time, scaled to ``talker_dbfs``), through the room, plus
    noise at ``snr_db`` under the speech, at ``rate_hz`` with ``channels``."""
    total_s = max(at + len(clip.pcm) / RATE_HZ for at, clip, _ in plan) + tail_s
    track = np.zeros(int(total_s * RATE_HZ), np.float32)
    utterances = []
    for at, clip, kind in plan:
        gain = 10 ** ((talker_dbfs - level_dbfs(clip.pcm, clip.speech)) / 20)
        start = int(at * RATE_HZ)
        _lay_bed(track, clip, start, gain)
        track[start:start + len(clip.pcm)] += clip.pcm * gain
        utterances.append(Utterance(clip.name, kind, tuple((at + a, at + b)
                                                           for a, b in clip.speech),
                                    hesitation_s))
    track = room.talker(track)
    if noise is not None:
        speech = tuple(s for u in utterances for s in u.speech)
        noise_pcm = looped(steady(noise.pcm), len(track))
        level = level_dbfs(track, speech) - snr_db
        whole = ((0.0, len(noise_pcm) / RATE_HZ),)
        gain = 10 ** ((level - level_dbfs(noise_pcm, whole)) / 20)
        track = (track + noise_pcm * gain).astype(np.float32)
    return TurnScenario(name, _convert(track, rate_hz, channels), rate_hz, utterances, room,
                        **kwargs)  # type: ignore[arg-type]


def _lay_bed(track: np.ndarray, clip: Clip, start: int, gain: float) -> None:
    """The recording's own background (before its first word) looped over the ``BED_S``
    before the clip, faded in: a microphone hears a room's noise before anyone speaks, and
    a noise that appears with the first word would be an onset no real room has."""
    background = clip.bed()
    length = min(start, int(BED_S * RATE_HZ))
    if len(background) < 160 or length <= 0:
        return
    bed = looped(background, length) * gain
    fade = min(length, int(BED_FADE_S * RATE_HZ))
    bed[:fade] *= 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)
    track[start - length:start] += bed


def _convert(track: np.ndarray, rate_hz: int, channels: int) -> np.ndarray:
    if rate_hz != RATE_HZ:
        from app.audio.resample import resample

        track = resample(track, RATE_HZ, rate_hz)
    if channels == 2:  # a second microphone 0.3 ms further away and a little quieter
        shifted = np.concatenate([np.zeros(max(1, rate_hz * 3 // 10000), np.float32),
                                  track])[:len(track)]
        return np.stack([track, 0.8 * shifted], axis=1).astype(np.float32)
    return track[:, None].astype(np.float32)


def reply_start_s(end_s: float, endpoint_s: float = 0.5) -> float:
    """When the echo engine's reply to speech ending at ``end_s`` is about audible."""
    return end_s + endpoint_s + 0.06
