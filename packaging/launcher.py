"""Entry script of the bundled executable (PyInstaller runs it as ``__main__``)."""

import multiprocessing
import sys

from app.cli import main

if __name__ == "__main__":
    # A frozen program re-runs itself for multiprocessing workers (e.g. torch.compile's);
    # without this they would start a second app.
    multiprocessing.freeze_support()
    sys.exit(main())
