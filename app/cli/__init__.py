"""Command line: ``python -m app [--version] [--self-test] [--screenshot PNG [--state S |
--demo]] [SUBCOMMAND ...]``; no subcommand starts the GUI.

Each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``; its help is
the module docstring's first line. Modules keep heavy imports inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from app import APP_NAME, __version__

SUBCOMMANDS: dict[str, str] = {
    "doctor": "app.cli.doctor",
    "converse": "app.cli.converse",
    "bench": "app.cli.bench",
    "memory-plan": "app.cli.memory_plan",
    "gpu-report": "app.cli.gpu_report",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moss-voice", description=f"{APP_NAME}: talk with MOSS-Speech on your own PC.")
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--screenshot", metavar="PNG", type=Path,
                        help="open the window, save a PNG of it to PNG and exit")
    parser.add_argument("--demo", action="store_true",
                        help="with --screenshot: play the demo conversation first (real pipeline, "
                        "echo engine, simulated devices); the same as --state demo")
    parser.add_argument("--state", metavar="S",
                        help="with --screenshot: the window state to show: first-run, demo, "
                        "settings, settings:PAGE (engine, replies, listening, echo, audio, "
                        "transcript), model-manager, errors, no-audio")
    parser.add_argument("--self-test", action="store_true",
                        help="check this installation (voice loop, window, engine code on tiny "
                        "random weights), print a report and exit (0 = all passed)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().splitlines()
        sub = subparsers.add_parser(name, help=doc[0] if doc else None,
                                    description=(module.__doc__ or "").strip())
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from app.hub_offline import apply_offline_defaults
    from app.paths import use_private_compile_caches

    use_private_compile_caches()  # before anything imports torch (issue 21 item 2)
    apply_offline_defaults()  # Hugging Face offline, from source as in the bundle
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else sys.argv[1:])
    if args.demo and args.screenshot is None:
        parser.error("--demo goes with --screenshot PNG")
    if args.state is not None and args.screenshot is None:
        parser.error("--state goes with --screenshot PNG")
    if args.self_test:
        from app.selftest import run_self_test

        return run_self_test(verbose=args.verbose)
    from app.logs import setup_logging

    setup_logging(verbose=args.verbose)
    runner = getattr(args, "_run", None)
    if args.screenshot is not None and runner is None:
        from app.ui.screenshot import take_screenshot

        return take_screenshot(args.screenshot, demo=args.demo, state=args.state)
    if runner is None:
        from app.cli.default import run_default

        return run_default(args)
    return int(runner(args) or 0)
