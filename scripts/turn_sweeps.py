"""Sweeps of the turn-taking pipeline over recordings too many for the corpus (issue 14).

Each recording is played alone through the whole simulated pipeline (default settings, end of
turn by silence, a quiet room: the bench's ``run_scenario``), and the sweep counts what became a
turn. The recordings stay outside the repository:

    # every digit of the Free Spoken Digit Dataset's test split (recordings 0-4): one-word
    # answers that must each be a turn
    git clone https://github.com/Jakobovski/free-spoken-digit-dataset FSDD
    python scripts/turn_sweeps.py words FSDD/recordings

    # Tux Paint's sound effects: sounds that must not be a turn (a few are Tux's voice)
    apt-get download tuxpaint-data tuxpaint-plugins-default
    for d in *.deb; do dpkg-deb -x "$d" TUX; done
    python scripts/turn_sweeps.py sounds TUX

Figures: BENCHMARKS.md, "Turn-taking on real speech", twelfth session.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import numpy as np
import soundfile as sf

from app.audio.resample import resample
from app.cli.bench_turn_taking import MODES, run_scenario
from app.cli.turn_corpus import RATE_HZ, Clip, Kind, compose
from app.cli.turn_scenarios import NO_ECHO

MARGIN_S = 0.05  # digital silence around each recording
LONGEST_S = 4.0  # sounds are cut to this


def play_alone(path: Path, kind: Kind) -> tuple[float, int, int] | None:
    """(seconds of sound, turns missed, false turns) for one recording played alone; None
    for a file that is no sound (unreadable, shorter than 50 ms, or silent)."""
    try:
        pcm, rate = sf.read(path, dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError):
        return None
    mono = pcm.mean(axis=1)[:round(LONGEST_S * rate)]
    seconds = len(mono) / rate
    if seconds < 0.05 or float(np.max(np.abs(mono))) < 1e-4:
        return None
    pad = np.zeros(round(MARGIN_S * RATE_HZ), np.float32)
    track = np.concatenate([pad, resample(mono, rate, RATE_HZ).astype(np.float32), pad])
    clip = Clip(path.stem, track, ((MARGIN_S, MARGIN_S + seconds),))
    figures = run_scenario(compose(path.stem, [(0.6, clip, kind)], NO_ECHO), MODES["silence"])
    return seconds, figures.missed, figures.false_turns


def words(folder: Path, last_take: int) -> None:
    by_length: collections.Counter[float] = collections.Counter()
    missed_by_length: collections.Counter[float] = collections.Counter()
    for path in sorted(folder.glob("*.wav")):
        match = re.fullmatch(r"(\d)_([a-z]+)_(\d+)", path.stem)
        if match is None or int(match[3]) > last_take:
            continue
        played = play_alone(path, "turn")
        if played is None:
            continue
        seconds, missed, _ = played
        band = min(int(seconds * 20) / 20, 0.6)
        by_length[band] += 1
        missed_by_length[band] += missed
        if missed:
            print(f"no turn: {path.stem} ({seconds * 1000:.0f} ms)")
    print(f"words {sum(by_length.values())}, no turn {sum(missed_by_length.values())}")
    for band in sorted(by_length):
        print(f"  {band:.2f}-{band + 0.05:.2f} s: {missed_by_length[band]} of {by_length[band]}")


def sounds(folder: Path) -> None:
    seen: set[str] = set()
    count = turns = 0
    for path in sorted([*folder.rglob("*.ogg"), *folder.rglob("*.wav")]):
        if path.name in seen:
            continue
        seen.add(path.name)
        played = play_alone(path, "ignored")
        if played is None:
            continue
        seconds, _, false_turns = played
        count, turns = count + 1, turns + false_turns
        if false_turns:
            print(f"a turn: {path.name} ({seconds:.2f} s)")
    print(f"sounds {count}, turns {turns}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="sweep", required=True)
    one = sub.add_parser("words", help="each recording a one-word turn")
    one.add_argument("folder", type=Path, help="FSDD's recordings folder")
    one.add_argument("--last-take", type=int, default=4, help="recordings 0..N of each digit")
    other = sub.add_parser("sounds", help="each recording a sound that must not be a turn")
    other.add_argument("folder", type=Path, help="where the packages were unpacked")
    args = parser.parse_args()
    if args.sweep == "words":
        words(args.folder, args.last_take)
    else:
        sounds(args.folder)


if __name__ == "__main__":
    main()
