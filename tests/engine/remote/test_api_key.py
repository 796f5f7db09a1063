"""The API key lives in the keyring (or, without one, in memory for the session), per server,
and never in the settings file."""

from __future__ import annotations

from pathlib import Path

from keyring.backends import fail, null

from app.engine.remote.api_key import SERVICE, ApiKeyStore, server_id
from app.settings_store import load_settings, save_settings
from tests.engine.remote.remote_helpers import MemoryKeyring, remote_settings


def test_keys_are_stored_in_the_keyring_per_server() -> None:
    backend = MemoryKeyring()
    store = ApiKeyStore(backend, environ={})
    result = store.save("http://Lab-GPU:8000/", "key-a")
    assert result.place == "keyring" and "system keyring" in result.message
    assert backend.passwords == {(SERVICE, "http://lab-gpu:8000"): "key-a"}
    assert store.get("http://lab-gpu:8000/v1") == "key-a"
    assert store.get("http://lab-gpu:9000") is None  # another server never gets it
    assert store.get("https://lab-gpu:8000") is None
    assert server_id("https://host") == "https://host:443"
    store.forget("http://lab-gpu:8000")
    assert store.get("http://lab-gpu:8000") is None and backend.passwords == {}


def test_without_a_keyring_the_key_is_kept_for_the_session_and_the_person_is_told() -> None:
    store = ApiKeyStore(fail.Keyring(), environ={})
    assert store.get("http://host:8000") is None  # a failing keyring is not an error
    result = store.save("http://host:8000", "key-b")
    assert result.place == "session" and "kept in memory until the app closes" in (
        result.message)
    assert store.find("http://host:8000") == ("key-b", "session")
    assert ApiKeyStore(fail.Keyring(), environ={}).get("http://host:8000") == "key-b"
    store.forget("http://host:8000")
    assert store.get("http://host:8000") is None


def test_a_keyring_that_silently_stores_nothing_counts_as_none() -> None:
    result = ApiKeyStore(null.Keyring(), environ={}).save("http://host:8000", "key-c")
    assert result.place == "session"


def test_the_environment_is_the_last_resort() -> None:
    store = ApiKeyStore(MemoryKeyring(), environ={"MOSS_VOICE_API_KEY": "from-env"})
    assert store.find("http://host:8000") == ("from-env", "environment")
    store.save("http://host:8000", "stored")
    assert store.get("http://host:8000") == "stored"


def test_the_settings_file_never_holds_a_key(isolated_home: Path) -> None:
    store = ApiKeyStore(MemoryKeyring(), environ={})
    settings = remote_settings("http://host:8000")
    store.save(settings.engine.remote_url, "very-secret-key")
    path = save_settings(settings)
    text = Path(path).read_text(encoding="utf-8")
    assert "very-secret-key" not in text and "http://host:8000" in text
    assert load_settings().settings.engine.remote_url == "http://host:8000"
