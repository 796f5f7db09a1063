"""Take the smart-turn v3.2 end-of-turn model out of the pipecat-ai wheel (issue 23).

    python scripts/fetch_smart_turn.py [--wheel PATH]

Downloads pipecat-ai (pinned, without its dependencies) with pip unless ``--wheel`` names the
wheel, checks the model's SHA-256 and writes it with the wheel's licence (BSD-2-Clause) to
app/vad/data/. Nothing else of pipecat is used. Idempotent: a file already in place with the
right hash is left alone. Exit 0 on success (or already there), 1 on failure (the app then
ends turns after a fixed silence).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PIPECAT = "pipecat-ai==1.14.0"
MEMBER = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
LICENSE_MEMBER = "pipecat_ai-1.14.0.dist-info/licenses/LICENSE"
SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
OUT = Path(__file__).resolve().parents[1] / "app" / "vad" / "data"
MODEL = OUT / "smart-turn-v3.2-cpu.onnx"
LICENSE = OUT / "smart-turn-LICENSE.txt"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
                    str(folder), PIPECAT], check=True)
    return next(folder.glob("pipecat_ai-*.whl"))


def extract(wheel: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        data, licence = archive.read(MEMBER), archive.read(LICENSE_MEMBER)
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise SystemExit(f"{wheel.name}: the model's SHA-256 is not the pinned one; not used")
    MODEL.write_bytes(data)
    LICENSE.write_bytes(b"smart-turn v3.2 model, from " + PIPECAT.encode() + b" (" +
                        MEMBER.encode() + b")\n\n" + licence)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a pipecat-ai wheel already downloaded")
    args = parser.parse_args()
    if MODEL.is_file() and sha256(MODEL) == SHA256 and LICENSE.is_file():
        print(f"smart-turn model already in place: {MODEL}")
        return 0
    try:
        if args.wheel:
            extract(args.wheel)
        else:
            with tempfile.TemporaryDirectory() as folder:
                extract(download(Path(folder)))
    except (OSError, subprocess.CalledProcessError, KeyError, zipfile.BadZipFile) as exc:
        print(f"could not get the smart-turn model ({exc}); turns will end after a fixed "
              "silence", file=sys.stderr)
        return 1
    print(f"smart-turn model written to {MODEL} (licence: {LICENSE.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
