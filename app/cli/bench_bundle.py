"""Size and start-up time of the one-folder bundle (make package), next to the source checkout.

Start-up is the wall time of whole processes, from launch to exit:
- ``--version``: the executable starts, Python and the command line load, it answers;
- ``--screenshot PNG``: the window opens (offscreen), is drawn and saved, the process exits
  (take_screenshot waits a fixed 150 ms for the last frame, included);
- ``doctor --json``: imports torch and probes the GPUs and audio devices (what a start with a
  model set up adds before the engine loads its weights);
- ``--self-test``: every self-test step (torch import and the tiny model included).
The first run of each is reported apart (cold file cache after a build), then the median of
the others.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app import APP_ID
from app.cli.options import InputError, InputFolder, OutputFile, count

COMMANDS = {"version": ["--version"], "window": ["--screenshot", "{tmp}/shot.png"],
            "doctor": ["doctor", "--json"], "self-test": ["--self-test"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bundle", type=InputFolder("bundle folder (build it with `make "
                                                     "package`)"),
                        default=Path("dist") / APP_ID,
                        help="the bundle folder (default: dist/moss-voice)")
    parser.add_argument("--repeat", type=count(1, 100), default=4, help="runs of each command")
    parser.add_argument("--no-source", dest="source", action="store_false",
                        help="do not time `python -m app` for comparison")
    parser.add_argument("--json", type=OutputFile(what="JSON file"),
                        help="also write the figures to this file")


def executable_name() -> str:
    """The bundle's executable (packaging/build.py builds it under this name)."""
    return APP_ID + (".exe" if sys.platform == "win32" else "")


def folder_size(folder: Path) -> tuple[int, int]:
    """(bytes, files) of a folder, links not followed (also the build summary's size)."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def time_command(argv: list[str], repeat: int) -> dict[str, float]:
    """Seconds per run of ``argv`` (offscreen, throwaway home): first run, median of the rest."""
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="moss-voice-bench-") as tmp:
            env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MOSS_VOICE_HOME": tmp}
            command = [part.replace("{tmp}", tmp) for part in argv]
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
            runs.append(time.perf_counter() - start)
    rest = runs[1:] or runs
    return {"first_s": round(runs[0], 3), "median_s": round(statistics.median(rest), 3),
            "min_s": round(min(runs), 3), "runs": len(runs)}


def check(args: argparse.Namespace) -> None:
    """The bundle's executable must be there."""
    if not (args.bundle / executable_name()).is_file():
        raise InputError("--bundle", args.bundle,
                         "no bundle there: build it with `make package` first")


def run(args: argparse.Namespace) -> int:
    exe = args.bundle / executable_name()
    size_bytes, files = folder_size(args.bundle)
    results: dict[str, object] = {"bundle": str(args.bundle), "bundle_bytes": size_bytes,
                                  "bundle_files": files, "bundle_s": {}, "source_s": {}}
    print(f"bundle {args.bundle}: {size_bytes / 2**20:.0f} MiB in {files} files")
    launchers = {"bundle_s": [str(exe)]}
    if args.source:
        launchers["source_s"] = [sys.executable, "-m", "app"]
    for label, launcher in launchers.items():
        for name, extra in COMMANDS.items():
            figures = time_command([*launcher, *extra], args.repeat)
            results[label][name] = figures  # type: ignore[index]
            print(f"{label[:-2]:>6} {name:<9} first {figures['first_s']:5.2f} s, median "
                  f"{figures['median_s']:5.2f} s, min {figures['min_s']:5.2f} s "
                  f"({figures['runs']} runs)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
