"""A whole Shoal cluster on one machine, in network namespaces with shaped links.

Node 0 runs the upstream registry (and/or, with `s3_origin`, s3rver as a dataset origin), node 1
registry-proxy and the scheduler (tracker), nodes 2.. each run peerd and (unless `containerd` is
false) a containerd whose hosts.toml points at that peerd (with the registry itself as
containerd's fallback `server`). Used by `make demo`, the multi-node tests, bench/fanout/run and
the dataset tests and benchmark.

With `tls` (the default) the cluster runs as docs/security.md's profile says: one CA made at
start (certs.ClusterPKI, in <workdir>/pki), registry-proxy and the scheduler serve HTTPS with
mutual TLS on the infra node's IP, each peerd calls them with its own node certificate and serves
its metrics listener with it, and `curl`/`metrics_of`/`proxy_metrics` present certificates (an
operator's from the infra node, the node's own from a node); the same `tls` sections make every
torrent an SSL torrent between members (docs/p2p.md). `tls=False` is the plain-mode smoke;
SHOAL_TEST_TLS=0 turns the default off.
"""
from __future__ import annotations

import concurrent.futures
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import oci
from .certs import ClusterPKI, TLSParty
from .containerd import Containerd
from .netns import Network, Shape
from .nodes import Peerd, Scheduler
from .registry import Registry
from .shoal import RegistryProxy, parse_metrics


def _env_json(name: str) -> dict[str, Any]:
    """Config merged over every cluster's own, from the environment: how a test's
    break-on-purpose check is re-run without editing it (e.g. SHOAL_TEST_PROXY_EXTRA=
    '{"torrent": {"super_seeding": false}}' must make the super-seeding bounds fail)."""
    raw = os.environ.get(name, "")
    if not raw:
        return {}
    import json
    val = json.loads(raw)
    if not isinstance(val, dict):
        raise ValueError(f"{name} must be a JSON object")
    return val


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


@dataclass
class NodeResult:
    node: str
    seconds: float
    ok: bool
    error: str = ""


