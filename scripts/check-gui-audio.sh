#!/bin/sh
# End-to-end check of the real app on a machine without a screen or a sound card:
# Xvfb (a virtual X display) + a PulseAudio null sink (userspace; its monitor is the default
# microphone), `python -m app` with the echo engine, speech played into the sink, screenshots.
#
#   scripts/check-gui-audio.sh [OUT_DIR] [SPEECH.wav]
#   MODEL_DIR=/some/folder scripts/check-gui-audio.sh   # ask for MOSS-Speech from that folder:
#                                                       # shows the fall-back to the echo demo
#
# Needs: Xvfb, pulseaudio + pulseaudio-utils (pactl, paplay), ImageMagick (import), .venv.
# Everything runs in a private folder (HOME, XDG_RUNTIME_DIR, MOSS_VOICE_HOME); nothing of the
# person's own settings or audio set-up is touched. Look at the PNGs it writes.
set -eu

OUT=${1:-/tmp/moss-voice-e2e}
SPEECH=${2:-tests/fixtures/audio/question.wav}
PY=${PY:-.venv/bin/python}
DISPLAY_NUMBER=${DISPLAY_NUMBER:-:97}

for tool in Xvfb pulseaudio pactl paplay import; do
    command -v "$tool" >/dev/null || { echo "missing: $tool"; exit 2; }
done
rm -rf "$OUT" && mkdir -p "$OUT/run" "$OUT/home" && chmod 700 "$OUT/run"
export HOME="$OUT/home" XDG_RUNTIME_DIR="$OUT/run" MOSS_VOICE_HOME="$OUT/moss"
export DISPLAY=$DISPLAY_NUMBER

cleanup() {
    [ -n "${APP_PID:-}" ] && kill "$APP_PID" 2>/dev/null || true
    [ -n "${XVFB_PID:-}" ] && kill "$XVFB_PID" 2>/dev/null || true
    pulseaudio --kill 2>/dev/null || true
}
trap cleanup EXIT

pulseaudio --daemonize=yes --exit-idle-time=-1 --disallow-exit -n \
    --load=module-native-protocol-unix --load="module-null-sink sink_name=vsink rate=48000" \
    --load=module-always-sink
for _ in 1 2 3 4 5 6 7 8 9 10; do pactl info >/dev/null 2>&1 && break; sleep 0.5; done
pactl info | grep -E "Default (Sink|Source)"

Xvfb "$DISPLAY" -screen 0 1280x900x24 -nolisten tcp >"$OUT/xvfb.log" 2>&1 &
XVFB_PID=$!
sleep 1

# First run done, echo demo; the null sink's monitor hears the reply perfectly (like loud
# speakers without echo cancellation), so the assistant never listens while it speaks.
MODEL_DIR=${MODEL_DIR:-} "$PY" - <<'EOF'
import os
from app.settings import Settings
from app.settings_store import save_settings
settings = (Settings().with_value("ui.first_run_done", True)
            .with_value("echo.mode", "half_duplex"))
if os.environ["MODEL_DIR"]:
    for key in ("engine.model_dir", "engine.codec_dir"):
        settings = settings.with_value(key, os.environ["MODEL_DIR"])
    settings = settings.with_value("engine.kind", "moss_speech")
save_settings(settings)
EOF

"$PY" -m app -v >"$OUT/app.log" 2>&1 &
APP_PID=$!
sleep 6  # Qt, the VAD model and PulseAudio's first capture block
import -window root "$OUT/1-started.png"
paplay --device=vsink "$SPEECH"
sleep 1.2  # endpoint silence, then the echo starts
import -window root "$OUT/2-replying.png"
sleep 3
import -window root "$OUT/3-after-the-turn.png"
kill "$APP_PID"; wait "$APP_PID" 2>/dev/null || true
APP_PID=
echo "screenshots and app.log in $OUT"
grep -E "WARNING|ERROR|Traceback" "$OUT/app.log" || echo "no warnings or errors in app.log"
