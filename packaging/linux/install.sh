#!/bin/sh
# Add MOSS Voice to your applications menu, for you only (no root needed).
# Run it from the unpacked folder, after moving the folder where it is to stay:
#   ./install.sh               menu entry, icons, and the command ~/.local/bin/moss-voice
#   ./install.sh --uninstall   removes those three again (the folder, your settings, models
#                              and logs are kept; `moss-voice doctor` shows where they are)
#
# The folder's path goes into the menu entry as data, never as code: it is escaped by the
# rules of the Desktop Entry Specification (Exec quoting, `%%`, string escapes), not pasted
# into a sed or shell command (tests/test_install_script.py runs this with hostile names).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
bin_dir="$HOME/.local/bin"
entry="$data/applications/moss-voice.desktop"
sizes="16 24 32 48 64 128 256 512"
tab=$(printf '\t')
cr=$(printf '\r')
newline='
'

say() { printf '%s\n' "$*"; }
fail() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

refresh_caches() {
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q "$data/applications" 2>/dev/null || true
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1; then
        gtk-update-icon-cache -q -t "$data/icons/hicolor" 2>/dev/null || true
    fi
}

# escape_value TEXT: a desktop-entry string value (only the backslash is special there).
escape_value() {
    rest=$1 out=''
    while [ -n "$rest" ]; do
        char=${rest%"${rest#?}"}
        rest=${rest#?}
        case $char in
            \\) out="$out\\\\" ;;
            *) out="$out$char" ;;
        esac
    done
    printf '%s' "$out"
}

# escape_exec_argument TEXT: one quoted argument of an Exec key. Inside double quotes the
# spec wants ", `, $ and \ behind a backslash, and % written as %%; then the value's own
# string escaping doubles every backslash (so a literal \ ends up as four, a $ as \\$).
escape_exec_argument() {
    rest=$1 out=''
    while [ -n "$rest" ]; do
        char=${rest%"${rest#?}"}
        rest=${rest#?}
        case $char in
            \\) out="$out\\\\\\\\" ;;
            \"|\`|\$) out="$out\\\\$char" ;;
            %) out="$out%%" ;;
            *) out="$out$char" ;;
        esac
    done
    printf '"%s"' "$out"
}

if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$entry"
    for size in $sizes; do
        rm -f "$data/icons/hicolor/${size}x${size}/apps/moss-voice.png"
    done
    if [ -L "$bin_dir/moss-voice" ]; then
        rm -f "$bin_dir/moss-voice"
    fi
    refresh_caches
    say "MOSS Voice removed from the menu. Delete $here to remove the program itself."
    exit 0
fi

if [ ! -x "$here/moss-voice" ]; then
    fail "$here/moss-voice is missing; run this script from the unpacked folder."
fi
case $here in
    *"$newline"* | *"$tab"* | *"$cr"*)
        fail "the folder's path contains a line break or a tab, which a menu entry cannot" \
             "hold; move the folder to a plain name (e.g. ~/.local/opt/moss-voice) and run" \
             "this again." ;;
esac

for size in $sizes; do
    icon="$here/_internal/resources/icons/hicolor/${size}x${size}/apps/moss-voice.png"
    if [ -f "$icon" ]; then
        mkdir -p "$data/icons/hicolor/${size}x${size}/apps"
        cp "$icon" "$data/icons/hicolor/${size}x${size}/apps/moss-voice.png"
    fi
done

mkdir -p "$data/applications"
exec_line="Exec=$(escape_exec_argument "$here/moss-voice")"
try_exec_line="TryExec=$(escape_value "$here/moss-voice")"
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        Exec=*) printf '%s\n' "$exec_line" ;;
        TryExec=*) printf '%s\n' "$try_exec_line" ;;
        *) printf '%s\n' "$line" ;;
    esac
done < "$here/moss-voice.desktop" > "$entry.tmp"
chmod 644 "$entry.tmp"
mv "$entry.tmp" "$entry"

mkdir -p "$bin_dir"
ln -sf "$here/moss-voice" "$bin_dir/moss-voice"
refresh_caches

say "MOSS Voice is in your applications menu; from a terminal: $bin_dir/moss-voice"
