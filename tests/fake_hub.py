"""A loopback fake of the Hugging Face Hub's HTTP API (the endpoints snapshot_download uses).

GET  /api/models/{repo}/revision/{rev}   repo info with the commit sha
GET  /api/models/{repo}/tree/{sha}[/...] recursive file listing
HEAD /{repo}/resolve/{sha}/{file}        metadata (ETag, X-Repo-Commit, Content-Length)
GET  /{repo}/resolve/{sha}/{file}        the bytes (with Range)

GET  /{any path in files}                 plain files (e.g. raw.githubusercontent.com's layout)

Serves on 127.0.0.1 only. ``drop_next_gets`` cuts file downloads mid-body to test retries.
"""

from __future__ import annotations

import hashlib
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from urllib.parse import unquote, urlparse

import numpy as np
from safetensors.numpy import save as save_safetensors

from app.engine.folders import expected_lm_shapes

SHA = "0123456789abcdef0123456789abcdef01234567"
TINY_LM_CONFIG = {
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_shared_layers": 1,
    "num_modality_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 8, "vocab_size": 32, "audio_vocab_size": 24, "rms_norm_eps": 1e-6,
    "rope_theta": 1e6,
}


def tiny_model_files() -> dict[str, bytes]:
    """A verifiable (tiny, random) MOSS-Speech model folder as {path: bytes}."""
    rng = np.random.default_rng(0)
    tensors = {name: rng.standard_normal(shape).astype(np.float32)
               for name, shape in expected_lm_shapes(TINY_LM_CONFIG).items()}
    return {"config.json": json.dumps(TINY_LM_CONFIG).encode(),
            "tokenizer.json": b'{"version": "1.0"}',
            "model.safetensors": save_safetensors(tensors)}


def _torch_style_archive() -> bytes:
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # fixed entry times: the same bytes each call
        entries = (("archive/data.pkl", b"\x80\x02}q\x00."), ("archive/data/0", bytes(4096)))
        for name, data in entries:
            archive.writestr(zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def tiny_codec_files() -> dict[str, bytes]:
    """A codec folder that passes app.engine.folders.verify_codec_folder."""
    archive = _torch_style_archive()
    return {
        "model.safetensors": save_safetensors({"w": np.zeros((8, 8), np.float32)}),
        "config.json": b"{}", "preprocessor_config.json": b"{}",
        "flow/config.yaml": b"chunk: 5\n", "flow/flow.pt": archive,
        "flow/flow-chunk-5.pt": archive, "flow/flow-chunk-25.pt": archive,
        "flow/hift.pt": archive, "flow/campplus.onnx": b"onnx" * 512,
    }


class FakeHub:
    """``with FakeHub({repo: files}) as hub:`` then pass ``endpoint=hub.url``."""

    def __init__(self, repos: dict[str, dict[str, bytes]],
                 files: dict[str, bytes] | None = None) -> None:
        self.repos = repos
        self.files = files or {}  # served as they are at their path (e.g. example voices)
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
                if path in hub.files:
                    self._plain(hub.files[path], head)
                elif path.startswith("/api/models/"):
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

            def _plain(self, data: bytes, head: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

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
