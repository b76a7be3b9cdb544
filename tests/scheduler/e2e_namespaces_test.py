#!/usr/bin/env python3
"""Issue #5 end to end, in network namespaces: prewarm a dataset-sized image on two of four nodes,
place a job and see those two chosen; lose one and see a warm standby take its place.

The cluster is tests/support/shoal_fixtures/cluster.py without containerd (prewarm needs none):
the registry on node 0, registry-proxy and the scheduler (tracker, index, REST API) on node 1,
four peerd nodes (node1..node4, zone z1, racks r1 r2 r1 r2, fabric f1, 4 GPUs each) on links
shaped to 200 Mbit/s. The tests run in name order and build on each other:

  1 all four nodes report healthy to the scheduler;
  2 POST /v1/prewarm of a 48 MiB, 3-layer image on node2 and node4: done; /v1/objects lists
    exactly those two as holders of every blob; the registry served each blob once;
  3 POST /v1/place (2 nodes, dry run) chooses node2 and node4, and its explanation shows them
    holding every byte and node1/node3 missing every byte (to come from the zone);
  4 a job prewarm (2 nodes, standby 1) keeps node2/node4 as primaries and warms one standby
    (node1: node1 and node3 tie on time and bytes, the name decides); kill -9 node2's peerd:
    once the scheduler calls it unhealthy, /v1/place chooses node4 and the standby, never
    node3, which lacks the data. The prewarm stays done with no replacement (its primaries were
    done before the loss, and terminal parts stay terminal);
  5 a job prewarm of a second image whose primary is killed mid-prewarm (its link slowed to
    8 Mbit/s so it is caught in flight): that part fails ("node lost"), the standby completes,
    the prewarm is done with `replacements` {lost primary: standby}, and /v1/place chooses the
    surviving primary and the standby.

The scheduler's bandwidths keep their defaults: the serial cost model is linear in bytes, so a
48 MiB image ranks the nodes exactly as a 48 GiB one would. Its liveness is shortened
(heartbeats every 2 s, unhealthy after 6 s) so a lost node is noticed within seconds.
"""
from __future__ import annotations

import json
import os
import sys
import time
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures import cluster as cluster_mod  # noqa: E402
from shoal_fixtures.cluster import Cluster  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402
from shoal_fixtures.shoal import _merge  # noqa: E402

MiB = 1 << 20
NODES = 4
UNHEALTHY_AFTER = 6.0  # seconds; peerd heartbeats every 2 s (the fixture's default)
GPUS = 4
PEERD = {"node": {"fabric": "f1", "gpus": [{"model": "test-gpu", "count": GPUS}]},
         "upstream": {"connect_timeout": "1s", "request_timeout": "3s", "metainfo_wait": "2s"},
         "swarm": {"stall_timeout": "3s"}}
SCHEDULER = {"nodes": {"unhealthy_after": f"{int(UNHEALTHY_AFTER)}s", "drop_after": "120s",
                       "heartbeat_interval": "2s"},
             "resolver": {"tag_ttl": "5s"},
             "prewarm": {"timeout": "120s"}}


class _TunedScheduler(Scheduler):
    """The cluster fixture's scheduler with this test's liveness settings merged in."""

    def __init__(self, *args, extra=None, **kwargs):
        cfg = json.loads(json.dumps(extra or {}))
        _merge(cfg, SCHEDULER)
        super().__init__(*args, extra=cfg, **kwargs)


