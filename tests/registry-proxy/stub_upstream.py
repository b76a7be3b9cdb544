"""A tiny scriptable upstream registry for the failure cases the real registry never produces.

docker-registry always answers well: it never sends 429, never stalls, never closes a body early
and never sends bytes that do not match their digest. `StubUpstream` does each of those on
request, per object, and records every request it saw (method, path, query, headers) so a test
can check what registry-proxy sent upstream (a resume's `Range: bytes=N-`, that `ns=` never
reaches it).

Blob behaviours (`BlobScript`), applied to GET (HEAD answers the headers only):
  - `hold_at=N`: send the headers and the first N bytes, then wait until `release()` before
    sending the rest. Makes "the upstream has not finished yet" deterministic.
  - `rate=B`: send at about B bytes/s in 64 KiB writes.
  - `close_after=N`: the first GET without a Range sends N bytes of a full-length body and then
    closes the connection; later GETs are served normally, with Range support (206).
  - `ignore_range=True`: answer a GET with a Range as if it had none (200, the whole body), as
    a server without range support does.
  - `wrong=True`: send bytes of the right length that do not hash to the digest.
  - `hang_after=N`: send N bytes, then stall (no bytes) until `release()`.
  - `hang_headers=True`: read the request and answer nothing until `release()`.
  - `status=S` (+ `headers`): answer S with a JSON error body (429 with Retry-After, 404, 500).
  - `redirect_to=URL`: answer GET and HEAD with 307 and `Location: URL` (blob storage, a CDN).
  - `repos={...}`: the blob exists only in these repositories; elsewhere 404 after `deny_delay` s.
  - `auth=VALUE`: only requests whose Authorization is VALUE get the blob; others 401 (with
    `StubUpstream.challenge` as WWW-Authenticate) after `deny_delay` s.
`StubUpstream.delay`: seconds every request waits before it is answered (a slow upstream, for
missing objects too).
Manifests are served from `manifests[(repo, ref)] = ManifestScript(...)` the same way, and
`hold=True` answers a manifest normally once `release()` is called.

Lifecycle: `StubUpstream().start()`, `stop()`; serves on 127.0.0.1 from daemon threads. The
request log and scripts are guarded by a lock; `release()` wakes every held response.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from shoal_fixtures.httpstub import StubServer

_BLOB = re.compile(r"^/v2/(?P<name>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
_MANIFEST = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>[^/]+)$")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class BlobScript:
    data: bytes
    hold_at: int | None = None
    rate: float | None = None
    close_after: int | None = None
    wrong: bool = False
    ignore_range: bool = False
    hang_after: int | None = None
    hang_headers: bool = False
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    redirect_to: str | None = None
    repos: set[str] | None = None
    auth: str | None = None
    deny_delay: float = 0.0
    # How many GETs have started and finished sending their body (for the test's assertions).
    gets_started: int = 0
    gets_finished: int = 0
    finished_at: float | None = None


@dataclass
class ManifestScript:
    data: bytes
    media_type: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang_headers: bool = False
    hold: bool = False  # answer normally, but only after release()


@dataclass(frozen=True)
class StubRequest:
    time: float
    method: str
    path: str
    query: str
    headers: dict[str, str]


class StubUpstream:
    """See the module comment."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.blobs: dict[str, BlobScript] = {}
        self.manifests: dict[tuple[str, str], ManifestScript] = {}
        self._lock = threading.Lock()
        self._log: list[StubRequest] = []
        self._release = threading.Event()
        self.delay = 0.0
        self.challenge = 'Basic realm="stub"'
        self._server = StubServer(self._handle, methods=("GET", "HEAD"), host=host, name="stub-upstream")

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "StubUpstream":
        self._server.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.stop()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def diagnostics(self) -> str:
        lines = [f"{r.method} {r.path}?{r.query} range={r.headers.get('range', '')}"
                 for r in self.requests()[-30:]]
        return "stub upstream requests:\n" + ("\n".join(lines) or "(none)")

    # -- scripting -------------------------------------------------------------------------------

    def add_blob(self, data: bytes, **behaviour: object) -> str:
        """Scripts a blob; returns its digest (of `data`, whatever bytes `wrong` sends)."""
        d = digest_of(data)
        with self._lock:
            self.blobs[d] = BlobScript(data, **behaviour)  # type: ignore[arg-type]
        return d

    def add_manifest(self, repo: str, ref: str, data: bytes, media_type: str,
                     **behaviour: object) -> str:
        with self._lock:
            self.manifests[(repo, ref)] = ManifestScript(data, media_type, **behaviour)  # type: ignore[arg-type]
        return digest_of(data)

    def release(self) -> None:
        """Lets every held or hanging response continue (and all later ones pass)."""
        self._release.set()

    def rearm(self) -> None:
        """Makes later holds and hangs wait again."""
        self._release.clear()

    def requests(self, path_contains: str = "", method: str | None = None) -> list[StubRequest]:
        with self._lock:
            return [r for r in self._log if path_contains in r.path and
                    (method is None or r.method == method)]

    def script(self, digest: str) -> BlobScript:
        with self._lock:
            return self.blobs[digest]

    # -- HTTP ------------------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        path, _, query = req.path.partition("?")
        with self._lock:
            self._log.append(StubRequest(time.monotonic(), method, path, query,
                                         {k.lower(): v for k, v in req.headers.items()}))
        if self.delay:
            time.sleep(self.delay)
        if path in ("/v2", "/v2/"):
            return self._json(req, 200, {})
        m = _BLOB.match(path)
        if m:
            with self._lock:
                script = self.blobs.get(m["digest"])
            if script is None:
                return self._error(req, 404, "BLOB_UNKNOWN", "blob unknown to stub")
            if script.repos is not None and m["name"] not in script.repos:
                time.sleep(script.deny_delay)
                return self._error(req, 404, "BLOB_UNKNOWN", "blob unknown to this repository")
            if script.auth is not None and req.headers.get("Authorization") != script.auth:
                time.sleep(script.deny_delay)
                return self._error(req, 401, "UNAUTHORIZED", "authentication required",
                                   {"WWW-Authenticate": self.challenge})
            return self._blob(req, method, m["digest"], script)
        m = _MANIFEST.match(path)
        if m:
            with self._lock:
                ms = self.manifests.get((m["name"], m["ref"]))
            if ms is None:
                return self._error(req, 404, "MANIFEST_UNKNOWN", "manifest unknown to stub")
            if ms.hang_headers:
                self._release.wait(60)
                return self._drop(req)
            if ms.hold:
                self._release.wait(60)
            if ms.status is not None:
                return self._error(req, ms.status, "TOOMANYREQUESTS" if ms.status == 429
                                   else "UNKNOWN", "scripted", ms.headers)
            req.send_response(200)
            req.send_header("Content-Type", ms.media_type)
            req.send_header("Content-Length", str(len(ms.data)))
            # `headers` may override the digest header (an upstream that lies about it).
            extra = {"Docker-Content-Digest": digest_of(ms.data), **ms.headers}
            for k, v in extra.items():
                req.send_header(k, v)
            req.end_headers()
            if method == "GET":
                try:
                    req.wfile.write(ms.data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client refused the body (too large)
            return
        return self._error(req, 404, "UNSUPPORTED", "no such path on the stub")

    def _blob(self, req: BaseHTTPRequestHandler, method: str, digest: str,
              s: BlobScript) -> None:
        if s.hang_headers:
            self._release.wait(60)
            return self._drop(req)
        if s.status is not None:
            return self._error(req, s.status, "TOOMANYREQUESTS" if s.status == 429 else
                               ("BLOB_UNKNOWN" if s.status == 404 else "UNKNOWN"), "scripted",
                               s.headers)
        if s.redirect_to is not None:
            req.send_response(307)
            req.send_header("Location", s.redirect_to)
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        body = s.data
        if s.wrong:
            body = bytes(b ^ 0x5A for b in body[:1]) + body[1:]
        start, end = 0, len(body)
        status = 200
        rng = None if s.ignore_range else req.headers.get("Range")
        if rng:
            mr = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if mr:
                start = int(mr[1])
                end = min(len(body), int(mr[2]) + 1) if mr[2] else len(body)
                status = 206
        req.send_response(status)
        req.send_header("Content-Type", "application/octet-stream")
        req.send_header("Content-Length", str(end - start))
        req.send_header("Docker-Content-Digest", digest)
        req.send_header("ETag", f'"{digest}"')
        req.send_header("Accept-Ranges", "bytes")
        if status == 206:
            req.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
        req.end_headers()
        if method == "HEAD":
            return
        with self._lock:
            first_plain_get = s.gets_started == 0 and not rng
            s.gets_started += 1
        out = body[start:end]
        try:
            if s.close_after is not None and first_plain_get:
                req.wfile.write(out[:s.close_after])
                req.wfile.flush()
                return self._drop(req)
            if s.hang_after is not None:
                req.wfile.write(out[:s.hang_after])
                req.wfile.flush()
                self._release.wait(60)
                return self._drop(req)
            if s.hold_at is not None and start < s.hold_at:
                req.wfile.write(out[:s.hold_at - start])
                req.wfile.flush()
                self._release.wait(60)
                out = out[s.hold_at - start:]
            step = 64 * 1024
            for i in range(0, len(out), step):
                req.wfile.write(out[i:i + step])
                if s.rate:
                    req.wfile.flush()
                    time.sleep(step / s.rate)
            req.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        with self._lock:
            s.gets_finished += 1
            s.finished_at = time.monotonic()

    @staticmethod
    def _drop(req: BaseHTTPRequestHandler) -> None:
        req.close_connection = True
        try:
            req.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _error(self, req: BaseHTTPRequestHandler, status: int, code: str, message: str,
               headers: dict[str, str] | None = None) -> None:
        self._json(req, status, {"errors": [{"code": code, "message": message}]}, headers)

    @staticmethod
    def _json(req: BaseHTTPRequestHandler, status: int, obj: dict,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)


class Blackhole:
    """A TCP port whose connects hang (the listen backlog is full, so SYNs are dropped): an
    upstream that is down in the worst way, for connect-timeout tests."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        self._listener.listen(0)
        self._fillers: list[socket.socket] = []
        # With backlog 0 the accept queue holds one connection; fill it (and a spare) so later
        # SYNs go unanswered.
        for _ in range(2):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect((host, self.port))
            except BlockingIOError:
                pass
            self._fillers.append(s)
        time.sleep(0.05)

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    def hangs(self, timeout: float = 0.5) -> bool:
        """True if a fresh connect does not complete within `timeout` s."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((self.host, self.port))
            return False
        except (socket.timeout, TimeoutError):
            return True
        finally:
            s.close()

    def stop(self) -> None:
        for s in self._fillers:
            s.close()
        self._listener.close()
