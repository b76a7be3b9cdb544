"""An upstream registry: Debian's `docker-registry` (CNCF distribution 2.8.2) on a free port.

Auth modes: "none" (anonymous), "htpasswd" (Basic; bcrypt entries made by `htpasswd -Bbn`), and
"token" (Bearer, with a `TokenIssuer` as realm). An admin account (default admin/adminpass) can
always push: it is added to the htpasswd file, or given push+pull on every repository by the
token issuer. `push()` runs skopeo; `access_log()` parses the registry's access log.

What the registry logs (verified here): with `log.accesslog.disabled: false` every request,
including 401s, 404s and HEADs, is written to **stdout** in Apache combined format once the
response is finished, e.g.
    127.0.0.1 - - [29/Nov/2026:19:10:57 +0000] "GET /v2/foo/blobs/sha256:… HTTP/1.1" 404 157 ""
    "curl/7.88.1"    (one line)
(the size is the number of body bytes written, so a truncated transfer shows fewer bytes). The
application log ("response completed", logrus text format) goes to stderr. The fixture sends
stdout to `access.log` and stderr to `registry.log`.

Lifecycle: `Registry(dir, …)`, `start()`, then `stop()`/`kill()`; `start()` again reuses the same
port and storage (restart tests). Not thread-safe; the access log may be read at any time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .oci import ImageLayout
from .procs import Daemon, FixtureError, free_port, free_port_in_netns, run, tail
from .token_issuer import Rule, TokenIssuer

_ACCESS_RE = re.compile(
    r'^(?P<remote>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] '
    r'"(?P<method>\S+) (?P<path>\S+) (?P<proto>[^"]*)" (?P<status>\d{3}) (?P<size>\d+|-)'
    r'(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)")?')
_BLOB_RE = re.compile(r"^/v2/(?P<name>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
_MANIFEST_RE = re.compile(r"^/v2/(?P<name>.+)/manifests/(?P<ref>[^/?]+)$")


@dataclass(frozen=True)
class AccessEntry:
    """One request from the registry's access log."""

    line: int
    remote: str
    time: str
    method: str
    path: str          # without the query string
    query: str
    status: int
    size: int          # body bytes written
    user_agent: str

    @property
    def blob(self) -> tuple[str, str] | None:
        """(repository, digest) for a /v2/<name>/blobs/<digest> request."""
        m = _BLOB_RE.match(self.path)
        return (m["name"], m["digest"]) if m else None

    @property
    def manifest(self) -> tuple[str, str] | None:
        """(repository, tag or digest) for a /v2/<name>/manifests/<ref> request."""
        m = _MANIFEST_RE.match(self.path)
        return (m["name"], m["ref"]) if m else None


def skopeo_base() -> list[str]:
    # --insecure-policy: no dependency on /etc/containers/policy.json; the tests trust their own
    # images. Global flags go before the subcommand.
    return ["skopeo", "--insecure-policy"]