@unittest.skipUnless(os.geteuid() == 0, "needs root (network namespaces)")
class SchedulerEndToEnd(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.t0 = time.monotonic()
        cls.c = cls.class_track(Cluster(cls.class_tmpdir("shoal-sched-e2e-"), nodes=NODES, rate="200mbit",
                                        containerd=False, peerd_extra=PEERD))
        with mock.patch.object(cluster_mod, "Scheduler", _TunedScheduler):
            cls.c.start()
        print(f"\n[ measure ] cluster up in {time.monotonic() - cls.t0:.1f}s", file=sys.stderr)
        # The "dataset-sized" image: 48 MiB in three layers (uncompressed, so generating it is fast).
        sizes = [24 * MiB, 16 * MiB, 8 * MiB]
        layers = [oci.LayerSpec(size=s, seed=f"e2e-big-{i}", compression="none") for i, s in enumerate(sizes)]
        cls.layout, cls.ref = cls.c.push(layers, name="team/dataset-image")
        cls.image = cls.layout.images[0]
        cls.blobs = cls.image.blobs()
        cls.total = sum(b.size for b in cls.blobs)
        cls.job_prewarm_id = ""

    @classmethod
    def tearDownClass(cls):
        print(f"\n[ measure ] whole class {time.monotonic() - cls.t0:.1f}s", file=sys.stderr)
        super().tearDownClass()

    # -- helpers ---------------------------------------------------------------------------------

    def api(self, path: str, body=None, timeout: float = 30) -> tuple[int, object]:
        """A scheduler REST call, made from the infra namespace: (HTTP status, decoded JSON)."""
        args = ["-w", "\n%{http_code}"]
        if body is not None:
            args += ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        out = self.c.curl(None, *args, self.c.scheduler.url + path, timeout=timeout).stdout
        text, _, code = out.rpartition("\n")
        try:
            return int(code or 0), json.loads(text) if text else None
        except ValueError:
            return int(code or 0), text

    def get(self, path: str) -> object:
        code, body = self.api(path)
        self.assertEqual(code, 200, f"GET {path}: {body}")
        return body

    def nodes(self) -> dict[str, dict]:
        code, body = self.api("/v1/nodes")
        return {n["node"]: n for n in body} if code == 200 and isinstance(body, list) else {}

    def holders(self, digest: str) -> dict[str, bool]:
        """node → healthy, for every node the scheduler lists as holding `digest`."""
        code, body = self.api("/v1/objects/" + digest)
        return {h["node"]: h["healthy"] for h in body["holders"]} if code == 200 else {}

    def wait(self, pred, timeout: float, what: str):
        return wait_until(pred, timeout, what, interval=0.2)

    def wait_prewarm(self, pw_id: str, pred, timeout: float, what: str) -> dict:
        def check():
            code, st = self.api("/v1/prewarm/" + pw_id)
            return st if code == 200 and pred(st) else None
        try:
            return self.wait(check, timeout, what)
        except Exception:
            print(f"last progress of {pw_id}: {self.api('/v1/prewarm/' + pw_id)[1]}", file=sys.stderr)
            raise

    @staticmethod
    def part(st: dict, node: str) -> dict:
        return next(p for p in st["nodes"] if p["node"] == node)

    def place(self, ref: str, standby: int = 0) -> dict:
        code, ans = self.api("/v1/place", {"images": [ref], "nodes": 2, "gpus": 1, "dry_run": True,
                                           "standby": standby})
        self.assertEqual(code, 200, ans)
        self.assertTrue(ans["feasible"], ans)
        self.assertEqual(ans["segment"], "f1", ans)
        return ans

    def kill_node(self, i: int) -> float:
        """kill -9 node i's peerd; waits until the scheduler calls it unhealthy; the seconds taken."""
        name = f"node{i + 1}"
        self.c.peerds[i].kill()
        t = time.monotonic()
        self.wait(lambda: self.nodes().get(name, {}).get("healthy") is False, UNHEALTHY_AFTER + 10,
                  f"{name} unhealthy at the scheduler")
        took = time.monotonic() - t
        print(f"[ measure ] {name} killed: unhealthy after {took:.1f}s (unhealthy_after {UNHEALTHY_AFTER}s)",
              file=sys.stderr)
        self.assertGreaterEqual(took, UNHEALTHY_AFTER - 2.5)
        return took

    # -- tests -----------------------------------------------------------------------------------

    def test_1_all_nodes_healthy(self):
        want = {f"node{i + 1}" for i in range(NODES)}
        self.wait(lambda: {n for n, r in self.nodes().items() if r["healthy"] and r["synced"]} == want, 30,
                  "4 healthy, synced nodes at the scheduler")
        for name, n in self.nodes().items():
            self.assertEqual(n["schema"], 2, n)
            self.assertEqual(n["gpus_total"], GPUS, n)
            self.assertEqual(n["labels"]["fabric"], "f1", n)
            self.assertEqual(n["labels"]["zone"], "z1", n)

    def test_2_prewarm_two_named_nodes(self):
        mark = self.c.registry.mark()
        t0 = time.monotonic()
        code, pw = self.api("/v1/prewarm", {"images": [self.ref], "nodes": ["node2", "node4"]})
        self.assertEqual(code, 202, pw)
        self.assertEqual({p["node"] for p in pw["nodes"]}, {"node2", "node4"}, pw)
        self.assertTrue(all(p["role"] == "target" for p in pw["nodes"]), pw)
        st = self.wait_prewarm(pw["id"], lambda s: s["state"] in ("done", "failed"), 60, "prewarm on node2, node4")
        took = time.monotonic() - t0
        print(f"[ measure ] prewarm of {self.total / MiB:.0f} MiB on 2 nodes: {took:.1f}s", file=sys.stderr)
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(st["bytes_total"], 2 * self.total, st)
        self.assertEqual(st["bytes_done"], 2 * self.total, st)
        for p in st["nodes"]:
            self.assertEqual(p["state"], "done", p)
            self.assertEqual(p["bytes_total"], self.total, p)
        # The index: exactly these two hold every blob (config and layers).
        for b in self.blobs:
            self.assertEqual(self.holders(b.digest), {"node2": True, "node4": True}, b.digest)
        # The nodes' caches agree with the index.
        for i in (1, 3):
            self.assertGreaterEqual(self.c.peerds[i].status()["cache"]["objects"], len(self.blobs))
        for i in (0, 2):
            self.assertEqual(self.c.peerds[i].status()["cache"]["objects"], 0)
        # The registry served every blob once: registry-proxy fetched it and the swarm did the rest.
        self.c.registry.wait_log_quiet()
        gets = self.c.registry.blob_gets(since=mark)
        for b in self.blobs:
            self.assertEqual(gets.get(b.digest, 0), 1, f"{b.digest} fetched {gets.get(b.digest, 0)} times upstream")

    def test_3_place_chooses_the_warm_nodes(self):
        ans = self.place(self.ref)
        self.assertEqual(sorted(ans["chosen"]), ["node2", "node4"], ans)
        self.assertEqual(ans["reservation"], None, "a dry run reserves nothing")
        self.assertEqual(ans["objects"]["linux/amd64"]["bytes"], self.total, ans)
        by = {n["node"]: n for n in ans["nodes"]}
        self.assertEqual(set(by), {"node1", "node2", "node3", "node4"})
        for name in ("node2", "node4"):
            n = by[name]
            self.assertEqual(n["role"], "chosen", n)
            self.assertTrue(n["eligible"], n)
            self.assertEqual(n["bytes_total"], self.total, n)
            self.assertEqual(n["bytes_present"], self.total, n)
            self.assertEqual(n["bytes_missing"], 0, n)
            self.assertEqual(n["estimated_seconds"], 0, n)
        for name in ("node1", "node3"):
            n = by[name]
            self.assertEqual(n["role"], "", n)
            self.assertTrue(n["eligible"], n)
            self.assertEqual(n["bytes_present"], 0, n)
            self.assertEqual(n["bytes_missing"], self.total, n)
            # node2 and node4 are in rack r2, node1 and node3 in r1: the bytes come from the zone.
            self.assertEqual(n["missing_by_source"]["zone"], self.total, n)
            self.assertGreater(n["estimated_seconds"], 0, n)
        self.assertEqual([n["node"] for n in ans["nodes"]][:2], sorted(["node2", "node4"]), ans)

    def test_4_warm_standby_replaces_a_lost_primary(self):
        mark = self.c.registry.mark()
        job = {"images": [self.ref], "nodes": 2, "gpus": 1}
        code, pw = self.api("/v1/prewarm", {"job": job, "standby": 1})
        self.assertEqual(code, 202, pw)
        self.__class__.job_prewarm_id = pw["id"]
        self.assertEqual(sorted(pw["placement"]["chosen"]), ["node2", "node4"], pw["placement"])
        # node1 and node3 tie (same zone, same bytes missing); ranking ends with the name.
        self.assertEqual(pw["placement"]["standby"], ["node1"], pw["placement"])
        roles = {p["node"]: p["role"] for p in pw["nodes"]}
        self.assertEqual(roles, {"node2": "primary", "node4": "primary", "node1": "standby"}, pw)
        # The primaries already hold everything: done at once (the index decides).
        self.assertEqual(self.part(pw, "node2")["state"], "done", pw)
        self.assertEqual(self.part(pw, "node4")["state"], "done", pw)
        st = self.wait_prewarm(pw["id"], lambda s: self.part(s, "node1")["state"] in ("done", "failed"), 60,
                               "the standby node1 warmed")
        self.assertEqual(self.part(st, "node1")["state"], "done", st)
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(st["replacements"], {}, st)
        for b in self.blobs:
            self.assertEqual(self.holders(b.digest), {"node1": True, "node2": True, "node4": True}, b.digest)
        self.c.registry.wait_log_quiet()
        self.assertEqual(self.c.registry.blob_gets(since=mark), {}, "the standby's bytes came from upstream")
        # Three nodes are warm now and tie at 0 s: a new placement takes two of them by name and
        # names the third as its standby; node3, the one without the data, is neither.
        ans = self.place(self.ref, standby=1)
        self.assertEqual((ans["chosen"], ans["standby"]), (["node1", "node2"], ["node4"]), ans)

        # Lose primary node2.
        self.kill_node(1)
        for b in self.blobs:
            self.assertEqual(self.holders(b.digest), {"node1": True, "node2": False, "node4": True}, b.digest)
            obj = self.get("/v1/objects/" + b.digest)
            self.assertEqual((obj["holder_count"], obj["healthy_holders"]), (3, 2), obj)
        ans = self.place(self.ref)
        self.assertEqual(sorted(ans["chosen"]), ["node1", "node4"], ans)
        by = {n["node"]: n for n in ans["nodes"]}
        self.assertFalse(by["node2"]["eligible"], by["node2"])
        self.assertTrue(any("unhealthy" in r for r in by["node2"]["reasons"]), by["node2"])
        self.assertEqual(by["node1"]["bytes_missing"], 0, by["node1"])
        self.assertEqual(by["node3"]["role"], "", by["node3"])
        self.assertEqual(by["node3"]["bytes_present"], 0, by["node3"])
        # node3 (rack r1) can now get everything from node1 in its own rack.
        self.assertEqual(by["node3"]["missing_by_source"]["rack"], self.total, by["node3"])
        # The prewarm finished before the loss: its parts are terminal and stay as they were.
        st = self.get("/v1/prewarm/" + pw["id"])
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(self.part(st, "node2")["state"], "done", st)
        self.assertEqual(st["replacements"], {}, st)

    def test_5_primary_lost_mid_prewarm_is_replaced(self):
        # A second image; node2 is down since test 4, so node1, node3, node4 are the candidates.
        layers = [oci.LayerSpec(size=12 * MiB, seed=f"e2e-second-{i}", compression="none") for i in range(2)]
        layout, ref = self.c.push(layers, name="team/second")
        blobs = layout.images[0].blobs()
        total = sum(b.size for b in blobs)
        job = {"images": [ref], "nodes": 2, "gpus": 1}
        # Every node is cold for this image: the dry run says which nodes the prewarm will pick.
        plan = self.place(ref, standby=1)
        self.assertEqual(len(plan["standby"]), 1, plan)
        self.assertNotIn("node2", plan["chosen"] + plan["standby"], plan)
        victim, survivor = plan["chosen"][1], plan["chosen"][0]
        standby = plan["standby"][0]
        vi = int(victim.removeprefix("node")) - 1
        # Slow the victim's link so its prewarm is still in flight when it dies.
        self.c.shape_node(vi, "8mbit")
        self.addCleanup(self.c.shape_node, vi, None)
        code, pw = self.api("/v1/prewarm", {"job": job, "standby": 1})
        self.assertEqual(code, 202, pw)
        self.assertEqual(pw["placement"]["chosen"], plan["chosen"], pw["placement"])
        self.assertEqual(pw["placement"]["standby"], [standby], pw["placement"])
        self.wait_prewarm(pw["id"], lambda s: self.part(s, victim)["state"] == "running"
                          and self.part(s, victim)["bytes_done"] < total, 20, f"{victim} fetching")
        self.kill_node(vi)
        st = self.wait_prewarm(pw["id"], lambda s: s["state"] in ("done", "failed")
                               and self.part(s, standby)["state"] in ("done", "failed"), 60,
                               "the prewarm finished with its standby")
        lost = self.part(st, victim)
        self.assertEqual(lost["state"], "failed", st)
        self.assertIn("node lost: no heartbeat for", lost.get("error", ""), st)
        self.assertLess(lost["bytes_done"], total, st)
        self.assertEqual(self.part(st, survivor)["state"], "done", st)
        self.assertEqual(self.part(st, standby)["state"], "done", st)
        self.assertEqual(st["state"], "done", st)
        self.assertEqual(st["replacements"], {victim: standby}, st)
        for b in blobs:
            self.assertTrue({survivor, standby} <= set(self.holders(b.digest)), b.digest)
        ans = self.place(ref)
        self.assertEqual(sorted(ans["chosen"]), sorted([survivor, standby]), ans)


if __name__ == "__main__":
    unittest.main(verbosity=2)
