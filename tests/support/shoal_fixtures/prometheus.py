"""Debian's Prometheus (package prometheus, tools/install-deps) scraping a cluster's daemons.

    prom = Prometheus(tmp / "prometheus", host=infra_ip, netns=infra_ns,
                      jobs={"shoal-peerd": ["10.0.0.4:9465"], ...}, tls=pki.monitor(),
                      rule_files=[ROOT / "deploy/observability/alerts.yaml"]).start()
    prom.query('sum(rate(shoal_peerd_bytes_from_peers_total[5m]))')  # -> the result list

Every job is scraped every `interval` over https with `tls` (the cluster CA and a client
certificate) or over http without it. The server listens on host:port inside `netns`; queries go
through curl in the same namespace. Only the HTTP API of Prometheus is used (v1/query, v1/targets,
v1/rules), as Grafana would.
"""
from __future__ import annotations

import json
import shutil
import time
import urllib.parse
from pathlib import Path
from typing import Any, Mapping, Sequence

from .certs import TLSParty
from .procs import Daemon, FixtureError, run


def prometheus_binary() -> str:
    p = shutil.which("prometheus")
    if not p:
        raise FixtureError("prometheus is not installed: run tools/install-deps")
    return p


class Prometheus:
    def __init__(self, directory: str | Path, *, host: str, port: int = 9090, netns: str | None = None,
                 jobs: Mapping[str, Sequence[str]], tls: TLSParty | None = None,
                 rule_files: Sequence[str | Path] = (), interval: str = "1s"):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host, self.port, self.netns = host, port, netns
        self.jobs = {k: list(v) for k, v in jobs.items()}
        self.tls = tls
        self.rule_files = [str(r) for r in rule_files]
        self.interval = interval
        self.config_path = self.dir / "prometheus.yml"
        self._write_config()
        self.daemon = Daemon("prometheus", [
            prometheus_binary(), f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address={host}:{port}",
            "--storage.tsdb.retention.time=2h", "--log.level=warn"],
            log_path=self.dir / "prometheus.log", netns=netns)

    def _write_config(self) -> None:
        scrape = []
        for job, targets in self.jobs.items():
            j: dict[str, Any] = {"job_name": job, "metrics_path": "/metrics",
                                 "static_configs": [{"targets": targets}]}
            if self.tls:
                j["scheme"] = "https"
                j["tls_config"] = {"ca_file": str(self.tls.ca), "cert_file": str(self.tls.cert.cert),
                                   "key_file": str(self.tls.cert.key)}
            scrape.append(j)
        cfg = {"global": {"scrape_interval": self.interval, "scrape_timeout": self.interval,
                          "evaluation_interval": self.interval},
               "rule_files": self.rule_files, "scrape_configs": scrape}
        # JSON is YAML: no yaml module needed for writing.
        self.config_path.write_text(json.dumps(cfg, indent=1))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "Prometheus":
        self.daemon.start()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.daemon.alive:
                raise FixtureError(f"prometheus exited at start\n{self.daemon.diagnostics()}")
            cp = self._curl("/-/ready", timeout=2)
            if cp.returncode == 0 and "Ready" in cp.stdout:
                return self
            time.sleep(0.3)
        raise FixtureError(f"prometheus not ready after {timeout}s\n{self.daemon.diagnostics()}")

    def stop(self):
        return self.daemon.stop()

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()

    def _curl(self, path: str, timeout: float = 10):
        return run(["curl", "-s", "-m", str(int(max(timeout, 1))), self.url + path], netns=self.netns,
                   timeout=timeout + 10, check=False)

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>?params; the `data` of a success answer, else FixtureError."""
        q = ("?" + urllib.parse.urlencode(params)) if params else ""
        cp = self._curl(f"/api/v1/{path}{q}")
        try:
            body = json.loads(cp.stdout)
        except ValueError:
            raise FixtureError(f"prometheus /api/v1/{path}: not JSON: {cp.stdout[:300]!r} {cp.stderr[:300]}")
        if body.get("status") != "success":
            raise FixtureError(f"prometheus /api/v1/{path}{q}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result list (vector or matrix; a scalar becomes one entry)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_targets_up(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        bad: list[str] = []
        while time.monotonic() < end:
            ts = self.targets()
            bad = [f"{t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}" for t in ts if t["health"] != "up"]
            if ts and not bad:
                return
            time.sleep(0.5)
        raise FixtureError("prometheus targets not up:\n  " + "\n  ".join(bad))
