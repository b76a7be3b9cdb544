"""stunnel4 in client mode: local plain-text ports that reach TLS servers with a client
certificate, as the scheduler pod's sidecar reaches Redis and its Sentinels (docs/ha.md, "TLS to
Redis"; Debian's hiredis 0.14 has no TLS).

    tun = Stunnel(tmp / "stunnel", party, [redis.primary_addr(), ...]).start()
    tun.local(addr)     # "127.0.0.1:<port>": the tunnel's plain end for a TLS server at addr

Each tunnel verifies the server's chain against the party's CA and its address (checkIP for an
IP, checkHost for a name), and presents the party's certificate. One stunnel process serves
every tunnel; its log (level notice) is stunnel.log. Lifecycle: construct, start(), stop().
"""
from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path
from typing import Sequence

from .procs import Daemon, FixtureError, free_port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


class Stunnel:
    def __init__(self, directory: str | Path, party: object, remotes: Sequence[tuple[str, int]],
                 host: str = "127.0.0.1") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.party = party
        self.host = host
        self.ports = {(r[0], int(r[1])): free_port(host) for r in remotes}
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        if binary is None:
            raise FixtureError("stunnel4 is not installed: run tools/install-deps")
        self.conf = self.dir / "stunnel.conf"
        self.conf.write_text(self._config())
        self.daemon = Daemon("stunnel", [binary, str(self.conf)], log_path=self.dir / "stunnel.log")

    def _config(self) -> str:
        p = self.party
        lines = ["foreground = yes", "pid =", "debug = notice", ""]
        for i, ((host, port), local) in enumerate(self.ports.items()):
            lines += [f"[t{i}]", "client = yes", f"accept = {self.host}:{local}",
                      f"connect = {host}:{port}", f"cert = {p.cert.cert}", f"key = {p.cert.key}",
                      f"CAfile = {p.ca}", "verifyChain = yes",
                      f"checkIP = {host}" if _is_ip(host) else f"checkHost = {host}", ""]
        return "\n".join(lines)

    def local(self, remote: tuple[str, int]) -> str:
        return f"{self.host}:{self.ports[(remote[0], int(remote[1]))]}"

    def start(self, timeout: float = 10) -> "Stunnel":
        self.daemon.start()
        for port in self.ports.values():
            self.daemon.wait_tcp(port, self.host, timeout=timeout)
        return self

    def stop(self) -> None:
        self.daemon.stop(timeout=5)

    def diagnostics(self) -> str:
        return self.daemon.diagnostics()
