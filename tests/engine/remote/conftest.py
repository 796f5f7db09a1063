"""Remote-engine fixtures: the stand-in server on loopback, and no API key left over in this
process's session store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine.remote.api_key import forget_session_keys
from app.engine.remote.standin import StandInServer


@pytest.fixture
def server() -> Iterator[StandInServer]:
    with StandInServer() as standin:
        yield standin


@pytest.fixture(autouse=True)
def no_session_keys() -> Iterator[None]:
    forget_session_keys()
    yield
    forget_session_keys()
