"""Talk to an engine through simulated devices: a WAV as the microphone, a WAV of the speaker.

Runs the real voice loop (resampling, VAD, turn-taking, barge-in, engine worker, player) on a
virtual clock, faster than real time unless --realtime. Engine compute is charged to the clock,
so a slow engine shows as slow. Writes what the speaker played (on the input's timeline) and a
latency report (REPORT.json; schema in docs/report-schema.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.settings import Settings

SPEAKER = "Simulated speaker"
HEADSET = "Simulated headset"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=["echo", "moss_speech", "remote"], default=None,
                        help="who answers (default: the settings' engine.kind, i.e. echo)")
    parser.add_argument("--remote-url", metavar="URL",
                        help="remote: the MOSS-Speech server, e.g. http://192.168.1.20:8000 "
                             "(engine.remote_url; implies --engine remote; its API key comes "
                             "from the keyring or MOSS_VOICE_API_KEY)")
    parser.add_argument("--model-dir", type=Path,
                        help="moss_speech: the MOSS-Speech model folder (engine.model_dir)")
    parser.add_argument("--codec-dir", type=Path,
                        help="moss_speech: the MOSS-Speech-Codec folder (engine.codec_dir)")
    parser.add_argument("--voice", type=Path,
                        help="moss_speech: voice-prompt WAV/FLAC the replies speak in "
                             "(engine.voice_prompt)")
    parser.add_argument("--input", type=Path, required=True,
                        help="the microphone: a WAV/FLAC file, any sample rate, mono or stereo")
    parser.add_argument("--output", type=Path, help="write what the speaker played (WAV)")
    parser.add_argument("--report", type=Path, help="write the latency report (JSON)")
    parser.add_argument("--metrics-jsonl", type=Path, help="append one JSON line per turn")
    parser.add_argument("--realtime", action="store_true", help="pace to the wall clock")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="GROUP.KEY=VALUE",
                        help="change one setting, e.g. --set vad.endpoint_silence_ms=700")
    parser.add_argument("--saved-settings", action="store_true",
                        help="start from the saved settings file instead of the defaults")
    parser.add_argument("--ptt", metavar="START-END[,START-END...]",
                        help="push-to-talk presses in seconds, e.g. 0.2-2.5,4-6 (implies "
                             "turn.mode=push_to_talk)")
    parser.add_argument("--output-rate", type=int, default=48000, help="speaker rate (Hz)")
    parser.add_argument("--block-ms", type=float, default=10.0, help="device block (ms)")
    parser.add_argument("--output-latency-ms", type=float, default=10.0,
                        help="simulated output latency, callback to DAC (ms)")
    parser.add_argument("--no-charge-compute", action="store_true",
                        help="engine compute takes no simulated time (bit-exact repeat runs)")
    parser.add_argument("--echo-first-chunk-delay-ms", type=float, default=0.0,
                        help="echo engine: wait this long before the first chunk")
    parser.add_argument("--echo-chunk-delay-ms", type=float, default=0.0,
                        help="echo engine: wait this long before each further chunk")
    parser.add_argument("--fail-output-at", type=float, metavar="SECONDS",
                        help=f"play through '{HEADSET}' and unplug it at this time (the app "
                             f"must fall back to '{SPEAKER}')")
    parser.add_argument("--simulate-echo", metavar="DELAY_MS:GAIN_DB",
                        help="the speaker comes back into the microphone through a small "
                             "simulated room, e.g. 60:-6 (60 ms later, 6 dB quieter than "
                             "played); pick the echo handling with --set echo.mode=...")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def parse_value(text: str) -> object:
    """``--set`` values: JSON literals (500, 0.6, true, null, "x"), else the plain text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_ptt(text: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for part in text.split(","):
        start, sep, end = part.strip().partition("-")
        if not sep:
            raise ValueError(f"push-to-talk '{part}': expected START-END in seconds")
        pairs.append((float(start), float(end)))
    return tuple(pairs)


def settings_from_args(args: argparse.Namespace) -> Settings:
    if args.saved_settings:
        from app.settings_store import load_settings

        settings = load_settings().settings
    else:
        settings = Settings()
    for override in args.overrides:
        key, sep, value = override.partition("=")
        if not sep:
            raise ValueError(f"--set {override}: expected GROUP.KEY=VALUE")
        settings = settings.with_value(key.strip(), parse_value(value.strip()))
    if getattr(args, "remote_url", None):
        settings = settings.with_values({"engine.kind": "remote",
                                         "engine.remote_url": args.remote_url})
    if args.engine:
        settings = settings.with_value("engine.kind", args.engine)
    for option, key in (("model_dir", "engine.model_dir"), ("codec_dir", "engine.codec_dir"),
                        ("voice", "engine.voice_prompt")):
        if getattr(args, option, None) is not None:
            settings = settings.with_value(key, getattr(args, option))
    if args.ptt:
        settings = settings.with_value("turn.mode", "push_to_talk")
    if args.fail_output_at is not None:
        settings = settings.with_value("audio.output_device", HEADSET)
    return settings


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from app.audio.simulated import DeviceFailure, SimulatedMicrophone, write_wav
    from app.audio.simulated_echo import SimulatedEcho
    from app.conversation.report import build_report, format_summary, write_report
    from app.conversation.simulation import SimulationOptions, run_simulation
    from app.engine.base import Engine
    from app.engine.echo import EchoEngine
    from app.engine.factory import EngineUnavailableError, build_engine

    try:
        settings = settings_from_args(args)
        ptt = parse_ptt(args.ptt) if args.ptt else ()
        echo = SimulatedEcho.parse(args.simulate_echo) if args.simulate_echo else None
        microphone = SimulatedMicrophone.from_wav(args.input)
        engine: Engine
        if settings.engine.kind == "echo":
            engine = EchoEngine(args.echo_first_chunk_delay_ms, args.echo_chunk_delay_ms)
        else:
            engine = build_engine(settings)
    except EngineUnavailableError as exc:
        print(f"converse: {str(exc).rstrip('.')}. {exc.advice('cli')}".rstrip(), file=sys.stderr)
        return 2
    except (ValueError, ValidationError, OSError) as exc:
        print(f"converse: {exc}", file=sys.stderr)
        return 2
    failures = ((DeviceFailure("output", HEADSET, args.fail_output_at),)
                if args.fail_output_at is not None else ())
    options = SimulationOptions(
        block_ms=args.block_ms, output_rate_hz=args.output_rate,
        output_latency_ms=args.output_latency_ms, realtime=args.realtime,
        charge_compute=not args.no_charge_compute, push_to_talk=ptt, failures=failures,
        output_devices=(SPEAKER, HEADSET) if failures else (SPEAKER,), echo=echo)
    result = run_simulation(settings, engine, microphone, options,
                            metrics_jsonl=args.metrics_jsonl)
    if args.output:
        write_wav(args.output, result.output, result.output_rate_hz)
    if args.report:
        write_report(args.report, build_report(result, args.realtime))
    if not args.quiet:
        print(format_summary(result, args.input.name))
    return 0
