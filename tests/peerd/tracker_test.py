#!/usr/bin/env python3
"""The scheduler's tracker and heartbeat endpoints over real HTTP (curl), on loopback.

Complements tests/scheduler/tracker_test.cc (the policy on the tracker object) with what only
the daemon shows: the query string as a client really sends it (percent-encoded binary), the
bencoded failure for every malformed parameter, the counters in /metrics (promtool-clean),
`ip=` trusted as peerd sends it (plain mode with tracker.trust_announced_ip, since every client
here connects from 127.0.0.1), and heartbeat holdings turning a node into a seed of a swarm it
never announced (and dropping it again).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE))

from bt_fake_peer import bdecode, compact_peers  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402


def q(b: bytes) -> str:
    return urllib.parse.quote_from_bytes(b, safe="")


def curl(url: str, *, method: str = "GET", data: str | None = None) -> tuple[int, bytes]:
    argv = ["curl", "-s", "--globoff", "-m", "10", "-o", "-", "-w", "\n%{http_code}", "-X", method, url]
    if data is not None:
        argv += ["-H", "Content-Type: application/json", "--data-binary", data]
    out = subprocess.run(argv, capture_output=True, timeout=20).stdout
    body, _, code = out.rpartition(b"\n")
    return int(code or 0), body


class TrackerHttpTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sched = cls.class_track(Scheduler(cls.class_tmpdir("shoal-tracker-") / "s",
                                              extra={"tracker": {"trust_announced_ip": True}}).start())
        cls.base = cls.sched.url

    def announce(self, ih: bytes, *, port: int, left: int, node: str, ip: str | None = None, extra: str = "",
                 rack: str = "r1", peer_id: bytes | None = None) -> tuple[int, dict]:
        pid = peer_id or (b"-SN0100-" + f"{port:012d}".encode())
        url = (f"{self.base}/announce?node={node}&zone=z1&rack={rack}&role=peer&info_hash={q(ih)}&peer_id={q(pid)}"
               f"&port={port}&uploaded=0&downloaded=0&left={left}&compact=1" + (f"&ip={ip}" if ip else "") + extra)
        code, body = curl(url)
        return code, bdecode(body)[0]

    def metric(self, name: str) -> float:
        _, body = curl(self.base + "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def test_malformed_announces_are_refused_with_a_reason(self):
        ih, pid = os.urandom(20), b"-SN0100-abcdefghijkl"
        good = f"info_hash={q(ih)}&peer_id={q(pid)}&port=6881&uploaded=0&downloaded=0&left=10&compact=1&node=n1"
        cases = {
            "missing info_hash": (good.replace(f"info_hash={q(ih)}&", ""), "info_hash"),
            "short info_hash": (good.replace(q(ih), q(ih[:19])), "info_hash"),
            "long info_hash": (good.replace(q(ih), q(ih + b"x")), "info_hash"),
            "broken escape": (good.replace(q(ih), "%zz" * 20), "info_hash"),
            "missing peer_id": (good.replace(f"peer_id={q(pid)}&", ""), "peer_id"),
            "port 0": (good.replace("port=6881", "port=0"), "port"),
            "port 70000": (good.replace("port=6881", "port=70000"), "port"),
            "port text": (good.replace("port=6881", "port=http"), "port"),
            "negative left": (good.replace("left=10", "left=-1"), "left"),
            "huge uploaded": (good.replace("uploaded=0", "uploaded=99999999999999999999999"), "uploaded"),
            "unknown event": (good + "&event=exploded", "event"),
            "numwant text": (good + "&numwant=lots", "numwant"),
            "node with spaces": (good.replace("node=n1", "node=a%20b"), "node"),
            "rack with binary": (good + "&rack=%00%ff", "rack"),
            "role": (good + "&role=king", "role"),
            "ip not an address": (good + "&ip=not-an-ip", "ip"),
        }
        before = self.metric("shoal_tracker_bad_announces_total")
        for name, (query, field) in cases.items():
            with self.subTest(name):
                code, body = curl(f"{self.base}/announce?{query}")
                self.assertEqual(code, 400, body)
                reply, _ = bdecode(body)
                self.assertIn(b"failure reason", reply)
                self.assertIn(field.encode(), reply[b"failure reason"], reply)
        self.assertEqual(self.metric("shoal_tracker_bad_announces_total"), before + len(cases))
        # The tracker still answers well-formed announces.
        code, reply = self.announce(ih, port=6881, left=10, node="n1")
        self.assertEqual(code, 200, reply)
        self.assertNotIn(b"failure reason", reply)

    def test_handout_order_origin_and_never_self(self):
        ih = os.urandom(20)
        # An origin (registry-proxy), two seeds in different racks, a downloader in rack r2.
        curl(f"{self.base}/announce?node=proxy&role=origin&info_hash={q(ih)}&peer_id={q(b'-SO0100-' + bytes(12))}"
             f"&port=6881&left=0&ip=10.1.0.1&compact=1")
        self.announce(ih, port=6882, left=0, node="seed-r1", ip="10.1.0.2", rack="r1")
        code, reply = self.announce(ih, port=6883, left=0, node="seed-r2", ip="10.1.0.3", rack="r2")
        self.assertEqual(code, 200)
        self.announce(ih, port=6884, left=100, node="leech", ip="10.1.0.4", rack="r2")
        # A new downloader in rack r2.
        code, reply = self.announce(ih, port=6885, left=100, node="me", ip="10.1.0.5", rack="r2")
        self.assertEqual(code, 200)
        peers = [f"{h}:{p}" for h, p in compact_peers(reply[b"peers"])]
        self.assertEqual(peers[0], "10.1.0.1:6881", f"origin not first: {peers}")
        self.assertEqual(peers[1], "10.1.0.3:6883", f"same-rack seed not before other seeds: {peers}")
        self.assertEqual(peers[2], "10.1.0.2:6882", peers)
        self.assertEqual(peers[3], "10.1.0.4:6884", f"seeds not before downloaders: {peers}")
        self.assertNotIn("10.1.0.5:6885", peers, "handed a peer to itself")
        # ip= is trusted (peerd's data-plane address), not the source address 127.0.0.1.
        self.assertFalse(any(p.startswith("127.") for p in peers), peers)
        # numwant=1 still includes the origin, which is always a possible seed.
        code, reply = self.announce(ih, port=6886, left=100, node="small", ip="10.1.0.6", extra="&numwant=1")
        peers = [f"{h}:{p}" for h, p in compact_peers(reply[b"peers"])]
        self.assertIn("10.1.0.1:6881", peers)
        # Same node name, another endpoint (a restarted peerd on a new port): still not itself.
        code, reply = self.announce(ih, port=7000, left=100, node="seed-r1", ip="10.1.0.2")
        peers = [f"{h}:{p}" for h, p in compact_peers(reply[b"peers"])]
        self.assertNotIn("10.1.0.2:6882", peers)

    def test_heartbeat_holdings_make_a_seed_until_dropped(self):
        ih = os.urandom(20)
        hb = {"schema": 1, "node": "holder", "labels": {"zone": "z1", "rack": "r1"}, "ip": "10.2.0.7",
              "bt_port": 6999, "http_port": 65001, "epoch": "", "seq": 1, "full": True,
              "objects": [{"digest": "sha256:" + "aa" * 32, "info_hash": ih.hex(), "size": 1234, "kind": "blob"}],
              "cache_capacity": 10, "cache_used": 1}
        code, body = curl(self.base + "/v1/heartbeat", method="POST", data=json.dumps(hb))
        self.assertEqual(code, 200, body)
        self.assertTrue(json.loads(body)["epoch"])
        nodes = {n["node"]: n for n in json.loads(curl(self.base + "/v1/nodes")[1])}
        self.assertEqual(nodes["holder"]["objects"], 1)
        self.assertEqual(nodes["holder"]["ip"], "10.2.0.7")
        self.assertTrue(nodes["holder"]["healthy"])
        # A downloader of that swarm is handed the holder, which never announced it.
        code, reply = self.announce(ih, port=6001, left=5, node="asker", ip="10.2.0.8")
        self.assertEqual(code, 200)
        self.assertIn(("10.2.0.7", 6999), compact_peers(reply[b"peers"]))
        self.assertGreaterEqual(reply[b"complete"], 1)
        # The holder unloads its torrent (stopped announce): it stays a holder.
        self.announce(ih, port=6999, left=0, node="holder", ip="10.2.0.7", extra="&event=stopped")
        code, reply = self.announce(ih, port=6002, left=5, node="asker2", ip="10.2.0.9")
        self.assertIn(("10.2.0.7", 6999), compact_peers(reply[b"peers"]))
        # A full heartbeat without the object drops it.
        hb.update(seq=2, objects=[], epoch=json.loads(body)["epoch"])
        self.assertEqual(curl(self.base + "/v1/heartbeat", method="POST", data=json.dumps(hb))[0], 200)
        code, reply = self.announce(ih, port=6003, left=5, node="asker3", ip="10.2.0.10")
        self.assertNotIn(("10.2.0.7", 6999), compact_peers(reply[b"peers"]))

    def test_bad_heartbeats_and_methods(self):
        before = self.metric("shoal_scheduler_bad_heartbeats_total")
        for body in ("not json", '{"schema": 99, "node": "x"}',
                     json.dumps({"schema": 1, "node": "x", "objects": [{"digest": "sha256:zz", "info_hash": "00"}]})):
            with self.subTest(body=body):
                code, reply = curl(self.base + "/v1/heartbeat", method="POST", data=body)
                self.assertEqual(code, 400, reply)
                self.assertIn("error", json.loads(reply))
        self.assertEqual(self.metric("shoal_scheduler_bad_heartbeats_total"), before + 3)
        self.assertEqual(curl(self.base + "/v1/heartbeat")[0], 405)
        self.assertEqual(curl(self.base + "/v1/nope")[0], 404)

    def test_metrics_pass_promtool(self):
        code, body = curl(self.base + "/metrics")
        self.assertEqual(code, 200)
        p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for name in (b"shoal_tracker_announces_total", b"shoal_tracker_swarms", b"shoal_scheduler_heartbeats_total"):
            self.assertIn(name, body)


if __name__ == "__main__":
    unittest.main(verbosity=2)
