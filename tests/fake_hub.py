"""A loopback fake of the Hugging Face Hub's HTTP API (the endpoints snapshot_download uses).

GET  /api/models/{repo}/revision/{rev}   repo info with the commit sha
GET  /api/models/{repo}/tree/{sha}[/...] recursive file listing
HEAD /{repo}/resolve/{sha}/{file}        metadata (ETag, X-Repo-Commit, Content-Length)
GET  /{repo}/resolve/{sha}/{file}        the bytes (with Range)

Serves on 127.0.0.1 only. ``drop_next_gets`` cuts file downloads mid-body to test retries.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
from safetensors.numpy import save as save_safetensors

from app.engine.folders import expected_lm_shapes

SHA = "0123456789abcdef0123456789abcdef01234567"
# The special ids sit inside the tiny vocabularies (config.json may carry its own ids), so the
# folder passes the same checks as the published one: config, tokenizer ids, every shape.
TINY_LM_CONFIG = {
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_shared_layers": 1,
    "num_modality_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 8, "vocab_size": 32, "audio_vocab_size": 24, "rms_norm_eps": 1e-6,
    "rope_theta": 1e6, "pad_token_id": 0, "im_start_token_id": 1, "im_end_token_id": 2,
    "sosp_token_id": 3, "modality_pad_token_id": 5, "eosp_token_id": 20, "audio_pad_token_id": 21,
}
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>")


def tiny_tokenizer_bytes() -> bytes:
    """A word-level tokenizer.json whose special tokens carry TINY_LM_CONFIG's ids."""
    added = [{"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, token in enumerate(TINY_SPECIAL_TOKENS)]
    vocab = {token: i for i, token in enumerate(TINY_SPECIAL_TOKENS)} | {"<unk>": 4}
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }).encode()


def tiny_model_files() -> dict[str, bytes]:
    """A verifiable (tiny, random) MOSS-Speech model folder as {path: bytes}."""
    rng = np.random.default_rng(0)
    tensors = {name: rng.standard_normal(shape).astype(np.float32)
               for name, shape in expected_lm_shapes(TINY_LM_CONFIG).items()}
    return {"config.json": json.dumps(TINY_LM_CONFIG).encode(),
            "tokenizer.json": tiny_tokenizer_bytes(),
            "model.safetensors": save_safetensors(tensors)}


@functools.lru_cache(maxsize=1)
def _tiny_codec_bytes() -> tuple[tuple[str, bytes], ...]:
    from app.engine.moss_speech.codec.testing import write_tiny_codec

    with tempfile.TemporaryDirectory() as scratch:
        folder = write_tiny_codec(Path(scratch) / "codec", seed=0)
        return tuple((p.relative_to(folder).as_posix(), p.read_bytes())
                     for p in sorted(folder.rglob("*")) if p.is_file())


def tiny_codec_files() -> dict[str, bytes]:
    """A codec folder that passes app.engine.folders.verify_codec_folder: the tiny random codec
    in the published layout (written once per test process, so every call has the same bytes)."""
    return dict(_tiny_codec_bytes())


class FakeHub:
    """``with FakeHub({repo: files}) as hub:`` then pass ``endpoint=hub.url``."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos
        self.drop_next_gets = 0
        self.fail_next_gets = 0  # answer file GETs with 503 (server trouble)
        self.broken_files: set[str] = set()  # always 503 for these file names
        self.requests: list[tuple[str, str]] = []
        self.get_started = threading.Event()
        self.gate = threading.Event()  # file bodies wait for it; clear it to hold downloads
        self.gate.set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def file_gets(self) -> list[str]:
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def take_drop(self) -> bool:
        return self._take("drop_next_gets")

    def take_failure(self) -> bool:
        return self._take("fail_next_gets")

    def _take(self, counter: str) -> bool:
        with self._lock:
            if getattr(self, counter) > 0:
                setattr(self, counter, getattr(self, counter) - 1)
                return True
            return False

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                self._serve(head=False)

            def do_HEAD(self) -> None:
                self._serve(head=True)

            def _serve(self, head: bool) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append(("HEAD" if head else "GET", path))
                if path.startswith("/api/models/"):
                    self._api(path[len("/api/models/"):])
                elif "/resolve/" in path:
                    self._resolve(path.lstrip("/"), head)
                else:
                    self._json(404, {"error": "not found"})

            def _repo_and_rest(self, text: str, marker: str) -> tuple[str | None, str]:
                for repo in hub.repos:
                    if text.startswith(repo + marker):
                        return repo, text[len(repo + marker):]
                return None, ""

            def _api(self, rest: str) -> None:
                repo, _tail = self._repo_and_rest(rest, "/revision/")
                if repo is not None:
                    siblings = [{"rfilename": name} for name in hub.repos[repo]]
                    self._json(200, {"id": repo, "sha": SHA, "siblings": siblings})
                    return
                repo, _tail = self._repo_and_rest(rest, "/tree/")
                if repo is None:
                    self._json(404, {"error": "Repository not found"},
                               {"X-Error-Code": "RepoNotFound"})
                    return
                listing = [{"type": "file", "path": name, "size": len(data),
                            "oid": hashlib.sha1(data).hexdigest()}
                           for name, data in sorted(hub.repos[repo].items())]
                self._json(200, listing)

            def _resolve(self, rest: str, head: bool) -> None:
                repo, tail = self._repo_and_rest(rest, "/resolve/")
                name = tail.split("/", 1)[1] if "/" in tail else ""
                data = hub.repos.get(repo or "", {}).get(name)
                if data is None:
                    self._json(404, {"error": "Entry not found"},
                               {"X-Error-Code": "EntryNotFound"})
                    return
                if not head and (name in hub.broken_files or hub.take_failure()):
                    self._json(503, {"error": "Service unavailable"})
                    return
                start = 0
                range_header = self.headers.get("Range", "")
                if range_header.startswith("bytes="):
                    start = int(range_header[6:].split("-")[0] or 0)
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", SHA)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                if hub.take_drop():
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                hub.get_started.set()
                hub.gate.wait(30)
                self.wfile.write(body)

            def _json(self, status: int, payload: object,
                      headers: dict[str, str] | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        return Handler
