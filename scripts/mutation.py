"""Mutation testing of the core modules, one module at a time against its own tests.

``make mutation`` runs this script. For each module it prepares ``mutants/<module>/`` (git-ignored):
links to ``app/`` and ``tests/`` and a ``pyproject.toml`` whose ``[tool.mutmut]`` section is the
project's (see pyproject.toml) plus ``only_mutate`` = the module and
``pytest_add_cli_args_test_selection`` = its test files. There it runs ``mutmut run`` (mutmut 3
keeps its own ``mutants/`` folder inside), reads ``mutmut results`` and ``mutmut show``, and
compares the surviving mutants with the equivalent ones listed in
``tests/mutation_equivalents.toml``. It prints one row per module and exits 1 when a module kills
less than ``--threshold`` of its non-equivalent mutants (or its run failed).

    nice -n 10 .venv/bin/python scripts/mutation.py                 # every module, fresh
    nice -n 10 .venv/bin/python scripts/mutation.py sampling vad    # some modules
    .venv/bin/python scripts/mutation.py --retest sampling          # only last run's survivors
    .venv/bin/python scripts/mutation.py --list

Why one mutmut run per module: mutmut 3 reads one configuration per folder, and a mutant must be
judged by the tests written for its module (a module "covered" only by slow end-to-end tests
elsewhere has no pinned behaviour); it also keeps the whole run well under an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"
EQUIVALENTS = ROOT / "tests" / "mutation_equivalents.toml"
THRESHOLD = 0.90
# mutmut's statuses that count as a killed mutant. "segfault" is also what mutmut reports for a
# worker it had to SIGKILL after its CPU-time limit, i.e. a timeout.
KILLED = ("killed", "timeout", "segfault", "caught by type check")


# torch imports torch._dynamo lazily, on the first nn.init or torch.testing call: seconds (more
# on a loaded machine) that every mutant's test run would pay again. mutation_plugin.py imports
# them once in mutmut's fork server instead, before it forks the workers.
TORCH_PRELOAD = ("torch", "torch._dynamo")
PLUGIN = Path(__file__).resolve().parent / "mutation_plugin.py"


@dataclass(frozen=True)
class Module:
    source: str  # the one file mutated
    tests: tuple[str, ...]  # the tests that judge it
    also_copy: tuple[str, ...] = ()  # extra files the tests read (relative to the repo root)
    preload: tuple[str, ...] = ()  # modules to import in mutmut's fork server (TORCH_PRELOAD)
    pytest_args: tuple[str, ...] = ()  # e.g. leave out soak tests that every survivor would rerun


TURN_TESTS = ("tests/conversation/test_turns.py", "tests/conversation/test_barge_in_policy.py",
              "tests/conversation/test_smart_endpoint.py", "tests/conversation/test_unsure_end.py")

MODULES: dict[str, Module] = {
    # The turn controller, one row per file: turns.py (the inputs), turn_state.py (the shared
    # state and steps), barge_in.py and end_of_turn.py (the two policies). They are one unit
    # behind TurnController, so each is judged by the controller's scripted tests on the virtual
    # clock. test_turn_batching.py is left out: its hypothesis examples are random, so what it
    # kills would change from run to run (it stays in `make test`).
    **{name: Module(f"app/conversation/{name}.py", TURN_TESTS)
       for name in ("turns", "turn_state", "barge_in", "end_of_turn")},
    "sound": Module("app/vad/sound.py", ("tests/vad/test_sound.py",)),
    # What tells a person from the reply's echo before the canceller has converged (issue 14).
    "echo_detector": Module("app/audio/echo_detector.py",
                            ("tests/audio/test_echo_detector.py", "tests/audio/test_double_talk.py",
                             "tests/audio/test_aec.py")),
    # The four 20-reply soak rooms (marked slow, 45 s of the file's 56 s) stay in `make test`;
    # the scenarios left cover every function of the module.
    "echo_control": Module("app/conversation/echo_control.py",
                           ("tests/conversation/test_echo_control.py",
                            "tests/conversation/test_echo_scenarios.py"),
                           pytest_args=("-m", "not slow")),
    "player": Module("app/audio/player.py", ("tests/audio/test_player.py",)),
    "vad": Module("app/vad/base.py", ("tests/vad/test_segmenter.py",
                                     "tests/vad/test_segmenter_rules.py")),
    "sampling": Module("app/engine/moss_speech/sampling.py",
                       ("tests/engine/moss_speech/test_sampling.py",), preload=TORCH_PRELOAD),
    "generate": Module("app/engine/moss_speech/generate.py",
                       ("tests/engine/moss_speech/test_generate.py",), preload=TORCH_PRELOAD),
    "folders": Module("app/engine/folders.py", ("tests/engine/test_folders.py",)),
    "memory": Module("app/engine/moss_speech/memory.py",
                     ("tests/engine/moss_speech/test_memory.py",), preload=TORCH_PRELOAD),
}


@dataclass
class Score:
    name: str
    statuses: dict[str, str] = field(default_factory=dict)  # mutant → mutmut status
    equivalent: list[str] = field(default_factory=list)
    needs_cuda: list[str] = field(default_factory=list)  # known survivors only CUDA can kill
    surviving: dict[str, str] = field(default_factory=dict)  # mutant → its change, one line
    stale: list[str] = field(default_factory=list)  # equivalents file entries that no longer fit
    error: str = ""
    wall_s: float = 0.0

    @property
    def killed(self) -> int:
        return sum(status in KILLED for status in self.statuses.values())

    @property
    def judged(self) -> int:
        """Mutants that a test must kill: all of them but the equivalent ones."""
        return len(self.statuses) - len(self.equivalent)

    @property
    def score(self) -> float:
        return self.killed / self.judged if self.judged else 1.0


def mutmut(work: Path, *args: str, log: Path | None = None,
           preload: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run the mutmut CLI in a module's folder; a run's output (a spinner) goes to ``log``."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", MUTATION_PRELOAD=",".join(preload))
    command = [sys.executable, "-m", "mutmut", *args]
    if log is None:
        return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                              check=False)
    with log.open("a", encoding="utf-8") as out:
        return subprocess.run(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                              text=True, check=False)


def prepare(name: str, module: Module, fresh: bool) -> Path:
    """``mutants/<name>/`` with links to the sources and the module's mutmut configuration."""
    work = WORK / name
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for linked in {"app", "tests", *(Path(path).parts[0] for path in module.also_copy)}:
        link = work / linked
        if not link.is_symlink():
            link.symlink_to(ROOT / linked, target_is_directory=(ROOT / linked).is_dir())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool = project.setdefault("tool", {})
    config = dict(tool.get("mutmut", {}))
    config["only_mutate"] = [module.source]
    config["pytest_add_cli_args_test_selection"] = list(module.tests)
    config["also_copy"] = [*config.get("also_copy", []), *module.also_copy]
    # mutmut runs pytest (its fork server's warm-up collection too) inside mutants/, which it
    # puts first on sys.path: the plugin is copied there and loaded with -p
    shutil.copy(PLUGIN, work / PLUGIN.name)
    config["also_copy"].append(PLUGIN.name)
    config["pytest_add_cli_args"] = [*config.get("pytest_add_cli_args", []), "-p", PLUGIN.stem,
                                     *module.pytest_args]
    tool["mutmut"] = config
    (work / "pyproject.toml").write_text(tomli_w.dumps(project), encoding="utf-8")
    return work


