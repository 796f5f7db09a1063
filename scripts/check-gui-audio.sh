#!/bin/sh
# End-to-end check of the real app on a machine without a screen or a sound card:
# Xvfb (a virtual X display) + a PulseAudio null sink (userspace; its monitor is the default
# microphone), `python -m app` with the echo engine, speech played into the sink, screenshots.
#
#   scripts/check-gui-audio.sh [OUT_DIR] [SPEECH.wav]
#   MODEL_DIR=/some/folder scripts/check-gui-audio.sh   # ask for MOSS-Speech from that folder:
#                                                       # shows the fall-back to the echo demo
#
# Needs: Xvfb, xauth, pulseaudio + pulseaudio-utils (pactl, paplay), ImageMagick (import), .venv;
# x11-utils (xwininfo) to wait for the window instead of a fixed 6 s.
# Everything runs in a private folder (HOME, XDG_RUNTIME_DIR, MOSS_VOICE_HOME); nothing of the
# person's own settings or audio set-up is touched. Look at the PNGs it writes.
#
# Safe to run by accident: without OUT_DIR it writes to a new folder from mktemp. An OUT_DIR
# must be new, empty, or one this script made before (it holds .check-gui-audio); the script
# then replaces only what it writes itself and never deletes the folder. The X display takes
# only clients that hold its cookie (-auth, in the private folder) and none over TCP.
set -eu

SPEECH=${2:-tests/fixtures/audio/question.wav}
PY=${PY:-.venv/bin/python}
MARKER=.check-gui-audio
OUR_ENTRIES="run home moss xauthority app.log xvfb.log 1-started.png 2-replying.png 3-after-the-turn.png"

refuse() { printf 'check-gui-audio: %s\n' "$*" >&2; exit 2; }

if [ $# -ge 1 ]; then
    OUT=$1
    [ -n "$OUT" ] || refuse "OUT_DIR is empty"
    if [ -e "$OUT" ] || [ -L "$OUT" ]; then
        if [ -L "$OUT" ] || [ ! -d "$OUT" ]; then
            refuse "$OUT exists and is not a folder; choose a new one"
        fi
        [ -O "$OUT" ] || refuse "$OUT belongs to another user; choose a new folder"
        if [ ! -e "$OUT/$MARKER" ] && [ -n "$(ls -A "$OUT")" ]; then
            refuse "$OUT is not empty and was not made by this script; nothing was deleted." \
                   "Choose a new or empty folder, or leave OUT_DIR out for a fresh temporary one."
        fi
    fi
fi

for tool in Xvfb xauth pulseaudio pactl paplay import; do
    command -v "$tool" >/dev/null || { echo "missing: $tool"; exit 2; }
done

if [ $# -ge 1 ]; then
    mkdir -p "$OUT"
    for name in $OUR_ENTRIES; do rm -rf "${OUT:?}/$name"; done
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/moss-voice-e2e.XXXXXXXX")
fi
: > "$OUT/$MARKER"
chmod 700 "$OUT"
mkdir -p "$OUT/run" "$OUT/home" && chmod 700 "$OUT/run" "$OUT/home"
export HOME="$OUT/home" XDG_RUNTIME_DIR="$OUT/run" MOSS_VOICE_HOME="$OUT/moss"

# A free display number (unless DISPLAY_NUMBER names one) and a cookie only we know.
if [ -z "${DISPLAY_NUMBER:-}" ]; then
    number=90
    while [ -e "/tmp/.X$number-lock" ] || [ -e "/tmp/.X11-unix/X$number" ]; do
        number=$((number + 1))
    done
    DISPLAY_NUMBER=":$number"
fi
export DISPLAY="$DISPLAY_NUMBER" XAUTHORITY="$OUT/xauthority"
: > "$XAUTHORITY" && chmod 600 "$XAUTHORITY"
xauth -q -f "$XAUTHORITY" add "$DISPLAY" . "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

cleanup() {
    if [ -n "${APP_PID:-}" ]; then kill "$APP_PID" 2>/dev/null || true; fi
    if [ -n "${XVFB_PID:-}" ]; then kill "$XVFB_PID" 2>/dev/null || true; fi
    pulseaudio --kill 2>/dev/null || true
}
trap cleanup EXIT

pulseaudio --daemonize=yes --exit-idle-time=-1 --disallow-exit -n \
    --load=module-native-protocol-unix --load="module-null-sink sink_name=vsink rate=48000" \
    --load=module-always-sink
for _ in 1 2 3 4 5 6 7 8 9 10; do pactl info >/dev/null 2>&1 && break; sleep 0.5; done
pactl info | grep -E "Default (Sink|Source)"

Xvfb "$DISPLAY" -screen 0 1280x900x24 -auth "$XAUTHORITY" -nolisten tcp >"$OUT/xvfb.log" 2>&1 &
XVFB_PID=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -e "/tmp/.X11-unix/X${DISPLAY#:}" ] && break
    kill -0 "$XVFB_PID" 2>/dev/null || { cat "$OUT/xvfb.log" >&2; exit 1; }
    sleep 0.5
done

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
# Wait for the window (xwininfo, from x11-utils; else a fixed 6 s), then for Qt, the VAD model
# and PulseAudio's first capture block.
if command -v xwininfo >/dev/null; then
    waited=0
    until xwininfo -root -tree 2>/dev/null | grep -q '"MOSS Voice'; do
        kill -0 "$APP_PID" 2>/dev/null || break
        [ "$waited" -lt 240 ] || break
        sleep 0.5
        waited=$((waited + 1))
    done
    sleep 2
else
    sleep 6
fi
if ! kill -0 "$APP_PID" 2>/dev/null; then
    APP_PID=
    echo "the app ended before its window could be checked; the end of $OUT/app.log:" >&2
    tail -n 20 "$OUT/app.log" >&2
    exit 1
fi
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
