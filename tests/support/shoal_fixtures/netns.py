"""Several "nodes" on one machine: network namespaces joined by a bridge, with shaped links.

Topology: one Linux bridge in the root namespace; per node a namespace with a veth pair whose
namespace end is `eth0` (address 10.77.X.(10+i)/24) and whose host end is enslaved to the
bridge. The root namespace gets 10.77.X.1 on the bridge (optional), so daemons on the host, such
as an upstream registry, can listen on an address the nodes reach. X is random per run and
checked against the host's routes, so parallel runs and other helpers do not clash. Nodes get no
default route: their traffic cannot leave the addresses this fixture created.

Shaping: `tc qdisc replace … root tbf rate R burst B latency L` on **both** ends of a node's
veth: the namespace end limits what the node sends, the host end what it receives. Measured
here: a 20 MB HTTP transfer over a 50mbit shape runs at ~47.8 Mbit/s (goodput; headers and
framing take the rest). The `netem` qdisc is not available in this kernel ("Specified qdisc kind
is unknown"), so added delay cannot be modelled; tbf's `latency` is only its queue bound.

Names carry the creating process id (`shoal-<pid>-<k>-<i>` namespaces, `shb<pidhex>-<k>` bridge,
`shv<pidhex>-<k>-<i>` veths) so `cleanup_stale()` can remove what a killed run left behind without
touching anything of a live run. `Network.destroy()` (also registered with atexit) kills the
processes still inside its namespaces by pid and deletes namespaces and bridge.

Not thread-safe; create and destroy from the test's thread. Requires root.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .procs import Daemon, FixtureError, run

NS_PREFIX = "shoal-"
_NS_RE = re.compile(r"^shoal-(\d+)-\d+-\d+$")
_LINK_RE = re.compile(r"^sh(?:b([0-9a-f]+)-\d+|v([0-9a-f]+)-\d+-\d+)$")
_counter = itertools.count()


@dataclass
class Shape:
    """A tbf link shape. rate/burst/latency use tc's units ("50mbit", "64kb", "50ms")."""

    rate: str
    burst: str | None = None
    latency: str = "50ms"

    def burst_or_default(self) -> str:
        if self.burst:
            return self.burst
        # At least 32 KiB, or 4 ms worth of the rate: small bursts under-shoot the rate with
        # GSO-sized packets, large ones let short transfers run above it.
        bits = rate_bits(self.rate)
        return f"{max(32 * 1024, int(bits / 8 * 0.004))}b"


@dataclass
class Node:
    """One namespace: its name, address on the bridge, and both ends of its veth."""

    network: "Network"
    index: int
    name: str
    ip: str
    veth_host: str
    veth_ns: str = "eth0"
    shape: Shape | None = None
    daemons: list[Daemon] = field(default_factory=list)

    def exec(self, argv: Sequence[str], *, timeout: float = 60, check: bool = True,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Runs a command to completion inside the node."""
        return run(argv, netns=self.name, timeout=timeout, check=check, env=env)

    def spawn(self, name: str, argv: Sequence[str | os.PathLike], *,
              log_path: str | os.PathLike, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None,
              stdout_path: str | os.PathLike | None = None) -> Daemon:
        """Starts a daemon inside the node; it is stopped by `Network.destroy()` at the latest."""
        d = Daemon(f"{name}@{self.name}", argv, log_path=log_path, env=env, cwd=cwd,
                   netns=self.name, stdout_path=stdout_path).start()
        self.daemons.append(d)
        return d

    def http_server(self, directory: str | os.PathLike, port: int, *,
                    log_path: str | os.PathLike) -> Daemon:
        """python3 -m http.server serving `directory` on this node's address."""
        d = self.spawn("http.server", [sys.executable, "-m", "http.server", str(port),
                                       "--bind", self.ip, "--directory", str(directory)],
                       log_path=log_path)
        d.wait_tcp(port, self.ip, timeout=20)
        return d

    def set_shape(self, shape: Shape | None) -> None:
        """Shapes (or, with None, unshapes) both directions of this node's link."""
        for netns, dev in ((self.name, self.veth_ns), (None, self.veth_host)):
            run(["tc", "qdisc", "del", "dev", dev, "root"], netns=netns, check=False)
            if shape is None:
                continue
            run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", shape.rate,
                 "burst", shape.burst_or_default(), "latency", shape.latency],
                netns=netns, what=f"tc tbf on {dev}")
        self.shape = shape

    def qdisc(self) -> str:
        """`tc -s qdisc show` of both ends, for diagnostics."""
        a = run(["tc", "-s", "qdisc", "show", "dev", self.veth_ns], netns=self.name,
                check=False).stdout
        b = run(["tc", "-s", "qdisc", "show", "dev", self.veth_host], check=False).stdout
        return f"{self.name}:{self.veth_ns}\n{a}host:{self.veth_host}\n{b}"


