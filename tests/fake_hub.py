"""A loopback fake of the Hugging Face Hub's HTTP API (the endpoints huggingface_hub uses).

GET  /api/models/{repo}[/revision/{rev}][?blobs=true]  repo info: commit sha, siblings (with
                                                       size, blobId and LFS sha256 for blobs)
GET  /api/models/{repo}/tree/{rev}[/...]               recursive file listing (with lfs.oid)
HEAD /{repo}/resolve/{rev}/{file}                      metadata (ETag, X-Repo-Commit, size)
GET  /{repo}/resolve/{rev}/{file}                      the bytes (Range honoured: 206)
GET  /{any path in files}                              plain files

Each repository holds revisions (commit sha → files); ``main`` points at one of them. Files
named like weights are stored "in LFS" (their ETag and metadata carry the SHA-256), the rest by
git blob id, as on the real Hub. Every request's method, path and headers are recorded.

Serves on 127.0.0.1 only. ``drop_next_gets`` cuts file bodies mid-way (retries), ``hold`` keeps
named files' bodies waiting for ``gate``, ``corrupt_next`` serves one flipped byte, ``drop_next``
cuts a named file's body half-way. ``files`` are plain files served at their own path (e.g.
raw.githubusercontent.com's layout, for the example voices).
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import numpy as np
from safetensors.numpy import save as save_safetensors

from app.engine.folders import expected_lm_shapes
from app.model_store import REPOS

SHA = "0123456789abcdef0123456789abcdef01234567"  # the revision of repos this app does not pin
OTHER_SHA = "fedcba9876543210fedcba9876543210fedcba98"
LFS_SUFFIXES = (".safetensors", ".pt", ".onnx", ".bin")
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


def tiny_model_files(seed: int = 0) -> dict[str, bytes]:
    """A verifiable (tiny, random) MOSS-Speech model folder as {path: bytes}."""
    rng = np.random.default_rng(seed)
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


def is_lfs(name: str) -> bool:
    return name.endswith(LFS_SUFFIXES)


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def pinned_revision(repo: str) -> str:
    """The revision this app pins for ``repo`` (SHA for any other repository)."""
    return next((spec.revision for spec in REPOS.values() if spec.repo_id == repo), SHA)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]  # names lower-cased


class FakeHub:
    """``with FakeHub({repo: files}) as hub:`` then pass ``endpoint=hub.url`` (or set
    HF_ENDPOINT). Each repository's files are its pinned revision, which ``main`` points at."""

    def __init__(self, repos: dict[str, dict[str, bytes]],
                 files: dict[str, bytes] | None = None) -> None:
        self.files = files or {}  # served as they are at their path (e.g. example voices)
        self.revisions: dict[str, dict[str, dict[str, bytes]]] = {
            repo: {pinned_revision(repo): files} for repo, files in repos.items()}
        self.main = {repo: pinned_revision(repo) for repo in repos}
        self.drop_next_gets = 0
        self.fail_next_gets = 0  # answer file GETs with 503 (server trouble)
        self.broken_files: set[str] = set()  # always 503 for these file names
        self.corrupt_next: dict[str, int] = {}  # file name → how many GETs get one byte flipped
        self.drop_next: dict[str, int] = {}  # file name → how many GETs are cut half-way
        self.hold: set[str] | None = None  # None: every body waits for `gate`; else these only
        self.log: list[Request] = []
        self.get_started = threading.Event()
        self.gate = threading.Event()  # held bodies wait for it; clear it to hold downloads
        self.gate.set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    def add_revision(self, repo: str, sha: str, files: dict[str, bytes],
                     main: bool = False) -> None:
        self.revisions.setdefault(repo, {})[sha] = files
        if main or repo not in self.main:
            self.main[repo] = sha

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.log]

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def file_gets(self) -> list[str]:
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def fetched_names(self) -> list[str]:
        """The file names fetched (GET) so far, in order."""
        return [path.split("/resolve/", 1)[1].split("/", 1)[1] for path in self.file_gets()]

    def take_drop(self) -> bool:
        return self._take("drop_next_gets")

    def take_failure(self) -> bool:
        return self._take("fail_next_gets")

    def take_corruption(self, name: str) -> bool:
        return self._take_for(self.corrupt_next, name)

    def take_named_drop(self, name: str) -> bool:
        return self._take_for(self.drop_next, name)

    def _take_for(self, counters: dict[str, int], name: str) -> bool:
        with self._lock:
            if counters.get(name, 0) > 0:
                counters[name] -= 1
                return True
            return False

    def _take(self, counter: str) -> bool:
        with self._lock:
            if getattr(self, counter) > 0:
                setattr(self, counter, getattr(self, counter) - 1)
                return True
            return False

    def resolve(self, repo: str, rev: str) -> str | None:
        """The commit ``rev`` names (a branch or a sha), or None."""
        revisions = self.revisions.get(repo, {})
        sha = self.main.get(repo) if rev == "main" else rev
        return sha if sha in revisions else None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)


