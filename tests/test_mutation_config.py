"""`make mutation` (scripts/mutation.py) stays runnable: every module and test file it names
exists, and every entry of the equivalents file names a mutant of its module with a reason."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def load_script():
    spec = importlib.util.spec_from_file_location("mutation_script", ROOT / "scripts/mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_module_and_its_tests_exist() -> None:
    script = load_script()
    assert set(script.MODULES) >= {"turns", "turn_state", "barge_in", "end_of_turn", "sound",
                                   "echo_control", "player", "vad", "sampling", "generate",
                                   "folders", "memory"}
    for module in script.MODULES.values():
        assert (ROOT / module.source).is_file(), module.source
        for path in (*module.tests, *module.also_copy):
            assert (ROOT / path).exists(), path


def test_every_equivalent_mutant_belongs_to_its_module_and_says_why() -> None:
    script = load_script()
    equivalents = tomllib.loads(script.EQUIVALENTS.read_text(encoding="utf-8"))
    assert set(equivalents) <= set(script.MODULES)
    for name, entries in equivalents.items():
        dotted = script.MODULES[name].source.removesuffix(".py").replace("/", ".")
        for mutant, entry in entries.items():
            assert mutant.startswith(dotted + ".") and "__mutmut_" in mutant, mutant
            assert set(entry) <= {"change", "reason", "needs"}, mutant
            assert " => " in entry["change"] and entry["reason"].strip(), mutant
            assert entry.get("needs", "cuda") == "cuda", mutant


def test_a_pasted_survivor_line_reads_back_as_written() -> None:
    script = load_script()
    line = script.toml_line("app.vad.base.xǁSegmenterǁupdate__mutmut_1",
                            'if a == "x\\y": => if a != "x\\y":')
    entry = tomllib.loads("[vad]\n" + line)["vad"]["app.vad.base.xǁSegmenterǁupdate__mutmut_1"]
    assert entry == {"change": 'if a == "x\\y": => if a != "x\\y":', "reason": ""}