class Network:
    """N namespaces on one bridge. Lifecycle: `Network(n, …)`, `create()`, `destroy()`."""

    def __init__(self, nodes: int, *, shape: Shape | None = None, host_addr: bool = True,
                 subnet: str | None = None) -> None:
        if not 1 <= nodes <= 200:
            raise ValueError("nodes must be 1..200")
        self.count = nodes
        self.shape = shape
        self.host_addr = host_addr
        self.pid = os.getpid()
        self.k = next(_counter)
        self.bridge = f"shb{self.pid:x}-{self.k}"
        self._subnet_arg = subnet
        self.subnet: ipaddress.IPv4Network | None = None
        self.nodes: list[Node] = []
        self._created = False

    def set_tcp_congestion_control(self, cc: str = "") -> str:
        """Sets every namespace's default TCP congestion control to `cc` (empty: leaves the one
        they inherited from the host) and returns the one in effect. Connections made or
        accepted afterwards use it. A namespace may only pick from the host's allowed list."""
        if cc:
            allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
            if cc not in allowed:
                raise FixtureError(f"tcp congestion control {cc}: not in the host's "
                                   f"net.ipv4.tcp_allowed_congestion_control ({' '.join(allowed)}); allow it "
                                   f"with sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{' '.join(allowed + [cc])}\"")
            for n in self.nodes:
                n.exec(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"])
        return self.nodes[0].exec(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip()

    @property
    def host_ip(self) -> str:
        """The root namespace's address on the bridge (reachable from every node)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def create(self) -> "Network":
        if os.geteuid() != 0:
            raise FixtureError("network namespaces need root")
        # Leftovers of killed runs would hold subnets and names; live runs are left alone.
        cleanup_stale()
        self._created = True
        atexit.register(self.destroy)
        try:
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            self._claim_subnet()
            run(["ip", "link", "set", self.bridge, "up"])
            for i in range(self.count):
                self._add_node(i)
            if self.shape is not None:
                for n in self.nodes:
                    n.set_shape(self.shape)
        except BaseException:
            self.destroy()
            raise
        return self

    def _claim_subnet(self) -> None:
        """Picks the subnet and puts the host address on the bridge. Another run may pick the
        same random subnet at the same moment; the route table then shows it twice, and the
        later of the two (each sees the other) moves on to a new pick."""
        for _ in range(8):
            self.subnet = ipaddress.ip_network(self._subnet_arg) if self._subnet_arg \
                else _pick_subnet()
            if not self.host_addr:
                return
            run(["ip", "addr", "add", f"{self.host_ip}/{self.subnet.prefixlen}",
                 "dev", self.bridge])
            routes = run(["ip", "-4", "route", "show", str(self.subnet)], check=False).stdout
            if self._subnet_arg or routes.count(str(self.subnet)) <= 1:
                return
            run(["ip", "addr", "del", f"{self.host_ip}/{self.subnet.prefixlen}",
                 "dev", self.bridge], check=False)
        raise FixtureError("could not claim a free 10.77.X.0/24 subnet")

    def _add_node(self, i: int) -> Node:
        assert self.subnet is not None
        name = f"{NS_PREFIX}{self.pid}-{self.k}-{i}"
        ip = str(self.subnet.network_address + 10 + i)
        veth = f"shv{self.pid:x}-{self.k}-{i}"
        if len(veth) > 15 or len(self.bridge) > 15:
            raise FixtureError(f"interface name too long: {veth} / {self.bridge}")
        run(["ip", "netns", "add", name])
        node = Node(self, i, name, ip, veth)
        self.nodes.append(node)  # before the links exist, so destroy() sees a half-made node
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name])
        run(["ip", "link", "set", veth, "master", self.bridge])
        run(["ip", "link", "set", veth, "up"])
        run(["ip", "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0"], netns=name)
        run(["ip", "link", "set", "eth0", "up"], netns=name)
        run(["ip", "link", "set", "lo", "up"], netns=name)
        return node

    def destroy(self) -> None:
        """Stops daemons, kills leftover processes in the namespaces, deletes everything.

        Safe to call more than once and on a half-created network.
        """
        if not self._created:
            return
        for node in self.nodes:
            for d in node.daemons:
                try:
                    d.stop(timeout=5)
                except Exception:  # noqa: BLE001 - keep tearing down
                    pass
        for name in self._namespaces():
            _delete_namespace(name)
        # The kernel removes a namespace's veths asynchronously; delete the host ends (and with
        # them the pairs) now so that nothing is left when destroy() returns.
        for node in self.nodes:
            if run(["ip", "link", "show", node.veth_host], check=False).returncode == 0:
                run(["ip", "link", "del", node.veth_host], check=False)
        run(["ip", "link", "del", self.bridge], check=False)
        self._created = False
        self.nodes = []

    def _namespaces(self) -> list[str]:
        prefix = f"{NS_PREFIX}{self.pid}-{self.k}-"
        return [n for n in list_namespaces() if n.startswith(prefix)]

    def __enter__(self) -> "Network":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def stop(self) -> None:
        """Alias of destroy() so `FixtureTestCase.track(network)` works."""
        self.destroy()

    def diagnostics(self) -> str:
        out = [f"bridge {self.bridge} subnet {self.subnet}"]
        for n in self.nodes:
            out.append(n.qdisc())
            for d in n.daemons:
                out.append(d.diagnostics(20))
        return "\n".join(out)


# -- stale cleanup ---------------------------------------------------------------------------------

def list_namespaces() -> list[str]:
    cp = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Removes namespaces and links named by this fixture whose creating process is gone.

    Returns what was removed. Objects of live processes (parallel test runs) are left alone.
    """
    removed = []
    for name in list_namespaces():
        m = _NS_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _delete_namespace(name)
            removed.append(name)
    cp = run(["ip", "-o", "link", "show"], check=False)
    for line in cp.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        link = parts[1].strip().split("@")[0]
        m = _LINK_RE.match(link)
        if m and not _pid_alive(int(m.group(1) or m.group(2), 16)):
            run(["ip", "link", "del", link], check=False)
            removed.append(link)
    return removed


def _delete_namespace(name: str) -> None:
    # Kill by pid whatever still runs in the namespace (all of it was started by the test).
    cp = run(["ip", "netns", "pids", name], check=False)
    for pid in (int(p) for p in cp.stdout.split() if p.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run(["ip", "netns", "del", name], check=False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pick_subnet() -> ipaddress.IPv4Network:
    used = run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout + \
        run(["ip", "-4", "addr"], check=False).stdout
    for _ in range(64):
        x = secrets.randbelow(256)
        if f"10.77.{x}." not in used:
            return ipaddress.ip_network(f"10.77.{x}.0/24")
    raise FixtureError("no free 10.77.X.0/24 subnet found")


def rate_bits(rate: str) -> float:
    """bits per second from tc rate syntax (kbit, mbit, gbit, bit; kbps etc. are bytes)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", rate.strip())
    if not m:
        raise ValueError(f"bad rate {rate!r}")
    value, unit = float(m.group(1)), m.group(2).lower()
    bit_units = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
    byte_units = {"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
    if unit in bit_units:
        return value * bit_units[unit]
    if unit in byte_units:
        return value * byte_units[unit]
    raise ValueError(f"bad rate unit in {rate!r}")

