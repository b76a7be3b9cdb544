#!/usr/bin/env python3
"""peerd fails over between registry-proxy replicas (upstream.registry_proxy and
upstream.registry_proxies; peerd/src/proxy_link.h), against the real daemons on loopback.

Set-up: the real registry with three small images; registry-proxy replicas A and B (seeding over
BitTorrent) in front of it; one peerd configured with a closed port first, then A, then B
(`registry_proxy` the closed port, `registry_proxies` [A, B]).

- Pulls through peerd (manifest by tag, then each blob) succeed although the first URL is
  refused: peerd moves on to A within the same call, and the refused URL is passed over for
  `registry_proxy_backoff` (the next calls go straight to A).
- A killed with SIGKILL: the next image's pulls go to B, in about a second (a refused connect
  moves on at once).
- A stopped with SIGSTOP instead (it accepts connections and never answers) while B answers:
  a manifest pull gives up on A after `request_timeout` (1 s) and is answered by B.
- A replica killed while peerd swarms a blob from it (its upload capped so that the blob takes
  seconds): the client's one GET still receives the whole blob, its last part through the swarm's
  HTTP fallback ranges from the next replica.
- The same for a blob registry-proxy cuts into chunk objects while it fetches it (the upstream
  held at 20 MiB of 40, so only the first chunk is listed): the replica cutting it is killed;
  the listed chunk's ranges come from the next replica, which answers the chunk list with 404
  (it is not cutting the blob), and the rest of the blob comes from it as ranges
  (shoal_peerd_chunked_tails_total). The client's one GET receives the whole blob.
- A 502 is an answer: registry-proxy B answering 502 for an upstream failure is passed on, not
  retried on another replica (checked by the unit test of endpoints::call_kind::read).

Prints the measured failover times.
"""
from __future__ import annotations

import hashlib
import http.client
import random
import signal
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE.parents[0] / "registry-proxy"))

from shoal_fixtures import FixtureTestCase, free_port, oci  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, parse_metrics, upstream  # noqa: E402
from stub_upstream import StubUpstream  # noqa: E402

ACCEPT = {"Accept": "application/vnd.oci.image.manifest.v1+json, "
                    "application/vnd.oci.image.index.v1+json"}


