"""Fixtures for peerd and the scheduler (registry-proxy lives in shoal.py).

Both take a directory, write a YAML config there, and run the binary from the build tree as a
Daemon (optionally inside a network namespace).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from .procs import Daemon, free_port
from .shoal import ListenPorts, _merge, binary, to_yaml


def _http_json(url: str, *, method: str = "GET", body: Any = None, timeout: float = 30,
               netns: str | None = None, client: Any = None) -> tuple[int, Any]:
    """`client` (a certs.TLSParty): the CA and client certificate for an https URL."""
    if netns is not None:
        # Run curl inside the namespace (urllib cannot enter it).
        from .procs import run
        argv = ["ip", "netns", "exec", netns, "curl", "-s", "-m", str(int(timeout)), "-w", "\n%{http_code}",
                "-X", method, *(client.curl_args() if client else []), url]
        if body is not None:
            argv += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        out = run(argv, timeout=timeout + 5, check=False).stdout
        text, _, code = out.rpartition("\n")
        try:
            return int(code), json.loads(text) if text else None
        except ValueError:
            return int(code or 0), text
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, method=method, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout,
                                    context=client.ssl_context() if client else None) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


class Scheduler(ListenPorts):
    """shoal-scheduler. tls: its certs.TLSParty (serves HTTPS, calls registry-proxy with it);
    client: the party this fixture presents for its own requests (default: `tls`)."""

    def __init__(self, directory: str | os.PathLike, *, host: str = "127.0.0.1", port: int | None = None,
                 netns: str | None = None, extra: Mapping[str, Any] | None = None, log_level: str = "info",
                 tls: Any = None, client: Any = None):
        self.dir = Path(directory)
        self.tls, self.client = tls, client or tls
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host, self.netns = host, netns
        self._pick_host = "127.0.0.1" if netns else host
        self._chosen = {"http"} if port is None else set()
        self.port = port or free_port(self._pick_host)
        cfg: dict[str, Any] = {"http": {"listen": f"{host}:{self.port}"}, "log": {"level": log_level},
                               "tracker": {"interval": "5s", "min_interval": "2s"}}
        if tls is not None:
            cfg["tls"] = tls.section()
        if extra:
            _merge(cfg, extra)
        self.config = cfg
        self.config_path = self.dir / "scheduler.yaml"
        self.config_path.write_text(to_yaml(cfg) + "\n")
        self.daemon = Daemon("scheduler", [str(binary("shoal-scheduler")), "-c", str(self.config_path)],
                             log_path=self.dir / "scheduler.log", netns=netns)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.port}"

    _PORT_ATTRS = {"http": "port"}

    def start(self, timeout: float = 20) -> "Scheduler":
        def wait():
            if self.netns:
                self.daemon.wait_tcp(self.port, self.host, timeout=timeout)
            else:
                self.daemon.wait_http(self.url + "/healthz", timeout=timeout, ok=lambda s: s == 200,
                                      client=self.client)
        self._launch(wait)
        return self

    def stop(self):
        return self.daemon.stop()

    def kill(self):
        return self.daemon.kill()

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()

    def nodes(self, netns: str | None = None) -> list[dict]:
        code, body = _http_json(self.url + "/v1/nodes", netns=netns, client=self.client)
        return body if code == 200 else []


class Peerd(ListenPorts):
    """shoal-peerd for one node. `host` is the node's address (inside `netns` when given).
    tls: the node's certs.TLSParty: its calls to registry-proxy and the scheduler (https URLs)
    present it, and the metrics listener serves with it. metrics_port: the metrics listener
    (metrics_listen) on host:port; None: off. The HTTP listener (`url`) stays plain."""

    def __init__(self, directory: str | os.PathLike, *, name: str, registry_proxy: str, scheduler: str = "",
                 host: str = "127.0.0.1", http_port: int | None = None, bt_port: int | None = None,
                 netns: str | None = None, zone: str = "", rack: str = "", extra: Mapping[str, Any] | None = None,
                 log_level: str = "info", tls: Any = None, metrics_port: int | None = None):
        self.dir = Path(directory)
        self.tls, self.metrics_port = tls, metrics_port
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name, self.host, self.netns = name, host, netns
        self._pick_host = "127.0.0.1" if netns else host
        self._chosen = {s for s, given in (("http", http_port), ("swarm", bt_port)) if given is None}
        self.http_port = http_port or free_port(self._pick_host)
        self.bt_port = bt_port or free_port(self._pick_host)
        cfg: dict[str, Any] = {
            "http": {"listen": f"{host}:{self.http_port}"},
            "log": {"level": log_level},
            "node": {"name": name, "zone": zone, "rack": rack},
            "upstream": {"registry_proxy": registry_proxy, "scheduler": scheduler},
            "cache": {"dir": str(self.dir / "cache"), "quota": "4GiB"},
            "swarm": {"listen": f"{host}:{self.bt_port}", "announce_ip": host, "heartbeat_interval": "2s"},
        }
        if tls is not None:
            cfg["tls"] = tls.section()
        if metrics_port is not None:
            cfg["metrics_listen"] = f"{host}:{metrics_port}"
        if extra:
            _merge(cfg, extra)
        self.config = cfg
        self.config_path = self.dir / "peerd.yaml"
        self.config_path.write_text(to_yaml(cfg) + "\n")
        self.daemon = Daemon(f"peerd-{name}", [str(binary("shoal-peerd")), "-c", str(self.config_path)],
                             log_path=self.dir / "peerd.log", netns=netns)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """The metrics listener's base URL (https with TLS on)."""
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.metrics_port}"

    _PORT_ATTRS = {"http": "http_port", "swarm": "bt_port"}

    def start(self, timeout: float = 20) -> "Peerd":
        def wait():
            if self.netns:
                self.daemon.wait_tcp(self.http_port, self.host, timeout=timeout)
            else:
                self.daemon.wait_http(self.url + "/healthz", timeout=timeout, ok=lambda s: s == 200)
        self._launch(wait)
        return self

    def stop(self):
        return self.daemon.stop()

    def kill(self):
        return self.daemon.kill()

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()

    def log_text(self) -> str:
        return self.daemon.log_text()

    def status(self) -> dict:
        code, body = _http_json(self.url + "/shoal/v1/status", netns=self.netns)
        return body if code == 200 and isinstance(body, dict) else {}

    def pull(self, image: str, timeout: float = 300) -> tuple[int, Any]:
        return _http_json(self.url + "/shoal/v1/pull", method="POST", body={"image": image}, timeout=timeout,
                          netns=self.netns)