def read_statuses(work: Path) -> dict[str, str]:
    result = mutmut(work, "results", "--all", "true")
    statuses = {}
    for line in result.stdout.splitlines():
        mutant, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in mutant:
            statuses[mutant] = status
    return statuses


# What `mutmut show NAME` prints, for many mutants in one process (each `mutmut show` is a new
# Python start: seconds apiece on a loaded machine).
DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in sys.argv[1:]}))
"""


def changes_of(work: Path, mutants: list[str]) -> dict[str, str]:
    """Each mutant's change on one line: removed lines ``=>`` added lines, whitespace folded."""
    if not mutants:
        return {}
    result = subprocess.run([sys.executable, "-c", DIFFS, *mutants], cwd=work,
                            capture_output=True, text=True, check=False)
    if result.returncode == 0:
        diffs = json.loads(result.stdout.strip().splitlines()[-1])
    else:  # another mutmut version: the CLI, one mutant at a time
        diffs = {m: mutmut(work, "show", m).stdout for m in mutants}
    return {mutant: one_line(diff) for mutant, diff in diffs.items()}


def one_line(diff: str) -> str:
    lines = diff.splitlines()
    removed = [line[1:] for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]

    def fold(lines: list[str]) -> str:
        return re.sub(r"\s+", " ", " / ".join(line.strip() for line in lines)).strip()

    return f"{fold(removed)} => {fold(added)}"


def load_equivalents() -> dict[str, dict[str, dict[str, str]]]:
    """{module: {mutant: {"change": ..., "reason": ...}}} from the checked-in file."""
    if not EQUIVALENTS.exists():
        return {}
    return tomllib.loads(EQUIVALENTS.read_text(encoding="utf-8"))


def judge(score: Score, work: Path, equivalents: dict[str, dict[str, str]]) -> None:
    """Sort the survivors: equivalent or needing CUDA (the same change as recorded), surviving."""
    alive = sorted(m for m, status in score.statuses.items() if status not in KILLED)
    changes = changes_of(work, alive)
    for mutant in alive:
        change = changes[mutant]
        recorded = equivalents.get(mutant)
        if recorded is not None and recorded.get("change") == change:
            known = score.needs_cuda if recorded.get("needs") == "cuda" else score.equivalent
            known.append(mutant)
        else:
            if recorded is not None:
                score.stale.append(f"{mutant}: recorded change no longer matches")
            score.surviving[mutant] = change
    for mutant in equivalents:
        if mutant not in score.statuses:
            score.stale.append(f"{mutant}: no such mutant any more")
        elif score.statuses[mutant] in KILLED:
            score.stale.append(f"{mutant}: listed in {EQUIVALENTS.name} but a test kills it")