class Registry:
    """A running docker-registry with its config, storage and logs under `directory`."""

    def __init__(self, directory: str | os.PathLike, *, auth: str = "none",
                 users: Mapping[str, str] | None = None,
                 token_issuer: TokenIssuer | None = None,
                 admin: tuple[str, str] = ("admin", "adminpass"), host: str = "127.0.0.1",
                 port: int | None = None, netns: str | None = None, delete: bool = True,
                 extra_config: Mapping[str, object] | None = None) -> None:
        if auth not in ("none", "htpasswd", "token"):
            raise ValueError(f"auth must be none, htpasswd or token, not {auth!r}")
        if auth == "token" and token_issuer is None:
            raise ValueError("auth='token' needs a started TokenIssuer")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.auth = auth
        self.users = dict(users or {})
        self.admin = admin
        self.token_issuer = token_issuer
        self.host = host
        self._fixed_port = port
        self.port = port or 0
        self.netns = netns
        self.delete = delete
        self.extra_config = dict(extra_config or {})
        self.log_path = self.dir / "registry.log"
        self.access_log_path = self.dir / "access.log"
        self.config_path = self.dir / "config.yml"
        self.daemon: Daemon | None = None
        self._secret = secrets.token_hex(16)
        if auth == "htpasswd":
            self._write_htpasswd()
        if auth == "token":
            assert token_issuer is not None
            token_issuer.users.setdefault(admin[0], admin[1])
            token_issuer.rules.append(Rule(admin[0], "*", ("pull", "push", "delete")))

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 20) -> "Registry":
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if not self._fixed_port:
                self.port = free_port_in_netns(self.netns, self.host) if self.netns \
                    else free_port(self.host)
            self._write_config()
            self.daemon = Daemon("docker-registry", ["docker-registry", "serve", self.config_path],
                                 log_path=self.log_path, stdout_path=self.access_log_path,
                                 netns=self.netns).start()
            try:
                # A TCP probe, not an HTTP one, so the access log holds only the test's requests.
                self.daemon.wait_tcp(self.port, self.host, timeout)
                # A restart keeps the address, so clients configured with it stay valid.
                self._fixed_port = self.port
                return self
            except FixtureError:
                in_use = "address already in use" in tail(self.log_path, 5)
                self.daemon.stop()
                if not in_use or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()

    def kill(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()

    def __enter__(self) -> "Registry":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host_port}"

    def diagnostics(self) -> str:
        text = self.daemon.diagnostics(30) if self.daemon else "(registry never started)"
        if self.token_issuer is not None:
            text += "\n" + self.token_issuer.diagnostics()
        return text

    # -- images ----------------------------------------------------------------------------------

    def push(self, layout: ImageLayout, name: str, tag: str | None = None, *,
             creds: tuple[str, str] | None | bool = True, fmt: str | None = None,
             timeout: float = 300) -> str:
        """Copies `layout` into repository `name` with skopeo; returns "host:port/name:tag".

        Digests are preserved (`--preserve-digests`; skopeo fails rather than convert), and
        every platform of an index is copied (`--multi-arch all`). `creds=True` uses the admin
        account when auth is on; pass (user, password) or False for anonymous. `fmt`
        ("oci"/"v2s2") forces a manifest format, which changes digests: only for tests that
        want a conversion. Sets `layout.reference`.
        """
        ref = f"{self.host_port}/{name}:{tag or layout.tag}"
        argv = [*skopeo_base(), "copy", "--retry-times", "0", "--dest-tls-verify=false",
                "--multi-arch", "all"]
        argv += ["--format", fmt] if fmt else ["--preserve-digests"]
        argv += self._creds_args("--dest", creds)
        argv += [layout.skopeo_source, f"docker://{ref}"]
        run(argv, timeout=timeout, what=f"skopeo copy {layout.skopeo_source} -> {ref}",
            env=self._skopeo_env(), netns=self.netns)
        layout.reference = ref
        return ref

    def pull(self, ref: str, dest: str | os.PathLike, *, transport: str = "dir",
             creds: tuple[str, str] | None | bool = True, timeout: float = 300) -> Path:
        """skopeo-copies `ref` ("host:port/name:tag" or "…@sha256:…") into a local directory.

        transport "dir" (default) keeps every digest for both formats (check the result with
        `oci.verify_dir`); "oci" writes an OCI layout tagged "pulled", which works for OCI
        images only (skopeo 1.9 refuses to write a Docker manifest list into an OCI layout
        without converting it, and --preserve-digests forbids that).
        """
        if transport not in ("dir", "oci"):
            raise ValueError("transport must be dir or oci")
        target = f"dir:{dest}" if transport == "dir" else f"oci:{dest}:pulled"
        argv = [*skopeo_base(), "copy", "--retry-times", "0", "--src-tls-verify=false",
                "--multi-arch", "all", "--preserve-digests", *self._creds_args("--src", creds),
                f"docker://{ref}", target]
        run(argv, timeout=timeout, what=f"skopeo copy {ref} -> {target}",
            env=self._skopeo_env(), netns=self.netns)
        return Path(dest)

    def inspect_raw(self, ref: str, *, creds: tuple[str, str] | None | bool = True) -> bytes:
        """The manifest bytes of `ref` as the registry serves them (skopeo inspect --raw)."""
        cp = run([*skopeo_base(), "inspect", "--raw", "--tls-verify=false",
                  *self._creds_args("", creds), f"docker://{ref}"],
                 what=f"skopeo inspect {ref}", env=self._skopeo_env(), timeout=60,
                 netns=self.netns)
        return cp.stdout.encode()

    # -- direct HTTP -----------------------------------------------------------------------------

    def request(self, path: str, *, method: str = "GET", headers: Mapping[str, str] | None = None,
                timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP request to the registry: (status, headers, body). No auth handling."""
        req = urllib.request.Request(self.url + path, method=method, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers.items()), r.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, dict(e.headers.items()), e.read()

    # -- access log ------------------------------------------------------------------------------

    def access_log(self, since: int = 0) -> list[AccessEntry]:
        """Parsed access-log entries from line `since` on (see `mark()`)."""
        try:
            lines = self.access_log_path.read_text("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for i, line in enumerate(lines):
            if i < since:
                continue
            m = _ACCESS_RE.match(line)
            if not m:
                continue
            path, _, query = m["path"].partition("?")
            out.append(AccessEntry(i, m["remote"], m["time"], m["method"], path, query,
                                   int(m["status"]), 0 if m["size"] == "-" else int(m["size"]),
                                   m["agent"] or ""))
        return out

    def mark(self) -> int:
        """The current length of the access log; pass it as `since` to count later requests."""
        try:
            with open(self.access_log_path, "rb") as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def wait_log_quiet(self, settle: float = 0.3, timeout: float = 10) -> None:
        """Waits until the access log stops growing for `settle` s (a response is logged only
        after it completed, so counts taken right after a client returns can lag)."""
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline:
            n = self.mark()
            if n == last:
                return
            last = n
            time.sleep(settle)

    def count(self, method: str | None = None, path: str | re.Pattern | None = None,
              status: int | None = None, since: int = 0) -> int:
        """Requests matching `method`, `path` (exact string or compiled regex) and `status`."""
        n = 0
        for e in self.access_log(since):
            if method is not None and e.method != method:
                continue
            if status is not None and e.status != status:
                continue
            if isinstance(path, str) and e.path != path:
                continue
            if isinstance(path, re.Pattern) and not path.search(e.path):
                continue
            n += 1
        return n

    def count_blob_gets(self, digest: str, repo: str | None = None, since: int = 0,
                        status: int | None = None) -> int:
        """GET /v2/<repo>/blobs/<digest> requests (any repository when `repo` is None)."""
        return sum(1 for e in self.access_log(since)
                   if e.method == "GET" and e.blob is not None and e.blob[1] == digest
                   and (repo is None or e.blob[0] == repo)
                   and (status is None or e.status == status))

    def blob_gets(self, since: int = 0) -> dict[str, int]:
        """digest → number of GETs of that blob (all repositories)."""
        out: dict[str, int] = {}
        for e in self.access_log(since):
            if e.method == "GET" and e.blob is not None:
                out[e.blob[1]] = out.get(e.blob[1], 0) + 1
        return out

    def count_manifest_requests(self, ref: str, method: str = "GET", repo: str | None = None,
                                since: int = 0) -> int:
        """Requests for /v2/<repo>/manifests/<ref> (tag or digest) with `method`."""
        return sum(1 for e in self.access_log(since)
                   if e.method == method and e.manifest is not None and e.manifest[1] == ref
                   and (repo is None or e.manifest[0] == repo))

    # -- internals -------------------------------------------------------------------------------

    def _creds_args(self, prefix: str, creds: tuple[str, str] | None | bool) -> list[str]:
        flag = f"{prefix}-creds" if prefix else "--creds"
        no_creds = f"{prefix}-no-creds" if prefix else "--no-creds"
        if creds is True:
            return [flag, f"{self.admin[0]}:{self.admin[1]}"] if self.auth != "none" else \
                [no_creds]
        if not creds:
            return [no_creds]
        return [flag, f"{creds[0]}:{creds[1]}"]

    def _skopeo_env(self) -> dict[str, str]:
        tmp = self.dir / "skopeo-tmp"
        tmp.mkdir(exist_ok=True)
        # An empty auth file keeps skopeo from picking up credentials from the machine.
        auth = self.dir / "skopeo-auth.json"
        if not auth.exists():
            auth.write_text('{"auths":{}}')
        return {"TMPDIR": str(tmp), "REGISTRY_AUTH_FILE": str(auth)}

    def _write_htpasswd(self) -> None:
        entries = []
        for user, password in {**self.users, self.admin[0]: self.admin[1]}.items():
            cp = run(["htpasswd", "-Bbn", user, password], what=f"htpasswd -Bbn {user}")
            entries.append(cp.stdout.strip())
        (self.dir / "htpasswd").write_text("\n".join(entries) + "\n")

    def _write_config(self) -> None:
        # JSON is YAML: writing the config as JSON avoids hand-quoting YAML.
        config: dict = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")},
                        "delete": {"enabled": self.delete},
                        "maintenance": {"uploadpurging": {"enabled": False}}},
            "http": {"addr": f"{self.host}:{self.port}", "secret": self._secret},
        }
        if self.auth == "htpasswd":
            config["auth"] = {"htpasswd": {"realm": "shoal-test",
                                           "path": str(self.dir / "htpasswd")}}
        elif self.auth == "token":
            ti = self.token_issuer
            assert ti is not None
            config["auth"] = {"token": {"realm": ti.realm, "service": ti.service,
                                        "issuer": ti.issuer,
                                        "rootcertbundle": str(ti.rootcertbundle)}}
        _merge(config, self.extra_config)
        self.config_path.write_text(json.dumps(config, indent=1))


def _merge(dst: dict, src: Mapping[str, object]) -> None:
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v

