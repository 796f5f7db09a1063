"""A folder check's verdict in words a person can act on.

The folder check (app.engine.folders) names every problem precisely, for the log and for
developers ("config.json: not valid JSON (Expecting ',' delimiter: line 2 column 1)"). The
window says what it means first: that a folder is empty, that it is not a MOSS-Speech folder at
all, or what is broken in one that is; the precise problems stay available as details.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.engine.folders import FolderCheck
from app.model_store import REPOS, FolderKind

MAX_LINES = 4
TINY_MODEL_PARAMS = 100_000_000  # the published model has ~9.1 billion


def _is_empty(path: Path) -> bool:
    try:
        return path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


def _all_missing(check: FolderCheck) -> bool:
    return bool(check.problems) and all(": missing" in p for p in check.problems)


def folder_lines(kind: FolderKind, check: FolderCheck) -> list[str]:
    """What is wrong, most telling first (empty list when the folder is fine)."""
    if check.ok:
        return []
    name = REPOS[kind].repo_id
    problems = check.problems
    if any(p.startswith("folder does not exist") for p in problems):
        return [f"This folder does not exist yet. Download puts the {kind} here, or choose the "
                f"folder where you already have {name}."]
    if _is_empty(check.path):
        return [f"This folder is empty — is it the right one? Choose the folder that holds "
                f"{name}, or press Download."]
    if kind == "codec" and _all_missing(check):
        return [f"None of the codec's files are here — is it the right folder? It should hold "
                f"model.safetensors and a flow folder from {name}."]
    for problem in problems:
        if re.match(r"config\.json: (not valid JSON|not a JSON object|missing$)", problem):
            what = "is missing" if problem.endswith("missing") else "is not valid JSON"
            return [f"This is not a MOSS-Speech {kind} folder: config.json {what}."]
    missing_keys = [re.sub(r".*missing key '(.*)'", r"\1", p) for p in problems
                    if "missing key" in p]
    if missing_keys:
        more = f" and {len(missing_keys) - 1} more" if len(missing_keys) > 1 else ""
        return [f"This is not a MOSS-Speech model folder: its config.json has no "
                f"'{missing_keys[0]}'{more} (missing key '{missing_keys[0]}')."]
    lines = [_sentence(p) for p in problems[:MAX_LINES]]
    if len(problems) > MAX_LINES:
        lines.append(f"…and {len(problems) - MAX_LINES} more (see the details).")
    return lines


def folder_summary(kind: FolderKind, check: FolderCheck) -> str:
    """One line, for banners."""
    lines = folder_lines(kind, check)
    return lines[0].rstrip(".") if lines else "fine"


def folder_details(check: FolderCheck) -> str:
    """The precise problems, for a tooltip."""
    return "\n".join(f"• {p}" for p in check.problems)


def _sentence(problem: str) -> str:
    """A sentence, but a file name that starts it keeps its own spelling (config.json)."""
    text = problem.strip()
    if re.fullmatch(r"[a-z]+", text.split(" ", 1)[0].rstrip(":,")):
        text = text[:1].upper() + text[1:]
    return text.rstrip(".") + "."


def tiny_model_note(param_count: int) -> str:
    """Said next to memory figures when the folder holds a small test model, whose figures
    are nearly all fixed working memory (codec, margin), not the model."""
    if param_count >= TINY_MODEL_PARAMS:
        return ""
    millions = param_count / 1e6
    size = f"{millions:.1f} million" if millions >= 0.1 else f"{param_count:,}"
    return (f"This is a tiny test model ({size} parameters, not the published 9.1 billion): "
            "the figures are mostly the codec and working memory, so every precision needs "
            "about the same.")
