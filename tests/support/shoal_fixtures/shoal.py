"""Fixtures for Shoal's own daemons: registry-proxy (and later peerd, scheduler).

The binaries come from the build tree: $SHOAL_BUILD_DIR (default build/release under the repo).
Every daemon gets a YAML config written into its own directory, binds port 0 or a free port,
and is stopped (SIGTERM, then SIGKILL) at cleanup.
"""
from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .procs import Daemon, FixtureError, free_port, run, start_on_free_ports

REPO = Path(__file__).resolve().parents[3]


def build_dir() -> Path:
    return Path(os.environ.get("SHOAL_BUILD_DIR", REPO / "build" / "release"))


def binary(name: str) -> Path:
    candidates = {
        "shoal-registry-proxy": build_dir() / "registry-proxy" / "shoal-registry-proxy",
        "shoal-peerd": build_dir() / "peerd" / "shoal-peerd",
        "shoal-scheduler": build_dir() / "scheduler" / "shoal-scheduler",
        "shoalctl": build_dir() / "tools" / "shoalctl",
    }
    p = candidates[name]
    if not p.exists():
        raise FixtureError(f"{name} not built at {p}: run `make build` (or set SHOAL_BUILD_DIR)")
    return p


def to_yaml(value: Any, indent: int = 0) -> str:
    """A small YAML emitter for configs (JSON scalars are valid YAML)."""
    pad = "  " * indent
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        lines = []
        for k, v in value.items():
            if isinstance(v, (Mapping, list)) and v:
                lines.append(f"{pad}{k}:\n{to_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{k}: {to_yaml(v, 0)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        lines = []
        for item in value:
            if isinstance(item, Mapping) and item:
                body = to_yaml(item, indent + 1).lstrip()
                lines.append(f"{pad}- {body}")
            else:
                lines.append(f"{pad}- {to_yaml(item, 0)}")
        return "\n".join(lines)
    return json.dumps(value)


def upstream(name: str, url: str, **fields: Any) -> dict[str, Any]:
    """One `upstreams:` entry: name (the ns= value), url, plus any other upstream_config key
    (prefix, aliases, docker_hub, auth, credentials_file, connect_timeout, stall_timeout,
    max_retries)."""
    return {"name": name, "url": url, **fields}



def parse_metrics(text: str) -> dict[str, float]:
    """A Prometheus text page as {'name{labels}': value}; comments and unparsable lines skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            pass
    return out

class ListenPorts:
    """What the daemon fixtures share to start on ports they drew with free_port().

    A subclass sets `_PORT_ATTRS` (a config section whose "listen" is "host:port" → the attribute
    holding that port), and in __init__ `_chosen` (the sections whose port it drew itself, not the
    caller's), `_pick_host` (where free_port draws), `config` and `config_path`, then starts with
    `_launch(wait)`: a first start that lost a port is tried again on new ones
    (procs.start_on_free_ports); a restart keeps its ports."""

    _PORT_ATTRS: dict[str, str] = {}
    _started = False

    def _launch(self, wait: Callable[[], object]) -> None:
        start_on_free_ports(self.daemon, wait, self._repick, first=not self._started)
        self._started = True

    def _repick(self) -> bool:
        """Draws a new port for every drawn one the config still listens on (`extra` may have
        set its own) and rewrites the config; False when none could move."""
        moved = False
        for section, attr in self._PORT_ATTRS.items():
            if section not in self._chosen or \
                    self.config[section].get("listen") != f"{self.host}:{getattr(self, attr)}":
                continue
            setattr(self, attr, free_port(self._pick_host))
            self.config[section]["listen"] = f"{self.host}:{getattr(self, attr)}"
            moved = True
        if moved:
            self.config_path.write_text(to_yaml(self.config) + "\n")
        return moved


class RegistryProxy(ListenPorts):
    """shoal-registry-proxy with a generated config.

    upstreams: list of dicts as in the config (name, url, auth, ...); see `upstream()`.
    extra: merged over the generated config (nested dicts merge).

    tls: its certs.TLSParty (the registry-proxy certificate): the daemon serves HTTPS (mutual TLS,
    the `tls` section) and `url` is https. client: the party this fixture presents for its own
    requests (metrics, get, readiness; default: an operator of the same CA, else `tls`).

    Lifecycle: construct (writes the config), `start()`, `stop()`/`kill()`; `restart()` keeps
    the port, cache and state (restart tests). The daemon runs with `no_proxy=*` so an
    http_proxy in the test environment never reroutes its upstream calls.
    """

    def __init__(self, directory: str | os.PathLike, *, upstreams: Sequence[Mapping[str, Any]],
                 host: str = "127.0.0.1", port: int | None = None, netns: str | None = None,
                 extra: Mapping[str, Any] | None = None, torrent: bool = False,
                 trackers: Sequence[str] = (), bt_port: int | None = None, log_level: str = "debug",
                 tls: Any = None, client: Any = None):
        self.dir = Path(directory)
        self.tls = tls
        self.client = client or tls
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.netns = netns
        self._pick_host = host if netns is None else "127.0.0.1"
        self._chosen = {s for s, given in (("http", port), ("torrent", bt_port)) if given is None}
        self.port = port or free_port(self._pick_host)
        self.bt_port = bt_port or free_port(self._pick_host)
        cfg: dict[str, Any] = {
            "http": {"listen": f"{host}:{self.port}"},
            "log": {"level": log_level, "format": "text"},
            "cache": {"dir": str(self.dir / "cache"), "quota": "4GiB"},
            "state_dir": str(self.dir / "state"),
            "upstreams": list(upstreams),
            "torrent": {"enabled": torrent, "listen": f"{host}:{self.bt_port}",
                        "trackers": list(trackers)},
        }
        if tls is not None:
            cfg["tls"] = tls.section()
        if extra:
            _merge(cfg, extra)
        self.config = cfg
        self.config_path = self.dir / "registry-proxy.yaml"
        self.config_path.write_text(to_yaml(cfg) + "\n")
        self.daemon = Daemon("registry-proxy", [str(binary("shoal-registry-proxy")), "-c", str(self.config_path)],
                             log_path=self.dir / "registry-proxy.log", netns=netns,
                             env={"no_proxy": "*", "NO_PROXY": "*"})
        self.name = f"registry-proxy({self.dir.name})"

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def _ctx(self):
        """The client SSL context for this instance's https URL (None when plain)."""
        return self.client.ssl_context() if self.tls is not None and self.client else None

    _PORT_ATTRS = {"http": "port", "torrent": "bt_port"}

    def start(self, timeout: float = 20) -> "RegistryProxy":
        self._launch(lambda: self.daemon.wait_http(
            self.url + "/healthz", timeout=timeout, ok=lambda s: s == 200,
            client=self.client if self.tls is not None else None))
        return self

    def stop(self) -> int | None:
        return self.daemon.stop()

    def restart(self, timeout: float = 20) -> "RegistryProxy":
        """SIGTERM, wait, start again on the same port, cache and state."""
        self.daemon.stop()
        return self.start(timeout)

    @property
    def bt_endpoint(self) -> str:
        return f"{self.host}:{self.bt_port}"

    def print_config(self, *extra_args: str) -> str:
        """The binary's `--print-config` output for this instance's config file."""
        cp = run([str(binary("shoal-registry-proxy")), "-c", str(self.config_path), *extra_args,
                  "--print-config"], what="shoal-registry-proxy --print-config", timeout=30)
        return cp.stdout

    def kill(self) -> int | None:
        return self.daemon.kill()

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()

    def log_text(self) -> str:
        return self.daemon.log_text()

    def metrics(self) -> dict[str, float]:
        """Parses /metrics into {'name{labels}': value}."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5, context=self._ctx()) as r:
            return parse_metrics(r.read().decode())

    def metric(self, name: str, labels: str = "") -> float:
        key = f"{name}{{{labels}}}" if labels else name
        return self.metrics().get(key, 0.0)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5, context=self._ctx()) as r:
            return r.read().decode()

    def open(self, path: str, headers: Mapping[str, str] | None = None, method: str = "GET",
             timeout: float = 30) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends one request on a fresh connection and returns it with the response, whose body
        the caller reads at its own pace (streaming tests) and then closes the connection."""
        if self.tls is not None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ctx())
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.request(method, path, headers=dict(headers or {}))
        return conn, conn.getresponse()

    def get(self, path: str, headers: Mapping[str, str] | None = None, method: str = "GET",
            timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, method=method, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ctx()) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def _merge(dst: dict, src: Mapping[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v