@dataclass
class Cluster:
    workdir: Path
    nodes: int = 4
    rate: str | None = "200mbit"        # every link (nodes, registry, registry-proxy)
    infra_rate: str | None = None       # registry and registry-proxy links, if different
    # tbf's latency on every link: its queue holds this long at the link's rate (netns.Shape).
    link_latency: str = "50ms"
    torrent: bool = True
    peerd_extra: Mapping[str, Any] | None = None
    peerd_extra_by_node: Mapping[int, Mapping[str, Any]] | None = None  # node index → merged over peerd_extra
    proxy_extra: Mapping[str, Any] | None = None
    scheduler_config: Mapping[str, Any] | None = None  # merged over scheduler_extra
    log_level: str = "info"
    snapshotter: str | None = None
    containerd: bool = True          # a containerd per node (image pulls); dataset tests need none
    containerd_kw: Mapping[str, Any] | None = None  # more Containerd() arguments (cri=True, …)
    registry_origin: bool = True     # node 0 runs the upstream registry
    s3_origin: bool = False          # node 0 runs s3rver (dataset origin, s3.py) on port 4568
    # Mutual TLS between the daemons (see the module's doc); SHOAL_TEST_TLS=0 turns the default off
    # (to time a suite both ways).
    tls: bool = field(default_factory=lambda: os.environ.get("SHOAL_TEST_TLS", "1") != "0")
    metrics_port: int = 9465         # each peerd's metrics listener on its node address
    pki: ClusterPKI | None = None
    s3: Any = None
    net: Network | None = None
    registry: Registry | None = None
    proxy: RegistryProxy | None = None
    scheduler: Scheduler | None = None
    peerds: list[Peerd] = field(default_factory=list)
    containerds: list[Containerd] = field(default_factory=list)
    _stack: list[Any] = field(default_factory=list)

    def start(self) -> "Cluster":
        self.workdir = Path(self.workdir)
        shape = Shape(self.rate, latency=self.link_latency) if self.rate else None
        self.net = Network(self.nodes + 2, shape=shape, host_addr=False).create()
        self._stack.append(self.net)
        infra_shape = Shape(self.infra_rate, latency=self.link_latency) if self.infra_rate else shape
        if infra_shape is not shape:
            self.net.nodes[0].set_shape(infra_shape)
            self.net.nodes[1].set_shape(infra_shape)
        n0, n1 = self.net.nodes[0], self.net.nodes[1]
        if self.tls:
            self.pki = ClusterPKI(self.workdir / "pki")
        upstreams = [{"name": "127.0.0.1:9", "url": "http://127.0.0.1:9"}]
        if self.registry_origin:
            self.registry = Registry(self.workdir / "registry", host=n0.ip, port=5000, netns=n0.name).start()
            self._stack.append(self.registry)
            upstreams = [{"name": self.registry.host_port, "url": self.registry.url}]
        proxy_extra: dict[str, Any] = _merged(self.proxy_extra or {}, _env_json("SHOAL_TEST_PROXY_EXTRA"))
        if self.s3_origin:
            from .s3 import S3rver
            self.s3 = S3rver(self.workdir / "s3", host=n0.ip, port=4568, netns=n0.name).start()
            self._stack.append(self.s3)
            creds = self.workdir / "credentials"
            self.s3.credentials_file(creds)
            ds = dict(proxy_extra.get("datasets", {}))
            ds.setdefault("credentials_dir", str(creds))
            # The only origin datasets may come from, with the credentials bound to it.
            ds["allowed_origins"] = list(ds.get("allowed_origins", [])) + [
                {"url": self.s3.endpoint, "credentials_file": "s3rver.creds"}]
            proxy_extra["datasets"] = ds
        # The scheduler resolves images and datasets through registry-proxy (started next, on 5050).
        self.scheduler = Scheduler(self.workdir / "scheduler", host=n1.ip, port=7070, netns=n1.name,
                                   log_level=self.log_level,
                                   tls=self.pki.scheduler([n1.ip]) if self.pki else None,
                                   client=self.operator,
                                   extra=self.scheduler_extra).start()
        self._stack.append(self.scheduler)
        self.proxy = RegistryProxy(self.workdir / "registry-proxy", host=n1.ip, port=5050, netns=n1.name,
                                   upstreams=upstreams,
                                   torrent=self.torrent, trackers=[self.scheduler.url + "/announce"],
                                   bt_port=6881, extra=proxy_extra or None, log_level=self.log_level,
                                   tls=self.pki.registry_proxy([n1.ip]) if self.pki else None,
                                   client=self.operator)
        self.proxy.daemon.start()
        self.proxy.daemon.wait_tcp(5050, n1.ip, timeout=30)
        self._stack.append(self.proxy)
        for i in range(self.nodes):
            node = self.net.nodes[i + 2]
            p = Peerd(self.workdir / f"node{i + 1}" / "peerd", name=f"node{i + 1}", registry_proxy=self.proxy.url,
                      scheduler=self.scheduler.url, host=node.ip, http_port=65001, bt_port=6881, netns=node.name,
                      zone="z1", rack=f"r{(i % 2) + 1}",
                      extra=_merged(self.peerd_extra or {}, (self.peerd_extra_by_node or {}).get(i, {})),
                      log_level=self.log_level,
                      tls=self.pki.node(f"node{i + 1}", [node.ip]) if self.pki else None,
                      metrics_port=self.metrics_port)
            p.start()
            self._stack.append(p)
            self.peerds.append(p)
            if not self.containerd:
                continue
            kw = {"netns": node.name, **(self.containerd_kw or {})}
            if self.snapshotter:
                kw["snapshotter"] = self.snapshotter
            c = Containerd(self.workdir / f"node{i + 1}" / "containerd", **kw).start()
            self._stack.append(c)
            c.configure_registry(self.registry.host_port, mirrors=[p.url], server=self.registry.url)
            self.containerds.append(c)
        return self

    def push(self, layers: Sequence[oci.LayerSpec], name: str = "demo/app", tag: str = "v1",
             fmt: str = "oci") -> tuple[oci.ImageLayout, str]:
        layout = oci.make_image(self.workdir / f"image-{name.replace('/', '_')}-{tag}", list(layers), fmt=fmt, tag=tag)
        ref = self.registry.push(layout, name, tag)
        return layout, ref

    def pull_all(self, ref: str, *, nodes: Sequence[int] | None = None, timeout: float = 600,
                 cri: bool = False) -> list[NodeResult]:
        """Pulls `ref` with containerd on the given nodes (default all) at the same moment: with
        `ctr images pull`, or with `cri` through the CRI plugin as kubelet does (needs
        `containerd_kw={"cri": True}`)."""
        idx = list(range(self.nodes)) if nodes is None else list(nodes)
        results: dict[int, NodeResult] = {}

        def one(i: int) -> NodeResult:
            t0 = time.monotonic()
            try:
                self.containerds[i].pull_with(ref, cri=cri, timeout=timeout)
                return NodeResult(f"node{i + 1}", time.monotonic() - t0, True)
            except Exception as e:  # noqa: BLE001 - reported per node
                return NodeResult(f"node{i + 1}", time.monotonic() - t0, False, str(e)[-2000:])

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(idx)) as ex:
            futs = {ex.submit(one, i): i for i in idx}
            for f in concurrent.futures.as_completed(futs):
                results[futs[f]] = f.result()
        return [results[i] for i in idx]

    def byte_report(self, statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Where the bytes came from, from every daemon's own counters (`statuses`: the peerds'
        /v1/status answers, if the caller has just read them)."""
        statuses = statuses if statuses is not None else [p.status() for p in self.peerds]
        from_origin = sum(s.get("bytes", {}).get("from_origin", 0) for s in statuses)
        from_http = sum(s.get("bytes", {}).get("from_http_fallback", 0) for s in statuses)
        from_peers = sum(s.get("bytes", {}).get("from_peers", 0) for s in statuses)
        proxy_metrics = self.proxy_metrics()
        self.registry.wait_log_quiet()
        upstream_bytes = sum(e.size for e in self.registry.access_log() if e.blob and e.method == "GET")
        return {
            "upstream_bytes": upstream_bytes,
            "upstream_blob_gets": sum(1 for e in self.registry.access_log() if e.blob and e.method == "GET"),
            "proxy_upstream_bytes": proxy_metrics.get("shoal_proxy_upstream_bytes_total", 0.0),
            "from_registry_proxy_p2p": from_origin,
            "from_registry_proxy_http": from_http,
            "from_peers": from_peers,
            "per_node": {p.name: s.get("bytes", {}) for p, s in zip(self.peerds, statuses)},
        }

    def proxy_metrics(self) -> dict[str, float]:
        return parse_metrics(self.curl(None, self.proxy.url + "/metrics", timeout=5).stdout)

    # -- identities (tls) ------------------------------------------------------------------------

    @property
    def scheduler_extra(self) -> dict[str, Any]:
        """The scheduler's config beside the fixture's defaults: it resolves images and datasets
        through registry-proxy (on the infra node, port 5050)."""
        scheme = "https" if self.tls else "http"
        base = {"resolver": {"registry_proxy": f"{scheme}://{self.net.nodes[1].ip}:5050"}}
        return _merged(base, self.scheduler_config or {})

    @property
    def operator(self) -> TLSParty | None:
        """The operator certificate tests use from the infra node (None without tls)."""
        return self.pki.operator() if self.pki else None

    def client(self, i: int | None) -> TLSParty | None:
        """What a request from node i presents: its node certificate (None: the operator's)."""
        if not self.pki:
            return None
        return self.operator if i is None else self.pki.node(f"node{i + 1}", [self.node_ip(i)])

    def shoalctl_tls_args(self) -> list[str]:
        """shoalctl's flags presenting the operator certificate to the scheduler (https) with tls;
        empty without."""
        op = self.operator
        return ["--ca", str(op.ca), "--cert", str(op.cert.cert), "--key", str(op.cert.key)] if op else []

    def client_args(self, i: int | None) -> list[str]:
        """curl arguments presenting client(i) (empty without tls)."""
        c = self.client(i)
        return c.curl_args() if c else []

    # -- per-node access (tests) -----------------------------------------------------------------

    def netns(self, i: int) -> str:
        """The network namespace of peerd node i (0-based, as in `peerds`)."""
        return self.net.nodes[i + 2].name

    def node_ip(self, i: int) -> str:
        return self.net.nodes[i + 2].ip

    @property
    def infra_netns(self) -> str:
        """The namespace of registry-proxy and the scheduler."""
        return self.net.nodes[1].name

    def curl(self, i: int | None, *args: str, timeout: float = 60, check: bool = False):
        """Runs curl inside node i's namespace (None: the registry-proxy/scheduler node), presenting
        client(i)'s certificate with tls (harmless toward plain URLs such as peerd's)."""
        from .procs import run
        ns = self.infra_netns if i is None else self.netns(i)
        return run(["curl", "-s", "--globoff", "-m", str(int(timeout)), *self.client_args(i), *args], netns=ns,
                   timeout=timeout + 10, check=check)

    def metrics_of(self, url: str, i: int | None = None) -> dict[str, float]:
        """Parses a /metrics page fetched from node i (None: the infra node)."""
        return parse_metrics(self.curl(i, url + "/metrics", timeout=10).stdout)

    def shape_infra(self, shaped: bool = True) -> None:
        """Shapes the registry's and registry-proxy's links as start() did (infra_rate, else the
        cluster's rate), or with shaped=False takes their shaping off."""
        r = (self.infra_rate or self.rate) if shaped else None
        for node in self.net.nodes[:2]:
            node.set_shape(Shape(r, latency=self.link_latency) if r else None)

    def shape_node(self, i: int, rate: str | None) -> None:
        """Reshapes node i's link (None: back to the cluster's rate)."""
        r = rate or self.rate
        self.net.nodes[i + 2].set_shape(Shape(r, latency=self.link_latency) if r else None)

    def restart_peerd(self, i: int, timeout: float = 30) -> Peerd:
        p = self.peerds[i]
        if p.daemon.alive:
            p.stop()
        return p.start(timeout=timeout)

    def restart_proxy(self, timeout: float = 30) -> RegistryProxy:
        if self.proxy.daemon.alive:
            self.proxy.stop()
        self.proxy.daemon.start()
        self.proxy.daemon.wait_tcp(self.proxy.port, self.proxy.host, timeout=timeout)
        return self.proxy

    def restart_scheduler(self, timeout: float = 30) -> Scheduler:
        if self.scheduler.daemon.alive:
            self.scheduler.stop()
        return self.scheduler.start(timeout=timeout)

    def diagnostics(self) -> str:
        parts = []
        for x in self._stack:
            try:
                parts.append(x.diagnostics())
            except Exception:  # noqa: BLE001
                pass
        return "\n".join(parts)

    def stop(self) -> None:
        while self._stack:
            x = self._stack.pop()
            try:
                if isinstance(x, Network):
                    x.destroy()
                else:
                    x.stop()
            except Exception:  # noqa: BLE001 - teardown must go on
                pass
