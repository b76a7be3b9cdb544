#!/usr/bin/env python3
"""peerd and shoalctl fail over between scheduler replicas (docs/ha.md), on loopback.

Two real, independent shoal-scheduler processes (no shared state: each learns the node from its
heartbeats) and one peerd configured with both (`upstream.scheduler` A, `upstream.schedulers`
[B]), heartbeating every second with upstream.scheduler_timeout 1s:

- peerd heartbeats A only while A answers;
- A killed with SIGKILL (connection refused): the next heartbeat goes to B at once, so B hears
  the node within about one heartbeat interval;
- A restarted, then B stopped with SIGSTOP (it accepts connections and never answers): the
  heartbeat in flight gives up after scheduler_timeout and goes to A;
- shoalctl with both URLs answers `nodes` in each state, the dead or hung replica listed first.

Prints the measured failover times.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))

from shoal_fixtures import FixtureTestCase, free_port  # noqa: E402
from shoal_fixtures.nodes import Peerd, Scheduler  # noqa: E402
from shoal_fixtures.shoal import binary  # noqa: E402

NODE = "fo-node"
# One heartbeat interval (1 s), plus the timeout of a hung replica (1 s) where there is one, plus
# slack for a loaded 2-core machine.
REFUSED_BUDGET_S = 2.5
HUNG_BUDGET_S = 3.5


def node_seq(s: Scheduler) -> int | None:
    """The seq of the node's last heartbeat on `s`, None when it does not know the node."""
    for n in s.nodes():
        if n.get("name") == NODE or n.get("node") == NODE:
            return int(n.get("seq", 0))
    return None


def wait_heard(s: Scheduler, after: int | None, budget: float) -> float:
    """Seconds until `s` records a heartbeat newer than `after` (polling every 50 ms)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < budget + 5:
        seq = node_seq(s)
        if seq is not None and (after is None or seq > after):
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{s.url} heard no heartbeat within {budget + 5} s")


def shoalctl(*schedulers: str) -> tuple[int, float, str]:
    argv = [str(binary("shoalctl"))]
    for s in schedulers:
        argv += ["--scheduler", s]
    t0 = time.monotonic()
    p = subprocess.run(argv + ["nodes", "-o", "json"], capture_output=True, text=True, timeout=30)
    took = time.monotonic() - t0
    ok = p.returncode == 0 and any(n.get("name") == NODE or n.get("node") == NODE
                                   for n in json.loads(p.stdout or "[]"))
    return (0 if ok else p.returncode or 1), took, p.stderr


class SchedulerFailoverTest(FixtureTestCase):
    def test_heartbeats_and_shoalctl_move_to_the_live_replica(self):
        d = self.tmpdir("shoal-failover-")
        a = self.track(Scheduler(d / "a").start())
        b = self.track(Scheduler(d / "b").start())
        self.addCleanup(lambda: b.daemon.send_signal(signal.SIGCONT))
        peer = self.track(Peerd(d / "peerd", name=NODE, registry_proxy=f"http://127.0.0.1:{free_port()}",
                                scheduler=a.url, extra={
                                    "upstream": {"schedulers": [b.url], "scheduler_timeout": "1s"},
                                    "swarm": {"heartbeat_interval": "1s"},
                                }).start())

        # A answers: every heartbeat goes to A, none to B.
        wait_heard(a, None, 5)
        time.sleep(1.5)
        self.assertIsNone(node_seq(b), "B heard the node while A answered")

        # A killed: refused, the next heartbeat goes to B.
        a.kill()
        t_refused = wait_heard(b, None, REFUSED_BUDGET_S)
        print(f"kill -9 of the replica in use: B heard the node after {t_refused:.2f} s", flush=True)
        self.assertLess(t_refused, REFUSED_BUDGET_S)
        rc, took, err = shoalctl(a.url, b.url)
        print(f"shoalctl nodes with the dead replica first: {took:.2f} s", flush=True)
        self.assertEqual(rc, 0, err)
        self.assertLess(took, 3)

        # A back (empty: a new process), then B hung: the heartbeat times out and goes to A.
        a.start()
        time.sleep(1.5)
        self.assertIsNone(node_seq(a), "the restarted A heard the node while B answered")
        b.daemon.send_signal(signal.SIGSTOP)
        t_hung = wait_heard(a, None, HUNG_BUDGET_S)
        print(f"SIGSTOP of the replica in use: A heard the node after {t_hung:.2f} s", flush=True)
        self.assertLess(t_hung, HUNG_BUDGET_S)
        # And keeps hearing it (peerd stays on A; B is not tried first again).
        seq = node_seq(a)
        time.sleep(2.5)
        self.assertGreater(node_seq(a) or 0, seq or 0)
        # shoalctl: with the hung replica first a GET waits 5 s for it, then asks A.
        rc, took, err = shoalctl(b.url, a.url)
        print(f"shoalctl nodes with the hung replica first: {took:.2f} s", flush=True)
        self.assertEqual(rc, 0, err)
        self.assertLess(took, 8)
        rc, took, err = shoalctl(f"{a.url},{b.url}")
        self.assertEqual(rc, 0, err)
        self.assertLess(took, 2)

        self.assertTrue(peer.daemon.alive)
        self.assertIn("failed over to another endpoint", peer.log_text())


if __name__ == "__main__":
    unittest.main()
