"""The Windows installer's parts (slices): the rules installer.iss's ``[Code]`` check relies on
(packaging/windows/slices.py), and the script's settings that keep every release file under
GitHub's 2 GiB. The compiled installer itself runs under wine in tests/test_installer_wine.py."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.packaging_helpers import ROOT, InnoScript

sys.path.insert(0, str(ROOT / "packaging" / "windows"))
import slices

SLICE_BYTES, CLUSTER_BYTES = 3_000_000, 512


def write_slice(path: Path, size: int, header_size: int | None = None) -> None:
    header = slices.SLICE_ID + (size if header_size is None else header_size).to_bytes(4, "little")
    path.write_bytes(header + bytes(size - len(header)))


def built_installer(folder: Path, sizes: list[int], setup_bytes: int = 1_873_910) -> Path:
    """Files shaped like ISCC's output: the setup program and slices of the given sizes."""
    setup = folder / "moss-voice-0.1.0-windows-x64-setup.exe"
    setup.write_bytes(b"MZ" + bytes(setup_bytes - 2))
    for number, size in enumerate(sizes, start=1):
        write_slice(folder / f"{setup.stem}-{number}.bin", size)
    return setup


def first_slice_budget(setup_bytes: int = 1_873_910) -> int:
    return SLICE_BYTES - slices.round_up(setup_bytes, CLUSTER_BYTES)


def test_a_layout_like_the_compilers_passes(tmp_path: Path) -> None:
    """The sizes ISCC 6.4.1 wrote under wine for the stand-in payload (make installer-check)."""
    setup = built_installer(tmp_path, [1_126_080, 3_000_000, 2_874_420])
    assert first_slice_budget() == 1_126_080
    assert slices.layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES) is None
    assert [p.name[-6:] for p in slices.slice_paths(setup)] == ["-1.bin", "-2.bin", "-3.bin"]


def test_a_slice_may_end_four_bytes_early_when_a_chunk_header_did_not_fit(tmp_path: Path) -> None:
    setup = built_installer(tmp_path, [first_slice_budget(), SLICE_BYTES - 4, 1000])
    assert slices.layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES) is None


@pytest.mark.parametrize(("sizes", "says"), [
    ([first_slice_budget(), SLICE_BYTES], "full, yet the last"),
    ([first_slice_budget(), 2_000_000, 500], "not full, yet not the last"),
    ([1_000_000, 500], "not full, yet not the last"),
])
def test_a_layout_the_parts_check_would_misread_fails_the_build(tmp_path: Path,
                                                                sizes: list[int],
                                                                says: str) -> None:
    setup = built_installer(tmp_path, sizes)
    problem = slices.layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES)
    assert problem is not None and says in problem and "DiskSliceSize" in problem


def test_a_slice_whose_header_disagrees_is_reported(tmp_path: Path) -> None:
    setup = built_installer(tmp_path, [first_slice_budget(), 1000])
    write_slice(setup.with_name(f"{setup.stem}-2.bin"), 1000, header_size=2000)
    assert "header says 2000 bytes, it has 1000" in str(
        slices.layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES))
    (tmp_path / "x.bin").write_bytes(b"not a slice")
    assert slices.header_size(tmp_path / "x.bin") is None


@pytest.mark.skipif(sys.platform == "win32", reason="a 2 GiB file is sparse only on POSIX here")
def test_a_file_of_2_gib_is_refused(tmp_path: Path) -> None:
    setup = built_installer(tmp_path, [first_slice_budget(), 1000])
    with setup.with_name(f"{setup.stem}-2.bin").open("r+b") as sparse:
        sparse.truncate(slices.GITHUB_FILE_LIMIT_BYTES)
    assert "GitHub takes no file of 2 GiB" in str(
        slices.layout_problem(setup, SLICE_BYTES, CLUSTER_BYTES))


# ---- installer.iss and the Python that builds and checks it agree ------------------------------


@pytest.fixture(scope="module")
def iss() -> InnoScript:
    return InnoScript()


def python_constant(path: Path, name: str) -> object:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def test_slices_stay_under_githubs_limit_and_everyone_agrees_on_their_size(
        iss: InnoScript) -> None:
    slice_bytes = int(iss.defines["DiskSliceSize"])
    cluster_bytes = int(iss.defines["DiskClusterSize"])
    assert slice_bytes < slices.GITHUB_FILE_LIMIT_BYTES
    assert iss.setup["DiskSliceSize"] == str(slice_bytes)
    assert iss.setup["DiskSpanning"] == "yes" and iss.setup["SlicesPerDisk"] == "1"
    build = ROOT / "packaging" / "build.py"
    check = ROOT / "packaging" / "windows" / "installer_check.py"
    assert python_constant(build, "INNO_SLICE_BYTES") == slice_bytes
    assert python_constant(build, "INNO_CLUSTER_BYTES") == cluster_bytes
    assert python_constant(check, "CLUSTER_BYTES") == cluster_bytes


def test_the_parts_check_reads_the_slice_format_slices_py_describes(iss: InnoScript) -> None:
    code = iss.text[iss.text.index("\n[Code]\n"):]
    assert f"SliceID = '{slices.SLICE_ID[:-1].decode()}';" in code
    assert f"ChunkHeaderBytes = {slices.CHUNK_HEADER_BYTES};" in code
    assert "function InitializeSetup(): Boolean;" in code and "SuppressibleMsgBox" in code
    # the check is written for Inno Setup 6.4's slice format, and CI compiles with 6.4.1
    assert "#if Ver < EncodeVer(6, 4, 0) || Ver >= EncodeVer(6, 5, 0)" in iss.text
    assert python_constant(ROOT / "packaging" / "windows" / "installer_check.py",
                           "INNO_PACKAGE") == "innosetup@6.4.1"


def test_no_code_line_starts_like_a_section_tag(iss: InnoScript) -> None:
    """ISCC reads a line starting with '[' as a new section even inside [Code] ("Invalid
    section tag"); a wrapped argument list must not start a line."""
    code = iss.text[iss.text.index("\n[Code]\n") + len("\n[Code]\n"):]
    assert not [line for line in code.splitlines() if re.match(r"\s*\[", line)]


def test_the_desktop_shortcut_is_offered_not_forced(iss: InnoScript) -> None:
    (task,) = iss.entries("Tasks")
    assert task["Name"] == "desktopicon" and task["Flags"] == "unchecked"


def test_the_install_folder_falls_back_where_windows_has_no_per_user_program_files(
        iss: InnoScript) -> None:
    assert iss.setup["DefaultDirName"] == "{code:DefaultInstallDir}"
    assert "ExpandConstant('{autopf}')" in iss.text
    assert "ExpandConstant('{localappdata}\\Programs')" in iss.text