def _make_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def _serve(self, head: bool) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            hub.log.append(Request("HEAD" if head else "GET", path, url.query, headers))
            if path in hub.files:
                self._plain(hub.files[path], head)
            elif path.startswith("/api/models/"):
                self._api(path[len("/api/models/"):], parse_qs(url.query))
            elif "/resolve/" in path:
                self._resolve(path.lstrip("/"), head)
            else:
                self._json(404, {"error": "not found"})

        def _split(self, text: str, marker: str) -> tuple[str | None, str]:
            for repo in hub.revisions:
                if not marker:
                    if text == repo:
                        return repo, ""
                elif text.startswith(repo + marker):
                    return repo, text[len(repo + marker):]
            return None, ""

        def _commit_or_404(self, repo: str, rev: str) -> str | None:
            sha = hub.resolve(repo, rev)
            if sha is None:
                self._json(404, {"error": f"Invalid rev id: {rev}"},
                           {"X-Error-Code": "RevisionNotFound"})
            return sha

        def _api(self, rest: str, query: dict[str, list[str]]) -> None:
            repo, rev = self._split(rest, "/revision/")
            if repo is None:
                repo, rev = self._split(rest, "")
                rev = "main"
            if repo is not None:
                self._repo_info(repo, rev, query.get("blobs") == ["True"] or
                                query.get("blobs") == ["true"])
                return
            repo, tail = self._split(rest, "/tree/")
            if repo is None:
                self._json(404, {"error": "Repository not found"},
                           {"X-Error-Code": "RepoNotFound"})
                return
            sha = self._commit_or_404(repo, tail.split("/", 1)[0])
            if sha is not None:
                self._json(200, [_tree_entry(name, data) for name, data in
                                 sorted(hub.revisions[repo][sha].items())])

        def _repo_info(self, repo: str, rev: str, blobs: bool) -> None:
            sha = self._commit_or_404(repo, rev)
            if sha is None:
                return
            files = hub.revisions[repo][sha]
            siblings = [_sibling(name, data, blobs) for name, data in sorted(files.items())]
            self._json(200, {"id": repo, "sha": sha, "siblings": siblings})

        def _resolve(self, rest: str, head: bool) -> None:
            repo, tail = self._split(rest, "/resolve/")
            rev, _, name = tail.partition("/")
            sha = hub.resolve(repo or "", rev)
            data = hub.revisions[repo][sha].get(name) if repo and sha else None
            if data is None:
                self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                return
            if not head and (name in hub.broken_files or hub.take_failure()):
                self._json(503, {"error": "Service unavailable"})
                return
            if not head and hub.take_corruption(name):
                data = bytes([data[0] ^ 0x01]) + data[1:]
            self._send_file(name, data, sha, head)

        def _send_file(self, name: str, data: bytes, sha: str, head: bool) -> None:
            start = 0
            range_header = self.headers.get("Range", "")
            if range_header.startswith("bytes="):
                start = int(range_header[6:].split("-")[0] or 0)
            body = data[start:]
            self.send_response(206 if start else 200)
            etag = hashlib.sha256(data).hexdigest() if is_lfs(name) else git_blob_id(data)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Repo-Commit", sha)
            self.send_header("Content-Length", str(len(body)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if head:
                return
            if hub.take_drop() or hub.take_named_drop(name):
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if hub.hold is None or name in hub.hold:
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


def _lfs(data: bytes, key: str) -> dict[str, object]:
    return {key: hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}


def _tree_entry(name: str, data: bytes) -> dict[str, object]:
    entry: dict[str, object] = {"type": "file", "path": name, "size": len(data),
                                "oid": git_blob_id(data)}
    if is_lfs(name):
        entry["lfs"] = _lfs(data, "oid")
    return entry


def _sibling(name: str, data: bytes, blobs: bool) -> dict[str, object]:
    if not blobs:
        return {"rfilename": name}
    sibling: dict[str, object] = {"rfilename": name, "size": len(data),
                                  "blobId": git_blob_id(data)}
    if is_lfs(name):
        sibling["lfs"] = _lfs(data, "sha256")
    return sibling
