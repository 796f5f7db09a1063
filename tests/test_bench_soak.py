"""``bench soak``: a 50-turn version of the long conversation, and proof that its bounds catch
a leak (memory, threads) when there is one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from app.cli.bench_soak import BOUNDS, judge, soak, theil_sen
from app.engine.base import EngineEvent, UserTurn
from app.engine.echo import EchoEngine
from app.settings import Settings


@pytest.mark.slow
def test_fifty_echo_turns_and_a_few_moss_turns_stay_flat(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    out = tmp_path / "soak.json"
    code = main(["bench", "soak", "--echo-turns", "50", "--moss-turns", "12",
                 "--warmup-turns", "2", "--json", str(out)])
    figures = json.loads(out.read_text())
    echo, moss = figures["runs"]["echo"], figures["runs"]["moss_speech_tiny"]
    assert echo["turns"] == 50 and echo["barge_ins"] >= 20 and echo["unanswered"] == 0
    assert moss["turns"] == 12 and moss["barge_ins"] >= 4
    for run in (echo, moss):
        assert set(run["metrics"]) == set(BOUNDS)
        assert len(run["per_turn"]["rss_mib"]) == run["turns"]
        for count in ("os_threads", "py_threads", "open_files"):
            assert run["metrics"][count]["slope_per_1000"] == 0.0, count
            assert run["metrics"][count]["flat"] is True
    flat = all(row["flat"] for run in (echo, moss) for row in run["metrics"].values())
    assert code == (0 if flat else 1)
    assert "| rss_mib MiB |" in capsys.readouterr().out


class LeakyEngine(EchoEngine):
    """The echo engine that keeps 2 MiB per reply, and a thread per reply if asked."""

    def __init__(self, threads: bool = False) -> None:
        super().__init__()
        self.kept: list[np.ndarray] = []
        self.threads = threads
        self.release = threading.Event()

    def respond(self, turn: UserTurn, cancel: threading.Event) -> Iterator[EngineEvent]:
        self.kept.append(np.ones(2**19, np.float32))  # touched: resident
        if self.threads:
            threading.Thread(target=self.release.wait, daemon=True).start()
        yield from super().respond(turn, cancel)


@pytest.mark.parametrize("threads", [False, True], ids=["memory", "threads"])
def test_a_leak_is_caught(threads: bool) -> None:
    engine = LeakyEngine(threads)
    try:
        samples, _ = soak(Settings(), engine, 24)
    finally:
        engine.release.set()
    rows = judge(samples, warmup=4)
    if threads:
        assert not rows["os_threads"]["flat"] and not rows["py_threads"]["flat"]
    else:
        assert rows["rss_mib"]["slope_low"] > 1000 and not rows["rss_mib"]["flat"]
    assert rows["open_files"]["flat"]


def test_theil_sen_ignores_outliers_and_brackets_the_slope() -> None:
    x = list(range(100))
    y = [2.0 * i + (500.0 if i % 17 == 0 else 0.0) for i in x]
    slope, low, high = theil_sen(x, y)
    assert slope == pytest.approx(2.0) and low <= 2.0 <= high


@pytest.mark.parametrize(("argv", "says"), [
    (["--echo-turns", "15"], "at least --warmup-turns + 10 = 30"),
    (["--echo-turns", "0", "--moss-turns", "0"], "at least one run needs turns"),
])
def test_too_few_turns_for_a_trend_are_refused(argv: list[str], says: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "soak", *argv]) == 2
    assert says in capsys.readouterr().err