def run_module(name: str, module: Module, args: argparse.Namespace,
               equivalents: dict[str, dict[str, str]]) -> Score:
    score = Score(name)
    start = time.monotonic()
    work = prepare(name, module, fresh=not args.retest)
    log = work / "run.log"
    log.write_text("", encoding="utf-8")
    targets: list[str] = []
    if args.retest:
        targets = [m for m, status in read_statuses(work).items() if status not in KILLED]
        if not targets and (work / "mutants").exists():
            score.statuses = read_statuses(work)
            judge(score, work, equivalents)
            return score
    children = ("--max-children", str(args.max_children))
    result = mutmut(work, "run", *children, *targets, log=log, preload=module.preload)
    if targets and result.returncode == 0 and "not checked" in read_statuses(work).values():
        # mutmut dropped the other results (the module's configuration or tests changed):
        # a plain run tests everything it has no result for
        result = mutmut(work, "run", *children, log=log, preload=module.preload)
    score.wall_s = time.monotonic() - start
    score.statuses = read_statuses(work)
    if result.returncode != 0 or not score.statuses:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
        score.error = f"mutmut run exited {result.returncode}; {log}:\n" + "\n".join(tail)
        return score
    judge(score, work, equivalents)
    return score


def toml_line(mutant: str, change: str) -> str:
    """One line of the equivalents file, ready to paste (JSON strings are TOML strings)."""
    return (f"{json.dumps(mutant, ensure_ascii=False)} = {{ change = "
            f"{json.dumps(change, ensure_ascii=False)}, reason = \"\" }}")


def report(scores: list[Score], threshold: float) -> bool:
    """Print survivors and the table; True when every module reaches the threshold."""
    ok = True
    for s in scores:
        if s.error:
            print(f"\n{s.name}: FAILED TO RUN\n{s.error}")
        if s.surviving:
            print(f"\n{s.name}: {len(s.surviving)} surviving mutant(s): kill each with a test, "
                  f"or list it under [{s.name}] in {EQUIVALENTS.relative_to(ROOT)} with a reason "
                  f"(`mutmut show NAME` in mutants/{s.name}/ prints the diff)")
            for mutant, change in s.surviving.items():
                print(f"  [{s.statuses[mutant]}] {toml_line(mutant, change)}")
        for line in s.stale:
            print(f"{s.name}: stale entry {line}")
    print(f"\n{'module':<13} {'mutants':>7} {'killed':>6} {'survived':>8} {'equiv.':>6} "
          f"{'cuda':>4} {'score':>6} {'time':>6}")
    for s in scores:
        passed = not s.error and s.score >= threshold
        ok &= passed
        survived = len(s.surviving) + len(s.needs_cuda)
        print(f"{s.name:<13} {len(s.statuses):>7} {s.killed:>6} {survived:>8} "
              f"{len(s.equivalent):>6} {len(s.needs_cuda):>4} {s.score:>6.1%} {s.wall_s:>5.0f}s"
              f"{'' if passed else '  BELOW ' + format(threshold, '.0%')}")
    print("score = killed / (mutants - equivalent); 'cuda': survivors only a CUDA machine can "
          "kill, counted as surviving")
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--retest", action="store_true",
                        help="keep mutants/<module>/ and rerun only the mutants not killed last "
                             "time (after adding tests); the default is a fresh run")
    parser.add_argument("--max-children", type=int, default=2,
                        help="parallel mutant workers (default: 2)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD,
                        help="least share of non-equivalent mutants killed (default: 0.9)")
    parser.add_argument("--json", type=Path, help="also write the scores to this file")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, module in MODULES.items():
            extra = f"  ({' '.join(module.pytest_args)})" if module.pytest_args else ""
            print(f"{name:<13} {module.source}  <-  {' '.join(module.tests)}{extra}")
        return 0
    equivalents = load_equivalents()
    scores = []
    for name in args.modules or list(MODULES):
        print(f"mutating {MODULES[name].source} against {' '.join(MODULES[name].tests)} ...",
              flush=True)
        scores.append(run_module(name, MODULES[name], args, equivalents.get(name, {})))
    ok = report(scores, args.threshold)
    if args.json:
        args.json.write_text(json.dumps(
            {s.name: {"mutants": len(s.statuses), "killed": s.killed,
                      "survived": sorted(s.surviving), "equivalent": sorted(s.equivalent),
                      "needs_cuda": sorted(s.needs_cuda),
                      "score": round(s.score, 4), "wall_s": round(s.wall_s),
                      "error": s.error} for s in scores}, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
