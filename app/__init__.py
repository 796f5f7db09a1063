"""MOSS Voice: an offline desktop voice assistant for the MOSS-Speech speech-to-speech model."""

import os as _os

# numpy's OpenBLAS runs any matrix product past a small size on one thread per core and lets
# those threads spin after it. The app's numpy products are small, and the spinning took the
# cores the voice loop and the end-of-turn model need: with it a decision took 49 ms of wall
# time on two onnxruntime threads, without it 24 (`bench end-of-turn`, 2 cores). Set before
# numpy is imported; a value already in the environment stands.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
APP_NAME = "MOSS Voice"
APP_ID = "moss-voice"
