"""A real S3 endpoint for dataset tests: s3rver (npm), with an access log the tests count.

`tools/install-deps` installs s3rver 3.7.1 under /opt/shoal/s3rver (or $SHOAL_S3RVER_DIR). The
server runs through `s3rver_run.js`, which adds an access log (one JSON line per request: method,
decoded path, status, Range, length, aborted) so a test can check that each object was read from
the origin once.

Objects are written straight into s3rver's on-disk format (`<bucket>/<key>._S3rver_object` plus
its `.md5`, which is the ETag), which s3rver reads on every request: 100,000 objects take seconds
to create, where PUTs would take minutes. s3rver keeps no index, so objects may be added or
changed while it runs. `put()` goes through the real S3 API (signed PUT with curl) for the few
objects a test wants created that way.

s3rver accepts the access key S3RVER (secret S3RVER) and, like S3, requires
x-amz-content-sha256; it does not verify signatures (the client's SigV4 is unit-tested against
AWS's published vectors instead).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .procs import Daemon, FixtureError, free_port, run

ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
HERE = Path(__file__).resolve().parent


def s3rver_dir() -> Path:
    return Path(os.environ.get("SHOAL_S3RVER_DIR", "/opt/shoal/s3rver"))


def node_binary() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        raise FixtureError("node is not installed: run tools/install-deps")
    return node


@dataclass
class AccessEntry:
    time: float
    method: str
    path: str
    query: str
    status: int
    range: str
    length: int
    aborted: bool

    @property
    def key(self) -> str | None:
        """The object key of a GET/HEAD on /<bucket>/<key> (None for bucket-level requests)."""
        parts = self.path.lstrip("/").split("/", 1)
        return parts[1] if len(parts) == 2 and parts[1] else None


class S3rver:
    """s3rver serving `directory` with one bucket; `host` may be inside `netns`."""

    def __init__(self, directory: str | os.PathLike, *, bucket: str = "ds", host: str = "127.0.0.1",
                 port: int | None = None, netns: str | None = None):
        self.dir = Path(directory)
        self.data = self.dir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.bucket = bucket
        self.host, self.netns = host, netns
        self.port = port or free_port("127.0.0.1" if netns else host)
        self.access_log_path = self.dir / "access.jsonl"
        script = HERE / "s3rver_run.js"
        modules = s3rver_dir() / "node_modules"
        if not (modules / "s3rver").exists():
            raise FixtureError(f"s3rver is not installed under {modules}: run tools/install-deps")
        self.daemon = Daemon("s3rver", [node_binary(), str(script), str(self.data), host, str(self.port), bucket,
                                        str(self.access_log_path)],
                             log_path=self.dir / "s3rver.log", netns=netns, env={"NODE_PATH": str(modules)})
        (self.data / bucket).mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "S3rver":
        self.daemon.start()
        self.daemon.wait_log("S3rver listening", timeout=timeout)
        return self

    def stop(self):
        return self.daemon.stop()

    def kill(self):
        return self.daemon.kill()

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()

    # -- objects ---------------------------------------------------------------------------------

    def object_path(self, key: str) -> Path:
        parts = key.split("/")
        return self.data.joinpath(self.bucket, *parts[:-1], parts[-1] + "._S3rver_object")

    def write_object(self, key: str, data: bytes) -> None:
        """Creates or replaces an object in s3rver's on-disk format."""
        p = self.object_path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        Path(str(p) + ".md5").write_text(hashlib.md5(data).hexdigest())

    def put(self, key: str, data: bytes) -> None:
        """A signed PUT through the S3 API (curl --aws-sigv4)."""
        from urllib.parse import quote
        url = f"{self.endpoint}/{self.bucket}/{quote(key, safe='/')}"
        argv = ["curl", "-s", "-f", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u",
                f"{ACCESS_KEY}:{SECRET_KEY}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--data-binary", "@-",
                url]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        run(argv, input=data.decode("latin-1"), what=f"PUT {key}", timeout=60)

    # -- access log ------------------------------------------------------------------------------

    def access_log(self) -> list[AccessEntry]:
        out = []
        if not self.access_log_path.exists():
            return out
        for line in self.access_log_path.read_text(errors="replace").splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            out.append(AccessEntry(j.get("time", 0.0), j.get("method", ""), j.get("path", ""), j.get("query", ""),
                                   int(j.get("status", 0)), j.get("range", ""), int(j.get("length", 0)),
                                   bool(j.get("aborted", False))))
        return out

    def object_gets(self) -> dict[str, int]:
        """Object key (relative to the bucket) → successful GETs (200 or 206)."""
        counts: dict[str, int] = {}
        for e in self.access_log():
            if e.method == "GET" and e.key is not None and e.status in (200, 206):
                counts[e.key] = counts.get(e.key, 0) + 1
        return counts

    def credentials_file(self, directory: str | os.PathLike, name: str = "s3rver.creds") -> Path:
        """Writes ACCESS_KEY:SECRET into directory/name (a registry-proxy credentials_dir)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        p = d / name
        p.write_text(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        return p
