"""Scheduler replicas on Redis with TLS (docs/ha.md, "TLS to Redis").

A Redis primary, one replica and three Sentinels that listen with TLS only and require a client
certificate of the cluster CA (they replicate and monitor over TLS too); one stunnel4 process in
client mode with a tunnel to each of them, presenting the scheduler's certificate (the scheduler
pod's sidecar); two scheduler replicas whose `redis.sentinels` are the Sentinels' tunnels and
whose `redis.tunnels` map every data node as the Sentinels name it to its tunnel.

1. heartbeats through either replica land in Redis (read back over TLS) and reach the other;
2. Redis refuses a plain-text client, a client without a certificate and one whose certificate
   another CA signed;
3. the primary killed (SIGKILL): Sentinel promotes the replica, the schedulers follow it through
   its tunnel, and heartbeats land there;
4. a scheduler whose tunnels lack the primary never reaches it in plain text: it answers stale
   and says why.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.certs import ClusterPKI, TLSParty, issue, make_ca  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402
from shoal_fixtures.redis import RedisHA, redis_binary  # noqa: E402
from shoal_fixtures.stunnel import Stunnel  # noqa: E402


def call(url: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def hb(node: str, seq: int, epoch: str = "", full: bool = True) -> bytes:
    return json.dumps({"schema": 2, "node": node, "bt_port": 6881, "full": full, "seq": seq,
                       "epoch": epoch, "health": "ok", "removed": [],
                       "objects": [{"digest": f"sha256:{seq:064x}", "size": 1000 + seq,
                                    "info_hash": f"{seq:040x}"}]}).encode()


class RedisTlsTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        d = Path(cls.class_tmpdir("shoal-redis-tls-"))
        cls.dir = d
        cls.pki = ClusterPKI(d / "pki")
        cls.redis = cls.class_track(RedisHA(d / "redis", tls=cls.pki.redis(["127.0.0.1"])).start())
        servers = [n.addr for n in cls.redis.data_nodes + cls.redis.sentinel_nodes]
        cls.tunnel = cls.class_track(Stunnel(d / "stunnel", cls.pki.scheduler(["127.0.0.1"]),
                                             servers).start())
        section = cls.redis.scheduler_section(d / "redis.password", lease_ttl="2s",
                                              wait_replicas=1, wait_timeout="500ms")
        section["sentinels"] = [cls.tunnel.local(a) for a in cls.redis.sentinel_addrs()]
        section["tunnels"] = {f"{n.addr.host}:{n.addr.port}": cls.tunnel.local(n.addr)
                              for n in cls.redis.data_nodes}
        cls.section = section
        cls.replicas = [cls.class_track(Scheduler(d / f"sched{i}", extra={"redis": section}).start())
                        for i in range(2)]
        cls.seq = 0
        cls.epoch = ""

    def beat(self, s: Scheduler, node: str = "n1") -> tuple[int, dict, dict]:
        type(self).seq += 1
        code, headers, body = call(s.url + "/v1/heartbeat",
                                   hb(node, self.seq, self.epoch, full=not self.epoch))
        reply = json.loads(body) if code == 200 else {}
        if code == 200:
            type(self).epoch = "" if reply.get("resync") else reply["epoch"]
        return code, headers, reply

    def landed(self, node: str = "n1") -> int:
        out = self.redis.cli("HGET", f"shoal:n:{node}", "seq")
        return int(out) if out.strip() else 0

    def wait_landing(self, s: Scheduler, timeout: float = 30) -> None:
        """Heartbeats to `s` until one is answered fresh (no Shoal-Stale) and is in Redis."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            code, headers, reply = self.beat(s)
            last = (code, headers.get("shoal-stale"), reply)
            if code == 200 and "shoal-stale" not in headers and not reply.get("resync") \
                    and self.landed() == self.seq:
                return
            time.sleep(0.2)
        self.fail(f"no heartbeat landed in Redis through {s.url}: {last}\n"
                  f"{s.daemon.log_tail(30)}\n{self.tunnel.diagnostics()}")

    def test_1_heartbeats_land_in_redis_through_the_tunnels(self):
        a, b = self.replicas
        self.wait_landing(a)
        self.wait_landing(b)
        nodes = [n["node"] for n in a.nodes()]
        self.assertIn("n1", nodes)
        # The other replica has it from the shared log, read through its own tunnel.
        self.assertIn("n1", [n["node"] for n in b.nodes()])

    def test_2_redis_refuses_plain_text_and_strangers(self):
        primary = self.redis.primary_addr()
        cli = redis_binary("redis-cli")
        plain = subprocess.run([cli, "-h", primary.host, "-p", str(primary.port), "PING"],
                               capture_output=True, text=True, timeout=10)
        self.assertNotIn("PONG", plain.stdout + plain.stderr)
        ca = self.pki.ca.cert
        no_cert = subprocess.run([cli, "--tls", "--cacert", str(ca), "-h", primary.host, "-p",
                                  str(primary.port), "PING"], capture_output=True, text=True,
                                 timeout=10)
        self.assertNotIn("PONG", no_cert.stdout + no_cert.stderr)
        other = make_ca(self.dir / "other-ca", "Not the cluster CA")
        stranger = issue(other, self.dir / "stranger", "stranger", ips=["127.0.0.1"])
        bad = subprocess.run([cli, "--tls", "--cacert", str(ca), "--cert", str(stranger.cert),
                              "--key", str(stranger.key), "-h", primary.host, "-p",
                              str(primary.port), "PING"], capture_output=True, text=True,
                             timeout=10)
        self.assertNotIn("PONG", bad.stdout + bad.stderr)
        # The cluster's own certificate gets in (the fixture's cli presents Redis's).
        self.assertEqual(self.redis.cli("PING", addr=primary), "PONG")

    def test_3_primary_killed_the_schedulers_follow_through_the_tunnels(self):
        old = self.redis.kill_primary()
        new = self.redis.wait_failover(old)
        self.assertNotEqual(tuple(new), tuple(old))
        for s in self.replicas:
            self.wait_landing(s, timeout=40)
        self.assertEqual(self.redis.cli("HGET", "shoal:n:n1", "seq", addr=new), str(self.seq))

    def test_4_a_primary_without_a_tunnel_is_not_reached(self):
        section = dict(self.section)
        section["tunnels"] = {"127.0.0.1:1": self.tunnel.local(self.redis.sentinel_addrs()[0])}
        s = self.class_track(Scheduler(self.dir / "sched-untunnelled",
                                       extra={"redis": section}).start())
        s.daemon.wait_log("has no entry in redis.tunnels", timeout=20)
        code, headers, _ = call(s.url + "/v1/heartbeat", hb("n9", 1))
        self.assertEqual(code, 200)
        self.assertIn("shoal-stale", headers)


if __name__ == "__main__":
    unittest.main()
