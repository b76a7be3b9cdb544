#!/usr/bin/env python3
"""Checkpoints and failover on a namespace cluster (docs/checkpoints.md): the real
registry, s3rver, registry-proxy, the scheduler and 5 peerd nodes with mutual TLS, SSL torrents
and grants (the scheduler signs checkpoint swarms' grants).

One cluster start, cases in order (each builds on the last):
 1. A job (an image and a dataset) is prewarmed onto 4 nodes plus 1 standby; the scheduler records
    it (GET /v1/jobs/train).
 2. The writer publishes step 1 (10 files) and step 2 (1 of 10 files changed): step 2 stores only
    that file, and the standby, kept current by the scheduler, moves only that file for step 2.
 3. The same step published again with other contents is refused with the scheduler's words.
 4. A peerd restarted on a healthy member publishes no failover.
 5. A member dies (peerd killed, link down): the scheduler finds it failed within failed_after and
    a few heartbeats, picks the standby (the failover answer), which already holds the image, the
    dataset and step 2; a restore there moves zero bytes over the network.
 6. A restore on a member that has nothing, while the writer dies half-way, completes from the
    other holders.
 7. A corrupt copy on one holder is refused (piece hash) and fetched from another; the view is
    byte-exact. Ranks: a restore of rank 3 takes rank 3's shard and the shared files only.
 8. A node whose health hook says failing is failed (cause `reported`).
 9. A restarted scheduler (its catalog is in memory) learns the steps again from their writer.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))

import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.cluster import Cluster  # noqa: E402
from shoal_fixtures.containerd import PAUSE_IMAGE, Containerd  # noqa: E402
from shoal_fixtures.shoal import to_yaml  # noqa: E402
from shoal_fixtures.procs import run, wait_until  # noqa: E402

MIB = 1 << 20
FAILED_AFTER = 6  # seconds (failover.failed_after)
SHARD = 6 * MIB + 4099  # each rank's shard: a group (torrent) of its own


def checkpoint_files(step_seed: str, changed: str = "") -> dict[str, bytes]:
    """8 rank shards and 2 shared metadata files; `changed` names a file whose bytes differ."""
    files = {f"rank_{r}/shard.bin": dc.content(f"shard{r}" + ("x" if f"rank_{r}/shard.bin" == changed else ""),
                                               SHARD + r) for r in range(8)}
    files["config.json"] = json.dumps({"layers": 80, "seed": step_seed}).encode()
    files["meta/tokenizer.json"] = dc.content("tok", 3000)
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def same_tree(view: Path, files: dict[str, bytes]) -> None:
    seen = {}
    for dirpath, _, names in os.walk(view):
        for n in names:
            p = Path(dirpath) / n
            seen[str(p.relative_to(view))] = hashlib.sha256(p.read_bytes()).hexdigest()
    want = {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    if seen != want:
        raise AssertionError(f"view {view} differs: missing {sorted(set(want) - set(seen))}, "
                             f"extra {sorted(set(seen) - set(want))}, "
                             f"different {sorted(k for k in want if k in seen and seen[k] != want[k])}")


@unittest.skipUnless(os.geteuid() == 0, "network namespaces need root")
class CheckpointFailover(FixtureTestCase):
    cluster: Cluster

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        work = cls.class_tmpdir("shoal-checkpoints-")
        cls.work = work
        cls.token = work / "checkpoint-token"
        cls.token.write_text("ckpt-" + hashlib.sha256(str(work).encode()).hexdigest()[:32] + "\n")
        os.chmod(cls.token, 0o600)
        t0 = time.monotonic()
        cls.cluster = cls.class_track(Cluster(
            work / "cluster", nodes=5, rate="400mbit", containerd=False, s3_origin=True,
            proxy_extra={"datasets": {"small_file_max": "1MiB", "pack_target": "4MiB"}},
            peerd_extra={"node": {"labels": {"fabric": "f1"}},
                         "swarm": {"heartbeat_interval": "1s", "stall_timeout": "5s", "fallback_deadline": "60s"},
                         "checkpoints": {"token_file": str(cls.token)}},
            scheduler_config={"nodes": {"unhealthy_after": "3s", "heartbeat_interval": "1s"},
                              "failover": {"failed_after": f"{FAILED_AFTER}s", "restart_grace": "60s"},
                              "prewarm": {"timeout": "180s"}}))
        cls.cluster.start()
        cls.started = time.monotonic()
        print(f"[ measure ] cluster start: {cls.started - t0:.1f}s", file=sys.stderr)

    # -- helpers ---------------------------------------------------------------------------------

    def sched(self, path: str, *args: str) -> tuple[int, object]:
        return dc.curl_json(self.cluster, None, self.cluster.scheduler.url + path, *args)

    def ctl(self, i: int, *args: str, timeout: float = 300):
        return dc.shoalctl("checkpoint", "--checkpoint-token-file", str(self.token), *args,
                           peerd=self.cluster.peerds[i].url, netns=self.cluster.netns(i), timeout=timeout)

    def idx(self, name: str) -> int:
        return int(name.removeprefix("node")) - 1

    def restore_state(self, i: int, key: str) -> dict:
        code, body = dc.curl_json(self.cluster, i, f"{self.cluster.peerds[i].url}/shoal/v1/checkpoints/{key}")
        return body if code == 200 and isinstance(body, dict) else {}

    def received(self, i: int) -> float:
        m = self.cluster.metrics_of(self.cluster.peerds[i].metrics_url, i)
        return sum(m.get(k, 0.0) for k in ("shoal_peerd_bytes_from_peers_total", "shoal_peerd_bytes_from_origin_total",
                                           "shoal_peerd_bytes_from_http_fallback_total"))

    def holds_all(self, node: str, key: str) -> bool:
        code, rec = self.sched(f"/v1/checkpoints/{key}")
        if code != 200:
            return False
        return any(h["node"] == node and h["bytes"] == rec["bytes"] for h in rec["holders"])

    # -- cases -----------------------------------------------------------------------------------

    def test_1_job_prewarmed_with_standby(self):
        c = self.cluster
        layers = [oci.LayerSpec(size=6 * MIB, seed="ckpt-a", gzip_level=0),
                  oci.LayerSpec(size=3 * MIB, seed="ckpt-b", gzip_level=0)]
        _, ref = c.push(layers, name="train/app", tag="v1")
        type(self).image = ref
        for k, v in dc.small_tree("", files=20, large=1, large_size=2 * MIB).items():
            c.s3.write_object("tokens/" + k, v)
        code, body = dc.curl_json(c, None, c.proxy.url + "/shoal/v1/datasets", "-X", "POST", "-H",
                                  "Content-Type: application/json", "--data-binary",
                                  json.dumps(dc.s3_declaration("tokens", "v1", c.s3, "tokens/")))
        self.assertIn(code, (200, 202), body)
        wait_until(lambda: dc.curl_json(c, None, c.proxy.url + "/shoal/v1/datasets/tokens@v1")[0] == 200, 120,
                   "tokens@v1 resolved")
        job = {"id": "train", "images": [ref], "datasets": ["tokens@v1"], "nodes": 4}
        code, pw = self.sched("/v1/prewarm", "-X", "POST", "-H", "Content-Type: application/json",
                              "--data-binary", json.dumps({"job": job, "standby": 1}))
        self.assertIn(code, (200, 201, 202), pw)
        pid = pw["id"]

        def done():
            code, p = self.sched(f"/v1/prewarm/{pid}")
            if code == 200 and p.get("state") == "failed":
                raise AssertionError(p)
            return code == 200 and p.get("state") == "done"
        wait_until(done, 180, "the job's prewarm done")
        code, j = self.sched("/v1/jobs/train")
        self.assertEqual(code, 200, j)
        members = [m["node"] if isinstance(m, dict) else m for m in j["members"]]
        standbys = [s["node"] if isinstance(s, dict) else s for s in j["standbys"]]
        self.assertEqual(len(members), 4, j)
        self.assertEqual(len(standbys), 1, j)
        type(self).members, type(self).standby = members, standbys[0]
        type(self).writer = self.idx(members[0])

    def test_2_publish_two_steps_standby_current(self):
        c, w = self.cluster, self.writer
        root = Path(c.peerds[w].dir) / "checkpoints" / "incoming"
        step1, step2 = checkpoint_files("1"), checkpoint_files("2", changed="rank_5/shard.bin")
        step2["config.json"] = step1["config.json"]  # one file of ten changes
        type(self).step2 = step2
        write_tree(root / "train-1", step1)
        write_tree(root / "train-2", step2)
        t0 = time.monotonic()
        cp = self.ctl(w, "publish", str(root / "train-1"), "--job", "train", "--step", "1", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        p1 = json.loads(cp.stdout)
        print(f"[ measure ] publish train@1 ({p1['bytes'] / MIB:.1f} MiB, 10 files) to registered: "
              f"{time.monotonic() - t0:.2f}s (read {p1['read_seconds']:.2f}s)", file=sys.stderr)
        self.assertEqual(p1["state"], "registered")
        self.assertEqual(p1["files"], 10)
        # Steps are minutes apart in training: the standby holds step 1 before step 2 comes.
        wait_until(lambda: self.holds_all(self.standby, "train@1"), 120, "the standby holds train@1")
        cp = self.ctl(w, "publish", str(root / "train-2"), "--job", "train", "--step", "2", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        p2 = json.loads(cp.stdout)
        # Content addressed: only the changed file is new to the writer's cache.
        self.assertEqual(p2["bytes_stored"], len(step2["rank_5/shard.bin"]), p2)
        code, rec = self.sched("/v1/checkpoints/train@latest")
        self.assertEqual(code, 200, rec)
        self.assertEqual(rec["step"], 2)
        self.assertEqual(rec["writer"], c.peerds[w].name)
        # The scheduler prewarms each registered step onto the standby.
        s = self.idx(self.standby)
        wait_until(lambda: self.holds_all(self.standby, "train@2"), 120, "the standby holds train@2")
        wait_until(lambda: self.restore_state(s, "train@2").get("state") == "ready", 60, "standby's train@2 ready")
        r2 = self.restore_state(s, "train@2")
        moved = r2["from_peers"] + r2["from_origin"] + r2["from_http"]
        print(f"[ measure ] standby's step 2 moved {moved / MIB:.2f} MiB "
              f"(changed file {len(step2['rank_5/shard.bin']) / MIB:.2f} MiB)", file=sys.stderr)
        self.assertEqual(moved, len(step2["rank_5/shard.bin"]), r2)
        same_tree(Path(r2["view"]), step2)

    def test_3_same_step_other_contents_refused(self):
        c, w = self.cluster, self.writer
        root = Path(c.peerds[w].dir) / "checkpoints" / "incoming"
        other = checkpoint_files("2", changed="rank_1/shard.bin")
        write_tree(root / "train-2b", other)
        cp = self.ctl(w, "publish", str(root / "train-2b"), "--job", "train", "--step", "2")
        self.assertNotEqual(cp.returncode, 0, cp.stdout)
        self.assertIn("already published", cp.stdout + cp.stderr)
        # Outside publish_root, and without the token: refused.
        cp = self.ctl(w, "publish", "/etc", "--job", "train", "--step", "3")
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("publish_root", cp.stdout + cp.stderr)
        code, body = dc.curl_json(c, w, c.peerds[w].url + "/shoal/v1/checkpoints/restore", "-X", "POST",
                                  "--data-binary", '{"checkpoint": "train@2"}')
        self.assertEqual(code, 401, body)

    def test_4_restarted_peerd_is_no_failover(self):
        k = self.idx(self.members[3]) if self.idx(self.members[3]) != self.writer else self.idx(self.members[2])
        self.cluster.restart_peerd(k)
        time.sleep(FAILED_AFTER + 2)
        code, body = self.sched("/v1/jobs/train/failover")
        self.assertEqual(code, 404, body)

    def test_5_member_dies_standby_takes_over(self):
        c = self.cluster
        victim = next(m for m in self.members[1:] if self.idx(m) != self.writer)
        type(self).victim = victim
        v = self.idx(victim)
        # The scheduler makes no silence-based decision during its first failed_after.
        time.sleep(max(0.0, FAILED_AFTER + 1 - (time.monotonic() - self.started)))
        t0 = time.monotonic()
        c.peerds[v].kill()
        run(["ip", "link", "set", "dev", "eth0", "down"], netns=c.netns(v))

        def decided():
            code, body = self.sched("/v1/jobs/train/failover")
            return body if code == 200 else None
        d = wait_until(decided, 60, "a failover decision for train")
        took = time.monotonic() - t0
        print(f"[ measure ] node death to failover decision: {took:.1f}s (failed_after {FAILED_AFTER}s, "
              f"heartbeat 1s)", file=sys.stderr)
        self.assertLess(took, FAILED_AFTER + 8)
        self.assertEqual(d["failed"]["node"], victim, d)
        self.assertEqual(d["replacement"], self.standby, d)
        self.assertEqual(d["checkpoint"]["key"], "train@2", d)
        self.assertTrue(d["checkpoint"]["complete"], d)
        held = d["bytes_held"]
        self.assertEqual(held["image"]["held"], held["image"]["total"], d)
        self.assertEqual(held["datasets"]["held"], held["datasets"]["total"], d)
        self.assertGreater(held["image"]["total"], 0)
        self.assertEqual(d["resume"]["checkpoint"], "train@2", d)
        # The restore on the standby moves nothing over the network (its byte counters stand still).
        s = self.idx(self.standby)
        before = self.received(s)
        link = self.work / "resume-standby"
        cp = self.ctl(s, "restore", "train@latest", str(link), "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(json.loads(cp.stdout)["checkpoint"], "train@2")
        self.assertEqual(self.received(s), before)
        same_tree(link.resolve(), self.step2)

    def test_6_restore_while_writer_dies(self):
        c = self.cluster
        left = [m for m in self.members if m != self.victim and self.idx(m) != self.writer]
        t = self.idx(left[0])
        type(self).survivor = left[0]
        c.shape_node(t, "80mbit")  # about 5 s for 50 MiB: the writer dies early in it
        cp = self.ctl(t, "restore", "train@2", "--no-wait", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        wait_until(lambda: self.restore_state(t, "train@2").get("bytes_done", 0) > 4 * MIB, 60,
                   "the restore under way")
        c.peerds[self.writer].kill()
        wait_until(lambda: self.restore_state(t, "train@2").get("state") in ("ready", "failed"), 120,
                   "the restore done")
        r = self.restore_state(t, "train@2")
        self.assertEqual(r["state"], "ready", r)
        same_tree(Path(r["view"]), self.step2)
        c.shape_node(t, None)

    def test_7_corrupt_holder_refused_and_ranks(self):
        c = self.cluster
        # Corrupt the standby's copy of rank 3's shard (root ignores the cache's 0444).
        digest = hashlib.sha256(self.step2["rank_3/shard.bin"]).hexdigest()
        obj = Path(c.peerds[self.idx(self.standby)].dir) / "cache" / "objects" / "sha256" / digest[:2] / digest
        run(["chattr", "-i", str(obj)], check=False)  # a sealed link's inode (ext4 views)
        data = bytearray(obj.read_bytes())
        for off in range(0, len(data), 256 * 1024):
            data[off] ^= 0xFF
        obj.write_bytes(bytes(data))
        last = [m for m in self.members if m not in (self.victim, self.survivor) and self.idx(m) != self.writer]
        t = self.idx(last[0])
        cp = self.ctl(t, "restore", "train@2", "--ranks", "3", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        r = json.loads(cp.stdout)
        want = {k: v for k, v in self.step2.items() if not k.startswith("rank_") or k.startswith("rank_3/")}
        same_tree(Path(r["view"]), want)
        self.assertEqual(r["ranks"], [3])
        moved = r["from_peers"] + r["from_origin"] + r["from_http"]
        self.assertLess(moved, 2 * SHARD, r)  # one shard and the shared pack, not the others

    def test_8_health_hook_failing_is_a_failure(self):
        """peerd's health hook (node.health_command) says failing: the scheduler marks the node
        failed with cause `reported`, whatever its heartbeats."""
        from shoal_fixtures.nodes import to_yaml
        c = self.cluster
        i = self.idx(self.survivor)
        p = c.peerds[i]
        p.config.setdefault("node", {})["health_command"] = ["/bin/sh", "-c", "echo GPU 0: XID 79; exit 3"]
        p.config_path.write_text(to_yaml(p.config) + "\n")
        c.restart_peerd(i)

        def failed():
            code, nodes = self.sched(f"/v1/nodes/{self.survivor}")
            st = nodes.get("state", {}) if code == 200 and isinstance(nodes, dict) else {}
            return st if st.get("state") == "failed" else None
        st = wait_until(failed, 30, f"{self.survivor} failed by its health hook")
        self.assertEqual(st["cause"], "reported", st)
        self.assertIn("XID 79", json.dumps(st))

    def test_9_restarted_scheduler_learns_the_steps_again(self):
        """The catalog is in memory: a restarted scheduler gets each step back from its writer's
        peerd, which registers again on seeing the new epoch."""
        c = self.cluster
        c.restart_peerd(self.writer)  # killed in case 6
        c.restart_scheduler()
        t0 = time.monotonic()
        # Whole again once both steps are back. (The restarted writer may first register with
        # the scheduler that is going away, then again on seeing the new one's epoch.)
        def latest_step():
            code, rec = self.sched("/v1/checkpoints/train@latest")
            return rec.get("step") if code == 200 and isinstance(rec, dict) else None
        wait_until(lambda: latest_step() == 2 and self.sched("/v1/checkpoints/train@1")[0] == 200,
                   60, "train@2 as train@latest, and train@1, known again")
        print(f"[ measure ] catalog whole again {time.monotonic() - t0:.1f}s after the scheduler restart",
              file=sys.stderr)
        code, rec = self.sched("/v1/checkpoints/train@latest")
        self.assertEqual(rec["step"], 2, rec)
        self.assertEqual(self.sched("/v1/checkpoints/train@1")[0], 200)

    def test_9b_jobs_from_their_pods_fail_over(self):
        """Pods that run on a node through containerd's CRI (a real containerd, real pod
        sandboxes) make the node a member of their job: a job nobody placed fails over when the
        node dies, and a job whose pods end is forgotten."""
        c = self.cluster
        alive = [i for i in range(len(c.peerds)) if c.peerds[i].daemon.alive and i != self.writer]
        x = alive[-1]
        node = c.peerds[x].name
        cd = Containerd(self.work / "containerd-cri", cri=True, sandbox_image=PAUSE_IMAGE).start()
        self.addCleanup(cd.stop)
        p = c.peerds[x]
        p.config["node"].update({"cri_socket": str(cd.address), "cri_interval": "1s"})
        p.config_path.write_text(to_yaml(p.config) + "\n")
        c.restart_peerd(x)
        cd.run_pod("infer-0", "ml", {"shoal.io/job": "infer", "app": "infer"})
        batch = cd.run_pod("batch-0", "ml", {"shoal.io/job": "batch"})
        cd.run_pod("web-0", "default", {"app": "web"})  # no job label: not reported

        def job(name):
            code, body = self.sched(f"/v1/jobs/{name}")
            return body if code == 200 else None
        j = wait_until(lambda: job("infer"), 30, "job infer learned from its pod")
        self.assertEqual(j["source"], "pods", j)
        self.assertEqual(j["pod_nodes"], [node], j)
        self.assertEqual([m["node"] for m in j["members"]], [node], j)
        self.assertIsNotNone(wait_until(lambda: job("batch"), 30, "job batch learned"))
        m = c.metrics_of(p.metrics_url, x)
        self.assertEqual(m.get("shoal_peerd_cri_job_pods"), 2.0, m)

        cd.stop_pod(batch)  # NOTREADY: the job's only pod ended
        wait_until(lambda: job("batch") is None, 30, "job batch forgotten once its pod stopped")

        time.sleep(max(0.0, FAILED_AFTER + 1 - (time.monotonic() - self.started)))
        p.kill()
        run(["ip", "link", "set", "dev", "eth0", "down"], netns=c.netns(x))

        def decided():
            code, body = self.sched("/v1/jobs/infer/failover")
            return body if code == 200 else None
        d = wait_until(decided, 60, "a failover decision for infer")
        self.assertEqual(d["failed"]["node"], node, d)
        self.assertTrue(d["replacement"], d)
        self.assertNotEqual(d["replacement"], node, d)

    def test_9c_keep_last_ls_and_rm(self):
        """checkpoints.keep_last (2): a third step unpins the first on the writer, as `ls --node`
        shows; `rm` on a node that restored a step drops its view and pins there; `rm --cluster`
        (the scheduler's DELETE, operator) forgets a step, and @latest falls back."""
        c, w = self.cluster, self.writer
        root = Path(c.peerds[w].dir) / "checkpoints" / "incoming"
        cp = self.ctl(w, "publish", str(root / "train-2"), "--job", "train", "--step", "3", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(json.loads(cp.stdout)["state"], "registered", cp.stdout)

        def published():
            cp = self.ctl(w, "ls", "--node", "-o", "json")
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            return {p["checkpoint"]: p["state"] for p in json.loads(cp.stdout)["published"]}
        pubs = wait_until(lambda: (lambda p: p if p.get("train@1") == "unpinned" else None)(published()),
                          30, "train@1 unpinned on the writer (keep_last 2)")
        self.assertEqual(pubs.get("train@3"), "registered", pubs)

        # A node that holds a restored train@2: rm takes its view and pins away.
        alive = [i for i in range(len(c.peerds)) if c.peerds[i].daemon.alive and i != w]
        holder = next((i for i in alive if self.restore_state(i, "train@2").get("state") == "ready"), None)
        if holder is None:
            holder = alive[0]
            cp = self.ctl(holder, "restore", "train@2", "-o", "json")
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        view = Path(self.restore_state(holder, "train@2")["view"])
        self.assertTrue(view.is_dir(), view)
        cp = self.ctl(holder, "rm", "train@2")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(self.restore_state(holder, "train@2"), {})
        self.assertFalse(view.exists(), f"{view} is still there after rm")

        # The scheduler forgets train@3 on the operator's word; @latest is train@2 again.
        code, body = self.sched("/v1/checkpoints/train@3", "-X", "DELETE")
        self.assertEqual(code, 200, body)
        self.assertEqual(self.sched("/v1/checkpoints/train@3")[0], 404)
        code, rec = self.sched("/v1/checkpoints/train@latest")
        self.assertEqual((code, rec.get("step")), (200, 2), rec)


if __name__ == "__main__":
    unittest.main(verbosity=2)
