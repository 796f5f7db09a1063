"""The Windows installer's slices: what Inno Setup 6.4 writes, and what installer.iss relies on.

With ``DiskSpanning=yes`` the compiler writes ``<name>.exe`` and ``<name>-1.bin``,
``<name>-2.bin``, ... Each slice starts with ``idska32`` + 0x1A and its own size (4 bytes,
little-endian), and is filled to ``DiskSliceSize`` before the next one starts, except that the
first shares its "disk" with the setup program (its budget is the slice size less the setup
program's size rounded up to ``DiskClusterSize``) and that a slice may end up to 4 bytes early
when the next compressed chunk's header did not fit. So a full slice means another follows.

installer.iss's ``[Code]`` checks the downloaded parts by these rules before Setup starts (a
missing part would otherwise make Setup ask for "Disk N", even in a silent install);
:func:`layout_problem` checks that a freshly built installer obeys them (``packaging/build.py``
on Windows, ``make installer-check`` under wine), so the check can never refuse a complete set.
"""

from __future__ import annotations

from pathlib import Path

SLICE_ID = b"idska32\x1a"
HEADER_BYTES = len(SLICE_ID) + 4
CHUNK_HEADER_BYTES = 4  # a slice may end this much early
GITHUB_FILE_LIMIT_BYTES = 2 * 2**30  # GitHub refuses release files of 2 GiB and more


def slice_paths(setup_exe: Path) -> list[Path]:
    """``<name>-1.bin``, ``<name>-2.bin``, ... next to the setup program, in order."""
    found, number = [], 1
    while (candidate := setup_exe.with_name(f"{setup_exe.stem}-{number}.bin")).is_file():
        found.append(candidate)
        number += 1
    return found


def header_size(path: Path) -> int | None:
    """The size a slice's header says it has; None when it is no slice."""
    with path.open("rb") as stream:
        head = stream.read(HEADER_BYTES)
    if len(head) != HEADER_BYTES or not head.startswith(SLICE_ID):
        return None
    return int.from_bytes(head[len(SLICE_ID):], "little")


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def is_full(number: int, size_bytes: int, setup_bytes: int, slice_bytes: int,
            cluster_bytes: int) -> bool:
    """Whether slice ``number`` (1-based) is full, so that another one must follow it."""
    budget = slice_bytes - (round_up(setup_bytes, cluster_bytes) if number == 1 else 0)
    return size_bytes >= budget - CHUNK_HEADER_BYTES


def layout_problem(setup_exe: Path, slice_bytes: int, cluster_bytes: int) -> str | None:
    """What in a freshly built installer breaks the rules installer.iss checks, or None."""
    if not setup_exe.is_file():
        return f"{setup_exe} is missing"
    slices = slice_paths(setup_exe)
    if not slices:
        return f"no slices next to {setup_exe.name} (DiskSpanning=yes writes at least one)"
    setup_bytes = setup_exe.stat().st_size
    for path in (setup_exe, *slices):
        if path.stat().st_size >= GITHUB_FILE_LIMIT_BYTES:
            return f"{path.name} is {path.stat().st_size} bytes: GitHub takes no file of 2 GiB"
    for number, path in enumerate(slices, start=1):
        size = path.stat().st_size
        if header_size(path) != size:
            return f"{path.name}: its header says {header_size(path)} bytes, it has {size}"
        full = is_full(number, size, setup_bytes, slice_bytes, cluster_bytes)
        last = number == len(slices)
        if full == last:
            state = "full, yet the last" if last else "not full, yet not the last"
            return (f"{path.name} ({size} bytes) is {state} slice: the installer's slice check "
                    f"would {'ask for a part that does not exist' if last else 'stop early'}; "
                    "change DiskSliceSize by a few bytes and build again")
    return None
