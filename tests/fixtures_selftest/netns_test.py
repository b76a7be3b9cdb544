"""Self-test of shoal_fixtures.netns: namespaces on a bridge, tbf shaping measured with real HTTP
transfers (python http.server → curl), isolation, and teardown including stale leftovers.
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureTestCase, free_port, oci, run  # noqa: E402
from shoal_fixtures.containerd import Containerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.netns import (Network, Shape, cleanup_stale, list_namespaces,  # noqa: E402
                                  rate_bits)
from shoal_fixtures.procs import Daemon, wait_until  # noqa: E402

RATE = "50mbit"
FILE_BYTES = 12 * 1000 * 1000  # ~2 s at 50 Mbit/s


def cpu_busy_fraction(before, after):
    """Machine-wide CPU busy fraction between two /proc/stat samples."""
    idle = (after[3] + after[4]) - (before[3] + before[4])
    total = sum(after) - sum(before)
    return 1 - idle / total if total else 0.0


def cpu_sample():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def curl_rate(url, netns=None):
    """Download speed in bit/s measured by curl, and the CPU busy fraction meanwhile."""
    before = cpu_sample()
    cp = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", url],
             netns=netns, timeout=60, what=f"curl {url}")
    busy = cpu_busy_fraction(before, cpu_sample())
    speed, size = cp.stdout.split()
    assert int(size) == FILE_BYTES, f"short download: {size}"
    return float(speed) * 8, busy


def link_exists(name):
    return run(["ip", "link", "show", name], check=False).returncode == 0


@unittest.skipUnless(os.geteuid() == 0, "network namespaces need root")
class NetnsTest(FixtureTestCase):
    def test_shaped_link_rate_both_directions(self):
        d = self.tmpdir("shoal-netns-")
        with open(d / "blob", "wb") as f:
            f.write(os.urandom(FILE_BYTES))
        net = self.track(Network(2, shape=Shape(RATE)).create())
        a, b = net.nodes
        a.http_server(d, 8080, log_path=d / "a.log")
        port = free_port(net.host_ip)
        host_srv = self.track(Daemon("host http.server", [sys.executable, "-m", "http.server",
                                                          str(port), "--bind", net.host_ip,
                                                          "--directory", d],
                                     log_path=d / "host.log").start())
        host_srv.wait_tcp(port, net.host_ip)
        want = rate_bits(RATE)
        paths = {
            "node a -> node b": (f"http://{a.ip}:8080/blob", b.name),   # a's uplink, b's downlink
            "node a -> host": (f"http://{a.ip}:8080/blob", None),       # a's uplink only
            "host -> node b": (f"http://{net.host_ip}:{port}/blob", b.name),  # b's downlink only
        }
        report = []
        for what, (url, netns) in paths.items():
            got, busy = curl_rate(url, netns)
            report.append(f"{what}: {got / 1e6:.1f} Mbit/s (CPU {busy * 100:.0f}% busy)")
            with self.subTest(what):
                self.assertLess(abs(got - want) / want, 0.20,
                                f"{what}: {got / 1e6:.1f} Mbit/s vs shape {RATE}\n"
                                f"{a.qdisc()}{b.qdisc()}")
        print("\n" + "\n".join(report), file=sys.stderr)

        # Unshaped, the same path runs far faster: the limit really comes from tbf.
        b.set_shape(None)
        a.set_shape(None)
        got, busy = curl_rate(f"http://{a.ip}:8080/blob", b.name)
        print(f"unshaped node a -> node b: {got / 1e6:.1f} Mbit/s (CPU {busy * 100:.0f}% busy)",
              file=sys.stderr)
        self.assertGreater(got, 2 * want, f"unshaped {got / 1e6:.1f} Mbit/s")

    def test_nodes_only_reach_their_own_subnet(self):
        d = self.tmpdir()
        (d / "hello").write_text("hi")
        net = self.track(Network(2).create())
        a, b = net.nodes
        routes = a.exec(["ip", "-4", "route"]).stdout
        self.assertNotIn("default", routes)
        self.assertIn(str(net.subnet), routes)
        b.http_server(d, 8081, log_path=d / "b.log")
        # (No ping here: iputils-ping is not among the project's packages.)
        self.assertEqual(a.exec(["curl", "-sS", "--max-time", "5",
                                 f"http://{b.ip}:8081/hello"]).stdout, "hi")
        self.assertEqual(run(["curl", "-sS", "--max-time", "5",
                              f"http://{b.ip}:8081/hello"]).stdout, "hi")
        # Any address outside the fixture's subnet is unreachable from a node.
        cp = a.exec(["ip", "route", "get", "192.0.2.1"], check=False)
        self.assertNotEqual(cp.returncode, 0)

    def test_containerd_in_a_node_pulls_from_host_and_node_registries(self):
        d = self.tmpdir("shoal-netns-ctrd-")
        net = self.track(Network(2, shape=Shape("200mbit")).create())
        a, b = net.nodes
        host_reg = self.track(Registry(d / "host-reg", host=net.host_ip).start())
        node_reg = self.track(Registry(d / "node-reg", host=a.ip, netns=a.name).start())
        ctrd = self.track(Containerd(d / "ctrd", netns=b.name).start())
        for reg in (host_reg, node_reg):
            with self.subTest(registry=reg.host_port):
                layout = oci.make_image(d / f"img-{reg.port}", [oci.LayerSpec(
                    size=2 * oci.MIB, seed=f"netns-{reg.host}")])
                ref = reg.push(layout, "netns/app")
                mark = reg.mark()
                ctrd.configure_registry(reg.host_port)
                ctrd.pull(ref)
                ctrd.verify_unpacked(layout.images)
                reg.wait_log_quiet()
                blob_gets = [e for e in reg.access_log(since=mark) if e.blob]
                self.assertEqual(len(blob_gets), 2)
                # The pull came from inside node b, over the bridge.
                self.assertEqual({e.remote for e in blob_gets}, {b.ip})

    def test_destroy_removes_everything_and_kills_processes(self):
        d = self.tmpdir()
        net = Network(2).create()
        self.addCleanup(net.destroy)
        names = [n.name for n in net.nodes]
        veths = [n.veth_host for n in net.nodes]
        daemon = net.nodes[0].spawn("sleeper", ["sleep", "300"], log_path=d / "s.log")
        # A process started behind the fixture's back, still inside the namespace.
        stray = subprocess.Popen(["ip", "netns", "exec", names[1], "sleep", "300"])
        self.addCleanup(lambda: (stray.kill(), stray.wait()))
        wait_until(lambda: str(stray.pid) in run(["ip", "netns", "pids", names[1]]).stdout, 10,
                   "stray process inside the namespace")
        net.destroy()
        self.assertFalse(daemon.alive)
        self.assertEqual(stray.wait(timeout=10), -9)
        self.assertFalse(set(names) & set(list_namespaces()))
        self.assertFalse(link_exists(net.bridge))
        for v in veths:
            self.assertFalse(link_exists(v))
        net.destroy()  # idempotent

    def test_cleanup_stale_removes_only_dead_runs(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        dead_ns = f"shoal-{dead.pid}-0-0"
        dead_br = f"shb{dead.pid:x}-0"
        live_ns = f"shoal-{os.getpid()}-999-0"
        for cmd in (["ip", "netns", "add", dead_ns], ["ip", "netns", "add", live_ns],
                    ["ip", "link", "add", dead_br, "type", "bridge"]):
            run(cmd)
        self.addCleanup(lambda: run(["ip", "netns", "del", live_ns], check=False))
        self.addCleanup(lambda: run(["ip", "netns", "del", dead_ns], check=False))
        self.addCleanup(lambda: run(["ip", "link", "del", dead_br], check=False))
        # (Another run's Network.create() may sweep them first, so check state, not the list.)
        cleanup_stale()
        self.assertNotIn(dead_ns, list_namespaces())
        self.assertFalse(link_exists(dead_br))
        self.assertIn(live_ns, list_namespaces(), "a live run's namespace must survive")


if __name__ == "__main__":
    unittest.main(verbosity=2)
