"""Report Python, torch, GPUs, audio devices, model folders and display; always exits 0."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from app.doctor import collect_report, format_report

    report = collect_report()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
