"""A local Hugging Face Hub endpoint, so tests drive the real `huggingface_hub` client without the internet.

Point the client at it with `HF_ENDPOINT=endpoint.url` (and patch `huggingface_hub.constants`, which reads the
variable once at import). It serves `HubRepo`s — local files at one fixed commit — streaming from disk, so sparse
multi-gigabyte shards cost nothing, and it records every request so tests can assert what went over the wire.

Why not olah (the self-hosted HF mirror on PyPI): its offline "local mirror" mode serves git repositories through
GitPython on a fastapi/uvicorn/pydantic/peewee stack, and we want plain files at a pinned commit with stdlib only.

Routes (exactly those huggingface_hub 2.4.0 calls for snapshot_download, hf_hub_download, model_info and
get_safetensors_metadata):

* `GET /api/models/{repo_id}[/revision/{revision}]` — model info: `sha`, `gated`, `siblings`; with `?blobs=true`
  (`files_metadata=True`) each sibling also has `size`, `blobId` and, for LFS-like files, `lfs`. Used by
  `model_info` / `repo_info`, and by `snapshot_download` when the revision is not a commit hash.
* `GET /api/models/{repo_id}/tree/{revision}[/{path}]?recursive=..` — the file listing `snapshot_download` filters
  with allow/ignore patterns (one page, no `Link` header, no `xetHash`).
* `HEAD` and `GET /{repo_id}/resolve/{revision}/{filename}` — `X-Repo-Commit`, `ETag`, `Content-Length`,
  `Accept-Ranges`, plus `X-Linked-Etag` / `X-Linked-Size` for LFS-like files (the client names the cache blob after
  the linked etag). `GET` honours a single `Range` (206 + `Content-Range`, 416 when unsatisfiable): the client
  resumes a dropped body with `Range: bytes=N-`, and `get_safetensors_metadata` reads headers with
  `Range: bytes=0-100000`. The file is served directly (no CDN redirect).

Errors carry `X-Error-Code` / `X-Error-Message`, which `hf_raise_for_status` maps to exceptions: 404 `RepoNotFound`,
404 `RevisionNotFound`, 404 `EntryNotFound` (with `X-Repo-Commit`, as the Hub sends it), and for a gated repo's
files 401 `GatedRepo` without a bearer token or 403 `GatedRepo` with a wrong one. As on the Hub, a gated repo's
info and tree stay public. No response carries any Xet header or field, so the client never takes the Xet path,
even with `hf_xet` installed. Anything else (e.g. the client's best-effort `GET /api/agent-harnesses`, sent once
per process) gets a bare 404, which the client ignores.

Client behaviour worth knowing: etags are the content's ids (git blob id, or the LFS sha256) up to 64 MiB, and
made up but stable above (hash of name, local path, size and mtime) for the sparse stand-ins, sha256-shaped
for LFS-like files and sha1-shaped otherwise. huggingface_hub 2.4.0 never resumes across calls (each download
writes a fresh `<etag>.<uuid>.incomplete` and deletes it on failure); it resumes only *inside* one `http_get`,
after a 1 s sleep, and only from the last whole `DOWNLOAD_CHUNK_SIZE` (10 MiB) chunk it wrote — bytes of a partial
chunk are fetched again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
# Files the Hub would store in LFS: weights by extension (the default .gitattributes), anything else from 10 MiB.
LFS_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"})
LFS_MIN_SIZE = 10 * 1024 * 1024
LFS_POINTER_SIZE = 134
CHUNK = 1024 * 1024
SLOW_CHUNK = 64 * 1024  # under a rate limit: small enough that the pace is even

_REPO = r"(?P<repo>[^/]+(?:/[^/]+)?)"
_API_RE = re.compile(rf"/api/models/{_REPO}(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+)(?:/(?P<sub>.+))?)?")
_RESOLVE_RE = re.compile(rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)")


@dataclass
class HubRepo:
    """One model repo at one fixed commit: repo filename -> local file served for it."""

    files: dict[str, Path]
    commit: str
    gated: bool = False
    revisions: set[str] = field(default_factory=lambda: {"main"})  # names resolving to `commit` (commit included)

    def __post_init__(self) -> None:
        if not COMMIT_RE.fullmatch(self.commit):
            raise ValueError(f"commit must be 40 lowercase hex digits, got {self.commit!r}")
        self.revisions = set(self.revisions) | {self.commit}
        for name, path in self.files.items():
            if not name or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"bad repo filename {name!r}")
            if not path.is_file():
                raise FileNotFoundError(f"{name}: {path} is not a file")


@dataclass
class Served:
    """One request as the endpoint saw it; `body_bytes` grows as the body is written (before each write)."""

    method: str
    path: str  # URL path, percent-decoded, without the query
    query: str
    range: str | None
    status: int
    repo_id: str | None = None
    filename: str | None = None  # set for /resolve/ requests
    body_bytes: int = 0


@dataclass(frozen=True)
class _Blob:
    size: int
    oid: str  # git blob id (40 hex)
    sha256: str  # LFS oid (64 hex), also the etag of LFS-like files
    lfs: bool

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


HASHED_MAX_SIZE = 64 * 1024 * 1024  # larger files are sparse stand-ins (metadata only): their ids are made up


@functools.lru_cache(maxsize=4096)
def _content_ids(path: str, size: int, mtime_ns: int) -> tuple[str, str]:
    """(git blob id, sha256) of a file's bytes, as the Hub publishes them; cached by size and mtime."""
    git, sha = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            git.update(chunk)
            sha.update(chunk)
    return git.hexdigest(), sha.hexdigest()


