"""Run test folders again and again while other processes keep cores busy.

A test that waits for a condition which may already hold, or for a fixed time, passes on a calm
machine and fails on a busy one (CI shares its two cores). This script makes the busy machine on
purpose: ``--hogs`` processes spin on a core each while pytest runs the given paths ``--runs``
times in a row. It stops at the first failed run unless ``--keep-going``, and exits 1 if any run
failed. The hogs end with the script, however it ends.

    .venv/bin/python scripts/test_under_load.py                  # tests/ui tests/conversation, 10×
    .venv/bin/python scripts/test_under_load.py --runs 3 tests/ui/test_live_pipeline.py
    make test-under-load
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("tests/ui", "tests/conversation")
SPIN = "while True: pass"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS),
                        help="test files or folders (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=10, help="runs in a row (default: 10)")
    parser.add_argument("--hogs", type=int, default=1,
                        help="busy processes, one core each (default: 1)")
    parser.add_argument("--keep-going", action="store_true",
                        help="run all runs even after a failure")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.hogs < 0:
        parser.error("--runs must be at least 1 and --hogs at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.hogs)]
    failed: list[int] = []
    runs_done = 0
    try:
        for run in range(1, args.runs + 1):
            runs_done = run
            started = time.monotonic()
            result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                                     "no:cacheprovider", *args.paths], cwd=ROOT,
                                    capture_output=True, text=True)
            summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"run {run}/{args.runs} with {args.hogs} busy core(s): {summary} "
                  f"[{time.monotonic() - started:.0f} s]", flush=True)
            if result.returncode != 0:
                failed.append(run)
                print(result.stdout[-6000:], result.stderr[-2000:], sep="\n", flush=True)
                if not args.keep_going:
                    break
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"{runs_done - len(failed)} of {runs_done} runs passed"
          + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
