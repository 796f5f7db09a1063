#!/bin/sh
# sounddevice needs Debian's libportaudio2 on Linux. Install it when it is missing and apt is
# usable; never fail the setup over it: the app starts without audio devices and says why.
[ "$(uname -s)" = "Linux" ] || exit 0
if ldconfig -p 2>/dev/null | grep -q 'libportaudio\.so\.2'; then exit 0; fi
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "note: libportaudio2 is missing; install it with 'sudo apt-get install libportaudio2' for real audio devices"; exit 0
    fi
    echo "installing libportaudio2 (needed for real audio devices)"
    $SUDO apt-get install -y -q libportaudio2 >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q libportaudio2 >/dev/null 2>&1; } \
      || echo "note: could not install libportaudio2; the app will run without real audio devices"
else
    echo "note: libportaudio2 not found; install PortAudio with your package manager for real audio devices"
fi
exit 0