def _blob(name: str, path: Path) -> _Blob:
    """The Hub's ids of a file: real content hashes (what staging checks), except for the huge sparse
    stand-ins of the example checkpoints, whose stable made-up ids no test downloads."""
    st = path.stat()
    lfs = path.suffix in LFS_SUFFIXES or st.st_size >= LFS_MIN_SIZE
    if st.st_size <= HASHED_MAX_SIZE:
        oid, sha256 = _content_ids(str(path.resolve()), st.st_size, st.st_mtime_ns)
        return _Blob(st.st_size, oid, sha256, lfs)
    seed = f"{name}\0{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return _Blob(st.st_size, hashlib.sha1(seed).hexdigest(), hashlib.sha256(seed).hexdigest(), lfs)


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `bytes=` range; None if unsatisfiable; ValueError if it is to be ignored."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        raise ValueError(header)
    first, _, last = spec.strip().partition("-")
    if not first:
        suffix = int(last)
        return (max(size - suffix, 0), size - 1) if suffix > 0 and size > 0 else None
    start = int(first)
    if last and int(last) < start:
        raise ValueError(header)
    return (start, min(int(last), size - 1) if last else size - 1) if start < size else None


class HubEndpoint:
    """A Hub-protocol HTTP server in a background thread, on 127.0.0.1 or `host` (an address the SSH
    lab's hosts reach); `url` is set by `start()`."""

    token: str = "hf_test_token"  # the bearer token gated repos accept

    def __init__(self, repos: dict[str, HubRepo], *, token: str | None = None, host: str = "127.0.0.1") -> None:
        self.repos = repos
        self.host = host
        if token is not None:
            self.token = token
        self.url = ""
        # When set, the next file GET whose body is longer than this is cut after that many body bytes (the
        # connection is closed, as when a network drops mid-shard); it then resets itself to None.
        self.cut_after_bytes: int | None = None
        self.cut_always = (
            False  # with cut_after_bytes: cut every such body, not only the next one (a link that keeps dropping)
        )
        self.rate_bytes_per_s: float | None = None  # when set, file bodies are sent no faster (a slow uplink)
        self.log: list[Served] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> HubEndpoint:
        """Bind a free port and serve until `stop()`."""
        if self._server is not None:
            raise RuntimeError("already started")
        server = _Server((self.host, 0), _Handler)
        server.endpoint = self
        self._server = server
        self.url = f"http://{self.host}:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-endpoint", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> HubEndpoint:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what tests look at --------------------------------------------------------------------------------------

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request so far, in arrival order."""
        with self._lock:
            return [(s.method, s.path) for s in self.log]

    @property
    def bytes_sent(self) -> Counter[str]:
        """Response body bytes per path (API JSON included)."""
        out: Counter[str] = Counter()
        with self._lock:
            for s in self.log:
                out[s.path] += s.body_bytes
        return out

    def file_gets(self, filename: str | None = None) -> list[Served]:
        """GET /resolve/ requests that sent a file body, optionally for one repo filename."""
        with self._lock:
            return [
                s
                for s in self.log
                if s.method == "GET"
                and s.filename is not None
                and s.status in (200, 206)
                and (filename is None or s.filename == filename)
            ]

    def clear(self) -> None:
        """Forget the request log."""
        with self._lock:
            self.log.clear()

    # -- used by the handler ---------------------------------------------------------------------------------------

    def _record(self, served: Served) -> None:
        with self._lock:
            self.log.append(served)

    def _count(self, served: Served, n: int) -> None:
        with self._lock:
            served.body_bytes += n

    def _take_cut(self, body_length: int) -> int | None:
        with self._lock:
            cut = self.cut_after_bytes
            if cut is None or body_length <= cut:
                return None
            if not self.cut_always:
                self.cut_after_bytes = None
            return cut


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    endpoint: HubEndpoint


class _Handler(BaseHTTPRequestHandler):
    """Routes one request; HTTP/1.1 keep-alive, since the client pools connections."""

    protocol_version = "HTTP/1.1"
    server_version = "hub-endpoint/1"
    timeout = 30  # idle keep-alive connections must not pin handler threads forever

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr line."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    @property
    def hub(self) -> HubEndpoint:
        assert isinstance(self.server, _Server)
        return self.server.endpoint

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        served = Served(method, unquote(split.path), split.query, self.headers.get("Range"), 0)
        if match := _RESOLVE_RE.fullmatch(split.path):
            served.filename = unquote(match["file"])
            self._resolve(served, unquote(match["repo"]), unquote(match["rev"]))
        elif match := _API_RE.fullmatch(split.path):
            self._api(
                served,
                unquote(match["repo"]),
                match["kind"],
                unquote(match["rev"] or "main"),
                unquote(match["sub"] or ""),
                parse_qs(split.query),
            )
        else:
            self._error(served, 404, None, f"no route for {split.path}")

    # -- routes ----------------------------------------------------------------------------------------------------

    def _repo(self, served: Served, repo_id: str, revision: str) -> HubRepo | None:
        """The repo if it exists and `revision` names its commit; otherwise answers the error and returns None."""
        served.repo_id = repo_id
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(served, 404, "RepoNotFound", "Repository not found")
        elif revision not in repo.revisions:
            self._error(served, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        else:
            return repo
        return None

    def _api(
        self, served: Served, repo_id: str, kind: str | None, revision: str, sub: str, query: dict[str, list[str]]
    ) -> None:
        repo = self._repo(served, repo_id, revision)
        if repo is None:
            return
        if kind == "tree":
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            entries = _tree(repo, sub.strip("/"), recursive)
            if entries is None:
                self._error(served, 404, "EntryNotFound", f"{sub} does not exist on {revision}", repo.commit)
            else:
                self._json(served, entries)
        elif sub:
            self._error(served, 404, None, f"no route for {served.path}")
        else:
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            self._json(served, _model_info(repo_id, repo, blobs))

    def _resolve(self, served: Served, repo_id: str, revision: str) -> None:
        repo = self._repo(served, repo_id, revision)
        if repo is None:
            return
        if repo.gated:
            auth = self.headers.get("Authorization")
            if auth is None:
                self._error(
                    served,
                    401,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted. You must have "
                    "access to it and be authenticated to access it. Please log in.",
                )
                return
            if auth != f"Bearer {self.hub.token}":
                self._error(
                    served,
                    403,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted and you are not in the authorized list.",
                )
                return
        assert served.filename is not None
        path = repo.files.get(served.filename)
        if path is None:
            self._error(served, 404, "EntryNotFound", f"{served.filename} does not exist on {revision}", repo.commit)
            return
        self._file(served, repo, path)

    def _file(self, served: Served, repo: HubRepo, path: Path) -> None:
        blob = _blob(served.filename or "", path)
        start, end, status = 0, blob.size - 1, 200
        if served.range is not None:
            try:
                wanted = _parse_range(served.range, blob.size)
            except ValueError:
                wanted = (start, end)  # not a single byte range: ignore it, as RFC 9110 allows
            else:
                status = 206
            if wanted is None:
                served.status = 416
                self.hub._record(served)
                self._head(416, {"Content-Range": f"bytes */{blob.size}", "Content-Length": "0"})
                return
            start, end = wanted
        length = max(end - start + 1, 0)
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(length),
            "Accept-Ranges": "bytes",
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{blob.oid}"',
        }
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
        served.status = status
        self.hub._record(served)
        self._head(status, headers)
        if served.method != "GET":
            return
        cut = self.hub._take_cut(length)
        remaining = length if cut is None else cut
        try:
            with path.open("rb") as handle:
                handle.seek(start)
                rate = self.hub.rate_bytes_per_s
                while remaining > 0:
                    chunk = handle.read(min(CHUNK if rate is None else SLOW_CHUNK, remaining))
                    if not chunk:
                        break
                    self.hub._count(served, len(chunk))  # count first: the client may finish before we return
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
                    if rate is not None:
                        time.sleep(len(chunk) / rate)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        if cut is not None:
            self.close_connection = True  # the body stops short of Content-Length: the client sees a dropped link

    # -- responses -------------------------------------------------------------------------------------------------

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _body(self, served: Served, status: int, headers: dict[str, str], body: bytes) -> None:
        served.status = status
        self.hub._record(served)
        self._head(status, headers | {"Content-Length": str(len(body))})
        if served.method == "GET":
            self.hub._count(served, len(body))
            self.wfile.write(body)

    def _json(self, served: Served, payload: Any) -> None:
        self._body(served, 200, {"Content-Type": "application/json"}, json.dumps(payload).encode())

    def _error(self, served: Served, status: int, code: str | None, message: str, commit: str | None = None) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code is not None:
            headers["X-Error-Code"] = code
        if commit is not None:
            headers["X-Repo-Commit"] = commit  # lets the client cache the file's absence at that commit
        self._body(served, status, headers, json.dumps({"error": message}).encode())


def _model_info(repo_id: str, repo: HubRepo, blobs: bool) -> dict[str, Any]:
    """What GET /api/models/{repo_id}/revision/{rev} returns (the fields ModelInfo reads)."""
    siblings: list[dict[str, Any]] = []
    newest = 0.0
    for name, path in sorted(repo.files.items()):
        newest = max(newest, path.stat().st_mtime)
        sibling: dict[str, Any] = {"rfilename": name}
        if blobs:
            blob = _blob(name, path)
            sibling |= {"size": blob.size, "blobId": blob.oid}
            if blob.lfs:
                sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": LFS_POINTER_SIZE}
        siblings.append(sibling)
    modified = datetime.fromtimestamp(newest, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return {
        "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
        "id": repo_id,
        "modelId": repo_id,
        "author": repo_id.split("/")[0] if "/" in repo_id else None,
        "sha": repo.commit,
        "lastModified": modified,
        "createdAt": modified,
        "private": False,
        "gated": "manual" if repo.gated else False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
    }


def _tree(repo: HubRepo, sub: str, recursive: bool) -> list[dict[str, Any]] | None:
    """What GET /api/models/{repo_id}/tree/{rev}/{sub} returns; None if `sub` is not a folder of the repo."""
    prefix = f"{sub}/" if sub else ""
    folders: set[str] = set()
    files: list[dict[str, Any]] = []
    for name, path in sorted(repo.files.items()):
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
            folders.add(prefix + "/".join(parts[:depth]))
        if recursive or len(parts) == 1:
            blob = _blob(name, path)
            entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": name}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": LFS_POINTER_SIZE}
            files.append(entry)
    if sub and not files and not folders:
        return None
    dirs = [
        {"type": "directory", "oid": hashlib.sha1(f"{repo.commit}/{d}".encode()).hexdigest(), "size": 0, "path": d}
        for d in sorted(folders)
    ]
    return dirs + files
