"""What the bench commands share: medians rounded to 0.1, the nearest true time, Markdown
tables, the ``--threads``/``--json`` options and the facts every run records."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def median_1(values: Sequence[float]) -> float | None:
    """The median rounded to 0.1, None for no values (a table shows "—")."""
    return round(statistics.median(values), 1) if values else None


def nearest(items: Sequence[T], t_s: float, at: Callable[[Any], float] = float) -> T:
    """The item whose time ``at(item)`` is nearest ``t_s`` (the first of equals)."""
    return min(items, key=lambda item: abs(at(item) - t_s))


def markdown_table(first_column: str, columns: Sequence[str],
                   rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Lines of a Markdown table: one row per name, None shown as "—"."""
    lines = [f"| {first_column} | " + " | ".join(columns) + " |",
             "|" + "---|" * (len(columns) + 1)]
    for name, values in rows.items():
        lines.append(f"| {name} | " + " | ".join("—" if values[c] is None else str(values[c])
                                                 for c in columns) + " |")
    return lines


def add_threads_and_json(parser: argparse.ArgumentParser) -> None:
    from app.cli.options import THREADS

    parser.add_argument("--threads", type=THREADS, default=0,
                        help="CPU threads (0 = torch default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def apply_threads(args: argparse.Namespace) -> None:
    """``--threads``: torch's CPU threads for this run (0 keeps torch's default)."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def run_facts(rss_digits: int | None) -> dict[str, Any]:
    """Threads, date and peak resident memory (MiB, rounded to ``rss_digits``) of this run."""
    import resource  # Unix only, like the figures it reads

    import torch

    return {"threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                                  rss_digits)}
