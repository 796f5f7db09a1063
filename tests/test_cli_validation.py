"""Every option of every command refuses bad values before any work: exit 2, one line that
names the option, no traceback, within seconds (in-process through ``main(argv)``; a few runs
through the real entry point prove the same for ``python -m app``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.audio.simulated import write_wav
from app.cli import build_parser, main
from app.cli.options import Number, Validator

SECONDS_PER_REFUSAL = 20.0  # generous for a busy 2-core machine; the bugs were endless hangs


def value_options(parser: argparse.ArgumentParser,
                  path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    """(command path, action) for every option that takes a value, in every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from value_options(sub, (*path, name))
        elif action.option_strings and action.nargs != 0:
            yield path, action


OPTIONS = list(value_options(build_parser()))
IDS = [" ".join((*path, action.option_strings[-1])) for path, action in OPTIONS]


def bad_values(action: argparse.Action) -> list[str]:
    if action.choices is not None:
        return ["not-a-choice", ""]
    assert isinstance(action.type, Validator)
    return action.type.bad_examples()


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    path = tmp_path / "in.wav"
    write_wav(path, np.zeros(1600, np.float32), 16000)
    return path


def baseline(path: tuple[str, ...], wav: Path) -> list[str]:
    """The required options of a command, with good values."""
    return ["--input", str(wav)] if path == ("converse",) else []


def run_main(argv: list[str]) -> tuple[int, str, float]:
    err = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # only --help/--version exit; a refusal returns 2
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue(), time.perf_counter() - started


def test_every_option_that_takes_a_value_is_checked() -> None:
    unchecked = [name for name, (_, action) in zip(IDS, OPTIONS, strict=True)
                 if action.choices is None and not isinstance(action.type, Validator)]
    assert not unchecked, f"options without a validator from app.cli.options: {unchecked}"
    assert len(OPTIONS) > 60  # every bench, converse and the top level are walked


@pytest.mark.parametrize(("path", "action"), OPTIONS, ids=IDS)
def test_bad_values_exit_2_with_one_line(path: tuple[str, ...], action: argparse.Action,
                                         wav: Path) -> None:
    option = action.option_strings[-1]
    for bad in bad_values(action):
        code, err, elapsed = run_main([*path, *baseline(path, wav), f"{option}={bad}"])
        assert code == 2, (option, bad, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (option, bad, err)
        assert f"argument {option}" in err, (option, bad, err)
        assert elapsed < SECONDS_PER_REFUSAL, (option, bad, elapsed)


NUMBER_OPTIONS = [(path, action) for path, action in OPTIONS if isinstance(action.type, Number)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choice=st.sampled_from(NUMBER_OPTIONS),
       text=st.one_of(st.text(max_size=12), st.floats().map(repr), st.integers().map(str)))
def test_a_number_option_either_refuses_or_keeps_its_range(
        choice: tuple[tuple[str, ...], argparse.Action], text: str) -> None:
    path, action = choice
    number = action.type
    assert isinstance(number, Number)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = build_parser().parse_args([*path, f"{action.option_strings[-1]}={text}",
                                              *(["--input", "x"] if path == ("converse",)
                                                else [])])
        except SystemExit as exc:
            assert exc.code == 2 and err.getvalue().count("\n") == 1, err.getvalue()
            return
    value = getattr(args, action.dest)
    if action.nargs is None and isinstance(action, argparse._AppendAction):
        [value] = value  # a repeatable option (bench end-of-turn --threads): a list of one
    assert np.isfinite(value) and isinstance(value, number.kind)
    assert number.low is None or value > number.low or (value == number.low
                                                         and not number.low_open)
    assert number.high is None or value <= number.high


@pytest.mark.parametrize(("argv", "says"), [
    (["converse", "--block-ms", "0"], "--block-ms: '0' is out of range: a number from 1 to 100"),
    (["converse", "--block-ms=-5"], "--block-ms: '-5'"),
    (["converse", "--output-rate", "0"], "--output-rate: '0'"),
    (["converse", "--ptt", "5-2"], "--ptt: '5-2'"),
    (["converse", "--fail-output-at=-1"], "--fail-output-at: '-1'"),
    (["converse", "--set", "vad.threshold=2"],
     "'vad.threshold=2' is not allowed: vad.threshold: input should be less than 1 (got 2)"),
    (["bench", "engine", "--random-weights", "--precision", "int4", "--device", "cpu"],
     "int4 needs a CUDA GPU"),
    (["bench", "engine", "--random-weights", "--model-dir", "."], "exclude each other"),
    (["bench", "engine"], "pass --random-weights or --model-dir PATH"),
    (["bench", "engine-e2e"], "--random-weights: needed"),
    (["--self-test", "doctor"], "cannot be combined"),
    (["--screenshot", "shot.txt"], "wrong file name ending"),
])
def test_the_reported_cases_name_option_value_and_what_is_allowed(
        argv: list[str], says: str, wav: Path) -> None:
    if argv[0] == "converse":
        argv = [*argv, "--input", str(wav)]
    code, err, _ = run_main(argv)
    assert code == 2 and says in err and err.count("\n") == 1, err


def test_output_folders_are_refused_before_the_run(wav: Path, tmp_path: Path) -> None:
    for option in ("--output", "--metrics-jsonl", "--report"):
        code, err, elapsed = run_main(["converse", "--input", str(wav), option, str(tmp_path)])
        assert code == 2 and "is a folder, not a file" in err, err
        assert elapsed < SECONDS_PER_REFUSAL


def test_precision_refusal_lists_what_this_machine_can_run(wav: Path) -> None:
    import torch

    code, err, _ = run_main(["bench", "engine-e2e", "--random-weights", "--precision", "int4"])
    if torch.cuda.is_available():
        assert code != 2 or "int4" not in err
    else:
        assert code == 2 and "this machine can run: --device cpu with bf16" in err, err


def run_app(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOSS_VOICE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.parametrize("args", [
    ["converse", "--block-ms", "0"],
    ["bench", "codec", "--device", "cuda"],
    ["bench", "engine", "--random-weights", "--precision", "int4"],
])
def test_the_real_entry_point_exits_2_with_one_line(args: list[str], wav: Path,
                                                    isolated_home: Path) -> None:
    import torch

    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if args[0] == "converse":
        args = [*args, "--input", str(wav)]
    started = time.perf_counter()
    result = run_app(*args, home=isolated_home)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert time.perf_counter() - started < 60  # a Python start and a torch import at most


def test_the_voice_loop_scenario_choices_are_the_scenarios_it_builds() -> None:
    from app.cli.bench_voice_loop import SCENARIOS, build_scenarios

    sentence = np.zeros(1600, np.float32)
    assert tuple(s.name for s in build_scenarios(sentence, sentence)) == SCENARIOS


def test_a_repeatable_number_option_keeps_each_value_in_its_range() -> None:
    """``bench end-of-turn --threads`` may be given several times: a list of checked numbers
    (the property test above takes it too, when it draws it)."""
    repeatable = [(path, action) for path, action in NUMBER_OPTIONS
                  if isinstance(action, argparse._AppendAction)]
    assert repeatable
    for path, action in repeatable:
        option = action.option_strings[-1]
        args = build_parser().parse_args([*path, f"{option}=1", f"{option}=2"])
        assert getattr(args, action.dest) == [1, 2]
        err = io.StringIO()
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
            build_parser().parse_args([*path, f"{option}=1", f"{option}=0"])
        assert err.getvalue().count("\n") == 1
