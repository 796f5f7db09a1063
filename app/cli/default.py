"""No subcommand: the GUI when a display is available, else the headless demo."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.conversation.pipeline import Pipeline
    from app.settings import Settings


def run_default(args: argparse.Namespace) -> int:
    from app.display import display_status

    status = display_status()
    if status.available:
        from app.ui.application import run_gui

        return run_gui(live_pipeline)
    print(f"No display available ({status.reason}): running the headless demo instead.")
    return run_headless_demo()


def live_pipeline(settings: Settings) -> Pipeline:
    """The GUI's voice loop: the real devices and the engine the settings name (built once
    started; the echo demo answers, labelled, when it cannot be). Never raises over a missing
    model or audio system: those become banners."""
    from app.conversation import create_live_pipeline

    return create_live_pipeline(settings)


def run_headless_demo() -> int:
    """The voice loop with the echo engine on the bundled sample, on simulated devices.

    The sample has two sentences; the second one starts while the first reply plays, so the
    demo shows a turn, a barge-in and a second turn. Output goes to the cache folder.
    """
    from app import paths
    from app.audio.simulated import SimulatedMicrophone, write_wav
    from app.conversation.demo import demo_sample
    from app.conversation.report import build_report, format_summary, write_report
    from app.conversation.simulation import run_simulation
    from app.engine.echo import EchoEngine
    from app.settings import Settings

    sample = demo_sample()
    out_dir = paths.cache_dir() / "demo"
    result = run_simulation(Settings(), EchoEngine(), SimulatedMicrophone.from_wav(sample))
    write_wav(out_dir / "speaker.wav", result.output, result.output_rate_hz)
    write_report(out_dir / "report.json", build_report(result, realtime=False))
    print(format_summary(result, sample.name))
    print(f"what the speaker played: {out_dir / 'speaker.wav'}; report: "
          f"{out_dir / 'report.json'}")
    print("Try your own recording: python -m app converse --engine echo --input IN.wav "
          "--output OUT.wav --report REPORT.json")
    return 0
