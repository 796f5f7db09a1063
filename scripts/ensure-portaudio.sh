#!/bin/sh
# sounddevice needs Debian's libportaudio2 on Linux. `make setup` runs this; it never fails the
# setup over it: the app starts without audio devices and says why.
#
# It changes the system only when that is clearly wanted:
#   INSTALL_PORTAUDIO=yes   install it (through sudo when not root; sudo may ask a password)
#   INSTALL_PORTAUDIO=no    never install; just say what is missing
#   (unset)                 root in CI (CI set) or without a terminal, as on a fresh build or
#                           CI machine: install. At a terminal: ask first. Otherwise: only say
#                           how to install it. Passwordless sudo is never used unasked.
[ "$(uname -s)" = "Linux" ] || exit 0
if ldconfig -p 2>/dev/null | grep -q 'libportaudio\.so\.2'; then exit 0; fi

how="sudo apt-get install libportaudio2"
note() { echo "note: $*"; }

if ! command -v apt-get >/dev/null 2>&1; then
    note "libportaudio2 not found; install PortAudio with your package manager for real audio devices"
    exit 0
fi

root=no
[ "$(id -u)" = "0" ] && root=yes
case ${INSTALL_PORTAUDIO:-} in
    yes | 1 | true) decision=install ;;
    no | 0 | false) decision=skip ;;
    *)
        if [ "$root" = yes ] && { [ -n "${CI:-}" ] || [ ! -t 0 ]; }; then
            decision=install
        elif [ -t 0 ] && [ -t 1 ]; then
            printf 'libportaudio2 (for real audio devices) is missing. Install it with apt-get%s? [y/N] ' \
                "$([ "$root" = yes ] || echo ' (through sudo)')"
            read -r answer || answer=
            case $answer in [yY]*) decision=install ;; *) decision=skip ;; esac
        else
            decision=skip
        fi ;;
esac

if [ "$decision" != install ]; then
    note "libportaudio2 is missing; install it with '$how' for real audio devices" \
         "(or run: make setup INSTALL_PORTAUDIO=yes)"
    exit 0
fi
if [ "$root" = yes ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    note "libportaudio2 is missing and neither root nor sudo is available; ask an administrator to run '$how'"
    exit 0
fi
echo "installing libportaudio2 (needed for real audio devices)"
$SUDO apt-get install -y -q libportaudio2 >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q libportaudio2 >/dev/null 2>&1; } \
  || note "could not install libportaudio2; the app will run without real audio devices"
exit 0
