"""No subcommand: the GUI when a display is available, else the headless demo."""

from __future__ import annotations

import argparse


def run_default(args: argparse.Namespace) -> int:
    from app.display import display_status

    status = display_status()
    if status.available:
        from app.ui.application import run_gui

        return run_gui()
    print(f"No display available ({status.reason}): running the headless demo instead.")
    return run_headless_demo()


def run_headless_demo() -> int:
    """Until the voice loop lands, the headless demo is the doctor report."""
    from app.doctor import collect_report, format_report

    print(format_report(collect_report()))
    return 0
