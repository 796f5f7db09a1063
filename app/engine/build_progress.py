"""How far an engine build has got, for the loading bar in the window.

Engines are built by ``build_engine(settings)`` on the engine worker; a build that takes a while
calls :func:`report` at each stage ("reading the model weights", 0.3). The worker that runs the
build installs a reporter for its own thread (:func:`reporting_to`), so the build functions keep
their signatures and a build run anywhere else (the CLI, tests) reports to nobody.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Reporter = Callable[[float, str], None]  # (fraction 0..1, what is being done)
_local = threading.local()


def report(fraction: float, what: str) -> None:
    """Tell whoever waits for this thread's build how far it is; nothing if nobody waits."""
    reporter: Reporter | None = getattr(_local, "reporter", None)
    if reporter is not None:
        reporter(max(0.0, min(1.0, fraction)), what)


@contextmanager
def reporting_to(reporter: Reporter) -> Iterator[None]:
    """Send this thread's :func:`report` calls to ``reporter`` inside the block."""
    previous = getattr(_local, "reporter", None)
    _local.reporter = reporter
    try:
        yield
    finally:
        _local.reporter = previous
