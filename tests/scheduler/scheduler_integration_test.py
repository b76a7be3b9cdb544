"""The scheduler with real daemons on loopback: a registry, registry-proxy (origin and first seed),
the scheduler (tracker, index, placement, extender, prewarm) and four peerd nodes in two racks.

- nodes with different cached images get the expected ranking from /v1/place and from the
  kube-scheduler extender (v1.Pod as kube-scheduler sends it);
- a prewarm on two nodes (through shoalctl) completes and /v1/objects shows them as holders;
- a node killed in the middle of a prewarm is reported lost;
- after a scheduler crash and restart the index is whole again within one heartbeat period;
- /metrics passes promtool;
- failure detection: a peerd stopped cleanly (SIGTERM) is `restarting`, comes back `recovered`
  and is never called failed; a peerd killed (SIGKILL) is `failed` with cause heartbeat within
  failover.failed_after, in /v1/nodes, /v1/events, the metric and `shoalctl nodes`.

The scheduler's bandwidths are scaled down 1024 times (KiB/s instead of MiB/s) so test images of
a few MiB rank like production images of a few GiB.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.nodes import Peerd, Scheduler  # noqa: E402
from shoal_fixtures.procs import free_port, wait_until  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, binary  # noqa: E402

MIB = 1 << 20
HEARTBEAT = 2.0  # seconds, every peerd


def http_json(url: str, body=None, timeout: float = 30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def pod(images: list[str], init: list[str] = (), annotations: dict | None = None) -> dict:
    """A v1.Pod as kube-scheduler serializes it (trimmed of nothing that matters here)."""
    def container(i: int, img: str, prefix: str) -> dict:
        return {"name": f"{prefix}{i}", "image": img, "imagePullPolicy": "IfNotPresent",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    return {
        "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "7d1c0a2e-0000-4000-8000-000000000001",
                     "resourceVersion": "1001", "creationTimestamp": "2026-11-30T10:00:00Z",
                     "labels": {"app": "trainer"}, "annotations": annotations or {}},
        "spec": {"initContainers": [container(i, img, "init") for i, img in enumerate(init)],
                 "containers": [container(i, img, "c") for i, img in enumerate(images)],
                 "restartPolicy": "Always", "schedulerName": "default-scheduler", "priority": 0,
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


class SchedulerIntegration(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        d = cls.class_tmpdir("shoal-sched-")
        cls.dir = d
        cls.registry = cls.class_track(Registry(d / "registry").start())
        proxy_port = free_port()
        kib = lambda n: f"{n}KiB"  # noqa: E731
        cls.scheduler = Scheduler(d / "scheduler", extra={
            "resolver": {"registry_proxy": f"http://127.0.0.1:{proxy_port}", "tag_ttl": "5s"},
            "nodes": {"unhealthy_after": "4s", "drop_after": "120s", "heartbeat_interval": f"{int(HEARTBEAT)}s"},
            "failover": {"failed_after": "6s", "restart_grace": "30s"},
            "placement": {"cost": {"rack_bandwidth": kib(1024), "zone_bandwidth": kib(512),
                                   "cluster_bandwidth": kib(256), "origin_bandwidth": kib(128),
                                   "upstream_bandwidth": kib(32), "node_ingress": kib(1024)}},
            "prewarm": {"timeout": "120s"},
        })
        cls.class_track(cls.scheduler.start())
        cls.proxy = RegistryProxy(d / "registry-proxy", port=proxy_port, torrent=True, log_level="info",
                                  upstreams=[{"name": cls.registry.host_port, "url": cls.registry.url}],
                                  trackers=[cls.scheduler.url + "/announce"])
        cls.class_track(cls.proxy.start())

        # Images: A and B share a 4 MiB base; C is unrelated; BIG is for the kill test.
        base = oci.LayerSpec(size=4 * MIB, seed="base", compression="none")
        cls.img = {}
        for name, layers in {"a": [base, oci.LayerSpec(size=256 * 1024, seed="a", compression="none")],
                             "b": [base, oci.LayerSpec(size=256 * 1024, seed="b", compression="none")],
                             "c": [oci.LayerSpec(size=1 * MIB, seed="c", compression="none")],
                             "big": [oci.LayerSpec(size=24 * MIB, seed="big", compression="none")]}.items():
            layout = oci.make_image(d / f"img-{name}", layers)
            ref = cls.registry.push(layout, f"team/{name}", "v1")
            cls.img[name] = (ref, layout.images[0])

        cls.peerds = {}
        for i, rack in ((1, "r1"), (2, "r1"), (3, "r2"), (4, "r2")):
            cls.peerds[f"node{i}"] = cls.class_track(cls.start_peerd(f"node{i}", rack))
        wait_until(lambda: len([n for n in cls.nodes() if n["healthy"]]) == 4, 30, "4 healthy nodes at the scheduler")
        # node1 holds A (so B's base), node3 holds C.
        for node, image in (("node1", "a"), ("node3", "c")):
            code, body = cls.peerds[node].pull(cls.img[image][0], timeout=120)
            assert code == 200, (node, code, body)
        for node, image in (("node1", "a"), ("node3", "c")):
            for blob in cls.img[image][1].blobs():
                cls.wait_holder(blob.digest, node)

    @classmethod
    def start_peerd(cls, name: str, rack: str, extra: dict | None = None) -> Peerd:
        cfg = {"swarm": {"heartbeat_interval": f"{int(HEARTBEAT)}s"},
               "node": {"fabric": "f1", "gpus": [{"model": "test-gpu", "count": 4}]}}
        for k, v in (extra or {}).items():
            cfg.setdefault(k, {}).update(v)
        return Peerd(cls.dir / name, name=name, registry_proxy=cls.proxy.url, scheduler=cls.scheduler.url,
                     zone="z1", rack=rack, extra=cfg).start()

    @classmethod
    def nodes(cls) -> list[dict]:
        code, body = http_json(cls.scheduler.url + "/v1/nodes")
        return body if code == 200 else []

    @classmethod
    def holders(cls, digest: str) -> set[str]:
        code, body = http_json(cls.scheduler.url + "/v1/objects/" + digest)
        return {h["node"] for h in body["holders"]} if code == 200 else set()

    @classmethod
    def wait_holder(cls, digest: str, node: str, timeout: float = 30) -> None:
        wait_until(lambda: node in cls.holders(digest), timeout, f"{node} listed as a holder of {digest}")

    # ---------------------------------------------------------------------------------------------

    def test_1_nodes_report_inventory(self):
        nodes = {n["node"]: n for n in self.nodes()}
        self.assertEqual(set(nodes), {"node1", "node2", "node3", "node4"})
        for n in nodes.values():
            self.assertTrue(n["healthy"], n)
            self.assertEqual(n["gpus_total"], 4)
            self.assertEqual(n["labels"]["fabric"], "f1")
            self.assertEqual(n["labels"]["platform"], "linux/amd64")
            self.assertTrue(n["synced"], n)
            self.assertEqual(n["schema"], 2)
        self.assertGreaterEqual(nodes["node1"]["objects"], 3)

    def test_2_place_ranks_by_what_nodes_hold(self):
        ref_b = self.img["b"][0]
        code, ans = http_json(self.scheduler.url + "/v1/place", {"images": [ref_b], "gpus": 1, "dry_run": True})
        self.assertEqual(code, 200, ans)
        self.assertTrue(ans["feasible"], ans)
        order = [n["node"] for n in ans["nodes"]]
        # node1 holds B's base; node2 gets it from its rack; node3 and node4 from the zone.
        self.assertEqual(order[:2], ["node1", "node2"], ans)
        self.assertEqual(ans["chosen"], ["node1"])
        by = {n["node"]: n for n in ans["nodes"]}
        base_size = self.img["b"][1].layers[0].size
        self.assertEqual(by["node1"]["bytes_present"], base_size)
        self.assertEqual(by["node2"]["missing_by_source"]["rack"], base_size)
        self.assertEqual(by["node3"]["missing_by_source"]["zone"], base_size)
        self.assertLess(by["node1"]["estimated_seconds"], by["node2"]["estimated_seconds"])
        self.assertLess(by["node2"]["estimated_seconds"], by["node3"]["estimated_seconds"])
        # Not enough GPUs anywhere: infeasible, every node explains why.
        code, ans = http_json(self.scheduler.url + "/v1/place", {"images": [ref_b], "gpus": 8, "dry_run": True})
        self.assertEqual(code, 200)
        self.assertFalse(ans["feasible"])
        self.assertTrue(all("needs 8 GPUs, 4 free" in n["reasons"][0] for n in ans["nodes"]), ans)
        # A gang of two in fabric f1.
        code, ans = http_json(self.scheduler.url + "/v1/place",
                              {"images": [ref_b], "nodes": 2, "gpus": 2, "dry_run": True})
        self.assertTrue(ans["feasible"], ans)
        self.assertEqual(ans["segment"], "f1")
        self.assertEqual(set(ans["chosen"]), {"node1", "node2"})
        # shoalctl shows the same answer.
        out = subprocess.run([str(binary("shoalctl")), "--scheduler", self.scheduler.url, "place", ref_b, "--dry-run"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("chosen: node1", out.stdout)

    def test_3_extender_scores_and_filters(self):
        ref_a, ref_c = self.img["a"][0], self.img["c"][0]
        names = ["node4", "node3", "node2", "node1", "ghost"]
        args = {"Pod": pod([ref_a]), "Nodes": None, "NodeNames": names}
        code, scores = http_json(self.scheduler.url + "/v1/extender/prioritize", args)
        self.assertEqual(code, 200, scores)
        self.assertEqual([h["Host"] for h in scores], names)
        s = {h["Host"]: h["Score"] for h in scores}
        # node1 holds A: 10. node2 can get it from its rack, node3/node4 from the zone. ghost has
        # no peerd: 0.
        self.assertEqual(s["node1"], 10, s)
        self.assertGreater(s["node2"], s["node3"], s)
        self.assertEqual(s["node3"], s["node4"], s)
        self.assertGreater(s["node4"], s["ghost"], s)
        self.assertEqual(s["ghost"], 0)
        # Hard mode with an init container: nodes lacking more than 50% fail.
        hard = pod([ref_a], init=[ref_c], annotations={"shoal.io/placement": "hard", "shoal.io/max-missing": "50%"})
        code, res = http_json(self.scheduler.url + "/v1/extender/filter",
                              {"Pod": hard, "Nodes": None, "NodeNames": names})
        self.assertEqual(code, 200, res)
        self.assertEqual(res["Error"], "")
        self.assertEqual(res["NodeNames"], ["node1"], res)
        self.assertEqual(set(res["FailedAndUnresolvableNodes"]), {"node4", "node3", "node2", "ghost"})
        # Malformed: 400 with a JSON Error.
        req = urllib.request.Request(self.scheduler.url + "/v1/extender/filter", data=b"{\"Pod\": [", method="POST")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(e.exception.code, 400)
        self.assertIn("Error", json.loads(e.exception.read()))

    def test_4_prewarm_two_nodes_with_shoalctl(self):
        ref_b, image_b = self.img["b"]
        t0 = time.monotonic()
        out = subprocess.run([str(binary("shoalctl")), "--scheduler", self.scheduler.url, "prewarm", ref_b,
                              "--node", "node3", "--node", "node4", "--timeout", "90"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("done", out.stdout)
        print(f"[ measure ] prewarm of {ref_b} on 2 nodes: {time.monotonic() - t0:.1f}s", file=sys.stderr)
        for blob in image_b.blobs():
            self.assertTrue({"node3", "node4"} <= self.holders(blob.digest), blob.digest)
        code, lst = http_json(self.scheduler.url + "/v1/prewarm")
        self.assertEqual(code, 200)
        done = [p for p in lst if p["state"] == "done" and p["nodes"] == 2]
        self.assertTrue(done, lst)
        # The nodes' own caches agree with the index.
        for node in ("node3", "node4"):
            st = self.peerds[node].status()
            self.assertGreaterEqual(st["cache"]["objects"], len(image_b.blobs()))

    def test_5_node_killed_mid_prewarm_is_reported(self):
        slow = self.track(self.start_peerd("node5", "r3"))
        wait_until(lambda: any(n["node"] == "node5" and n["healthy"] for n in self.nodes()), 20, "node5 known")
        ref = self.img["big"][0]
        # Resolve first (the scheduler caches it), then freeze registry-proxy: node5's fetch of the
        # object hangs there, so node5 is caught in the middle of its prewarm (loopback is too
        # fast to catch a transfer in flight, and libtorrent does not rate-limit local peers).
        code, _ = http_json(self.scheduler.url + "/v1/images/" + ref)
        self.assertEqual(code, 200)
        self.proxy.daemon.send_signal(signal.SIGSTOP)
        self.addCleanup(self.proxy.daemon.send_signal, signal.SIGCONT)
        code, pw = http_json(self.scheduler.url + "/v1/prewarm", {"images": [ref], "nodes": ["node5"]})
        self.assertEqual(code, 202, pw)
        url = self.scheduler.url + pw["status_url"]

        def part(node: str) -> dict:
            _, st = http_json(url)
            return next(p for p in st["nodes"] if p["node"] == node)

        wait_until(lambda: part("node5")["state"] == "running", 20, "node5 working on its prewarm")
        slow.kill()
        killed = time.monotonic()
        wait_until(lambda: part("node5")["state"] == "failed", 20, "node5 reported failed")
        lost_after = time.monotonic() - killed
        print(f"[ measure ] killed node reported failed after {lost_after:.1f}s (unhealthy_after 4s)", file=sys.stderr)
        self.proxy.daemon.send_signal(signal.SIGCONT)
        self.assertIn("node lost: no heartbeat for", part("node5")["error"])
        self.assertLess(part("node5")["bytes_done"], part("node5")["bytes_total"])
        _, st = http_json(url)
        self.assertEqual(st["state"], "failed", st)
        # shoalctl reports the failure with a non-zero status.
        out = subprocess.run([str(binary("shoalctl")), "--scheduler", self.scheduler.url, "prewarm", "status",
                              pw["id"]], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        self.assertIn("node lost", out.stdout)

    def test_6_restart_rebuilds_the_index_within_one_heartbeat(self):
        def snapshot() -> dict[str, int]:
            return {n["node"]: n["objects"] for n in self.nodes() if n["healthy"] and n["synced"]}

        before = snapshot()
        self.assertTrue({"node1", "node2", "node3", "node4"} <= set(before), before)
        base = self.img["a"][1].layers[0].digest
        holders_before = self.holders(base)
        self.scheduler.kill()
        self.scheduler.start()
        up = time.monotonic()
        wait_until(lambda: all(snapshot().get(n) == before[n] for n in ("node1", "node2", "node3", "node4")),
                   HEARTBEAT + 10, "the index rebuilt after the restart")
        rebuilt = time.monotonic() - up
        print(f"[ measure ] index rebuilt {rebuilt:.2f}s after the restart (heartbeat every {HEARTBEAT}s)",
              file=sys.stderr)
        self.assertLessEqual(rebuilt, HEARTBEAT + 1.5)
        self.assertEqual(self.holders(base), holders_before)
        # A node whose heartbeat reached the new scheduler as a delta was told to resync (a node
        # whose heartbeat failed while the scheduler was down sent its full list anyway).
        metrics = urllib.request.urlopen(self.scheduler.url + "/metrics", timeout=5).read().decode()
        self.assertIn('shoal_scheduler_resyncs_total{reason="unknown_node"}', metrics)

    def test_8_a_restart_is_not_a_failure_and_a_death_is(self):
        def state(node: str) -> dict:
            return next((n["state"] for n in self.nodes() if n["node"] == node), {})

        def events(node: str) -> list[dict]:
            return http_json(self.scheduler.url + "/v1/events?node=" + node)[1]["events"]

        # After test 6's restart the scheduler decides nothing on silence for failed_after.
        wait_until(lambda: not http_json(self.scheduler.url + "/v1/events")[1]["view_stale"], 20,
                   "the scheduler's view to be fresh")
        # A clean stop: peerd's last heartbeat says `leaving`.
        p2 = self.peerds["node2"]
        p2.stop()
        wait_until(lambda: state("node2").get("state") == "restarting", 10, "node2 restarting")
        self.assertIn("stopped cleanly", state("node2")["detail"])
        time.sleep(7)  # past failed_after (6 s): still a restart, not a failure
        self.assertEqual(state("node2")["state"], "restarting")
        p2.start()
        wait_until(lambda: state("node2").get("state") == "healthy", 20, "node2 back")
        kinds = [e["event"] for e in events("node2")]
        self.assertEqual(kinds[:2], ["recovered", "restarting"], kinds)
        self.assertNotIn("failed", kinds)
        # A death: no last word.
        p4 = self.peerds["node4"]
        p4.kill()
        killed = time.monotonic()
        wait_until(lambda: state("node4").get("state") == "failed", 20, "node4 failed")
        detected = time.monotonic() - killed
        print(f"[ measure ] killed node found failed after {detected:.1f}s (failed_after 6s, heartbeat {HEARTBEAT}s)",
              file=sys.stderr)
        self.assertEqual(state("node4")["cause"], "heartbeat")
        self.assertIn("no heartbeat for", state("node4")["detail"])
        self.assertEqual(events("node4")[0]["event"], "failed")
        metrics = urllib.request.urlopen(self.scheduler.url + "/metrics", timeout=5).read().decode()
        self.assertIn('shoal_scheduler_node_failures_total{cause="heartbeat"} 1', metrics)
        self.assertIn("shoal_scheduler_nodes_failed 1", metrics)
        out = subprocess.run([str(binary("shoalctl")), "--scheduler", self.scheduler.url, "nodes"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        line = next(l for l in out.stdout.splitlines() if l.startswith("node4 "))
        self.assertIn("failed", line)
        self.assertIn("no heartbeat for", out.stdout)
        p4.start()
        wait_until(lambda: state("node4").get("state") == "healthy", 20, "node4 back")
        self.assertEqual(events("node4")[0]["event"], "recovered")

    def test_9_a_failed_network_validation_fails_the_node_until_it_passes(self):
        """The failure detector judges every node's netsetup document each second from verdicts
        kept per document version (cached_network_model): a node whose validation failed is
        failed at its first heartbeat, and recovers with the heartbeat that carries a new
        document that passes, without a restart of anything."""
        def state(node: str) -> dict:
            return next((n["state"] for n in self.nodes() if n["node"] == node), {})

        def heartbeat_bytes() -> float:
            text = urllib.request.urlopen(self.scheduler.url + "/metrics", timeout=5).read().decode()
            return float(re.search(r"^shoal_scheduler_heartbeat_bytes_total (\S+)$", text, re.M).group(1))

        # Padded to 300 KB (a big node's document is some 22 KB): whether it travels again shows
        # in the scheduler's byte count beside the other nodes' small heartbeats.
        pad = "x" * 300_000
        report = self.dir / "node5-netsetup.json"
        report.write_text(json.dumps({"validation": {"passed": False, "error": "PFC is off on rail 3"}, "pad": pad}))
        p5 = self.start_peerd("node5", "r2", {"node": {"netsetup_report": str(report)}})
        try:
            wait_until(lambda: state("node5").get("state") == "failed", 20, "node5 failed by its netsetup report")
            self.assertEqual(state("node5")["cause"], "netsetup")
            self.assertIn("PFC is off on rail 3", state("node5")["detail"])
            node5 = http_json(self.scheduler.url + "/v1/nodes/node5")[1]
            self.assertEqual(node5["netsetup"]["validation"]["passed"], False)
            self.assertIsNone(next(n for n in self.nodes() if n["node"] == "node5")["netsetup"])
            # The same document: still failed, no second event, and not sent again (peerd's deltas
            # say netsetup_unchanged once the scheduler acknowledged it; the scheduler keeps it).
            seq0, bytes0 = node5["seq"], heartbeat_bytes()
            time.sleep(2 * HEARTBEAT + 1)
            node5 = http_json(self.scheduler.url + "/v1/nodes/node5")[1]
            self.assertGreaterEqual(node5["seq"], seq0 + 2)
            self.assertLess(heartbeat_bytes() - bytes0, len(pad))
            self.assertEqual(node5["netsetup"]["pad"], pad)
            self.assertEqual(state("node5")["state"], "failed")
            events = http_json(self.scheduler.url + "/v1/events?node=node5")[1]["events"]
            self.assertEqual([e["event"] for e in events], ["failed"], events)
            # Fixed on the node: the next heartbeat's document is a new version, judged again.
            report.write_text(json.dumps({"validation": {"passed": True, "settings": {"mtu": 4200}}}))
            wait_until(lambda: state("node5").get("state") == "healthy", 20, "node5 healthy with a passing report")
            events = http_json(self.scheduler.url + "/v1/events?node=node5")[1]["events"]
            self.assertEqual([e["event"] for e in events], ["recovered", "failed"], events)
        finally:
            p5.stop()

    def test_7_metrics_pass_promtool(self):
        text = urllib.request.urlopen(self.scheduler.url + "/metrics", timeout=5).read().decode()
        for name in ("shoal_scheduler_nodes", "shoal_scheduler_nodes_healthy", "shoal_scheduler_index_objects",
                     "shoal_scheduler_placement_duration_seconds_bucket", "shoal_scheduler_prewarm_orders",
                     "shoal_scheduler_heartbeats_total", "shoal_tracker_swarms"):
            self.assertIn(name, text)
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
