"""Windows code paths, simulated on Linux where they can be (issue 16, item 2).

- A user folder like ``C:\\Users\\Jürgen Müller\\AppData\\Local``: settings, models, logs and
  temporary files under a path with spaces and non-ASCII letters, and every text file the app
  writes or reads with an explicit encoding (Windows' default is the ANSI code page, e.g.
  cp1252 or cp936, not UTF-8: ``-X warn_default_encoding`` turns each omission into an error).
- The no-console build (PyInstaller ``console=False``): ``sys.stdout`` and ``sys.stderr`` are
  None; the self-test must still run, say everything in the log file and answer through its
  exit code.
- The CUDA allocator settings Windows lacks (expandable segments).
- torch.compile on Windows needs ``triton-windows``; without it the plan is CUDA graphs, then
  eager; a bundle never compiles.
- Long paths: what the installer and the model downloads write stays under 260 characters.
- PortAudio on Windows: one entry per device, with non-ASCII names, also without WASAPI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path, PureWindowsPath

import pytest
from voice_helpers import FakeSd

from app import APP_ID
from app.audio.backend import find_device
from app.audio.sounddevice_backend import SounddeviceBackend
from app.engine.moss_speech import decode_policy
from app.settings import Settings
from app.settings_store import load_settings, save_settings
from tests.packaging_helpers import ROOT

USER_FOLDER = ("Users", "Jürgen Müller 李", "AppData", "Local")
NON_ASCII_TEXT = "Grüß Gott – 你好 ✓"
# Windows' own names for the folders (platformdirs, README "Where files live").
WORST_USER_NAME = "n" * 20  # Windows user names have at most 20 characters
WINDOWS_LOCAL_APPDATA = PureWindowsPath("C:/Users", WORST_USER_NAME, "AppData", "Local")
MAX_PATH = 260


def windows_like_home(tmp_path: Path) -> Path:
    home = tmp_path.joinpath(*USER_FOLDER, APP_ID)
    (home / "Temp").mkdir(parents=True)
    return home


def run_app_code(code: str, home: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python as a Windows user would run it: the app's folders and TEMP in
    ``home``, offscreen Qt, and any text I/O of the app without an explicit encoding failing."""
    prelude = ("import sys, warnings\n"
               "warnings.filterwarnings('error', category=EncodingWarning, "
               "module=r'app(\\.|$)')\n")
    env = {**os.environ, "MOSS_VOICE_HOME": str(home), "TMPDIR": str(home / "Temp"),
           "QT_QPA_PLATFORM": "offscreen", "PYTHONUTF8": "0",
           # one compute thread: OpenMP's spinning threads crawl on a busy 2-core machine
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("MOSS_VOICE_SETTINGS", None)
    return subprocess.run([sys.executable, "-X", "warn_default_encoding", "-c", prelude + code],
                          cwd=ROOT, env=env, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=timeout, check=False)


def log_text(home: Path) -> str:
    return (home / "logs" / "moss-voice.log").read_text(encoding="utf-8")


# ---- no console, non-ASCII user folder --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_no_console_self_test_passes_in_a_non_ascii_user_folder(tmp_path: Path) -> None:
    """The whole self-test as the windowed build runs it: nothing to print to, tiny models
    written to and loaded from a TEMP under ``Jürgen Müller 李``, the report in the log."""
    home = windows_like_home(tmp_path)
    run = run_app_code("sys.stdout = sys.stderr = None  # console=False\n"
                       "from app.cli import main\n"
                       "sys.exit(main(['--self-test']))\n", home, timeout=840)
    log = log_text(home)
    assert run.returncode == 0, log[-6000:] + run.stderr[-3000:]
    assert run.stdout == ""
    assert "self-test passed" in log and " FAIL " not in log
    assert "EncodingWarning" not in log


def test_a_failing_step_exits_1_and_the_log_names_it(tmp_path: Path) -> None:
    home = windows_like_home(tmp_path)
    run = run_app_code(
        "sys.stdout = sys.stderr = None\n"
        "from app.selftest import Step, run_self_test\n"
        "def broken(ctx):\n"
        "    raise RuntimeError('Grüß Gott: this step broke')\n"
        "steps = [Step('fine', lambda ctx: 'ok'), Step('broken step', broken)]\n"
        "sys.exit(run_self_test(steps))\n", home)
    log = log_text(home)
    assert run.returncode == 1, log
    assert run.stdout == ""
    assert "ok   fine" in log and "FAIL broken step" in log
    assert "RuntimeError: Grüß Gott: this step broke" in log
    assert "self-test FAILED" in log and "broken step" in log.splitlines()[-1]


def test_settings_with_non_ascii_values_round_trip_in_a_non_ascii_folder(tmp_path: Path) -> None:
    home = windows_like_home(tmp_path)
    models = home / "data" / "models" / "MOSS Speech (Jürgen's copy)"
    run = run_app_code(
        "from pathlib import Path\n"
        "from app.settings import Settings\n"
        "from app.settings_store import load_settings, save_settings\n"
        "from app.logs import setup_logging\n"
        "import logging\n"
        "setup_logging()\n"
        f"models = Path({str(models)!r})\n"
        f"settings = (Settings().with_value('engine.system_prompt', {NON_ASCII_TEXT!r})\n"
        "            .with_value('engine.model_dir', models))\n"
        "path = save_settings(settings)\n"
        "loaded = load_settings()\n"
        "assert loaded.path == path and not loaded.issues, loaded.warning_text()\n"
        "assert loaded.settings == settings\n"
        f"logging.getLogger('app.test').warning('saved %s: %s', path, {NON_ASCII_TEXT!r})\n",
        home)
    assert run.returncode == 0, run.stderr[-3000:]
    settings_file = home / "config" / "settings.toml"
    assert NON_ASCII_TEXT in settings_file.read_bytes().decode("utf-8")
    assert str(models) in settings_file.read_bytes().decode("utf-8").replace("\\\\", "\\")
    assert f"saved {settings_file}: {NON_ASCII_TEXT}" in log_text(home)


def test_settings_in_process_keep_a_non_ascii_windows_path(tmp_path: Path) -> None:
    """The same path written as Windows writes it (backslashes) survives TOML."""
    windows_dir = str(PureWindowsPath("C:/Users/Jürgen Müller/AppData/Local/moss-voice/models"))
    settings = Settings().with_value("engine.system_prompt", NON_ASCII_TEXT)
    path = save_settings(settings.with_value("engine.model_dir", windows_dir),
                         tmp_path / "Jürgen" / "settings.toml")
    loaded = load_settings(path)
    assert not loaded.issues
    assert str(loaded.settings.engine.model_dir) == windows_dir
    assert loaded.settings.engine.system_prompt == NON_ASCII_TEXT


# ---- CUDA allocator, torch.compile ------------------------------------------------------------


def test_windows_keeps_the_default_cuda_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch has no expandable segments on Windows (it warns and ignores the setting)."""
    from app.engine.moss_speech import device

    monkeypatch.delenv(device.ALLOC_CONF_ENV, raising=False)
    device.configure_cuda_allocator(platform="win32")
    assert device.ALLOC_CONF_ENV not in os.environ
    device.configure_cuda_allocator(platform="linux")
    assert os.environ[device.ALLOC_CONF_ENV] == device.EXPANDABLE_SEGMENTS
    monkeypatch.setenv(device.ALLOC_CONF_ENV, "max_split_size_mb:256")
    device.configure_cuda_allocator(platform="win32")  # the user's own setting is kept
    assert os.environ[device.ALLOC_CONF_ENV] == "max_split_size_mb:256"


def windows_toolchain(tmp_path: Path, with_triton: bool, with_tcc: bool) -> str | None:
    """The probe as on a Windows source checkout: no cc on PATH, Python.h present, and
    triton-windows (which brings TinyCC) installed or not."""
    include = tmp_path / "Include"
    include.mkdir(exist_ok=True)
    (include / "Python.h").write_text("", encoding="utf-8")
    triton = tmp_path / "site-packages" / "triton"
    if with_tcc:
        tcc = triton / "runtime" / "tcc" / "tcc.exe"
        tcc.parent.mkdir(parents=True, exist_ok=True)
        tcc.write_text("", encoding="utf-8")
    spec = type("Spec", (), {"submodule_search_locations": [str(triton)]})()
    return decode_policy.compiler_toolchain_problem(
        "cuda", env={"PATH": str(tmp_path / "empty")},
        find_spec=lambda name: spec if with_triton else None, include_dir=include)


def test_windows_compiles_only_with_triton_windows_and_falls_back_to_graphs(
        tmp_path: Path) -> None:
    no_triton = windows_toolchain(tmp_path, with_triton=False, with_tcc=False)
    assert no_triton is not None and "triton-windows" in no_triton
    plan = decode_policy.plan_decode_paths("cuda", frozen=False, toolchain_problem=no_triton)
    assert [(p.path, p.skipped is None) for p in plan] == [
        ("compile", False), ("graph", True), ("eager", True)]
    assert windows_toolchain(tmp_path, with_triton=True, with_tcc=True) is None  # its TinyCC
    plan = decode_policy.plan_decode_paths("cuda", frozen=False, toolchain_problem=None)
    assert [p.path for p in plan if p.skipped is None] == ["compile", "graph", "eager"]
    bundled = decode_policy.plan_decode_paths("cuda", frozen=True, toolchain_problem=None)
    assert bundled[0].skipped == decode_policy.FROZEN_REASON  # the installed app never compiles


# ---- long paths -------------------------------------------------------------------------------


def test_model_downloads_stay_under_windows_path_limit(tmp_path: Path) -> None:
    """huggingface_hub writes ``<file>`` and, while downloading, ``.cache/huggingface/download/
    <hash>.<sha256>.incomplete`` under the model folder; in the worst user folder both must stay
    under 260 characters (long paths are off by default on Windows 10 and 11)."""
    from huggingface_hub._local_folder import get_local_download_paths

    from app.model_store import REPOS

    etag = "f" * 64  # an LFS file's etag is its SHA-256
    for spec in REPOS.values():
        local = tmp_path / spec.folder_name
        for name in ("model-00004-of-00004.safetensors", "flow/flow.pt", "hift/hift.pt",
                     "model.safetensors.index.json"):
            paths = get_local_download_paths(local, name)
            for path in (paths.file_path, paths.incomplete_path(etag), paths.metadata_path):
                relative = path.relative_to(tmp_path).as_posix()
                windows = WINDOWS_LOCAL_APPDATA / APP_ID / "models" / relative
                assert len(str(windows)) < MAX_PATH, str(windows)


def test_the_bundle_path_check_counts_the_install_folder(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "packaging"))
    from build import WINDOWS_INSTALL_PREFIX, longest_installed_path

    bundle = tmp_path / APP_ID
    deep = bundle / "_internal" / "torch" / "lib"
    deep.mkdir(parents=True)
    (deep / "torch_cuda.dll").write_bytes(b"")
    length, path = longest_installed_path(bundle)
    assert path == "_internal\\torch\\lib\\torch_cuda.dll"
    assert length == len(WINDOWS_INSTALL_PREFIX) + len(path)
    assert WINDOWS_INSTALL_PREFIX.startswith(f"C:\\Users\\{WORST_USER_NAME}\\AppData\\Local")


# ---- PortAudio on Windows ---------------------------------------------------------------------


def dev(name: str, api: int, inputs: int, outputs: int) -> dict:
    return {"name": name, "hostapi": api, "max_input_channels": inputs,
            "max_output_channels": outputs, "default_samplerate": 48000.0}


def test_windows_devices_with_non_ascii_names_and_without_wasapi_are_listed_once() -> None:
    """WASAPI can be missing (a disabled service, some remote sessions): then DirectSound's
    full names stand in for MME's truncated ones, once per device, and a name saved from the
    truncated MME list still finds its device."""
    apis = [{"name": "MME", "default_input_device": 0, "default_output_device": 1},
            {"name": "Windows DirectSound", "default_input_device": 2,
             "default_output_device": 3}]
    devices = [dev("Mikrofon (Realtek® Audio)", 0, 2, 0),
               dev("Lautsprecher (Realtek® Audio Ge", 0, 0, 2),  # MME: 31 characters
               dev("Mikrofon (Realtek® Audio)", 1, 2, 0),
               dev("Lautsprecher (Realtek® Audio Gerät)", 1, 0, 2)]
    listed = SounddeviceBackend(FakeSd(apis, devices, default=(0, 1))).list_devices()
    assert [(d.name, d.host_api, d.index) for d in listed] == [
        ("Mikrofon (Realtek® Audio)", "Windows DirectSound", 2),
        ("Lautsprecher (Realtek® Audio Gerät)", "Windows DirectSound", 3)]
    assert listed[0].is_default_input and listed[1].is_default_output
    assert find_device(listed, "Lautsprecher (Realtek® Audio Ge", "output").index == 3
    chinese = [dev("麦克风 (USB Audio Device)", 0, 1, 0), dev("扬声器 (USB Audio Device)", 0, 0, 2)]
    listed = SounddeviceBackend(FakeSd(apis[:1], chinese, default=(0, 1))).list_devices()
    assert find_device(listed, "麦克风 (USB Audio Device)", "input").index == 0
    assert find_device(listed, "扬声器 (USB Audio Device)", "output").index == 1
