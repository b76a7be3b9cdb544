"""Scheduler replicas sharing state through real Redis with Sentinel (docs/ha.md).

One cluster for every case: a Redis primary, one Redis replica and three Sentinels (ACLs on, the
scheduler's user limited to shoal:* keys), and three shoal-scheduler replicas that find the
primary through the Sentinels. Cases run in name order and build on each other:

1. a node's full list sent to one replica and its deltas to the others: every replica holds the
   same view; a gap sent to any replica is a resync everywhere;
2. announces answered by one replica are handed out by another (the tracker is shared);
3. a replica started later loads the nodes and recent announces from Redis, without a heartbeat;
4. the Redis primary killed (SIGKILL): Sentinel promotes the replica, the schedulers reconnect,
   and a full list acknowledged before the kill (WAIT 1) is still there;
5. the lease: one holder at a time; kill -9 the holder and another takes it within lease_ttl;
6. Redis entirely down: replicas still answer, marked Shoal-Stale, /healthz degraded; Redis back
   (empty): a new cluster epoch, and nodes are told to resync;
7. a node (in its own network namespace) cannot reach Redis, and an unauthenticated client that
   can is refused;
8. a job placed through one replica is known to all, its GPU reservation too; when a member fails, the lease holder alone
   decides: one decision, one failover prewarm, one failover event, the same on every replica,
   and its orders reach the replacement through whichever replica it talks to; the lease holder
   killed and a second member failed: the new holder decides, once;
9. a replica started a moment ago, left the only one, decides a reported failure at once (the
   schedulers have served longer than its failed_after).

Nodes here are fake (heartbeats over HTTP from a thread, spread over the replicas as nodes that
fail over between them would); images resolve through a real registry and registry-proxy.
"""
from __future__ import annotations

import json
import os
import re
import struct
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402
from shoal_fixtures.procs import free_port  # noqa: E402
from shoal_fixtures.redis import RedisHA  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy  # noqa: E402

LEASE_TTL_S = 2


