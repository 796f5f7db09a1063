"""A pytest plugin for the mutmut runs of scripts/mutation.py (copied next to each module's
mutants and loaded with ``-p mutation_plugin``); it makes a run shorter, never different:

- it imports the modules named in ``MUTATION_PRELOAD`` (comma-separated) when pytest loads it,
  which first happens in mutmut's fork server: workers forked from there find them imported
  (torch imports torch._dynamo lazily, seconds on a loaded machine, in every worker otherwise);
- it runs the quickest tests first, by the durations mutmut measured in its stats run, so that
  a mutant a quick test kills stops there (mutmut runs pytest with ``-x``).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

for _name in filter(None, os.environ.get("MUTATION_PRELOAD", "").split(",")):
    importlib.import_module(_name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:  # mutmut runs pytest inside its mutants/ folder, where it keeps its stats
        stats = json.loads(Path("mutmut-stats.json").read_text(encoding="utf-8"))
        durations = stats["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return  # the stats run itself: nothing measured yet
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
