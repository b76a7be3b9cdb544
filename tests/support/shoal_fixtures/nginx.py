"""nginx as an HTTP dataset origin: a directory served with `autoindex on; autoindex_format json;`
(the listing registry-proxy walks), an access log the tests count, and an optional per-connection
rate limit so a test can kill the origin in the middle of a transfer.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from .procs import Daemon, FixtureError, free_port

LOG_RE = re.compile(r'^(?P<remote>\S+) "(?P<method>\S+) (?P<uri>\S+) [^"]*" (?P<status>\d+) (?P<bytes>\d+) '
                    r'"(?P<range>[^"]*)"$')


@dataclass
class AccessEntry:
    method: str
    path: str  # decoded URI path, relative to the served root ("/a/b.txt")
    status: int
    bytes: int
    range: str


def nginx_binary() -> str:
    for c in ("nginx", "/usr/sbin/nginx"):
        p = shutil.which(c) or (c if os.path.exists(c) else None)
        if p:
            return p
    raise FixtureError("nginx is not installed: run tools/install-deps")


class Nginx:
    """nginx serving `root` (a directory of dataset files) at http://host:port/."""

    def __init__(self, directory: str | os.PathLike, root: str | os.PathLike, *, host: str = "127.0.0.1",
                 port: int | None = None, netns: str | None = None, limit_rate: str | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root = Path(root)
        self.host, self.netns = host, netns
        self.port = port or free_port("127.0.0.1" if netns else host)
        self.access_log_path = self.dir / "access.log"
        self.limit_rate = limit_rate
        self._write_config()
        self.daemon = Daemon("nginx", [nginx_binary(), "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"),
                                       "-e", str(self.dir / "error.log")],
                             log_path=self.dir / "nginx.out", netns=netns)

    def _write_config(self) -> None:
        for d in ("tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        limit = f"limit_rate {self.limit_rate};" if self.limit_rate else ""
        (self.dir / "nginx.conf").write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log info;
events {{ worker_connections 1024; }}
http {{
  log_format shoal '$remote_addr "$request" $status $body_bytes_sent "$http_range"';
  access_log {self.access_log_path} shoal;
  client_body_temp_path {self.dir}/tmp/body;
  proxy_temp_path {self.dir}/tmp/proxy;
  fastcgi_temp_path {self.dir}/tmp/fastcgi;
  uwsgi_temp_path {self.dir}/tmp/uwsgi;
  scgi_temp_path {self.dir}/tmp/scgi;
  sendfile on;
  server {{
    listen {self.host}:{self.port};
    root {self.root};
    location / {{
      autoindex on;
      autoindex_format json;
      {limit}
    }}
  }}
}}
""")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self, timeout: float = 20) -> "Nginx":
        self.daemon.start()
        self.daemon.wait_tcp(self.port, self.host, timeout=timeout)
        return self

    def stop(self):
        return self.daemon.stop()

    def kill(self):
        return self.daemon.kill()

    def diagnostics(self) -> str:
        extra = ""
        err = self.dir / "error.log"
        if err.exists():
            extra = "\n--- nginx error.log ---\n" + "\n".join(err.read_text(errors="replace").splitlines()[-30:])
        return self.daemon.diagnostics() + extra

    def access_log(self) -> list[AccessEntry]:
        out = []
        if not self.access_log_path.exists():
            return out
        for line in self.access_log_path.read_text(errors="replace").splitlines():
            m = LOG_RE.match(line)
            if not m:
                continue
            uri = m["uri"].split("?", 1)[0]
            out.append(AccessEntry(m["method"], unquote(uri), int(m["status"]), int(m["bytes"]),
                                   "" if m["range"] == "-" else m["range"]))
        return out

    def file_gets(self) -> dict[str, int]:
        """Path (relative to root, without the leading '/') → successful GETs of files (not listings)."""
        counts: dict[str, int] = {}
        for e in self.access_log():
            if e.method == "GET" and e.status in (200, 206) and not e.path.endswith("/"):
                p = e.path.lstrip("/")
                counts[p] = counts.get(p, 0) + 1
        return counts