def call(url: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def hb(node: str, objects: list[dict], *, seq: int, epoch: str = "", full: bool = True,
       removed: tuple[str, ...] = (), port: int = 6881) -> bytes:
    return json.dumps({"schema": 2, "node": node, "bt_port": port, "full": full, "seq": seq,
                       "epoch": epoch, "objects": objects, "removed": list(removed),
                       "health": "ok"}).encode()


def obj(i: int) -> dict:
    return {"digest": f"sha256:{i:064x}", "size": 1000 + i, "info_hash": f"{i:040x}"}


def announce(base: str, info_hash: bytes, port: int, node: str) -> bytes:
    q = urllib.parse.urlencode({"info_hash": info_hash, "peer_id": b"-SH0001-" + b"y" * 12,
                                "port": port, "left": 10, "compact": 1, "node": node})
    code, _, body = call(f"{base}/announce?{q}")
    assert code == 200, body
    return body


def compact_peer(port: int) -> bytes:
    return bytes([127, 0, 0, 1]) + struct.pack(">H", port)


def metric(base: str, name: str) -> float | None:
    code, _, body = call(base + "/metrics")
    if code != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_for(what: str, fn, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


class FakeNodes:
    """Nodes that heartbeat every `period` s (deltas, a full list when told to resync), each
    heartbeat to the next replica in turn; `stop(name)` silences one. Orders received are kept."""

    def __init__(self, replicas: list, names: list[str], period: float = 0.5):
        self.replicas, self.period = replicas, period
        self.state = {n: {"seq": 0, "epoch": "", "full": True, "alive": True} for n in names}
        self.failing: set[str] = set()  # nodes that report health `failing`
        self.orders: dict[str, set[str]] = {n: set() for n in names}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.turn = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def beat(self, name: str) -> None:
        st = self.state[name]
        st["seq"] += 1
        body = json.dumps({"schema": 2, "node": name, "bt_port": 7100 + int(name[1:]),
                           "full": st["full"], "seq": st["seq"], "epoch": st["epoch"],
                           "objects": [], "removed": [],
                           "health": "failing" if name in self.failing else "ok",
                           "labels": {"fabric": "f1"}, "gpus": [{"model": "g", "count": 4}],
                           "orders": [{"id": o, "state": "queued", "bytes_done": 0,
                                       "bytes_total": 0} for o in sorted(self.orders[name])]
                           }).encode()
        alive = [r for r in self.replicas if r.daemon.alive]
        self.turn += 1
        r = alive[self.turn % len(alive)]
        try:
            code, _, out = call(r.url + "/v1/heartbeat", body, timeout=3)
        except OSError:
            return
        if code != 200:
            return
        reply = json.loads(out)
        st["epoch"], st["full"] = reply["epoch"], reply["resync"]
        for o in reply.get("orders", []):
            self.orders[name].add(o["id"])

    def run(self) -> None:
        while not self.done.wait(self.period):
            with self.lock:
                for name, st in self.state.items():
                    if st["alive"]:
                        self.beat(name)

    def stop(self, name: str) -> None:
        with self.lock:
            self.state[name]["alive"] = False


class SchedulerHA(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        d = Path(cls.class_tmpdir("shoal-ha-"))
        cls.redis = RedisHA(d / "redis")
        cls.class_track(cls.redis.start())
        cls.redis_cfg = {"redis": cls.redis.scheduler_section(
            d / "redis.password", lease_ttl=f"{LEASE_TTL_S}s", wait_replicas=1,
            wait_timeout="500ms")}
        cls.dir = d
        cls.registry = cls.class_track(Registry(d / "registry").start())
        proxy_port = free_port()
        cls.redis_cfg.update({
            "resolver": {"registry_proxy": f"http://127.0.0.1:{proxy_port}"},
            "nodes": {"unhealthy_after": "2s", "heartbeat_interval": "1s"},
            # Nodes of the earlier cases fall silent: not a stale view here.
            "failover": {"failed_after": "3s", "restart_grace": "10s", "max_failed_fraction": 0.95}})
        cls.replicas = [cls.start_replica(i) for i in range(3)]
        cls.proxy = cls.class_track(RegistryProxy(
            d / "registry-proxy", port=proxy_port,
            upstreams=[{"name": cls.registry.host_port, "url": cls.registry.url}]).start())
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=256 * 1024, seed="ha")])
        cls.image = cls.registry.push(layout, "team/ha", "v1")

    @classmethod
    def start_replica(cls, i: int) -> Scheduler:
        s = Scheduler(cls.dir / f"sched{i}", extra=cls.redis_cfg)
        return cls.class_track(s.start())

    def node_of(self, s: Scheduler, name: str) -> dict | None:
        for n in s.nodes():
            if n["node"] == name:
                return n
        return None

    def epoch(self) -> str:
        return self.redis.cli("GET", "shoal:epoch").strip()

    def test_1_heartbeats_go_through_any_replica(self):
        a, b, c = (r.url for r in self.replicas)
        code, _, body = call(a + "/v1/heartbeat", hb("n1", [obj(1), obj(2)], seq=1))
        self.assertEqual(code, 200, body)
        reply = json.loads(body)
        self.assertFalse(reply["resync"])
        self.assertEqual(reply["epoch"], self.epoch())
        e = reply["epoch"]
        code, _, body = call(b + "/v1/heartbeat", hb("n1", [obj(3)], seq=2, epoch=e, full=False,
                                                     removed=(obj(1)["digest"],)))
        self.assertEqual((code, json.loads(body)["resync"]), (200, False), body)
        code, _, body = call(c + "/v1/heartbeat", hb("n1", [obj(4)], seq=3, epoch=e, full=False))
        self.assertEqual((code, json.loads(body)["resync"]), (200, False), body)
        for r in self.replicas:
            n = wait_for(f"n1 at {r.url}", lambda: (x := self.node_of(r, "n1")) and
                         x["seq"] == 3 and x, 5)
            self.assertEqual(n["objects"], 3, r.url)
            code, _, body = call(r.url + "/v1/objects/" + obj(1)["digest"])
            self.assertEqual(code, 404, f"{r.url} still lists the removed object: {body}")
        # A gap (seq 5 after 3) sent to B is a resync, and C judges the next delta the same way.
        code, _, body = call(b + "/v1/heartbeat", hb("n1", [], seq=5, epoch=e, full=False))
        self.assertTrue(json.loads(body)["resync"])
        code, _, body = call(c + "/v1/heartbeat", hb("n1", [], seq=6, epoch=e, full=False))
        self.assertTrue(json.loads(body)["resync"], "a delta after a refused one must resync too")
        code, _, body = call(a + "/v1/heartbeat", hb("n1", [obj(2), obj(3), obj(4)], seq=7))
        self.assertFalse(json.loads(body)["resync"])
        code, _, body = call(b + "/v1/heartbeat", hb("n1", [], seq=8, epoch=e, full=False))
        self.assertFalse(json.loads(body)["resync"], body)

    def test_2_announces_are_shared(self):
        a, b, _ = (r.url for r in self.replicas)
        ih = b"\x42" * 20
        announce(a, ih, 7001, "pa")
        # B answers with A's peer once the announce went through the log (milliseconds).
        wait_for("A's announce handed out by B",
                 lambda: compact_peer(7001) in announce(b, ih, 7002, "pb"), 5)
        # And the holder from the heartbeat of case 1 is in the swarm of its info-hash too.
        ih1 = bytes.fromhex(obj(2)["info_hash"])
        self.assertIn(compact_peer(6881), announce(self.replicas[2].url, ih1, 7003, "pc"))

    def test_3_a_new_replica_loads_the_state(self):
        d = self.start_replica(3)
        try:
            n = self.node_of(d, "n1")
            self.assertIsNotNone(n, "the new replica did not load n1 from Redis")
            self.assertEqual(n["objects"], 3)
            self.assertIn(compact_peer(7001), announce(d.url, b"\x42" * 20, 7004, "pd"))
            self.assertEqual(metric(d.url, "shoal_scheduler_shared_state_stale"), 0)
        finally:
            d.stop()

    def test_4_redis_failover_keeps_acknowledged_writes(self):
        a, b, c = (r.url for r in self.replicas)
        e = self.epoch()
        code, _, body = call(a + "/v1/heartbeat", hb("n2", [obj(10), obj(11)], seq=1))
        self.assertEqual(code, 200, body)
        unrep = metric(a, "shoal_scheduler_redis_unreplicated_writes_total")
        self.assertEqual(unrep, 0, "WAIT 1 did not see the write on the Redis replica")
        old = self.redis.kill_primary()
        t0 = time.monotonic()
        new = self.redis.wait_failover(old, timeout=30)
        self.assertNotEqual(tuple(old), tuple(new))

        def delta_ok():
            code, _, body = call(b + "/v1/heartbeat", hb("n2", [obj(12)], seq=2, epoch=e,
                                                         full=False))
            return code == 200 and not json.loads(body)["resync"] and \
                metric(b, "shoal_scheduler_shared_state_stale") == 0
        wait_for("a delta judged by the new primary", delta_ok, 20, 0.2)
        print(f"redis failover: heartbeats through Redis again {time.monotonic() - t0:.1f} s "
              f"after the primary was killed", file=sys.stderr)
        self.assertEqual(self.epoch(), e, "the failover lost the cluster's epoch")
        self.assertEqual(self.redis.cli("HGET", "shoal:n:n2", "seq").strip(), "2")
        for r in self.replicas:
            wait_for(f"n2 with 3 objects at {r.url}",
                     lambda: (x := self.node_of(r, "n2")) and x["objects"] == 3, 5)
        # The new primary has no replica until the old one follows it: no WAIT can succeed, so
        # heartbeats are answered without waiting wait_timeout (500 ms) each, counted unreplicated.
        wait_for("b sees a primary without replicas",
                 lambda: metric(b, "shoal_scheduler_redis_replicas") == 0, 5, 0.2)
        before = metric(b, "shoal_scheduler_redis_unreplicated_writes_total")
        took = []
        for seq in range(3, 8):
            t = time.monotonic()
            code, _, body = call(b + "/v1/heartbeat", hb("n2", [], seq=seq, epoch=e, full=False))
            took.append(time.monotonic() - t)
            self.assertEqual(code, 200, body)
            self.assertFalse(json.loads(body)["resync"], body)
        took.sort()
        self.assertLess(took[2], 0.45, f"heartbeats waited for a replica that is not there: {took}")
        self.assertEqual(metric(b, "shoal_scheduler_redis_unreplicated_writes_total"), before + 5)
        # The old primary comes back as a replica, so the next cases have two Redis again.
        self.redis.restart(old, replica_of=new)
        self.redis.wait_replica(old, new)
        wait_for("b sees the replica again",
                 lambda: metric(b, "shoal_scheduler_redis_replicas") == 1, 5, 0.2)
        # WAIT 1 sees writes again. One WAIT may still time out (500 ms) on a loaded machine
        # while the replica settles: of up to 5 heartbeats, one must be replicated.
        for seq in range(8, 13):
            before = metric(b, "shoal_scheduler_redis_unreplicated_writes_total")
            code, _, body = call(b + "/v1/heartbeat", hb("n2", [], seq=seq, epoch=e, full=False))
            self.assertEqual(code, 200, body)
            if metric(b, "shoal_scheduler_redis_unreplicated_writes_total") == before:
                break
        else:
            self.fail("WAIT 1 saw none of 5 writes with the replica back")

    def holders(self) -> list[Scheduler]:
        return [r for r in self.replicas
                if r.daemon.alive and metric(r.url, "shoal_scheduler_lease_held") == 1]

    def test_5_the_lease_moves_when_its_holder_dies(self):
        first = wait_for("a lease holder", self.holders, 10)
        self.assertEqual(len(first), 1, "two replicas hold the lease")
        first[0].kill()
        t0 = time.monotonic()
        nxt = wait_for("another lease holder", self.holders, LEASE_TTL_S + 5)
        took = time.monotonic() - t0
        print(f"lease moved in {took:.1f} s (lease_ttl {LEASE_TTL_S} s)", file=sys.stderr)
        self.assertEqual(len(nxt), 1)
        self.assertIsNot(nxt[0], first[0])
        self.assertLess(took, LEASE_TTL_S + 2)
        i = self.replicas.index(first[0])
        self.replicas[i] = self.start_replica(10 + i)
        time.sleep(0.5)
        self.assertEqual(len(self.holders()), 1)

    def test_6_redis_down_answers_stale_then_resyncs(self):
        a = self.replicas[0].url
        old_epoch = self.epoch()
        self.redis.stop_all(kill=True)
        wait_for("stale", lambda: metric(a, "shoal_scheduler_shared_state_stale") == 1, 10)
        code, headers, body = call(a + "/v1/nodes")
        self.assertEqual(code, 200)
        self.assertIn("Shoal-Stale", headers)
        self.assertIn("n1", [n["node"] for n in json.loads(body)])
        code, _, body = call(a + "/healthz")
        self.assertIn("degraded", body.decode())
        code, _, body = call(a + "/readyz")
        self.assertEqual(code, 200, "a stale replica still serves: it must stay ready")
        code, headers, body = call(a + "/v1/heartbeat", hb("n3", [obj(20)], seq=1))
        self.assertEqual(code, 200, body)
        self.assertIsNotNone(self.node_of(self.replicas[0], "n3"))
        self.redis.start_again()
        for r in self.replicas:
            wait_for(f"{r.url} fresh", lambda: metric(r.url, "shoal_scheduler_shared_state_stale")
                     == 0, 15)
        e = wait_for("a new epoch", lambda: (x := self.epoch()) != old_epoch and x, 10)
        code, headers, body = call(a + "/v1/heartbeat",
                                   hb("n1", [], seq=9, epoch=old_epoch, full=False))
        reply = json.loads(body)
        self.assertNotIn("Shoal-Stale", headers)
        self.assertTrue(reply["resync"])
        self.assertEqual(reply["epoch"], e)

    def test_7_a_node_cannot_write_to_redis(self):
        out = self.redis.cli("SET", "shoal:x", "1", user=None, check=False)
        self.assertIn("NOAUTH", out)
        if os.geteuid() != 0:
            self.skipTest("network namespaces need root")
        from shoal_fixtures.netns import Network
        net = Network(1)
        net.create()
        try:
            node = net.nodes[0]
            primary = self.redis.primary_addr()
            for host in (net.host_ip, "127.0.0.1"):
                r = node.exec(["redis-cli", "-h", host, "-p", str(primary.port), "--no-auth-warning",
                               "SET", "shoal:x", "1"], check=False, timeout=10)
                self.assertNotIn("OK", r.stdout, f"a node wrote to Redis through {host}")
        finally:
            net.destroy()

    def fo_prewarms(self, s: Scheduler) -> list[str]:
        code, _, body = call(s.url + "/v1/prewarm")
        self.assertEqual(code, 200, body)
        items = json.loads(body)
        items = items.get("prewarms", items) if isinstance(items, dict) else items
        return sorted(p["id"] for p in items if p["id"].startswith("fo-"))

    def decision(self, s: Scheduler) -> dict | None:
        code, _, body = call(s.url + "/v1/jobs/train/failover")
        return json.loads(body) if code == 200 else None

    def failover_events(self, s: Scheduler, node: str) -> int:
        code, _, body = call(s.url + f"/v1/events?node={node}")
        return sum(1 for e in json.loads(body)["events"] if e["event"] == "failover")

    def decided_once_everywhere(self, failed: str, before: list[str]) -> dict:
        live = [r for r in self.replicas if r.daemon.alive]
        try:
            wait_for(f"a decision for {failed} on every replica",
                     lambda: all((d := self.decision(r)) and d["failed"]["node"] == failed
                                 for r in live), 20, 0.2)
        except AssertionError:
            for r in live:
                print(r.url, self.decision(r), metric(r.url, "shoal_scheduler_lease_held"),
                      r.diagnostics()[-3000:], file=sys.stderr)
            raise
        time.sleep(1.5)  # time for a second decision, were one to be made
        ds = [self.decision(r) for r in live]
        self.assertEqual(len({d["time"] for d in ds}), 1, f"different decisions: {ds}")
        pws = [self.fo_prewarms(r) for r in live]
        self.assertTrue(all(p == pws[0] for p in pws), f"replicas disagree: {pws}")
        new = [p for p in pws[0] if p not in before]
        self.assertEqual(len(new), 1, f"failover prewarms for {failed}: {new}")
        for r in live:
            self.assertEqual(self.failover_events(r, failed), 1, r.url)
        # Decided by the lease holder: its log has the decision, the others only applied it.
        made = re.compile(rf"failover(: no replacement)? job=train failed={failed} ")
        deciders = [r for r in live
                    if made.search((r.dir / "scheduler.log").read_text(errors="replace"))]
        self.assertEqual(deciders, self.holders(), "the decision was not the lease holder's")
        return ds[0] | {"prewarm_id": new[0]}

    def test_8_one_decision_per_failure_whoever_holds_the_lease(self):
        names = [f"f{i}" for i in range(1, 6)]
        nodes = FakeNodes(self.replicas, names)
        nodes.thread.start()
        try:
            for r in self.replicas:
                wait_for(f"5 healthy nodes at {r.url}", lambda: sum(
                    1 for n in r.nodes() if n["node"] in names and n["healthy"]) == 5, 15)
            job = {"id": "train", "images": [self.image], "nodes": 2, "gpus": 4, "standby": 1}
            code, _, body = call(self.replicas[1].url + "/v1/place", json.dumps(job).encode(),
                                 timeout=30)
            self.assertEqual(code, 200, body)
            members = json.loads(body)["chosen"]
            # Its GPU reservation counts on every replica (a placement through another one does
            # not take the same GPUs).
            for r in self.replicas:
                wait_for(f"the reservation at {r.url}", lambda: all(
                    n["gpus_reserved"] == 4 for n in r.nodes() if n["node"] in members), 5)
            for r in self.replicas:
                wait_for(f"the job at {r.url}", lambda: (c := call(r.url + "/v1/jobs/train"))[0]
                         == 200 and [m["node"] for m in json.loads(c[2])["members"]] == members, 5)
            nodes.stop(members[0])
            d = self.decided_once_everywhere(members[0], [])
            self.assertTrue(d["replacement"], d)
            wait_for("the failover order at the replacement",
                     lambda: any(o.startswith(d["prewarm_id"]) for o in nodes.orders[d["replacement"]]),
                     10)
            holder = wait_for("a lease holder", self.holders, 10)
            holder[0].kill()
            other = [m for m in d["members"] if m != d["replacement"]][0]
            nodes.stop(other)
            wait_for("a new lease holder", self.holders, LEASE_TTL_S + 5)
            self.decided_once_everywhere(other, [d["prewarm_id"]])
        finally:
            nodes.done.set()
            nodes.thread.join(5)

    def test_9_a_replica_started_a_moment_ago_decides_at_once(self):
        """A replica whose own start is younger than its failed_after, left the only one (so the
        lease holder), decides a member's reported failure at once: the schedulers have served
        longer than that (shoal:up_since), and it loaded the nodes' last heartbeats from Redis.
        (Before, a new replica decided nothing during its first failed_after.)"""
        failed_after = 15

        def service_age() -> float:
            sec, usec = self.redis.cli("TIME").splitlines()
            since = self.redis.cli("GET", "shoal:up_since").strip()
            now_ms = int(sec) * 1000 + int(usec) // 1000
            return (now_ms - int(since)) / 1000 if since else 0.0

        # Redis was restarted empty in case 6: let the schedulers serve for failed_after first.
        wait_for("the schedulers serving for failed_after",
                 lambda: service_age() >= failed_after + 1, failed_after + 10, 0.5)
        cfg = json.loads(json.dumps(self.redis_cfg))
        cfg["failover"]["failed_after"] = f"{failed_after}s"
        t0 = time.monotonic()
        young = self.class_track(Scheduler(self.dir / "sched-young", extra=cfg).start())
        for r in self.replicas:
            if r.daemon.alive:
                r.kill()
        self.replicas.append(young)
        wait_for("the young replica holding the lease", lambda: self.holders() == [young],
                 LEASE_TTL_S + 5)
        names = [f"y{i}" for i in range(1, 5)]
        nodes = FakeNodes([young], names)
        nodes.thread.start()
        try:
            wait_for("4 healthy nodes", lambda: sum(
                1 for n in young.nodes() if n["node"] in names and n["healthy"]) == 4, 15)
            job = {"id": "young", "images": [self.image], "nodes": 2, "gpus": 4, "standby": 1}
            code, _, body = call(young.url + "/v1/place", json.dumps(job).encode(), timeout=30)
            self.assertEqual(code, 200, body)
            member = json.loads(body)["chosen"][0]
            with nodes.lock:
                nodes.failing.add(member)

            def decided():
                code, _, body = call(young.url + "/v1/jobs/young/failover")
                return json.loads(body) if code == 200 else None
            d = wait_for("a failover decision", decided, failed_after)
            took = time.monotonic() - t0
            print(f"decided {took:.1f} s after the replica started (failed_after {failed_after} s)",
                  file=sys.stderr)
            self.assertEqual(d["failed"]["node"], member, d)
            self.assertLess(took, failed_after, "decided only once the replica's own start-up "
                            "window ended")
        finally:
            nodes.done.set()
            nodes.thread.join(5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
