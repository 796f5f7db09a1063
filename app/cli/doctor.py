"""Report Python, torch, GPUs, audio devices, model folders and display; exits 0 (with
--verify-hashes: 1 when a file does not match the Hub's SHA-256 or cannot be checked)."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--verify-hashes", action="store_true",
                        help="also read every file of the model and codec folders and compare "
                        "its SHA-256 with what the Hub publishes for their revision (Ctrl-C "
                        "cancels); exits 1 if a file does not match")


def run(args: argparse.Namespace) -> int:
    from app.doctor import collect_report, format_report

    checks: list[dict[str, object]] = []
    exit_code = 0
    if args.verify_hashes:
        from app.cli.verify_hashes import verify_configured_folders

        checks, exit_code = verify_configured_folders(progress=not args.json)
    report = collect_report()
    if args.verify_hashes:
        report["models"]["hash_checks"] = checks
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return exit_code
