"""A scriptable stand-in for registry-proxy, for peerd tests on loopback (standard library only).

It records every request (method, path, query, headers) and answers:
  /v2/<repo>/manifests/<ref>      from `manifests[(repo, ref)]` = (status, headers, body)
  /shoal/v1/metainfo/<digest>     the .torrent of a blob in `blobs` (or `metainfo_status[digest]`)
  /v2/<repo>/blobs/<digest>       the blob's bytes, honouring Range, at most `rate` bytes/s
A digest in `private` (digest -> the one Authorization value allowed) answers metainfo, blob GET
and HEAD with 401 and a Basic challenge to any other credential, as registry-proxy does for
private content.
Setting `hang = True` makes every request wait without an answer (a registry-proxy that accepts
connections but never responds) until `hang` is cleared or 60 s pass.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass

from bt_fake_peer import make_torrent


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]   # lower-case names
    range: str | None = None
    bytes_sent: int = 0


class FakeProxy:
    def __init__(self, host: str = "127.0.0.1"):
        self.manifests: dict[tuple[str, str], tuple[int, dict[str, str], bytes]] = {}
        self.blobs: dict[str, bytes] = {}
        self.metainfo_status: dict[str, tuple[int, bytes]] = {}
        self.private: dict[str, str] = {}
        self.rate: float | None = None
        self.hang = False
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                outer._handle(self, head=False)

            def do_HEAD(self):
                outer._handle(self, head=True)

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        h, p = self.server.server_address[:2]
        return f"http://{h}:{p}"

    def add_blob(self, data: bytes) -> str:
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[d] = data
        return d

    def requests(self, path_prefix: str = "") -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path.startswith(path_prefix)]

    def stop(self):
        self.hang = False
        self.server.shutdown()
        self.server.server_close()

    def diagnostics(self) -> str:
        with self.lock:
            return "fake registry-proxy saw:\n" + "\n".join(f"  {s.method} {s.path} {s.query} range={s.range}"
                                                          for s in self.seen[-30:])

    # -- request handling ------------------------------------------------------------------------

    def _send(self, h, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _handle(self, h, head: bool) -> None:
        u = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        seen = Seen("HEAD" if head else "GET", u.path, q, {k.lower(): v for k, v in h.headers.items()},
                    h.headers.get("Range"))
        with self.lock:
            self.seen.append(seen)
        end = time.monotonic() + 60
        while self.hang and time.monotonic() < end:
            time.sleep(0.05)
        parts = u.path.split("/")
        try:
            allowed = self.private.get(parts[-1]) if ("/blobs/" in u.path or "/metainfo/" in u.path) else None
            if allowed is not None and h.headers.get("Authorization") != allowed:
                return self._send(h, 401, {"Content-Type": "application/json",
                                           "WWW-Authenticate": 'Basic realm="fake"'},
                                  b'{"errors":[{"code":"UNAUTHORIZED","message":"private"}]}', head)
            if u.path.startswith("/shoal/v1/metainfo/"):
                d = u.path.rsplit("/", 1)[1]
                if d in self.metainfo_status:
                    status, body = self.metainfo_status[d]
                    return self._send(h, status, {"Content-Type": "application/json"}, body, head)
                if d not in self.blobs:
                    return self._send(h, 404, {"Content-Type": "application/json"},
                                      b'{"errors":[{"code":"BLOB_UNKNOWN","message":"no such blob"}]}', head)
                return self._send(h, 200, {"Content-Type": "application/x-bittorrent"},
                                  make_torrent(self.blobs[d]), head)
            if "/manifests/" in u.path:
                repo = u.path[len("/v2/"):u.path.index("/manifests/")]
                ref = parts[-1]
                status, headers, body = self.manifests.get(
                    (repo, ref), (404, {"Content-Type": "application/json"},
                                  b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}'))
                return self._send(h, status, headers, body, head)
            if "/blobs/" in u.path:
                d = parts[-1]
                data = self.blobs.get(d)
                if data is None:
                    return self._send(h, 404, {}, b"", head)
                start, stop = 0, len(data) - 1
                status = 200
                rng = h.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    start, stop = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
                    status = 206
                body = data[start:stop + 1]
                h.send_response(status)
                h.send_header("Content-Length", str(len(body)))
                h.send_header("Docker-Content-Digest", d)
                if status == 206:
                    h.send_header("Content-Range", f"bytes {start}-{stop}/{len(data)}")
                h.end_headers()
                if head:
                    return
                step = 64 << 10
                for i in range(0, len(body), step):
                    h.wfile.write(body[i:i + step])
                    seen.bytes_sent += len(body[i:i + step])
                    if self.rate:
                        time.sleep(step / self.rate)
                return
            self._send(h, 404, {}, json.dumps({"error": "fake: no route"}).encode(), head)
        except (BrokenPipeError, ConnectionResetError):
            pass
