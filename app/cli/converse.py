"""Talk to an engine through simulated devices: a WAV as the microphone, a WAV of the speaker.

Runs the real voice loop (resampling, VAD, turn-taking, barge-in, engine worker, player) on a
virtual clock, faster than real time unless --realtime. Engine compute is charged to the clock,
so a slow engine shows as slow. Writes what the speaker played (on the input's timeline) and a
latency report (REPORT.json; schema in docs/report-schema.md).
"""

from __future__ import annotations

import argparse
import sys

from app.cli.options import (
    AudioInput,
    EchoRoom,
    InputFolder,
    Number,
    OutputFile,
    PushToTalk,
    milliseconds,
)
from app.cli.setting_options import SettingOverride, SettingValue, with_changes
from app.settings import Settings

SPEAKER = "Simulated speaker"
HEADSET = "Simulated headset"
PROG = "moss-voice converse"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=["echo", "moss_speech", "remote"], default=None,
                        help="who answers (default: the settings' engine.kind, i.e. echo)")
    parser.add_argument("--remote-url", metavar="URL", type=SettingValue("engine.remote_url"),
                        help="remote: the MOSS-Speech server, e.g. http://192.168.1.20:8000 "
                             "(engine.remote_url; implies --engine remote; its API key comes "
                             "from the keyring or MOSS_VOICE_API_KEY)")
    parser.add_argument("--model-dir", type=InputFolder("model folder"),
                        help="moss_speech: the MOSS-Speech model folder (engine.model_dir)")
    parser.add_argument("--codec-dir", type=InputFolder("codec folder"),
                        help="moss_speech: the MOSS-Speech-Codec folder (engine.codec_dir)")
    parser.add_argument("--voice", type=AudioInput("a 3–20 s WAV or FLAC recording of a voice"),
                        help="moss_speech: voice-prompt WAV/FLAC the replies speak in "
                             "(engine.voice_prompt)")
    parser.add_argument("--input", type=AudioInput(), required=True,
                        help="the microphone: a WAV/FLAC file, any sample rate, mono or stereo")
    parser.add_argument("--output", type=OutputFile((".wav", ".flac"), "sound file"),
                        help="write what the speaker played (WAV or FLAC)")
    parser.add_argument("--report", type=OutputFile(what="JSON file"),
                        help="write the latency report (JSON)")
    parser.add_argument("--metrics-jsonl", type=OutputFile(what="JSON lines file"),
                        help="append one JSON line per turn")
    parser.add_argument("--realtime", action="store_true", help="pace to the wall clock")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=SettingOverride(), metavar="GROUP.KEY=VALUE",
                        help="change one setting, e.g. --set vad.endpoint_silence_ms=700")
    parser.add_argument("--saved-settings", action="store_true",
                        help="start from the saved settings file instead of the defaults (the "
                             "file is only read)")
    parser.add_argument("--ptt", type=PushToTalk(), metavar="START-END[,START-END...]",
                        help="push-to-talk presses in seconds, e.g. 0.2-2.5,4-6 (implies "
                             "turn.mode=push_to_talk)")
    parser.add_argument("--output-rate", type=Number(int, 8000, 192000, unit="Hz"),
                        default=48000, help="speaker rate (Hz, 8000-192000)")
    parser.add_argument("--block-ms", type=Number(float, 1, 100, unit="ms"), default=10.0,
                        help="device block (ms, 1-100)")
    parser.add_argument("--output-latency-ms", type=milliseconds(0, 1000), default=10.0,
                        help="simulated output latency, callback to DAC (ms, 0-1000)")
    parser.add_argument("--no-charge-compute", action="store_true",
                        help="engine compute takes no simulated time (bit-exact repeat runs)")
    parser.add_argument("--echo-first-chunk-delay-ms", type=milliseconds(), default=0.0,
                        help="echo engine: wait this long before the first chunk")
    parser.add_argument("--echo-chunk-delay-ms", type=milliseconds(), default=0.0,
                        help="echo engine: wait this long before each further chunk")
    parser.add_argument("--fail-output-at", type=Number(float, 0, 86400, unit="seconds"),
                        metavar="SECONDS",
                        help=f"play through '{HEADSET}' and unplug it at this time (the app "
                             f"must fall back to '{SPEAKER}')")
    parser.add_argument("--simulate-echo", type=EchoRoom(), metavar="DELAY_MS:GAIN_DB",
                        help="the speaker comes back into the microphone through a small "
                             "simulated room, e.g. 60:-6 (60 ms later, 6 dB quieter than "
                             "played); pick the echo handling with --set echo.mode=...")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The settings this run uses; raises InputError naming the option that made them invalid.
    The saved settings file is only read, never repaired or rewritten."""
    if args.saved_settings:
        from app.settings_store import load_settings

        loaded = load_settings(repair=False)
        for issue in loaded.issues:
            print(f"{PROG}: warning: saved settings: {issue} (the file is left as it is)",
                  file=sys.stderr)
        settings = loaded.settings
    else:
        settings = Settings()
    changes: list[tuple[str, str, object]] = [("--set", key, value)
                                              for key, value in args.overrides]
    if getattr(args, "remote_url", None):
        changes += [("--remote-url", "engine.kind", "remote"),
                    ("--remote-url", "engine.remote_url", args.remote_url)]
    if args.engine:
        changes.append(("--engine", "engine.kind", args.engine))
    for option, key in (("model_dir", "engine.model_dir"), ("codec_dir", "engine.codec_dir"),
                        ("voice", "engine.voice_prompt")):
        if getattr(args, option, None) is not None:
            changes.append((f"--{option.replace('_', '-')}", key, getattr(args, option)))
    if args.ptt:
        changes.append(("--ptt", "turn.mode", "push_to_talk"))
    if args.fail_output_at is not None:
        changes.append(("--fail-output-at", "audio.output_device", HEADSET))
    return with_changes(settings, changes)


def check(args: argparse.Namespace) -> None:
    """Everything that can be known before the run: the settings the options make."""
    args._settings = settings_from_args(args)


def run(args: argparse.Namespace) -> int:
    from app.audio.audio_file import AudioFileError, read_audio_file
    from app.audio.simulated import DeviceFailure, SimulatedMicrophone, write_wav
    from app.conversation.report import build_report, format_summary, write_report
    from app.conversation.simulation import SimulationOptions, run_simulation
    from app.engine.base import Engine
    from app.engine.echo import EchoEngine
    from app.engine.factory import EngineUnavailableError, build_engine

    settings: Settings = getattr(args, "_settings", None) or settings_from_args(args)
    try:
        audio = read_audio_file(args.input)
    except AudioFileError as exc:
        print(f"{PROG}: error: argument --input: {exc}", file=sys.stderr)
        return 2
    warning = audio.non_finite_warning(args.input.name)
    if warning:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    try:
        engine: Engine
        if settings.engine.kind == "echo":
            engine = EchoEngine(args.echo_first_chunk_delay_ms, args.echo_chunk_delay_ms)
        else:
            engine = build_engine(settings)
    except EngineUnavailableError as exc:
        print(f"{PROG}: error: {str(exc).rstrip('.')}. {exc.advice('cli')}".rstrip(),
              file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:  # a build that refuses its inputs
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    failures = ((DeviceFailure("output", HEADSET, args.fail_output_at),)
                if args.fail_output_at is not None else ())
    options = SimulationOptions(
        block_ms=args.block_ms, output_rate_hz=args.output_rate,
        output_latency_ms=args.output_latency_ms, realtime=args.realtime,
        charge_compute=not args.no_charge_compute, push_to_talk=args.ptt or (),
        failures=failures, output_devices=(SPEAKER, HEADSET) if failures else (SPEAKER,),
        echo=args.simulate_echo)
    microphone = SimulatedMicrophone(audio.pcm, audio.sample_rate_hz)
    result = run_simulation(settings, engine, microphone, options,
                            metrics_jsonl=args.metrics_jsonl)
    if args.output:
        write_wav(args.output, result.output, result.output_rate_hz)
    report = build_report(result, args.realtime, input_peak_dbfs=audio.peak_dbfs,
                          input_warnings=[warning] if warning else [])
    if args.report:
        write_report(args.report, report)
    failed = report["summary"]["failures"]
    if not args.quiet or failed:
        print(format_summary(result, args.input.name, input_peak_dbfs=audio.peak_dbfs))
    return exit_status(failed)


def exit_status(failures: list[dict[str, object]]) -> int:
    """0: every turn was answered (or there was no speech); 1: something failed on the way."""
    if failures:
        turns = sorted({int(str(f["turn_id"])) for f in failures if f["turn_id"] is not None})
        on = f" (turns {', '.join(map(str, turns))})" if turns else ""
        print(f"{PROG}: {len(failures)} failure(s) during the run{on}; exit status 1",
              file=sys.stderr)
        return 1
    return 0

