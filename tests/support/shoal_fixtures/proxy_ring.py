"""registry-proxy replicas on a rendezvous-hash ring (registry-proxy/include/registry-proxy/ring.h),
for tests/registry-proxy/ring_test.py and bench/proxy/run --replicas N.

`ProxyRing(dir, n, upstreams=...)` writes N configs that list each other as `ring.members`;
`start()` starts them; `owner(digest)` computes which one owns a digest exactly as the daemon does
(the member with the highest first 8 bytes of sha256("<member>\\n<digest>"), big-endian), so a test
knows whom to kill. `herd()` runs one request per thread, released together, each to the replica it
names, and hashes every body. `kill_owner_mid_blob()` is the failure scenario both the test and the
benchmark run: clients on the other replicas stream a cold blob, the owner is killed with SIGKILL
once it received `kill_at` of the blob from upstream, and the registry's access log tells how many
upstream GETs and bytes the blob cost.
"""

from __future__ import annotations

import hashlib
import http.client
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .procs import FixtureError, free_port
from .shoal import RegistryProxy


def ring_score(member: str, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{member}\n{key}".encode()).digest()[:8], "big")


def ring_owner(members: Sequence[str], key: str) -> str:
    """The owner among `members` (all up): the highest score (64-bit ties do not happen)."""
    return max(members, key=lambda m: ring_score(m, key))


def get_hashed(conn: http.client.HTTPConnection, method: str, path: str,
               headers: Mapping[str, str] | None = None) -> tuple[int, str, int]:
    """Sends one request and reads the whole body, hashing it: (status, "sha256:…", length)."""
    conn.request(method, path, headers=dict(headers or {}))
    r = conn.getresponse()
    h, n = hashlib.sha256(), 0
    while chunk := r.read(1 << 20):
        h.update(chunk)
        n += len(chunk)
    return r.status, "sha256:" + h.hexdigest(), n


@dataclass
class HerdResult:
    status: Any
    digest: str
    size: int
    replica: int
    error: str = ""


@dataclass
class FailoverResult:
    digest: str
    size: int
    owner: int
    clients: list[HerdResult] = field(default_factory=list)
    upstream_gets: int = 0
    upstream_bytes: int = 0
    gets: list[tuple[int, int]] = field(default_factory=list)  # (status, bytes) per GET
    seconds: float = 0.0

    @property
    def extra_upstream_bytes(self) -> int:
        return max(0, self.upstream_bytes - self.size)


class ProxyRing:
    def __init__(self, directory: str | Path, n: int, *, upstreams: Sequence[Mapping[str, Any]],
                 torrent: bool = False, extra: Mapping[str, Any] | None = None,
                 log_level: str = "info", pki: Any = None,
                 schedulers: Sequence[str] | None = None):
        """pki: a certs.ClusterPKI: every replica serves mutual TLS with the registry-proxy
        certificate, the members are https URLs, and the fixture's own requests present an
        operator certificate. schedulers: the replicas configure no members, only themselves
        and these scheduler URLs, and learn each other from the scheduler (ring.schedulers)."""
        if n < 2:
            raise FixtureError("a ring needs at least two replicas")
        self.dir = Path(directory)
        self.scheme = "https" if pki is not None else "http"
        self.client = pki.operator() if pki is not None else None
        self.tls = pki.registry_proxy(["127.0.0.1"]) if pki is not None else None
        self.upstreams, self.torrent, self.extra = upstreams, torrent, extra
        self.log_level, self.schedulers = log_level, list(schedulers or [])
        ports = [free_port() for _ in range(n)]
        self.members = [f"{self.scheme}://127.0.0.1:{p}" for p in ports]
        self.proxies: list[RegistryProxy] = []
        for port in ports:
            self.proxies.append(self._replica(port))

    def _replica(self, port: int) -> RegistryProxy:
        i = len(self.proxies)
        me = f"{self.scheme}://127.0.0.1:{port}"
        ring: dict[str, Any] = {"self": me, "probe_interval": "500ms"}
        if self.schedulers:
            ring["schedulers"] = self.schedulers
        else:
            ring["members"] = self.members
        cfg: dict[str, Any] = {"ring": ring}
        if self.extra:
            for k, v in self.extra.items():
                cfg[k] = v
        return RegistryProxy(self.dir / f"proxy{i}", upstreams=self.upstreams, port=port,
                             torrent=self.torrent, extra=cfg, log_level=self.log_level,
                             tls=self.tls, client=self.client)

    def add_replica(self) -> int:
        """Starts one more replica (announce mode only: the others learn it from the
        scheduler); returns its index."""
        if not self.schedulers:
            raise FixtureError("add_replica needs schedulers= (a static ring lists its members)")
        port = free_port()
        self.members.append(f"{self.scheme}://127.0.0.1:{port}")
        p = self._replica(port)
        self.proxies.append(p)
        p.start()
        return len(self.proxies) - 1

    def start(self) -> "ProxyRing":
        for p in self.proxies:
            p.start()
        return self

    def stop(self) -> None:
        for p in self.proxies:
            p.stop()

    def diagnostics(self) -> str:
        return "\n".join(p.diagnostics() for p in self.proxies)

    def _conn(self, p: RegistryProxy) -> http.client.HTTPConnection:
        if self.client is not None:
            return http.client.HTTPSConnection(p.host, p.port, timeout=60,
                                               context=self.client.ssl_context())
        return http.client.HTTPConnection(p.host, p.port, timeout=60)

    def owner(self, digest: str, alive: Sequence[int] | None = None) -> int:
        idx = list(alive) if alive is not None else list(range(len(self.proxies)))
        m = ring_owner([self.members[i] for i in idx], digest)
        return self.members.index(m)

    def metric_sum(self, name: str, only: Sequence[int] | None = None) -> float:
        idx = only if only is not None else range(len(self.proxies))
        return sum(self.proxies[i].metric(name) for i in idx)

    def herd(self, requests: Sequence[tuple[int, str, Mapping[str, str], str]],
             timeout: float = 120) -> list[HerdResult]:
        """requests: (replica index, path, headers, method). All start together."""
        barrier = threading.Barrier(len(requests))
        out: list[HerdResult | None] = [None] * len(requests)

        def client(i: int, rep: int, path: str, headers: Mapping[str, str], method: str) -> None:
            p = self.proxies[rep]
            conn = self._conn(p)
            try:
                conn.connect()
                barrier.wait(30)
                out[i] = HerdResult(*get_hashed(conn, method, path, headers), rep)
            except Exception as e:  # noqa: BLE001 - reported to the caller
                out[i] = HerdResult("error", "", 0, rep, repr(e))
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(i, *r)) for i, r in enumerate(requests)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            raise FixtureError(f"a herd client hung for {timeout:.0f}s\n{self.diagnostics()}")
        return [r for r in out if r is not None]

    def kill_owner_mid_blob(self, registry, repo: str, digest: str, size: int, ns: str, *,
                            clients_per_replica: int = 2, kill_at: float = 0.3,
                            timeout: float = 120) -> FailoverResult:
        """Clients on every replica but the owner GET a cold blob; the owner is killed (SIGKILL)
        once its upstream transfer passed `kill_at` of the blob. Returns what the clients got
        and what the registry served for the blob (its access log)."""
        owner = self.owner(digest)
        others = [i for i in range(len(self.proxies)) if i != owner]
        mark = registry.mark()
        path = f"/v2/{repo}/blobs/{digest}?ns={ns}"
        res = FailoverResult(digest, size, owner)
        results: list[HerdResult | None] = [None] * (len(others) * clients_per_replica)
        start = time.monotonic()

        def client(k: int, rep: int) -> None:
            p = self.proxies[rep]
            conn = self._conn(p)
            try:
                results[k] = HerdResult(*get_hashed(conn, "GET", path), rep)
            except Exception as e:  # noqa: BLE001 - reported to the caller
                results[k] = HerdResult("error", "", 0, rep, repr(e))
            finally:
                conn.close()

        threads = []
        for j, rep in enumerate(others):
            for c in range(clients_per_replica):
                threads.append(threading.Thread(target=client,
                                                args=(j * clients_per_replica + c, rep)))
        base = self.proxies[owner].metric("shoal_proxy_upstream_bytes_total")
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        while True:
            got = self.proxies[owner].metric("shoal_proxy_upstream_bytes_total") - base
            if got >= kill_at * size:
                break
            if time.monotonic() > deadline or not any(t.is_alive() for t in threads):
                raise FixtureError(f"the owner never reached {kill_at:.0%} of the blob "
                                   f"(got {got:.0f} B)\n{self.diagnostics()}")
            time.sleep(0.02)
        self.proxies[owner].kill()
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            raise FixtureError(f"a client hung after the owner was killed\n{self.diagnostics()}")
        res.seconds = time.monotonic() - start
        res.clients = [r for r in results if r is not None]
        registry.wait_log_quiet()
        for e in registry.access_log(mark):
            if e.method == "GET" and e.blob is not None and e.blob[1] == digest:
                res.gets.append((e.status, e.size))
        res.upstream_gets = len(res.gets)
        res.upstream_bytes = sum(b for _, b in res.gets)
        return res
