"""Benchmarks: ``bench NAME ...`` prints measured figures (record them in BENCHMARKS.md)."""

from __future__ import annotations

import argparse
import importlib

# name -> module with add_arguments(parser) and run(args) -> int
BENCHES: dict[str, str] = {
    "aec": "app.cli.bench_aec",
    "ui-frames": "app.ui.bench_frames",
    "voice-loop": "app.cli.bench_voice_loop",
    "turn-taking": "app.cli.bench_turn_taking",
    "end-of-turn": "app.cli.bench_end_of_turn",
    "engine": "app.cli.bench_engine",
    "codec": "app.cli.bench_codec",
    "bundle": "app.cli.bench_bundle",
    "engine-e2e": "app.cli.bench_engine_e2e",
    "hashes": "app.cli.bench_hashes",
    "remote": "app.cli.bench_remote",
    "soak": "app.cli.bench_soak",
    "limiter": "app.cli.bench_limiter",
    "parity": "app.cli.bench_parity",
    "memory": "app.cli.bench_memory",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    benches = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, module_name in BENCHES.items():
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().splitlines()
        sub = benches.add_parser(name, help=doc[0] if doc else None)
        module.add_arguments(sub)
        sub.set_defaults(_bench_run=module.run, _bench_check=getattr(module, "check", None),
                         _parser=sub)


def check(args: argparse.Namespace) -> None:
    """The bench's own pre-flight checks (devices, precisions, combinations)."""
    if args._bench_check is not None:
        args._bench_check(args)


def run(args: argparse.Namespace) -> int:
    return int(args._bench_run(args) or 0)
