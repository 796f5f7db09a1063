"""The null-sink fixture for the real-stream audio tests (helpers in ``pulse.py``)."""

from __future__ import annotations

import pytest

from tests.audio.pulse import start_null_sink


@pytest.fixture(scope="module")
def null_sink(tmp_path_factory: pytest.TempPathFactory):
    daemon, env = start_null_sink(tmp_path_factory.mktemp("pulse"))
    yield env
    daemon.terminate()
    daemon.wait(10)
