"""The documentation: README.md stays short and its links resolve, the docs/ site builds with
``mkdocs build --strict`` (a broken link or anchor fails), and what the docs promise about the
command line is what the command line accepts."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 150  # issue 18: requirements and the two commands must be seen at a glance

# [text](target) and ![alt](target); the target ends at whitespace or ")" (no titles used here)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_links(text: str) -> list[str]:
    """Link targets outside fenced code blocks and inline code."""
    prose = FENCE.sub("", text)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return LINK.findall(prose)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(markdown: Path) -> set[str]:
    text = FENCE.sub("", markdown.read_text(encoding="utf-8"))
    return {github_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+?)\s*#*$", text, re.MULTILINE)}


def broken_links(markdown: Path) -> list[str]:
    broken = []
    for target in markdown_links(markdown.read_text(encoding="utf-8")):
        if target.startswith(EXTERNAL):
            continue
        path_part, _, anchor = target.partition("#")
        path = (markdown.parent / path_part).resolve() if path_part else markdown
        if not path.exists():
            broken.append(f"{target}: {path} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in anchors_of(path):
            broken.append(f"{target}: no heading with anchor #{anchor} in {path.name}")
    return broken


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move details to docs/")


def test_readme_links_resolve() -> None:
    targets = markdown_links(README.read_text(encoding="utf-8"))
    assert any(t.startswith("docs/") for t in targets), "README.md should link into docs/"
    assert not broken_links(README), "\n".join(broken_links(README))


def test_link_checker_finds_a_broken_link(tmp_path: Path) -> None:
    """The README check above can fail: a missing file and a missing anchor are both caught."""
    (tmp_path / "b.md").write_text("# Real heading\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [bad](b.md#nowhere) `[code](x.md)`\n"
                    "```\n[fenced](y.md)\n```\n", encoding="utf-8")
    problems = broken_links(page)
    assert [p.split(":")[0] for p in problems] == ["c.md", "b.md#nowhere"]


def test_readme_shows_how_to_run_commands_after_make() -> None:
    """The system python lacks the dependencies; the README must name the venv's entry points,
    and the console script it names must be the one pyproject.toml installs."""
    text = README.read_text(encoding="utf-8")
    assert ".venv/bin/moss-voice" in text and ".venv/bin/python -m app" in text
    assert 'moss-voice = "app.cli:main"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None
                    or importlib.util.find_spec("material") is None,
                    reason="mkdocs-material is not installed (it is in the dev extra: "
                           "pip install -e '.[dev]')")
def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # material's banner about MkDocs 2.0
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    # docs/benchmarks.md includes BENCHMARKS.md: the figures must really be on the page.
    first_heading = next(line for line in (ROOT / "BENCHMARKS.md").read_text(
        encoding="utf-8").splitlines() if line.startswith("## "))[3:]
    assert first_heading.split(":")[0] in (site / "benchmarks.html").read_text(encoding="utf-8")


def help_text(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "app", *args, "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=120).stdout


def cli_page() -> str:
    return (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def section(markdown: str, heading_start: str) -> str:
    """The text under the first ``## `` heading that starts with ``heading_start``."""
    match = re.search(rf"^## {re.escape(heading_start)}.*?(?=^## |\Z)", markdown,
                      re.MULTILINE | re.DOTALL)
    assert match, f"no section '## {heading_start}'"
    return match.group(0)


def test_documented_converse_options_exist() -> None:
    options = set(re.findall(r"(--[a-z][a-z0-9-]*)", section(cli_page(), "Headless conversations")))
    assert {"--simulate-echo", "--ptt", "--set"} <= options  # the pattern finds the table
    accepted = set(re.findall(r"--[a-z][a-z0-9-]*", help_text("converse")))
    missing = options - accepted
    assert not missing, f"docs/cli.md documents converse options it does not accept: {missing}"


def test_documented_bench_names_exist() -> None:
    names = set(re.findall(r"`python -m app bench ([a-z0-9-]+)", cli_page()))
    assert {"voice-loop", "aec", "engine"} <= names
    listed = help_text("bench")
    missing = {n for n in names if not re.search(rf"^\s+{re.escape(n)}\b", listed, re.MULTILINE)}
    assert not missing, f"docs/cli.md documents bench commands that do not exist: {missing}"
