"""Command line: ``python -m app [--version] [--self-test] [--screenshot PNG [--state S |
--demo]] [SUBCOMMAND ...]``; no subcommand starts the GUI.

Each subcommand is a module with ``add_arguments(parser)``, ``run(args) -> int`` and optionally
``check(args)``; its help is the module docstring's first line. Modules keep heavy imports
inside ``run``. Every value is checked before any work starts (:mod:`app.cli.options`).

Exit status: 0 success; 1 the command ran but something failed on the way (``converse``: a turn
the engine could not answer, a device with no fallback; the report says which); 2 bad input (an
option, a file, a combination this machine cannot run), one line on stderr; 3 ``bench engine``
and ``bench engine-e2e`` refused a model too large for this machine's memory.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from app import APP_NAME, __version__
from app.cli.options import InputError, OneLineParser, OutputFile, ScreenshotState

SUBCOMMANDS: dict[str, str] = {
    "doctor": "app.cli.doctor",
    "converse": "app.cli.converse",
    "bench": "app.cli.bench",
    "memory-plan": "app.cli.memory_plan",
    "gpu-report": "app.cli.gpu_report",
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="moss-voice", description=f"{APP_NAME}: talk with MOSS-Speech on your own PC.")
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--screenshot", metavar="PNG",
                        type=OutputFile((".png", ".jpg", ".jpeg", ".bmp"), "picture"),
                        help="open the window, save a PNG of it to PNG and exit")
    parser.add_argument("--demo", action="store_true",
                        help="with --screenshot: play the demo conversation first (real pipeline, "
                        "echo engine, simulated devices); the same as --state demo")
    parser.add_argument("--state", metavar="S", type=ScreenshotState(),
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
        sub.set_defaults(_run=module.run, _check=getattr(module, "check", None), _parser=sub)
    return parser


def parse_command_line(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check everything (values, combinations, what this machine can run) before any
    work starts; a problem ends the program with one line on stderr and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else sys.argv[1:])
    if args.demo and args.screenshot is None:
        parser.error("--demo goes with --screenshot PNG")
    if args.state is not None and args.screenshot is None:
        parser.error("--state goes with --screenshot PNG")
    command = getattr(args, "command", None)
    for flag, given in (("--self-test", args.self_test), ("--screenshot", args.screenshot)):
        if given and command:
            parser.error(f"{flag} cannot be combined with the command {command!r}")
    if args.self_test and args.screenshot is not None:
        parser.error("--self-test cannot be combined with --screenshot")
    check = getattr(args, "_check", None)
    if check is not None:
        try:
            check(args)
        except InputError as exc:
            args._parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input, after one line on
    stderr). ``--help`` and ``--version`` exit as argparse does."""
    from app.hub_offline import apply_offline_defaults
    from app.paths import use_private_compile_caches

    use_private_compile_caches()  # before anything imports torch (issue 21 item 2)
    apply_offline_defaults()  # Hugging Face offline, from source as in the bundle
    try:
        args = parse_command_line(argv)
    except SystemExit as exc:
        if exc.code == 2:
            return 2
        raise
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
