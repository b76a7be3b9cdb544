"""Three registry-proxy replicas on a rendezvous-hash ring (ring.h) against the real registry.

The registry runs in a network namespace on a shaped link (100 Mbit/s) so a 32 MiB blob takes
about 3 s to arrive: the herd and the kill land while it is in flight. The registry's own access
log is the judge of what reached upstream.

1. A 50-client herd spread over the three replicas (whole GETs, Range GETs, metainfo requests)
   on one cold blob: one upstream GET, every body right, the two other replicas streamed it from
   the owner.
2. Every replica then holds the blob and serves it from its cache (each seeds it too).
3. The owner killed (SIGKILL) mid-blob while clients on the two other replicas stream it: every
   client gets the whole blob; the registry served at most one extra partial copy (a GET cut
   short by the kill, then a Range GET for the rest).
4. With the owner still dead, a cold blob it would own is fetched once by the next member.
5. Manifests are owned too: 30 clients over the three replicas asking one tag (then one digest)
   cost one upstream GET, made by the owner; with the owner dead, the next member resolves a tag
   it owned, once.

The same kill against a token-auth upstream, with fresh replicas: the member that takes over
has no token yet, gets one at the 401 of its continuation and resumes with the Range.

Private content through the ring (htpasswd registry, no network shaping): a client with
credentials pulls a private blob through a replica that does not own it (the owner is asked
anonymously first, refuses, and is asked again with the client's credential); a stranger and an
anonymous client asking the other replicas are refused, and bob, who may read the repository, is
served only after upstream confirmed his access. The same for a private tag.

Datasets on the ring: a dataset ref is owned like a digest ("dataset:<ref>"). A declaration sent
to another replica is redirected (307) to the owner, which alone resolves it (shoalctl follows
the redirect, as the scheduler's and peerd's clients do); status, manifest and dataset metainfo
asked anywhere lead to the owner; the list asked anywhere holds every replica's datasets once.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import subprocess
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.certs import ClusterPKI
from shoal_fixtures.netns import Network, Shape
from shoal_fixtures.httpstub import StubServer
from shoal_fixtures.nodes import Scheduler
from shoal_fixtures.proxy_ring import ProxyRing, ring_owner
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import binary, upstream
from shoal_fixtures.token_issuer import Rule, TokenIssuer

MIB = 1 << 20
CLIENTS = 50


@unittest.skipUnless(os.geteuid() == 0, "needs root (network namespace with a shaped link)")
class RingTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-")
        net = cls.class_track(Network(1, shape=Shape("100mbit")).create())
        cls.reg = cls.class_track(Registry(d / "registry", host=net.nodes[0].ip,
                                           netns=net.nodes[0].name).start())
        cls.layout = oci.make_image(d / "img", [
            oci.LayerSpec(size=32 * MIB, seed=f"ring-{i}", gzip_level=0) for i in range(3)])
        cls.reg.push(cls.layout, "team/ring")
        cls.ns = cls.reg.host_port
        cls.ring = cls.class_track(ProxyRing(d / "ring", 3, upstreams=[
            upstream(cls.ns, cls.reg.url)], torrent=True).start())
        cls.layers = cls.layout.images[0].layers

    def blob_path(self, digest: str) -> str:
        return f"/v2/team/ring/blobs/{digest}?ns={self.ns}"

    def cold_blob_owned_by(self, owner: int, mib: int, tag: str):
        for k in range(40):
            layout = oci.make_image(self.class_tmpdir(f"shoal-ring-{tag}-{k}-"), [
                oci.LayerSpec(size=mib * MIB, seed=f"ring-{tag}-{k}", gzip_level=0)])
            layer = layout.images[0].layers[0]
            if self.ring.owner(layer.digest) == owner:
                self.reg.push(layout, f"team/{tag}")
                return layer
        self.fail(f"no blob owned by replica {owner} in 40 tries")

    def test_0_a_member_streaming_from_the_asker_answers_421(self):
        """Replica 1 streams a blob from its owner, replica 0. A request from replica 0 (as if
        0 thought 1 owned it) must not join that stream (a cycle): 421, and a ring member that
        gets it fetches upstream itself."""
        layer = self.cold_blob_owned_by(0, 16, "cycle")
        path = f"/v2/team/cycle/blobs/{layer.digest}?ns={self.ns}"
        p1 = self.ring.proxies[1]
        conn, resp = p1.open(path)
        try:
            self.assertEqual(resp.status, 200)
            resp.read(MIB)  # the stream from the owner is running
            status, headers, body = p1.get(path, {"Shoal-Ring-From": self.ring.members[0]})
            self.assertEqual(status, 421, body[:300])
            self.assertIn(b"owns it", body)
            # Any other asker joins the running stream.
            status, _, body = p1.get(path, {"Shoal-Ring-From": self.ring.members[2]})
            self.assertEqual((status, pc.sha256(body)), (200, layer.digest))
            rest = resp.read()
            self.assertEqual(len(rest) + MIB, layer.size)
        finally:
            conn.close()

    def test_1_herd_over_three_replicas_costs_one_upstream_get(self):
        layer = self.layers[0]
        data = self.layout.blob_path(layer.digest).read_bytes()
        owner = self.ring.owner(layer.digest)
        mark = self.reg.mark()
        fwd0 = self.ring.metric_sum("shoal_proxy_ring_forwarded_total")
        gets0 = [p.metric("shoal_proxy_upstream_blob_gets_total") for p in self.ring.proxies]
        ub0 = [p.metric("shoal_proxy_upstream_bytes_total") for p in self.ring.proxies]
        rb0 = [p.metric("shoal_proxy_ring_bytes_total") for p in self.ring.proxies]
        meta = f"/shoal/v1/metainfo/{layer.digest}?ns={self.ns}&repo=team/ring"
        reqs = []
        for i in range(CLIENTS):
            rep = i % 3
            kind = (i // 3) % 3
            if kind == 0:
                reqs.append((rep, self.blob_path(layer.digest), {}, "GET"))
            elif kind == 1:
                first = (i * 997 * 1024) % (layer.size - MIB)
                reqs.append((rep, self.blob_path(layer.digest),
                             {"Range": f"bytes={first}-{first + MIB - 1}"}, "GET"))
            else:
                reqs.append((rep, meta, {}, "GET"))
        results = self.ring.herd(reqs)
        for (rep, path, headers, _), r in zip(reqs, results):
            with self.subTest(replica=rep, path=path, headers=headers):
                self.assertNotEqual(r.status, "error", r.error)
                if path == meta:
                    self.assertEqual(r.status, 200)
                elif headers:
                    first = int(headers["Range"].split("=")[1].split("-")[0])
                    self.assertEqual(r.status, 206)
                    self.assertEqual(r.digest, pc.sha256(data[first:first + MIB]))
                else:
                    self.assertEqual((r.status, r.digest, r.size),
                                     (200, layer.digest, layer.size))
        self.reg.wait_log_quiet()
        gets = self.reg.count_blob_gets(layer.digest, since=mark)
        print(f"\nring herd: {CLIENTS} clients over 3 replicas, {gets} upstream GET(s); "
              f"owner replica {owner}")
        self.assertEqual(gets, 1, "the herd over three replicas must cost upstream one GET")
        # Only the owner went upstream; the two others streamed from it.
        for i, p in enumerate(self.ring.proxies):
            self.assertEqual(p.metric("shoal_proxy_upstream_blob_gets_total") - gets0[i],
                             1 if i == owner else 0, f"replica {i}")
        self.assertEqual(self.ring.metric_sum("shoal_proxy_ring_forwarded_total") - fwd0, 2)
        # Bytes from the owner are ring bytes at the two others, not upstream bytes.
        for i, p in enumerate(self.ring.proxies):
            up = p.metric("shoal_proxy_upstream_bytes_total") - ub0[i]
            rb = p.metric("shoal_proxy_ring_bytes_total") - rb0[i]
            self.assertEqual((up, rb), (layer.size, 0) if i == owner else (0, layer.size),
                             f"replica {i}")

    def test_2_every_replica_holds_and_serves_the_blob(self):
        layer = self.layers[0]
        mark = self.reg.mark()
        for i, p in enumerate(self.ring.proxies):
            status, headers, body = p.get(self.blob_path(layer.digest))
            self.assertEqual((status, pc.sha256(body)), (200, layer.digest), f"replica {i}")
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 0)

    def test_2a_manifest_herd_over_three_replicas_costs_one_upstream_get(self):
        """A tag and a digest are owned like blobs: 30 clients over the three replicas ask for
        a tag (then others for a manifest by digest) at once; upstream sees one GET of each, from
        the owner; the two others asked the owner once each (their own clients waited for that
        one request)."""
        d = self.tmpdir()
        tagged = oci.make_image(d / "t", [oci.LayerSpec(size=1_000, seed="ring-mherd-t")])
        by_digest = oci.make_image(d / "d", [oci.LayerSpec(size=1_000, seed="ring-mherd-d")])
        self.reg.push(tagged, "team/mherd", "v1")
        self.reg.push(by_digest, "team/mherd", "other")
        accept = {"Accept": pc.ALL_MANIFESTS}
        for ref, top in (("v1", tagged.top.digest), (by_digest.top.digest, by_digest.top.digest)):
            key = (f"manifest:{self.ns}/team/mherd:{ref}" if ref == "v1" else ref)
            owner = self.ring.owner(key)
            mark = self.reg.mark()
            up0 = [p.metric("shoal_proxy_upstream_manifest_requests_total")
                   for p in self.ring.proxies]
            fwd0 = [p.metric("shoal_proxy_ring_manifests_forwarded_total")
                    for p in self.ring.proxies]
            path = f"/v2/team/mherd/manifests/{ref}?ns={self.ns}"
            results = self.ring.herd([(i % 3, path, accept, "GET") for i in range(30)])
            for r in results:
                self.assertEqual((r.status, r.digest), (200, top), r.error)
            self.reg.wait_log_quiet()
            gets = self.reg.count_manifest_requests(ref, repo="team/mherd", since=mark)
            print(f"\nmanifest herd ({ref[:20]}): 30 clients over 3 replicas, {gets} upstream "
                  f"GET(s); owner replica {owner}")
            self.assertEqual(gets, 1, "a manifest herd over three replicas: one upstream GET")
            for i, p in enumerate(self.ring.proxies):
                with self.subTest(ref=ref, replica=i):
                    self.assertEqual(
                        p.metric("shoal_proxy_upstream_manifest_requests_total") - up0[i],
                        1 if i == owner else 0)
                    fwd = p.metric("shoal_proxy_ring_manifests_forwarded_total") - fwd0[i]
                    self.assertLessEqual(fwd, 0 if i == owner else 1)
        self.assertGreater(self.ring.metric_sum("shoal_proxy_manifest_flights_joined_total"), 0)
        # The owner tells a member how old its tag row is and that the manifest is public.
        owner = self.ring.owner(f"manifest:{self.ns}/team/mherd:v1")
        other = (owner + 1) % 3
        time.sleep(1.1)
        status, headers, body = self.ring.proxies[owner].get(
            f"/v2/team/mherd/manifests/v1?ns={self.ns}",
            {**accept, "Shoal-Ring-From": self.ring.members[other]})
        self.assertEqual((status, pc.sha256(body)), (200, tagged.top.digest))
        self.assertGreaterEqual(int(headers.get("age", "0")), 1, headers)
        self.assertEqual(headers.get("shoal-visibility"), "public")
        # A client is not told.
        status, headers, _ = self.ring.proxies[owner].get(
            f"/v2/team/mherd/manifests/v1?ns={self.ns}", accept)
        self.assertEqual(status, 200)
        self.assertNotIn("shoal-visibility", headers)

    def test_3_owner_killed_mid_blob(self):
        layer = self.layers[1]
        res = self.ring.kill_owner_mid_blob(self.reg, "team/ring", layer.digest, layer.size,
                                            self.ns, clients_per_replica=2, kill_at=0.3)
        type(self).killed = res.owner
        survivors = [i for i in range(3) if i != res.owner]
        print(f"\nowner {res.owner} killed mid-blob: {res.upstream_gets} upstream GETs "
              f"{res.gets}, extra {res.extra_upstream_bytes / MIB:.1f} MiB of "
              f"{layer.size / MIB:.0f}, clients done in {res.seconds:.1f}s")
        for r in res.clients:
            with self.subTest(replica=r.replica):
                self.assertEqual((r.status, r.digest, r.size), (200, layer.digest, layer.size),
                                 r.error)
        self.assertLessEqual(res.upstream_gets, 2, res.gets)
        self.assertLessEqual(res.extra_upstream_bytes, layer.size, res.gets)
        if res.upstream_gets == 2:
            # The first GET was cut by the kill; the takeover asked only for the rest.
            self.assertLess(sum(b for _, b in res.gets[:1]), layer.size)
        self.assertGreaterEqual(
            self.ring.metric_sum("shoal_proxy_ring_takeovers_total", survivors), 1)

    def test_4_owner_still_dead_next_member_fetches_once(self):
        dead = [getattr(type(self), "killed", None)]
        if dead[0] is None:
            self.skipTest("runs after test_3 killed an owner")
        alive = [i for i in range(3) if i not in dead]
        # A new cold blob the dead replica owns (in the ring of all three).
        for k in range(40):
            layout = oci.make_image(self.class_tmpdir(f"shoal-ring-late-{k}-"), [
                oci.LayerSpec(size=4 * MIB, seed=f"ring-late-{k}", gzip_level=0)])
            layer = layout.images[0].layers[0]
            if self.ring.owner(layer.digest) == dead[0]:
                break
        else:
            self.fail("no blob owned by the dead replica in 40 tries")
        self.reg.push(layout, "team/late")
        mark = self.reg.mark()
        gets0 = [self.ring.proxies[i].metric("shoal_proxy_upstream_blob_gets_total")
                 for i in alive]
        path = f"/v2/team/late/blobs/{layer.digest}?ns={self.ns}"
        results = self.ring.herd([(alive[i % 2], path, {}, "GET") for i in range(6)])
        for r in results:
            self.assertEqual((r.status, r.digest), (200, layer.digest), r.error)
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1)
        # The next member in the digest's order fetched it.
        nxt = self.ring.owner(layer.digest, alive)
        gets = [self.ring.proxies[i].metric("shoal_proxy_upstream_blob_gets_total") - g
                for i, g in zip(alive, gets0)]
        self.assertEqual(gets, [1 if i == nxt else 0 for i in alive])

    def test_5_owner_still_dead_next_member_resolves_the_tag_once(self):
        dead = getattr(type(self), "killed", None)
        if dead is None:
            self.skipTest("runs after test_3 killed an owner")
        alive = [i for i in range(3) if i != dead]
        layout = oci.make_image(self.tmpdir(), [oci.LayerSpec(size=1_000, seed="ring-late-tag")])
        for k in range(40):
            key = f"manifest:{self.ns}/team/latetag:t{k}"
            if self.ring.owner(key) == dead:
                tag = f"t{k}"
                break
        else:
            self.fail("no tag owned by the dead replica in 40 tries")
        self.reg.push(layout, "team/latetag", tag)
        mark = self.reg.mark()
        up0 = [self.ring.proxies[i].metric("shoal_proxy_upstream_manifest_requests_total")
               for i in alive]
        path = f"/v2/team/latetag/manifests/{tag}?ns={self.ns}"
        results = self.ring.herd([(alive[i % 2], path, {"Accept": pc.ALL_MANIFESTS}, "GET")
                                  for i in range(6)])
        for r in results:
            self.assertEqual((r.status, r.digest), (200, layout.top.digest), r.error)
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_manifest_requests(tag, repo="team/latetag", since=mark),
                         1)
        nxt = self.ring.owner(key, alive)
        ups = [self.ring.proxies[i].metric("shoal_proxy_upstream_manifest_requests_total") - u
               for i, u in zip(alive, up0)]
        self.assertEqual(ups, [1 if i == nxt else 0 for i in alive])

class RingTokenTakeoverTest(FixtureTestCase):
    """A token-auth upstream (the test token issuer; anyone may pull public/*) and three fresh
    replicas on a shaped link. The owner of a cold blob is killed mid-blob: the member that takes
    over never talked to this upstream (its clients streamed from the owner), so its continuation
    (`Range: bytes=N-`, no token yet) meets the 401 challenge first. It fetches a token and
    resumes; before, it failed the continuation ("resume at byte N: source answered HTTP 401")
    and cut every client off."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-token-")
        net = cls.class_track(Network(1, shape=Shape("100mbit")).create())
        # On the bridge: skopeo pushes from inside the registry's namespace, and registry-proxy
        # asks for tokens from the root namespace; both reach it there.
        cls.ti = cls.class_track(TokenIssuer(d / "issuer", users={},
                                             rules=[Rule("*", "public/*")],
                                             host=net.host_ip).start())
        cls.reg = cls.class_track(Registry(d / "registry", host=net.nodes[0].ip,
                                           netns=net.nodes[0].name, auth="token",
                                           token_issuer=cls.ti).start())
        cls.layout = oci.make_image(d / "img", [
            oci.LayerSpec(size=24 * MIB, seed="ring-token", gzip_level=0)])
        cls.reg.push(cls.layout, "public/ring")
        cls.ns = cls.reg.host_port
        cls.ring = cls.class_track(ProxyRing(d / "ring", 3, upstreams=[
            upstream(cls.ns, cls.reg.url, token_realm_hosts=[net.host_ip])],
            torrent=True).start())

    def test_the_next_member_gets_a_token_and_resumes(self):
        # Replicas start one after another and probe each other every second: until each sees
        # the others up, each has an owner of its own for the blob (and fetches it itself).
        deadline = time.monotonic() + 15
        while any(p.metric("shoal_proxy_ring_members_up") < 3 for p in self.ring.proxies):
            self.assertLess(time.monotonic(), deadline, "the replicas never saw each other up")
            time.sleep(0.1)
        layer = self.layout.images[0].layers[0]
        res = self.ring.kill_owner_mid_blob(self.reg, "public/ring", layer.digest, layer.size,
                                            self.ns, clients_per_replica=2, kill_at=0.3)
        survivors = [i for i in range(3) if i != res.owner]
        for r in res.clients:
            with self.subTest(replica=r.replica):
                self.assertEqual((r.status, r.digest, r.size), (200, layer.digest, layer.size),
                                 r.error)
        # The continuation was answered (a 206 from where the writer stood, after a 401), and
        # the registry served at most one extra partial copy.
        served = [(s, b) for s, b in res.gets if s in (200, 206)]
        self.assertTrue(any(s == 206 for s, _ in served), res.gets)
        self.assertLessEqual(len(served), 2, res.gets)
        self.assertLessEqual(sum(b for _, b in served) - layer.size, layer.size, res.gets)
        self.assertGreaterEqual(
            self.ring.metric_sum("shoal_proxy_ring_takeovers_total", survivors), 1)


class RingCrossedManifestsTest(FixtureTestCase):
    """Two members with one worker each, each asked at once for a tag the other owns: each
    worker waits for the other member, whose answer must not queue behind that worker (members'
    requests run on threads of their own). Both answers come long before the ring's stall
    timeout (10 s) would break the wait."""

    def test_each_member_answers_the_other_while_its_worker_waits(self):
        d = self.tmpdir("shoal-proxy-ring-crossed-")
        reg = self.track(Registry(d / "registry").start())
        ring = self.track(ProxyRing(d / "ring", 2, upstreams=[
            upstream(reg.host_port, reg.url)], extra={"worker_threads": 1}).start())
        tags: dict[int, str] = {}
        for k in range(80):
            o = ring.owner(f"manifest:{reg.host_port}/team/crossed:c{k}")
            tags.setdefault(o, f"c{k}")
            if len(tags) == 2:
                break
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=1_000, seed="ring-crossed")])
        for t in tags.values():
            reg.push(layout, "team/crossed", t)
        # Replica 0 asked for replica 1's tag and replica 1 for replica 0's, several times each.
        reqs = [(asked, f"/v2/team/crossed/manifests/{tags[1 - asked]}?ns={reg.host_port}",
                 {"Accept": pc.ALL_MANIFESTS}, "GET") for asked in (0, 1) for _ in range(3)]
        t0 = time.monotonic()
        results = ring.herd(reqs, timeout=60)
        took = time.monotonic() - t0
        print(f"\ncrossed manifest requests on one worker each: answered in {took:.2f} s")
        for r in results:
            self.assertEqual((r.status, r.digest), (200, layout.top.digest), r.error)
        self.assertLess(took, 5, "a member's answer queued behind a worker waiting for it")


class RingAnnouncedTest(FixtureTestCase):
    """Membership from the scheduler (ring.schedulers; scheduler/origins.h): no replica lists
    another; each announces itself to the real scheduler every probe_interval and rings with
    whoever the scheduler lists. Three replicas find each other and share a herd (one upstream
    GET); a fourth started later joins every ring and is copied the datasets its owner already
    resolved; killed, it leaves every ring once the scheduler forgets it
    (tracker.origin_members_ttl 2 s). With the scheduler gone, the rings keep their members."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-announced-")

        cls.origin_url = start_origin(cls)
        (d / "creds").mkdir()
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.ns = cls.reg.host_port
        cls.sched = cls.class_track(Scheduler(d / "scheduler", extra={
            "tracker": {"origin_members_ttl": "2s"}}).start())
        cls.ring = cls.class_track(ProxyRing(d / "ring", 3, upstreams=[
            upstream(cls.ns, cls.reg.url)], schedulers=[cls.sched.url], extra={
                "datasets": {"credentials_dir": str(d / "creds"), "small_file_max": "256KiB",
                             "pack_target": "1MiB",
                             "allowed_origins": [{"url": cls.origin_url}]}}).start())

    def wait_members(self, replicas: list[int], n: int, budget: float = 15) -> float:
        t0 = time.monotonic()
        while True:
            seen = [self.ring.proxies[i].metric("shoal_proxy_ring_members") for i in replicas]
            if all(v == n for v in seen):
                return time.monotonic() - t0
            if time.monotonic() - t0 > budget:
                self.fail(f"replicas {replicas} list {seen} members, not {n}, after {budget} s")
            time.sleep(0.1)

    def test_replicas_find_each_other_share_a_herd_and_follow_joins_and_leaves(self):
        took = self.wait_members([0, 1, 2], 3)
        print(f"\nthree replicas announced to the scheduler ring with each other after "
              f"{took:.1f} s")
        with urllib.request.urlopen(self.sched.url + "/v1/origins", timeout=10) as r:
            listed = json.loads(r.read())
        self.assertEqual(sorted(listed["members"]), sorted(self.ring.members))
        self.assertEqual(listed["ttl_ms"], 2000)
        # A herd over the three: one upstream GET, by the owner.
        layout = oci.make_image(self.tmpdir(), [oci.LayerSpec(size=4 * MIB, seed="ring-ann",
                                                              gzip_level=0)])
        self.reg.push(layout, "team/announced")
        layer = layout.images[0].layers[0]
        mark = self.reg.mark()
        path = f"/v2/team/announced/blobs/{layer.digest}?ns={self.ns}"
        for r in self.ring.herd([(i % 3, path, {}, "GET") for i in range(12)]):
            self.assertEqual((r.status, r.digest), (200, layer.digest), r.error)
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1)
        owner = self.ring.owner(layer.digest)
        self.assertEqual(
            self.ring.proxies[owner].metric("shoal_proxy_upstream_blob_gets_total"), 1)

        # A dataset resolved by its owner among the three.
        decl = {"name": "announced", "version": "v1", "origin": {"url": self.origin_url + "/data/"}}
        ref = "announced@v1"
        downer = self.ring.members.index(ring_owner(self.ring.members, "dataset:" + ref))
        p = self.ring.proxies[downer]
        conn = http.client.HTTPConnection(p.host, p.port, timeout=30)
        conn.request("POST", "/shoal/v1/datasets", body=json.dumps(decl),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self.assertIn(resp.status, (200, 201, 202), body[:300])
        deadline = time.monotonic() + 60
        while True:
            status, _, body = self.ring.proxies[downer].get(f"/shoal/v1/datasets/{ref}")
            st = json.loads(body) if status == 200 else {}
            if st.get("state") in ("ready", "failed"):
                break
            self.assertLess(time.monotonic(), deadline, body[:300])
            time.sleep(0.2)
        self.assertEqual(st["state"], "ready", st)
        copies = "shoal_proxy_dataset_copies_pending"
        deadline = time.monotonic() + 20
        while self.ring.proxies[downer].metric(copies) > 0:
            self.assertLess(time.monotonic(), deadline, "copies to the other two never went out")
            time.sleep(0.1)
        sent0 = self.ring.proxies[downer].metric("shoal_proxy_dataset_copies_sent_total")

        # A fourth replica joins every ring, and the dataset's owner copies the record to it.
        fourth = self.ring.add_replica()
        took = self.wait_members([0, 1, 2, fourth], 4)
        print(f"a fourth replica joined every ring after {took:.1f} s")
        deadline = time.monotonic() + 20
        while self.ring.proxies[downer].metric("shoal_proxy_dataset_copies_sent_total") <= sent0:
            self.assertLess(time.monotonic(), deadline, "the joiner was not copied the dataset")
            time.sleep(0.1)

        # Killed, it leaves every ring once the scheduler forgets it.
        self.ring.proxies[fourth].daemon.kill()
        took = self.wait_members([0, 1, 2], 3)
        print(f"the fourth replica, killed, left every ring after {took:.1f} s")

        # The scheduler gone: announces fail (counted, logged once) and every ring keeps its
        # members.
        f0 = [self.ring.proxies[i].metric("shoal_proxy_ring_announce_failures_total")
              for i in range(3)]
        self.sched.daemon.kill()
        time.sleep(2.5)
        for i in range(3):
            p = self.ring.proxies[i]
            self.assertEqual(p.metric("shoal_proxy_ring_members"), 3, f"replica {i}")
            self.assertGreater(p.metric("shoal_proxy_ring_announce_failures_total"), f0[i])
        self.assertEqual(
            self.ring.proxies[0].daemon.log_text().count("cannot announce this replica"), 1)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


USERS = {"alice": "alice-pass", "bob": "bob-pass"}


class RingPrivateTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-private-")
        cls.reg = cls.class_track(Registry(d / "registry", auth="htpasswd",
                                           users=dict(USERS)).start())
        cls.ring = cls.class_track(ProxyRing(d / "ring", 3, upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)]).start())
        cls.ns = cls.reg.host_port

    def test_private_blob_through_a_non_owner(self):
        # A blob owned by replica 0, asked at replica 1 (ports are random: make one that is).
        for k in range(40):
            layout = oci.make_image(self.tmpdir(), [
                oci.LayerSpec(size=300_000, seed=f"ring-private-{k}")])
            layer = layout.images[0].layers[0]
            if self.ring.owner(layer.digest) == 0:
                break
        else:
            self.fail("no blob owned by replica 0 in 40 tries")
        self.reg.push(layout, "team/secret")
        path = f"/v2/team/secret/blobs/{layer.digest}?ns={self.ns}"
        mark = self.reg.mark()
        status, _, body = self.ring.proxies[1].get(path, basic("alice", USERS["alice"]))
        self.assertEqual((status, pc.sha256(body)), (200, layer.digest))
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark, status=200), 1)
        self.assertEqual(self.ring.proxies[1].metric("shoal_proxy_upstream_blob_gets_total"), 0,
                         "the non-owner must stream it from the owner")
        # Both replicas hold it now; neither serves it to strangers.
        for rep in (0, 1, 2):
            for headers in ({}, basic("mallory", "x"), basic("alice", "wrong")):
                with self.subTest(replica=rep, headers=headers):
                    status, _, body = self.ring.proxies[rep].get(path, headers)
                    self.assertIn(status, (401, 403), body[:200])
                    self.assertNotIn(b"\0", body[:64])
        mark = self.reg.mark()
        status, _, body = self.ring.proxies[2].get(path, basic("bob", USERS["bob"]))
        self.assertEqual((status, pc.sha256(body)), (200, layer.digest))
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark, status=200), 0,
                         "bob's pull must come from the ring, not from a second upstream GET")


    def test_private_tag_through_a_non_owner(self):
        """A private tag another replica owns: the owner is asked anonymously, refuses, and is
        asked again with alice's credential; the non-owner keeps the manifest as private (a
        stranger asking it is refused), and bob, asking a third replica, is served once upstream
        confirmed his access."""
        layout = oci.make_image(self.tmpdir(), [oci.LayerSpec(size=1_000, seed="ring-ptag")])
        self.reg.push(layout, "team/secret", "p1")
        owner = self.ring.owner(f"manifest:{self.ns}/team/secret:p1")
        asked = (owner + 1) % 3
        path = f"/v2/team/secret/manifests/p1?ns={self.ns}"
        accept = {"Accept": pc.ALL_MANIFESTS}
        fwd0 = self.ring.proxies[asked].metric("shoal_proxy_ring_manifests_forwarded_total")
        status, _, body = self.ring.proxies[asked].get(
            path, {**accept, **basic("alice", USERS["alice"])})
        self.assertEqual((status, pc.sha256(body)), (200, layout.top.digest), body[:300])
        self.assertEqual(
            self.ring.proxies[asked].metric("shoal_proxy_upstream_manifest_requests_total"), 0,
            "the non-owner must ask the owner, not upstream")
        self.assertEqual(
            self.ring.proxies[asked].metric("shoal_proxy_ring_manifests_forwarded_total") - fwd0,
            1)
        for rep in (0, 1, 2):
            for headers in ({}, basic("mallory", "x"), basic("alice", "wrong")):
                with self.subTest(replica=rep, headers=headers):
                    status, _, body = self.ring.proxies[rep].get(path, {**accept, **headers})
                    self.assertIn(status, (401, 403), body[:200])
                    self.assertNotIn(b"schemaVersion", body)
        third = (owner + 2) % 3
        status, _, body = self.ring.proxies[third].get(
            path, {**accept, **basic("bob", USERS["bob"])})
        self.assertEqual((status, pc.sha256(body)), (200, layout.top.digest), body[:300])


FILES = {f"f{i}.bin": os.urandom(2000 + i) for i in range(5)}


def start_origin(cls, on_list=None, files=None) -> str:
    """An HTTP dataset origin serving `files` (default FILES) under /data/ (a JSON listing at
    /data/), stopped with the class (or test) `cls`; returns its base URL. `on_list` is called
    for each listing, before it is answered."""
    files = FILES if files is None else files

    def handle(req, method):
        path = req.path.partition("?")[0]
        if path == "/data/":
            if on_list:
                on_list()
            body = json.dumps([{"name": n, "type": "file", "size": len(b)}
                               for n, b in files.items()]).encode()
        elif path.startswith("/data/") and path[6:] in files:
            body = files[path[6:]]
        else:
            body = None
        req.send_response(200 if body is not None else 404)
        req.send_header("Content-Length", str(len(body or b"")))
        req.end_headers()
        if method != "HEAD" and body:
            req.wfile.write(body)

    origin = StubServer(handle, methods=["GET", "HEAD"], name="origin").start()
    if isinstance(cls, type):
        cls.origin = origin
        cls.addClassCleanup(origin.stop)
    else:
        cls.addCleanup(origin.stop)
    return f"http://127.0.0.1:{origin.port}"


class RingDatasetsTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-datasets-")
        cls.listings = 0

        def listed():
            cls.listings += 1

        origin = start_origin(cls, listed)
        cls.origin_url = origin
        (d / "creds").mkdir()
        cls.ring = cls.class_track(ProxyRing(d / "ring", 3, upstreams=[
            upstream("127.0.0.1:9", "http://127.0.0.1:9")], torrent=True, extra={
                "datasets": {"credentials_dir": str(d / "creds"), "small_file_max": "256KiB",
                             "pack_target": "1MiB", "allowed_origins": [{"url": origin}]}}).start())
        cls.dir = d

    def ref_owned_by(self, owner: int) -> str:
        for k in range(60):
            ref = f"ringset{k}@v1"
            if ring_owner(self.ring.members, "dataset:" + ref) == self.ring.members[owner]:
                return ref
        self.fail(f"no dataset ref owned by replica {owner}")

    def get_json(self, rep: int, path: str) -> tuple[int, object]:
        status, _, body = self.ring.proxies[rep].get(path)  # urllib follows 307 for GET
        return status, json.loads(body) if body else None

    def test_declaration_redirected_resolved_once_by_the_owner(self):
        ref = self.ref_owned_by(0)
        name = ref.split("@")[0]
        decl = {"name": name, "version": "v1", "origin": {"url": self.origin_url + "/data/"}}
        # Raw: the 307 itself, pointing at the owner.
        p1 = self.ring.proxies[1]
        conn = http.client.HTTPConnection(p1.host, p1.port, timeout=10)
        conn.request("POST", "/shoal/v1/datasets", body=json.dumps(decl),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        conn.close()
        self.assertEqual(r.status, 307)
        self.assertEqual(r.getheader("Location"), self.ring.members[0] + "/shoal/v1/datasets")
        # shoalctl sends it to replica 1 and follows the redirect with the body.
        f = self.dir / f"{name}.json"
        f.write_text(json.dumps(decl))
        cp = subprocess.run([str(binary("shoalctl")), "--registry-proxy", p1.url, "dataset", "declare",
                             str(f)], capture_output=True, text=True, timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        deadline = time.monotonic() + 60
        while True:
            status, st = self.get_json(2, f"/shoal/v1/datasets/{ref}")
            if status == 200 and st.get("state") in ("ready", "failed"):
                break
            self.assertLess(time.monotonic(), deadline, st)
            time.sleep(0.2)
        self.assertEqual(st["state"], "ready", st)
        self.assertEqual(st["files"], len(FILES))
        # Only the owner knows it: the others answer from the owner through the redirect.
        for rep in (1, 2):
            direct = self.ring.proxies[rep]
            conn = http.client.HTTPConnection(direct.host, direct.port, timeout=10)
            conn.request("GET", f"/shoal/v1/datasets/{ref}/manifest")
            r = conn.getresponse()
            r.read()
            conn.close()
            self.assertEqual((r.status, r.getheader("Shoal-Ring-Owner")), (307, self.ring.members[0]))
        status, manifest = self.get_json(1, f"/shoal/v1/datasets/{ref}/manifest")
        self.assertEqual(status, 200)
        self.assertEqual(len(manifest["files"]), len(FILES))
        self.assertEqual(self.listings, 1, "one resolution, by the owner")
        # The list asked at any replica names it once.
        for rep in range(3):
            status, lst = self.get_json(rep, "/shoal/v1/datasets")
            self.assertEqual(status, 200)
            self.assertEqual([x["dataset"] for x in lst].count(ref), 1, lst)


    def declare(self, rep: int, ref: str) -> None:
        name, version = ref.split("@")
        decl = {"name": name, "version": version, "origin": {"url": self.origin_url + "/data/"}}
        f = self.dir / f"{name}.json"
        f.write_text(json.dumps(decl))
        cp = subprocess.run([str(binary("shoalctl")), "--registry-proxy", self.ring.proxies[rep].url,
                             "dataset", "declare", str(f)], capture_output=True, text=True,
                            timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)

    def wait_ready(self, rep: int, ref: str) -> dict:
        deadline = time.monotonic() + 60
        while True:
            status, st = self.get_json(rep, f"/shoal/v1/datasets/{ref}")
            if status == 200 and st.get("state") in ("ready", "failed"):
                self.assertEqual(st["state"], "ready", st)
                return st
            self.assertLess(time.monotonic(), deadline, (status, st))
            time.sleep(0.2)

    def wait_copies_delivered(self, rep: int, at_least: int) -> None:
        p = self.ring.proxies[rep]
        deadline = time.monotonic() + 30
        while (p.metric("shoal_proxy_dataset_copies_sent_total") < at_least
               or p.metric("shoal_proxy_dataset_copies_pending") != 0):
            self.assertLess(time.monotonic(), deadline, p.metrics_text()[-3000:])
            time.sleep(0.2)

    def wait_members_up(self, reps, n: int) -> None:
        deadline = time.monotonic() + 30
        for rep in reps:
            while self.ring.proxies[rep].metric("shoal_proxy_ring_members_up") != n:
                self.assertLess(time.monotonic(), deadline, f"replica {rep} never saw {n} members up")
                time.sleep(0.1)

    def test_a_copy_refused_from_a_non_member(self):
        p = self.ring.proxies[0]
        ref = "ringcopy@v1"
        for headers, want in (({}, 403), ({"Shoal-Ring-From": "http://127.0.0.1:9"}, 403),
                              ({"Shoal-Ring-From": p.url}, 403)):
            status, _, out = p.get(f"/shoal/v1/datasets/{ref}/copy", method="PUT",
                                   headers={**headers, "Content-Type": "application/json"})
            self.assertEqual(status, want, out)
        other = self.ring.members[1]
        conn = http.client.HTTPConnection(p.host, p.port, timeout=10)
        for payload, want in (("not json", 400), (json.dumps({"state": "ready"}), 400),
                              (json.dumps({"state": "ready", "manifest": "sha256:zz"}), 400),
                              (json.dumps({"state": "ready", "manifest": 5}), 400),
                              (json.dumps({"state": 5}), 400),
                              (json.dumps({"state": "ready", "manifest": "sha256:" + "0" * 64,
                                           "declaration": []}), 502)):
            conn.request("PUT", f"/shoal/v1/datasets/{ref}/copy", body=payload,
                         headers={"Shoal-Ring-From": other, "Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read()
            self.assertEqual(r.status, want, text)
        conn.close()
        status, _ = self.get_json(0, f"/shoal/v1/datasets/{ref}")
        self.assertEqual(status, 404, "a refused copy leaves no record")

    def test_z_owner_away_the_next_member_answers_from_its_copy(self):
        """Runs last: kills replica 2 and starts it again."""
        ring = self.ring
        ref = self.ref_owned_by(2)
        self.declare(2, ref)
        st = self.wait_ready(2, ref)
        listings = self.listings
        _, _, manifest_bytes = ring.proxies[2].get(f"/shoal/v1/datasets/{ref}/manifest")
        # Declared, then ready: both records reached both other members.
        self.wait_copies_delivered(2, 4)
        ring.proxies[2].kill()
        self.wait_members_up((0, 1), 2)
        for rep in (0, 1):
            status, st2 = self.get_json(rep, f"/shoal/v1/datasets/{ref}")
            self.assertEqual((status, st2["state"], st2["manifest"]), (200, "ready", st["manifest"]),
                             st2)
            status, _, body = ring.proxies[rep].get(f"/shoal/v1/datasets/{ref}/manifest")
            self.assertEqual((status, "sha256:" + hashlib.sha256(body).hexdigest()),
                             (200, st["manifest"]))
            self.assertEqual(body, manifest_bytes)
        manifest = json.loads(manifest_bytes)
        by_path = {f["path"]: f["digest"] for f in manifest["files"]}
        for name, data in FILES.items():
            status, _, body = ring.proxies[0].get(f"/shoal/v1/datasets/{ref}/objects/{by_path[name]}")
            self.assertEqual((status, body == data), (200, True), name)
        status, _, body = ring.proxies[1].get(f"/shoal/v1/dataset-metainfo/{ref}/0")
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(self.listings, listings, "served from the copy: the origin not listed again")
        for rep in (0, 1):
            status, lst = self.get_json(rep, "/shoal/v1/datasets")
            self.assertEqual([x["dataset"] for x in lst].count(ref), 1, lst)

        # Declared while its owner is away: the next member resolves it, and the owner knows it
        # when it returns.
        ref_b = next(f"ringaway{k}@v1" for k in range(200)
                     if ring_owner(ring.members, f"dataset:ringaway{k}@v1") == ring.members[2])
        new_owner = ring.members.index(ring_owner(ring.members[:2], "dataset:" + ref_b))
        self.declare(0, ref_b)
        st_b = self.wait_ready(0, ref_b)
        self.assertEqual(self.listings, listings + 1)
        sent = ring.proxies[new_owner].metric("shoal_proxy_dataset_copies_sent_total")
        ring.proxies[2].restart()
        self.wait_members_up((0, 1, 2), 3)
        # At least the ready record reached the returned member.
        self.wait_copies_delivered(new_owner, sent + 1)
        p2 = ring.proxies[2]
        conn = http.client.HTTPConnection(p2.host, p2.port, timeout=10)
        conn.request("GET", f"/shoal/v1/datasets/{ref_b}")
        r = conn.getresponse()
        got = json.loads(r.read())
        conn.close()
        self.assertEqual((r.status, got["state"], got["manifest"]), (200, "ready", st_b["manifest"]),
                         "the returned owner answers itself, from the copy")
        status, _, body = p2.get(f"/shoal/v1/datasets/{ref_b}/manifest")
        self.assertEqual((status, "sha256:" + hashlib.sha256(body).hexdigest()),
                         (200, st_b["manifest"]))
        self.assertEqual(self.listings, listings + 1, "resolved once, by the member that owned it")
        for rep in range(3):
            status, lst = self.get_json(rep, "/shoal/v1/datasets")
            names = [x["dataset"] for x in lst]
            self.assertEqual((names.count(ref), names.count(ref_b)), (1, 1), lst)


class RingResumedResolutionTest(FixtureTestCase):
    """A dataset's owner killed while it resolves; the next member resolves the ref (the origin
    has changed meanwhile), the origin changes again, and the owner comes back: it takes the
    version the other member resolved instead of resolving its interrupted record again (which
    would pin another manifest for the same version)."""

    def start_ring(self, name: str, listed, files: dict):
        """Two replicas whose dataset origin serves `files` and calls `listed` at each listing;
        a ref owned by the first replica."""
        d = self.tmpdir(f"shoal-proxy-ring-{name}-")
        url = start_origin(self, listed, files)
        (d / "creds").mkdir()
        ring = self.track(ProxyRing(d / "ring", 2, upstreams=[
            upstream("127.0.0.1:9", "http://127.0.0.1:9")], torrent=True, extra={
                "datasets": {"credentials_dir": str(d / "creds"), "small_file_max": "256KiB",
                             "pack_target": "1MiB", "allowed_origins": [{"url": url}]}}).start())
        ref = next(f"{name}{k}@v1" for k in range(200)
                   if ring_owner(ring.members, f"dataset:{name}{k}@v1") == ring.members[0])
        return ring, ref, url

    def declare_and_kill_the_owner(self, ring, ref: str, url: str, listings: list) -> None:
        """Declared at the owner, whose listing the caller holds; the owner killed while it
        resolves, once its copy of the declaration reached the other member."""
        owner, other = ring.proxies
        conn = http.client.HTTPConnection(owner.host, owner.port, timeout=30)
        conn.request("POST", "/shoal/v1/datasets", headers={"Content-Type": "application/json"},
                     body=json.dumps({"name": ref.split("@")[0], "version": "v1",
                                      "origin": {"url": url + "/data/"}}))
        r = conn.getresponse()
        r.read()
        conn.close()
        self.assertIn(r.status, (200, 201, 202))
        deadline = time.monotonic() + 20
        while not listings or owner.metric("shoal_proxy_dataset_copies_sent_total") < 1:
            self.assertLess(time.monotonic(), deadline, "no listing or no copy of the declaration")
            time.sleep(0.1)
        owner.kill()
        deadline = time.monotonic() + 20
        while other.metric("shoal_proxy_ring_members_up") != 1:
            self.assertLess(time.monotonic(), deadline, "the owner's death went unnoticed")
            time.sleep(0.1)

    def final_state(self, p, ref: str, ring_from: str | None = None, timeout: float = 60) -> dict:
        """The record's status once ready or failed; with `ring_from`, the member's own record
        (not a redirect to the owner)."""
        deadline = time.monotonic() + timeout
        while True:
            c = http.client.HTTPConnection(p.host, p.port, timeout=10)
            c.request("GET", f"/shoal/v1/datasets/{ref}",
                      headers={"Shoal-Ring-From": ring_from} if ring_from else {})
            got = json.loads(c.getresponse().read() or b"{}")
            c.close()
            if got.get("state") in ("ready", "failed"):
                return got
            self.assertLess(time.monotonic(), deadline, got)
            time.sleep(0.2)

    def test_the_returning_owner_takes_the_version_resolved_while_it_was_away(self):
        import threading
        files = {"a.bin": b"version one " * 100}
        gate = threading.Event()
        listings = []

        def listed():
            listings.append(time.monotonic())
            gate.wait(30)  # held while the owner is killed mid-resolution

        ring, ref, url = self.start_ring("resumed", listed, files)
        self.addCleanup(gate.set)
        owner, other = ring.proxies
        self.declare_and_kill_the_owner(ring, ref, url, listings)
        files.clear()
        files["b.bin"] = b"version two " * 100  # the origin changed
        gate.set()
        # The other member owns the ref now and resolves it at the first request.
        st = self.final_state(other, ref)
        self.assertEqual(st["state"], "ready", st)
        pinned = st["manifest"]
        files.clear()
        files["c.bin"] = b"version three " * 100  # and changed again
        n_listings = len(listings)
        owner.restart()
        got = self.final_state(owner, ref, ring_from=ring.members[1])
        print(f"\nthe returning owner's record: {got.get('state')} {got.get('manifest')}; "
              f"resolved while it was away: {pinned}")
        self.assertEqual((got["state"], got["manifest"]), ("ready", pinned),
                         "one version, one manifest: the returning owner must take the pinned one")
        self.assertEqual(len(listings), n_listings, "the returning owner listed the origin again")
        self.assertIn("taken from another ring member", owner.daemon.log_text())

    def test_the_returning_owner_waits_for_a_member_still_resolving(self):
        """The owner comes back while the other member is still resolving the ref (its listing
        held): it waits for that resolution and takes its version, instead of resolving again."""
        import threading
        files = {"a.bin": b"version one " * 100}
        gate = threading.Event()
        listings = []

        def listed():
            listings.append(time.monotonic())
            gate.wait(30)

        ring, ref, url = self.start_ring("waited", listed, files)
        self.addCleanup(gate.set)
        owner, other = ring.proxies
        self.declare_and_kill_the_owner(ring, ref, url, listings)
        files.clear()
        files["b.bin"] = b"version two " * 100  # the origin changed
        # The other member starts resolving at the first request; its listing is held too.
        status, _, body = other.get(f"/shoal/v1/datasets/{ref}")
        self.assertEqual(status, 202, body[:300])
        deadline = time.monotonic() + 20
        while len(listings) < 2:
            self.assertLess(time.monotonic(), deadline, "the other member did not list the origin")
            time.sleep(0.1)
        owner.restart()
        deadline = time.monotonic() + 20
        while "waiting for its version" not in owner.daemon.log_text():
            self.assertLess(time.monotonic(), deadline, "the returning owner did not wait")
            time.sleep(0.1)
        files.clear()
        files["c.bin"] = b"version three " * 100  # changed again before anyone lists once more
        gate.set()
        st = self.final_state(other, ref, ring_from=ring.members[0])
        got = self.final_state(owner, ref, ring_from=ring.members[1])
        print(f"\nthe returning owner waited: {got.get('state')} {got.get('manifest')}; "
              f"the member's: {st.get('state')} {st.get('manifest')}")
        self.assertEqual(st["state"], "ready", st)
        self.assertEqual((got["state"], got["manifest"]), ("ready", st["manifest"]),
                         "one version, one manifest")
        self.assertEqual(len(listings), 2, "the returning owner listed the origin again")


class RingTlsTest(FixtureTestCase):
    """The ring with mutual TLS (the deployment's mode): members are https URLs, find each other
    through the scheduler (announcing with their registry-proxy certificate; a node's or an
    operator's is refused) and call each other with it; a blob asked at a non-owner comes from the
    owner, once."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-ring-tls-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.pki = ClusterPKI(d / "pki")

        origin = start_origin(cls)
        (d / "creds").mkdir()
        # The members find each other through the scheduler, over TLS (registry-proxy
        # certificates announce; the deployment's mode).
        cls.sched = cls.class_track(Scheduler(d / "scheduler",
                                              tls=cls.pki.scheduler(["127.0.0.1"])).start())
        cls.ring = cls.class_track(ProxyRing(d / "ring", 2, upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)], pki=cls.pki, torrent=True,
            schedulers=[cls.sched.url], extra={
                "datasets": {"credentials_dir": str(d / "creds"), "small_file_max": "256KiB",
                             "pack_target": "1MiB", "allowed_origins": [
                                 {"url": origin}]}}).start())
        deadline = time.monotonic() + 15
        while any(p.metric("shoal_proxy_ring_members") != 2 for p in cls.ring.proxies):
            if time.monotonic() > deadline:
                raise AssertionError("the two replicas did not find each other through the "
                                     "scheduler over TLS\n" + cls.ring.diagnostics())
            time.sleep(0.1)

    def test_only_registry_proxy_certificates_announce(self):
        body = json.dumps({"url": self.ring.members[0]}).encode()  # (a real member again)
        for party, want in ((self.pki.node("n1"), 403), (self.pki.operator(), 403),
                            (self.pki.registry_proxy(["127.0.0.1"]), 200)):
            req = urllib.request.Request(self.sched.url + "/v1/origins", data=body,
                                         method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10, context=party.ssl_context()) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            self.assertEqual(status, want, party)

    def test_dataset_copies_and_lists_between_members_over_tls(self):
        """Members call each other with registry-proxy certificates: the owner's record copy
        (and the manifest the receiver fetches for it) is accepted, and the list merged at the
        other member names the dataset once."""
        ref = next(f"tlsset{k}@v1" for k in range(100)
                   if ring_owner(self.ring.members, f"dataset:tlsset{k}@v1") == self.ring.members[0])
        p0, p1 = self.ring.proxies
        decl = {"name": ref.split("@")[0], "version": "v1",
                "origin": {"url": f"http://127.0.0.1:{self.origin.port}/data/"}}
        conn = http.client.HTTPSConnection(p0.host, p0.port, timeout=30, context=p0._ctx())
        conn.request("POST", "/shoal/v1/datasets", body=json.dumps(decl),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        self.assertIn(r.status, (200, 202), r.read())
        conn.close()
        deadline = time.monotonic() + 60
        while True:
            status, _, body = p0.get(f"/shoal/v1/datasets/{ref}")
            st = json.loads(body) if body else {}
            if status == 200 and st.get("state") == "ready":
                break
            self.assertNotEqual(st.get("state"), "failed", st)
            self.assertLess(time.monotonic(), deadline, (status, st))
            time.sleep(0.2)
        while (p0.metric("shoal_proxy_dataset_copies_sent_total") < 2
               or p0.metric("shoal_proxy_dataset_copies_pending") != 0):
            self.assertLess(time.monotonic(), deadline, p0.log_text()[-3000:])
            time.sleep(0.2)
        self.assertEqual(p0.metric("shoal_proxy_dataset_copies_failed_total"), 0,
                         p1.log_text()[-3000:])
        status, headers, body = p1.get("/shoal/v1/datasets")
        self.assertEqual(status, 200, body)
        self.assertNotIn("shoal-partial", headers)
        self.assertEqual([x["dataset"] for x in json.loads(body)].count(ref), 1, body)

    def test_blob_through_a_non_owner_over_tls(self):
        for k in range(40):
            layout = oci.make_image(self.tmpdir(), [
                oci.LayerSpec(size=2 * MIB, seed=f"ring-tls-{k}", gzip_level=0)])
            layer = layout.images[0].layers[0]
            if self.ring.owner(layer.digest) == 0:
                break
        else:
            self.fail("no blob owned by replica 0 in 40 tries")
        self.reg.push(layout, "team/tls")
        mark = self.reg.mark()
        path = f"/v2/team/tls/blobs/{layer.digest}?ns={self.reg.host_port}"
        results = self.ring.herd([(1, path, {}, "GET")] * 4)
        for r in results:
            self.assertEqual((r.status, r.digest), (200, layer.digest), r.error)
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1)
        p0, p1 = self.ring.proxies
        self.assertEqual(p1.metric("shoal_proxy_upstream_blob_gets_total"), 0)
        self.assertEqual(p1.metric("shoal_proxy_ring_forwarded_total"), 1)
        self.assertEqual(p1.metric("shoal_proxy_ring_members_up"), 2)


if __name__ == "__main__":
    unittest.main()
