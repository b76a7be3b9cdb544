"""The scheduler's caps against hostile heartbeats and announces (security review finding 13),
on the real binary:

- the review's input: two ~30 MiB heartbeats for fake nodes with 200,000 objects each. Before the
  caps they were accepted and the scheduler's RSS grew by ~220 MiB each (15 -> 452 MiB); now
  both are refused with 413 before parsing and RSS stays flat (VmRSS/VmHWM from /proc; the
  old binary grew by over 200 MiB and had not answered within 120 s on a loaded 2-core box);
- a new node beyond nodes.max_nodes gets 429, a known node is still heard;
- a heartbeat listing more than nodes.max_objects_per_node, or a delta that would leave the node
  holding more, gets 413 and changes nothing;
- the tracker refuses a swarm beyond tracker.max_swarms and a peer beyond
  tracker.max_peers_per_swarm (429 with a bencoded failure reason); known peers are still heard.

Two schedulers: one with the default caps (the review's input), one with small caps.
"""
from __future__ import annotations

import json
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402

MIB = 1 << 20


def post(url: str, body: bytes, timeout: float = 60) -> tuple[int, object]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")
    except TimeoutError:
        return 0, f"no answer within {timeout} s"


def get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def heartbeat(node: str, objects: list[dict], *, full: bool = True, seq: int = 1, epoch: str = "",
              removed: list[str] = ()) -> bytes:
    return json.dumps({"schema": 2, "node": node, "ip": "10.9.9.9", "bt_port": 6881, "full": full,
                       "seq": seq, "epoch": epoch, "objects": objects, "removed": list(removed),
                       "health": "ok"}, separators=(",", ":")).encode()


def fake_objects(count: int, prefix: int, info_hash: bool = True) -> list[dict]:
    """`count` made-up objects (nobody checks that a node holds what it lists)."""
    out = []
    for i in range(count):
        o = {"digest": f"sha256:{prefix:08x}{i:056x}", "size": 100000 + i}
        if info_hash:
            o["info_hash"] = f"{prefix:08x}{i:032x}"
        out.append(o)
    return out


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def announce(base: str, info_hash: bytes, port: int) -> tuple[int, bytes]:
    q = urllib.parse.urlencode({"info_hash": info_hash, "peer_id": b"-SH0001-" + b"x" * 12,
                                "port": port, "left": 100, "compact": 1, "node": f"p{port}"})
    return get(f"{base}/announce?{q}")


class ReviewFlood(FixtureTestCase):
    """The review's input against the default configuration."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.default = cls.class_track(Scheduler(cls.class_tmpdir("shoal-sched-flood-")).start())

    def test_review_flood_is_refused_and_memory_stays_flat(self):
        url = self.default.url + "/v1/heartbeat"
        pid = self.default.daemon.pid
        code, _ = post(url, heartbeat("warm", fake_objects(10, 1)))
        self.assertEqual(code, 200)
        before = memory_kib(pid)
        answers = []
        for n, name in enumerate(("fake1", "fake2")):
            body = heartbeat(name, fake_objects(200_000, 100 + n))
            self.assertGreater(len(body), 29 * MIB)
            t0 = time.monotonic()
            answers.append(post(url, body, timeout=120) + (len(body), time.monotonic() - t0))
        after = memory_kib(pid)
        grew_rss = (after["VmRSS"] - before["VmRSS"]) / 1024
        grew_hwm = (after["VmHWM"] - before["VmRSS"]) / 1024
        print(f"two {answers[0][2] / MIB:.1f} MiB heartbeats: {[a[0] for a in answers]} in "
              f"{[round(a[3], 1) for a in answers]} s; RSS {before['VmRSS'] / 1024:.0f} -> "
              f"{after['VmRSS'] / 1024:.0f} MiB, peak {after['VmHWM'] / 1024:.0f} MiB", file=sys.stderr)
        # The finding's symptom: hundreds of MiB kept (until drop_after) per fake node.
        self.assertLess(grew_rss, 96, f"RSS grew by {grew_rss:.0f} MiB")
        self.assertLess(grew_hwm, 160, f"peak RSS grew by {grew_hwm:.0f} MiB")
        for code, body, size, _ in answers:
            self.assertEqual(code, 413, body)
            self.assertIn("larger than", body["error"])
            self.assertIn("100000 objects", body["error"])
        names = {n["node"] for n in json.loads(get(self.default.url + "/v1/nodes")[1])}
        self.assertNotIn("fake1", names)
        self.assertNotIn("fake2", names)



class SmallCaps(FixtureTestCase):
    """One scheduler with small caps: 3 nodes (all taken at the start), 1000 objects per node,
    20 swarms, 3 peers per swarm."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.capped = cls.class_track(Scheduler(cls.class_tmpdir("shoal-sched-caps-"), extra={
            "nodes": {"max_nodes": 3, "max_objects_per_node": 1000},
            "tracker": {"max_swarms": 20, "max_peers_per_swarm": 3},
        }).start())
        for name in ("c1", "c2", "c3"):
            code, body = post(cls.capped.url + "/v1/heartbeat", heartbeat(name, []))
            assert code == 200, (name, code, body)

    def test_new_node_beyond_max_nodes_is_refused_known_ones_heard(self):
        url = self.capped.url + "/v1/heartbeat"
        code, body = post(url, heartbeat("c4", fake_objects(5, 4)))
        self.assertEqual(code, 429, body)
        self.assertIn("nodes.max_nodes", body["error"])
        self.assertIn('"c4"', body["error"])
        code, body = post(url, heartbeat("c2", [], seq=2))
        self.assertEqual(code, 200, body)
        names = sorted(n["node"] for n in json.loads(get(self.capped.url + "/v1/nodes")[1]))
        self.assertEqual(names, ["c1", "c2", "c3"])

    def test_objects_per_node_are_capped(self):
        url = self.capped.url + "/v1/heartbeat"
        code, body = post(url, heartbeat("c1", fake_objects(1001, 5, info_hash=False), seq=2))
        self.assertEqual(code, 413, body)
        self.assertIn("more than 1000", body["error"])
        code, reply = post(url, heartbeat("c1", fake_objects(1000, 5, info_hash=False), seq=3))
        self.assertEqual(code, 200, reply)
        one_more = fake_objects(1, 6, info_hash=False)
        code, body = post(url, heartbeat("c1", one_more, full=False, seq=4, epoch=reply["epoch"]))
        self.assertEqual(code, 413, body)
        self.assertIn("would hold 1001", body["error"])
        self.assertIn("nodes.max_objects_per_node", body["error"])
        code, node = get(self.capped.url + "/v1/nodes/c1")
        self.assertEqual(code, 200)
        self.assertEqual(json.loads(node)["objects"], 1000)

    def test_tracker_caps_swarms_and_peers(self):
        base = self.capped.url
        for i in range(20):
            code, body = announce(base, bytes([i]) * 20, 1000 + i)
            self.assertEqual(code, 200, body)
        code, body = announce(base, bytes([99]) * 20, 1099)
        self.assertEqual(code, 429, body)
        self.assertIn(b"tracker full", body)
        self.assertIn(b"tracker.max_swarms", body)
        # Swarm 0 has one peer; two more fit, the fourth does not; a known one is still heard.
        for port in (2001, 2002):
            self.assertEqual(announce(base, bytes([0]) * 20, port)[0], 200)
        code, body = announce(base, bytes([0]) * 20, 2003)
        self.assertEqual(code, 429, body)
        self.assertIn(b"swarm full", body)
        self.assertEqual(announce(base, bytes([0]) * 20, 2001)[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
