#!/bin/sh
# Add MOSS Voice to your applications menu, for you only (no root needed).
# Run it from the unpacked folder, after moving the folder where it is to stay:
#   ./install.sh               menu entry, icons, and the command ~/.local/bin/moss-voice
#   ./install.sh --uninstall   removes those three again (the folder, your settings, models
#                              and logs are kept; `moss-voice doctor` shows where they are)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
bin_dir="$HOME/.local/bin"
entry="$data/applications/moss-voice.desktop"
sizes="16 24 32 48 64 128 256 512"

refresh_caches() {
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q "$data/applications" 2>/dev/null || true
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1; then
        gtk-update-icon-cache -q -t "$data/icons/hicolor" 2>/dev/null || true
    fi
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
    echo "MOSS Voice removed from the menu. Delete $here to remove the program itself."
    exit 0
fi

if [ ! -x "$here/moss-voice" ]; then
    echo "install.sh: $here/moss-voice is missing; run this script from the unpacked folder." >&2
    exit 1
fi

for size in $sizes; do
    icon="$here/_internal/resources/icons/hicolor/${size}x${size}/apps/moss-voice.png"
    if [ -f "$icon" ]; then
        mkdir -p "$data/icons/hicolor/${size}x${size}/apps"
        cp "$icon" "$data/icons/hicolor/${size}x${size}/apps/moss-voice.png"
    fi
done

mkdir -p "$data/applications"
sed -e "s|^Exec=.*|Exec=\"$here/moss-voice\"|" -e "s|^TryExec=.*|TryExec=$here/moss-voice|" \
    "$here/moss-voice.desktop" > "$entry.tmp"
mv "$entry.tmp" "$entry"
chmod 644 "$entry"

mkdir -p "$bin_dir"
ln -sf "$here/moss-voice" "$bin_dir/moss-voice"
refresh_caches

echo "MOSS Voice is in your applications menu; from a terminal: $bin_dir/moss-voice"