def request(port: int, path: str, headers: dict[str, str] | None = None,
            timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


class ProxyFailoverTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-failover-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.images = {}
        for name in ("one", "two", "three"):
            img = oci.make_image(d / name, [oci.LayerSpec(size=200_000, seed=f"pfo-{name}")])
            cls.reg.push(img, f"team/{name}", "v1")
            cls.images[name] = img
        ups = [upstream(cls.reg.host_port, cls.reg.url)]
        cls.a = cls.class_track(RegistryProxy(d / "a", torrent=True, upstreams=ups).start())
        cls.b = cls.class_track(RegistryProxy(d / "b", torrent=True, upstreams=ups).start())
        cls.closed = f"http://127.0.0.1:{free_port()}"
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="pfo-node", registry_proxy=cls.closed,
                                          extra={
            "upstream": {"registry_proxies": [cls.a.url, cls.b.url], "request_timeout": "1s",
                         "connect_timeout": "1s", "metainfo_wait": "1s",
                         "registry_proxy_backoff": "30s"},
            "swarm": {"stall_timeout": "500ms", "fallback_deadline": "10s"}}).start())

    def pull(self, name: str) -> float:
        """Manifest by tag, then every blob, through peerd; returns the seconds it took."""
        img = self.images[name]
        ns = self.reg.host_port
        t0 = time.monotonic()
        s, h, body = request(self.peerd.http_port, f"/v2/team/{name}/manifests/v1?ns={ns}", ACCEPT)
        self.assertEqual(s, 200, body[:300])
        self.assertEqual(sha(body), img.top.digest)
        for blob in [img.images[0].config, *img.images[0].layers]:
            s, _, body = request(self.peerd.http_port,
                                 f"/v2/team/{name}/blobs/{blob.digest}?ns={ns}")
            self.assertEqual((s, sha(body)), (200, blob.digest), body[:300])
        return time.monotonic() - t0

    def served(self, proxy: RegistryProxy) -> float:
        m = parse_metrics(proxy.metrics_text())
        # (Not the /metrics scrapes themselves: route "ops".)
        return sum(v for k, v in m.items()
                   if k.startswith("shoal_proxy_requests_total") and 'route="ops"' not in k)

    def slow_replica_first(self, d: Path, ups: list, name: str) -> tuple[RegistryProxy, RegistryProxy, Peerd]:
        """A replica seeding over BitTorrent with its upload capped (3 MiB/s, so a blob takes
        seconds), a second one, and a peerd that asks the slow one first. The swarm's stall
        timeout (1.5 s) leaves the capped swarm time to start on a busy machine: a stall before
        the kill would take the whole blob from the slow replica over HTTP, uncapped."""
        slow = self.track(RegistryProxy(d / "slow", torrent=True, upstreams=ups, extra={
            "torrent": {"upload_rate_limit": "3MiB"}}).start())
        other = self.track(RegistryProxy(d / "other", upstreams=ups).start())
        p = self.track(Peerd(d / "peerd", name=name, registry_proxy=slow.url, extra={
            "upstream": {"registry_proxies": [other.url], "request_timeout": "2s",
                         "connect_timeout": "1s", "metainfo_wait": "1s",
                         "registry_proxy_backoff": "30s"},
            "swarm": {"stall_timeout": "1500ms", "fallback_deadline": "15s"}}).start())
        return slow, other, p

    def test_1_refused_first_url_then_a_killed_replica(self):
        # The first URL is refused: every call moves on to A within itself.
        a0, b0 = self.served(self.a), self.served(self.b)
        took = self.pull("one")
        print(f"\nfirst URL refused: image pulled through A in {took:.2f} s")
        self.assertGreater(self.served(self.a) - a0, 0)
        self.assertEqual(self.served(self.b) - b0, 0, "B is only tried after A")
        self.assertLess(took, 10)

        # A killed: the next pulls go to B.
        self.a.daemon.kill()
        b0 = self.served(self.b)
        took = self.pull("two")
        print(f"A killed: image pulled through B in {took:.2f} s")
        self.assertGreater(self.served(self.b) - b0, 0)
        self.assertLess(took, 10)

    def test_2_a_hung_replica_is_given_up_after_request_timeout(self):
        # A fresh peerd whose first replica accepts connections and never answers.
        d = self.tmpdir("shoal-proxy-failover-hung-")
        hung = self.track(RegistryProxy(d / "hung", upstreams=[
            upstream(self.reg.host_port, self.reg.url)]).start())
        hung.daemon.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: hung.daemon.send_signal(signal.SIGCONT))
        p = self.track(Peerd(d / "peerd", name="pfo-hung", registry_proxy=hung.url, extra={
            "upstream": {"registry_proxies": [self.b.url], "request_timeout": "1s",
                         "connect_timeout": "1s", "metainfo_wait": "1s"}}).start())
        t0 = time.monotonic()
        s, _, body = request(p.http_port,
                             f"/v2/team/three/manifests/v1?ns={self.reg.host_port}", ACCEPT)
        took = time.monotonic() - t0
        print(f"\nhung first replica: manifest answered by the next in {took:.2f} s")
        self.assertEqual((s, sha(body)), (200, self.images["three"].top.digest), body[:300])
        self.assertLess(took, 5)

    def test_3_a_replica_killed_mid_blob_the_blob_completes_from_another(self):
        """The replica peerd swarms a blob from (upload capped so the blob takes seconds) is
        killed mid-blob: the swarm stalls, its HTTP fallback ranges fail on the dead replica and
        go to the next, and the client's one GET receives the whole blob."""
        d = self.tmpdir("shoal-proxy-failover-midblob-")
        img = oci.make_image(d / "big", [oci.LayerSpec(size=16 << 20, seed="pfo-big",
                                                       compression="none")])
        self.reg.push(img, "team/big", "v1")
        slow, other, p = self.slow_replica_first(d, [upstream(self.reg.host_port, self.reg.url)],
                                                 "pfo-midblob")
        layer = img.images[0].layers[0]
        c = http.client.HTTPConnection("127.0.0.1", p.http_port, timeout=60)
        self.addCleanup(c.close)
        t0 = time.monotonic()
        c.request("GET", f"/v2/team/big/blobs/{layer.digest}?ns={self.reg.host_port}")
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        h = hashlib.sha256()
        first = r.read(2 << 20)
        h.update(first)
        self.assertEqual(len(first), 2 << 20)
        # A few MiB in: the blob is still coming from the slow replica alone.
        served0 = self.served(other)
        slow.daemon.kill()
        killed_at = time.monotonic() - t0
        rest = r.read()
        h.update(rest)
        took = time.monotonic() - t0
        got = len(first) + len(rest)
        print(f"\nreplica killed {killed_at:.2f} s into a {layer.size >> 20} MiB blob: "
              f"{got >> 20} MiB received in {took:.2f} s")
        self.assertEqual(got, layer.size)
        self.assertEqual("sha256:" + h.hexdigest(), layer.digest)
        self.assertGreater(self.served(other) - served0, 0, "the rest came from the other replica")
        _, _, text = request(p.http_port, "/metrics")
        m = parse_metrics(text.decode())
        self.assertGreater(m.get("shoal_peerd_http_fallbacks_total", 0), 0)

    def test_4_the_replica_cutting_a_chunked_blob_killed_the_blob_completes_from_another(self):
        d = self.tmpdir("shoal-proxy-failover-chunked-")
        stub = self.track(StubUpstream().start())
        data = random.Random("pfo-chunked").randbytes(40 << 20)
        digest = stub.add_blob(data, hold_at=20 << 20)
        self.addCleanup(stub.release)
        cutting, other, p = self.slow_replica_first(
            d, [upstream("stub.test", stub.url, stall_timeout="60s")], "pfo-chunked")
        c = http.client.HTTPConnection("127.0.0.1", p.http_port, timeout=60)
        self.addCleanup(c.close)
        t0 = time.monotonic()
        c.request("GET", f"/v2/team/big/blobs/{digest}?ns=stub.test")
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        first = r.read(2 << 20)
        self.assertEqual(len(first), 2 << 20)
        _, _, text = request(p.http_port, "/metrics")
        self.assertEqual(parse_metrics(text.decode()).get("shoal_peerd_chunked_fetches_total"), 1,
                         "the blob must be fetched in chunks for this test")
        served0 = self.served(other)
        cutting.daemon.kill()
        killed_at = time.monotonic() - t0
        stub.release()  # the other replica's own fetch goes past 20 MiB
        rest = r.read()
        took = time.monotonic() - t0
        got = first + rest
        print(f"\nreplica cutting a chunked blob killed {killed_at:.2f} s in: "
              f"{len(got) >> 20} MiB of {len(data) >> 20} received in {took:.2f} s")
        self.assertEqual(len(got), len(data))
        self.assertEqual(sha(got), digest)
        self.assertGreater(self.served(other) - served0, 0, "the rest came from the other replica")
        _, _, text = request(p.http_port, "/metrics")
        m = parse_metrics(text.decode())
        self.assertEqual(m.get("shoal_peerd_chunked_tails_total"), 1)
        self.assertGreater(m.get("shoal_peerd_http_fallbacks_total", 0), 0)


if __name__ == "__main__":
    unittest.main()
