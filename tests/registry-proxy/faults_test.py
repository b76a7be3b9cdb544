"""registry-proxy when upstream misbehaves: streaming while the upstream is still sending, Range
and HEAD on an in-flight blob, wrong bytes for a digest, a body cut short (resumed with Range),
429 with Retry-After, 404, stalls, refused and hanging connects (scripted `StubUpstream`); and
the real registry killed mid-blob (restarted: the transfer resumes; left down: clients are cut
off and nothing is cached) or down while the cache is warm (cached content and stale tags are
served, with a Warning header).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.netns import Network, Shape
from shoal_fixtures.procs import free_port, wait_until
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream
from stub_upstream import Blackhole, StubUpstream

MIB = 1 << 20


def rand_bytes(n: int, seed: str) -> bytes:
    return random.Random(seed).randbytes(n)


class StubFaultsTest(FixtureTestCase):
    """Failure modes scripted per object on a stub upstream."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-faults-")
        cls.stub = cls.class_track(StubUpstream().start())
        cls.hole = cls.class_track(Blackhole())
        cls.closed_port = free_port()
        creds = d / "creds"
        creds.write_text("proxyuser:proxypass\n")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            # Patient: holds of a few seconds are expected; breaks are resumed.
            upstream("patient.test", cls.stub.url, stall_timeout="10s", max_retries=3),
            # Impatient: one attempt, a 1 s stall bound.
            upstream("noretry.test", cls.stub.url, stall_timeout="1s", connect_timeout="1s",
                     max_retries=0),
            upstream("refused.test", f"http://127.0.0.1:{cls.closed_port}",
                     connect_timeout="1s", max_retries=0),
            upstream("blackhole.test", f"http://127.0.0.1:{cls.hole.port}",
                     connect_timeout="1s", max_retries=0),
            # registry-proxy's own Basic credentials (they must not follow redirects).
            upstream("creds.test", cls.stub.url, auth="basic", credentials_file=str(creds)),
        ]).start())

    def setUp(self):
        super().setUp()
        self.stub.rearm()
        self.addCleanup(self.stub.release)

    def blob_path(self, digest: str, ns: str = "patient.test") -> str:
        return f"/v2/team/x/blobs/{digest}?ns={ns}"

    def read_exact(self, resp, n: int, timeout: float = 10) -> bytes:
        got = b""
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            chunk = resp.read1(n - len(got))
            if not chunk:
                break
            got += chunk
        return got

    # -- streaming -------------------------------------------------------------------------------

    def test_client_gets_first_bytes_while_upstream_still_sends(self):
        data = rand_bytes(2 * MIB, "stream")
        digest = self.stub.add_blob(data, hold_at=512 * 1024)
        joins0 = self.proxy.metric("shoal_proxy_singleflight_joins_total")
        conn, resp = self.proxy.open(self.blob_path(digest))
        self.addCleanup(conn.close)
        self.assertEqual(resp.status, 200)
        self.assertEqual(int(resp.getheader("Content-Length")), len(data))
        first = self.read_exact(resp, 256 * 1024)
        self.assertEqual(first, data[:256 * 1024], "first bytes must arrive before upstream ends")
        self.assertEqual(self.stub.script(digest).gets_finished, 0)
        # HEAD of the in-flight blob: answered at once, with its length and digest.
        s, h, body = self.proxy.get(self.blob_path(digest), method="HEAD", timeout=5)
        self.assertEqual((s, body), (200, b""))
        self.assertEqual(int(h["content-length"]), len(data))
        self.assertEqual(h.get("docker-content-digest"), digest)
        # A Range over bytes that exist is answered now; one past them waits for them.
        s, h, body = self.proxy.get(self.blob_path(digest), headers={"Range": "bytes=1000-1999"},
                                    timeout=5)
        self.assertEqual((s, body), (206, data[1000:2000]))
        self.assertEqual(h.get("content-range"), f"bytes 1000-1999/{len(data)}")
        late = {}

        def fetch_late():
            late["r"] = self.proxy.get(self.blob_path(digest),
                                       headers={"Range": f"bytes={MIB}-{MIB + 99}"}, timeout=20)
        t = threading.Thread(target=fetch_late)
        t.start()
        time.sleep(0.5)
        self.assertNotIn("r", late, "a range past the arrived bytes cannot be complete yet")
        self.assertEqual(self.stub.script(digest).gets_finished, 0)
        self.stub.release()
        t.join(20)
        self.assertEqual(late["r"][0], 206)
        self.assertEqual(late["r"][2], data[MIB:MIB + 100])
        rest, complete = pc.read_body_until_close(resp)
        self.assertTrue(complete)
        self.assertEqual(pc.sha256(first + rest), digest)
        self.assertEqual(len(self.stub.requests(digest, "GET")), 1)
        self.assertGreaterEqual(self.proxy.metric("shoal_proxy_singleflight_joins_total") - joins0,
                                2)

    def test_wrong_bytes_abort_every_client_and_are_not_cached(self):
        data = rand_bytes(MIB, "wrong")
        digest = self.stub.add_blob(data, wrong=True, hold_at=256 * 1024)
        before = self.proxy.metric("shoal_proxy_digest_mismatch_total")
        conns = [self.proxy.open(self.blob_path(digest)) for _ in range(3)]
        for conn, _ in conns:
            self.addCleanup(conn.close)
        for _, resp in conns:
            self.assertEqual(resp.status, 200)
            self.assertEqual(int(resp.getheader("Content-Length")), len(data))
        self.stub.release()
        for _, resp in conns:
            body, complete = pc.read_body_until_close(resp)
            self.assertFalse(complete, "a client got a complete-looking body of wrong bytes")
            self.assertLess(len(body), len(data))
        wait_until(lambda: self.proxy.metric("shoal_proxy_digest_mismatch_total") > before, 10,
                   "digest mismatch counted")
        self.assertRegex(self.proxy.log_text(), rf"upstream sent wrong bytes.*{digest}")
        # Nothing was cached: the next request goes upstream again (and fails again).
        conn, resp = self.proxy.open(self.blob_path(digest))
        self.addCleanup(conn.close)
        _, complete = pc.read_body_until_close(resp)
        self.assertFalse(complete)
        self.assertEqual(len(self.stub.requests(digest, "GET")), 2)

    def test_broken_transfer_resumes_with_range(self):
        data = rand_bytes(3 * MIB, "resume")
        cut = MIB + 12345
        digest = self.stub.add_blob(data, close_after=cut)
        gets0 = self.proxy.metric("shoal_proxy_upstream_blob_gets_total")
        s, h, body = self.proxy.get(self.blob_path(digest), timeout=30)
        self.assertEqual(s, 200)
        self.assertEqual(pc.sha256(body), digest)
        reqs = self.stub.requests(digest, "GET")
        self.assertEqual(len(reqs), 2, self.stub.diagnostics())
        self.assertNotIn("range", reqs[0].headers)
        self.assertEqual(reqs[1].headers.get("range"), f"bytes={cut}-",
                         "the resume must continue where the first transfer broke")
        self.assertEqual(self.proxy.metric("shoal_proxy_upstream_blob_gets_total") - gets0, 1)
        # And it was cached whole.
        s, _, body = self.proxy.get(self.blob_path(digest))
        self.assertEqual((s, pc.sha256(body)), (200, digest))
        self.assertEqual(len(self.stub.requests(digest, "GET")), 2)

    def test_a_client_leaving_does_not_cancel_the_shared_fetch(self):
        data = rand_bytes(2 * MIB, "leaver")
        digest = self.stub.add_blob(data, hold_at=MIB)
        conn, resp = self.proxy.open(self.blob_path(digest))
        self.assertEqual(self.read_exact(resp, 100_000), data[:100_000])
        conn.close()
        self.stub.release()
        wait_until(lambda: self.stub.script(digest).gets_finished == 1, 10, "upstream finished")
        s, _, body = self.proxy.get(self.blob_path(digest))
        self.assertEqual((s, pc.sha256(body)), (200, digest))
        self.assertEqual(len(self.stub.requests(digest, "GET")), 1,
                         "the object must have been cached although its only client left")

    def test_shutdown_with_a_fetch_in_flight(self):
        data = rand_bytes(2 * MIB, "shutdown")
        digest = self.stub.add_blob(data, hold_at=MIB)
        proxy = self.track(RegistryProxy(self.tmpdir() / "p", upstreams=[
            upstream("patient.test", self.stub.url, stall_timeout="10s")]).start())
        conn, resp = proxy.open(self.blob_path(digest))
        self.addCleanup(conn.close)
        self.assertEqual(self.read_exact(resp, 1000), data[:1000])
        t0 = time.monotonic()
        status = proxy.stop()
        self.assertLess(time.monotonic() - t0, 9, "shutdown must not wait for a held upstream")
        self.assertEqual(status, 0)
        _, complete = pc.read_body_until_close(resp)
        self.assertFalse(complete)
        # The next start reconciles the cache (the partial write is gone) and fetches again.
        self.stub.release()
        proxy.start()
        s, _, body = proxy.get(self.blob_path(digest))
        self.assertEqual((s, pc.sha256(body)), (200, digest))

    # -- upstream answers we pass on ---------------------------------------------------------------

    def test_429_is_passed_through_with_retry_after(self):
        digest = self.stub.add_blob(b"x" * 100, status=429, headers={"Retry-After": "7"})
        self.stub.add_manifest("team/x", "busy", b"{}", pc.OCI_MANIFEST, status=429,
                               headers={"Retry-After": "9"})
        for method in ("GET", "HEAD"):
            with self.subTest(method=method):
                s, h, body = self.proxy.get(self.blob_path(digest, "noretry.test"), method=method)
                self.assertEqual(s, 429)
                self.assertEqual(h.get("retry-after"), "7")
                if method == "GET":
                    self.assertEqual(pc.error_code(body), "TOOMANYREQUESTS")
                    # The upstream's own reason travels with the status (stub_upstream's
                    # message is "scripted"), not only "answered HTTP 429".
                    msg = pc.error_message(body)
                    self.assertIn("answered HTTP 429: scripted", msg)
                s, h, body = self.proxy.get("/v2/team/x/manifests/busy?ns=noretry.test",
                                            method=method)
                self.assertEqual(s, 429)
                self.assertEqual(h.get("retry-after"), "9")
                if method == "GET":
                    self.assertEqual(pc.error_code(body), "TOOMANYREQUESTS")

    def test_redirect_to_blob_storage_never_carries_authorization(self):
        # The registry answers 307 to "blob storage" on another host (127.0.0.2), as Docker Hub
        # and S3-backed registries do; registry-proxy follows it, and its Authorization (here its
        # own Basic credentials) must stay with the registry.
        data = os.urandom(300_000)
        storage = self.track(StubUpstream(host="127.0.0.2").start())
        d = storage.add_blob(data)
        self.stub.add_blob(data, redirect_to=f"{storage.url}/v2/team/x/blobs/{d}?X-Amz-Signature=abc")
        s, h, body = self.proxy.get(self.blob_path(d, "creds.test"))
        self.assertEqual(s, 200, body[:200])
        self.assertEqual(body, data)
        upstream_gets = [r for r in self.stub.requests(d, method="GET")]
        self.assertTrue(upstream_gets)
        self.assertTrue(upstream_gets[0].headers.get("authorization", "").startswith("Basic "))
        stored = storage.requests(d, method="GET")
        self.assertEqual(len(stored), 1)
        self.assertEqual(stored[0].query, "X-Amz-Signature=abc")
        self.assertNotIn("authorization", stored[0].headers)

    def test_upstream_404_is_blob_unknown(self):
        missing = "sha256:" + "1" * 64
        for method in ("GET", "HEAD"):
            s, h, body = self.proxy.get(self.blob_path(missing), method=method)
            self.assertEqual(s, 404)
            if method == "GET":
                self.assertEqual(pc.error_code(body), "BLOB_UNKNOWN")
        s, _, body = self.proxy.get("/v2/team/x/manifests/nope?ns=patient.test")
        self.assertEqual((s, pc.error_code(body)), (404, "MANIFEST_UNKNOWN"))
        s, _, body = self.proxy.get(f"/shoal/v1/metainfo/{missing}?repo=team/x&ns=patient.test")
        self.assertEqual((s, pc.error_code(body)), (404, "BLOB_UNKNOWN"))

    def test_clients_waiting_for_a_slow_manifest_hold_no_worker(self):
        """30 clients ask one tag whose upstream answer hangs, on a proxy with two workers: one
        fetch goes upstream and the other 29 wait without a thread, so another manifest is
        answered meanwhile; once upstream answers, all 30 get it."""
        d = self.tmpdir("shoal-proxy-parked-")
        proxy = self.track(RegistryProxy(d / "proxy", upstreams=[
            upstream("patient.test", self.stub.url, stall_timeout="30s")],
            extra={"worker_threads": 2}).start())
        slow = b'{"schemaVersion":2,"note":"slow"}'
        fast = b'{"schemaVersion":2,"note":"fast"}'
        slow_digest = self.stub.add_manifest("team/x", "slow", slow, pc.OCI_MANIFEST, hold=True)
        fast_digest = self.stub.add_manifest("team/x", "fast", fast, pc.OCI_MANIFEST)
        results: list = []
        lock = threading.Lock()

        def client() -> None:
            s, h, body = proxy.get("/v2/team/x/manifests/slow?ns=patient.test",
                                   {"Accept": pc.OCI_MANIFEST}, timeout=60)
            with lock:
                results.append((s, pc.sha256(body) if s == 200 else body[:400].decode()))
        threads = [threading.Thread(target=client) for _ in range(30)]
        for t in threads:
            t.start()
        wait_until(lambda: len(self.stub.requests("/manifests/slow")) >= 1, 10,
                   "the upstream GET of the slow manifest")
        time.sleep(1.0)  # every client's request is in
        t0 = time.monotonic()
        s, _, body = proxy.get("/v2/team/x/manifests/fast?ns=patient.test",
                               {"Accept": pc.OCI_MANIFEST}, timeout=20)
        took = time.monotonic() - t0
        print(f"\n29 clients waiting on a hung manifest, 2 workers: another manifest in "
              f"{took:.2f} s")
        self.assertEqual((s, pc.sha256(body)), (200, fast_digest))
        self.assertLess(took, 5)
        self.stub.release()
        for t in threads:
            t.join(60)
        self.assertEqual(results, [(200, slow_digest)] * 30, results[0][1])
        self.assertEqual(len(self.stub.requests("/manifests/slow", "GET")), 1)
        self.assertGreaterEqual(proxy.metric("shoal_proxy_manifest_flights_joined_total"), 29)

    def test_manifests_with_wrong_bytes_or_too_large_are_refused(self):
        good = b'{"schemaVersion":2,"mediaType":"%s","layers":[]}' % pc.OCI_MANIFEST.encode()
        other = pc.sha256(b"some other manifest")
        before = self.proxy.metric("shoal_proxy_manifest_digest_mismatch_total")
        # Asked by digest, upstream sends bytes that hash to something else.
        self.stub.add_manifest("team/x", other, good, pc.OCI_MANIFEST,
                               headers={"Docker-Content-Digest": other})
        s, _, body = self.proxy.get(f"/v2/team/x/manifests/{other}?ns=patient.test",
                                    headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(s, 502, body[:200])
        self.assertIn(pc.sha256(good), pc.error_message(body))
        # A tag whose announced digest does not match its bytes.
        self.stub.add_manifest("team/x", "lying", good, pc.OCI_MANIFEST,
                               headers={"Docker-Content-Digest": other})
        s, _, body = self.proxy.get("/v2/team/x/manifests/lying?ns=patient.test",
                                    headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(s, 502, body[:200])
        self.assertEqual(self.proxy.metric("shoal_proxy_manifest_digest_mismatch_total") - before,
                         2)
        # Neither was cached: asked again, upstream is asked again.
        n = len(self.stub.requests("/manifests/lying"))
        self.proxy.get("/v2/team/x/manifests/lying?ns=patient.test",
                       headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(len(self.stub.requests("/manifests/lying")), n + 1)
        # Larger than manifests.max_size (4 MiB by default).
        huge = b'{"schemaVersion":2,"x":"' + b"x" * (5 * MIB) + b'"}'
        self.stub.add_manifest("team/x", "huge", huge, pc.OCI_MANIFEST)
        s, _, body = self.proxy.get("/v2/team/x/manifests/huge?ns=patient.test",
                                    headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(s, 502, body[:200])
        self.assertRegex(pc.error_message(body), r"(?i)(exceeds|too large)")

    # -- slow or dead upstreams --------------------------------------------------------------------

    def assert_gateway_error(self, path, status, cause_re, bound, method="GET"):
        t0 = time.monotonic()
        s, h, body = self.proxy.get(path, method=method, timeout=bound + 10)
        took = time.monotonic() - t0
        self.assertEqual(s, status, body[:300])
        self.assertLess(took, bound, f"{path}: answered after {took:.1f}s")
        if method == "GET":
            self.assertEqual(h.get("content-type"), "application/json")
            self.assertRegex(pc.error_message(body), cause_re)

    def test_stalled_upstream_gives_504_with_the_cause(self):
        digest = self.stub.add_blob(b"s" * 1000, hang_headers=True)
        self.stub.add_manifest("team/x", "hang", b"{}", pc.OCI_MANIFEST, hang_headers=True)
        self.assert_gateway_error(self.blob_path(digest, "noretry.test"), 504, r"(?i)stall", 6)
        self.assert_gateway_error("/v2/team/x/manifests/hang?ns=noretry.test", 504,
                                  r"(?i)stall", 6)

    def test_stall_mid_body_cuts_clients_off(self):
        data = rand_bytes(MIB, "stall-mid")
        digest = self.stub.add_blob(data, hang_after=100_000)
        fails0 = self.proxy.metric("shoal_proxy_upstream_failures_total")
        t0 = time.monotonic()
        conn, resp = self.proxy.open(self.blob_path(digest, "noretry.test"), timeout=20)
        self.addCleanup(conn.close)
        self.assertEqual(resp.status, 200)
        body, complete = pc.read_body_until_close(resp)
        self.assertFalse(complete)
        self.assertLess(time.monotonic() - t0, 8, "a stalled upstream must not hang the client")
        self.assertEqual(body, data[:len(body)])
        wait_until(lambda: self.proxy.metric("shoal_proxy_upstream_failures_total") > fails0, 5,
                   "failure counted")
        self.stub.release()

    def test_refused_and_hanging_connects_fail_fast(self):
        d = "sha256:" + "2" * 64
        self.assert_gateway_error(self.blob_path(d, "refused.test"), 502, r"(?i)refused", 5)
        self.assert_gateway_error(self.blob_path(d, "refused.test"), 502, "", 5, method="HEAD")
        self.assert_gateway_error("/v2/team/x/manifests/v1?ns=refused.test", 502, r"(?i)refused",
                                  5)
        self.assertTrue(self.hole.hangs(), "the blackhole port must swallow connects")
        self.assert_gateway_error(self.blob_path(d, "blackhole.test"), 504,
                                  r"(?i)(connect|timed? ?out)", 6)
        self.assert_gateway_error("/v2/team/x/manifests/v1?ns=blackhole.test", 504,
                                  r"(?i)(connect|timed? ?out)", 6)


# "Fails fast": the bound on answering a request whose upstream refuses connections.
FAIL_FAST_S = 5.0


@unittest.skipUnless(os.geteuid() == 0, "network namespaces need root")
class RealRegistryFaultsTest(FixtureTestCase):
    """The real registry on a shaped link (so a blob takes seconds), killed mid-blob, or down
    while registry-proxy's cache is warm."""

    RATE = "100mbit"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-realfaults-")
        cls.net = cls.class_track(Network(1, shape=Shape(cls.RATE)).create())
        node = cls.net.nodes[0]
        cls.reg = cls.class_track(Registry(d / "registry", host=node.ip, netns=node.name).start())
        cls.layout = oci.make_image(d / "img", [
            oci.LayerSpec(size=16 * MIB, seed="kill-resume", gzip_level=0),
            oci.LayerSpec(size=16 * MIB, seed="kill-down", gzip_level=0),
            oci.LayerSpec(size=50_000, seed="warm")])
        cls.reg.push(cls.layout, "team/app")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url, connect_timeout="1s", stall_timeout="5s"),
            # The same registry under another name, with enough retries (backoff up to ~15 s in
            # all) for a restarted registry to come back within one transfer.
            upstream("resume.test", cls.reg.url, max_retries=8, connect_timeout="1s",
                     stall_timeout="5s")],
            extra={"manifests": {"tag_ttl": "1s"}}).start())

    def path(self, ref: str, kind: str = "blobs", ns: str | None = None) -> str:
        return f"/v2/team/app/{kind}/{ref}?ns={ns or self.reg.host_port}"

    def start_transfer(self, digest, ns=None):
        conn, resp = self.proxy.open(self.path(digest, ns=ns), timeout=60)
        self.addCleanup(conn.close)
        self.assertEqual(resp.status, 200)
        first = resp.read1(64 * 1024)
        self.assertTrue(first)
        return resp, first

    def test_1_killed_mid_blob_and_restarted_resumes(self):
        layer = self.layout.images[0].layers[0]
        mark = self.reg.mark()
        resp, first = self.start_transfer(layer.digest, ns="resume.test")
        self.reg.kill()
        self.reg.start()
        rest, complete = pc.read_body_until_close(resp)
        self.assertTrue(complete, "the client must get the whole blob after a resumed transfer")
        self.assertEqual(pc.sha256(first + rest), layer.digest)
        self.reg.wait_log_quiet()
        gets = [e for e in self.reg.access_log(mark) if e.blob and e.blob[1] == layer.digest]
        # The killed registry never logged its cut response; the restarted one logged a 206
        # for the rest only (never the whole blob again).
        self.assertTrue(gets, "no resume reached the restarted registry")
        self.assertTrue(all(e.status == 206 for e in gets), [(e.status, e.size) for e in gets])
        self.assertLess(sum(e.size for e in gets), layer.size)
        s, _, body = self.proxy.get(self.path(layer.digest))
        self.assertEqual((s, pc.sha256(body)), (200, layer.digest))

    def test_2_killed_mid_blob_and_left_down(self):
        layer = self.layout.images[0].layers[1]
        warm = self.layout.images[0].layers[2]
        im = self.layout.images[0]
        # Warm what the last test serves with the upstream down.
        for ref, kind in ((warm.digest, "blobs"), (im.config.digest, "blobs"),
                          ("v1", "manifests"), (im.manifest.digest, "manifests")):
            s, _, _ = self.proxy.get(self.path(ref, kind), headers={"Accept": pc.OCI_MANIFEST})
            self.assertEqual(s, 200)
        fails0 = self.proxy.metric("shoal_proxy_upstream_failures_total")
        resp, first = self.start_transfer(layer.digest)
        self.reg.kill()
        t0 = time.monotonic()
        rest, complete = pc.read_body_until_close(resp)
        self.assertFalse(complete, "a transfer that cannot finish must not look complete")
        self.assertLess(time.monotonic() - t0, 40)
        self.assertEqual(first + rest, self.layout.blob_path(layer.digest).read_bytes()[
            :len(first) + len(rest)])
        wait_until(lambda: self.proxy.metric("shoal_proxy_upstream_failures_total") > fails0, 10,
                   "failure counted")
        # Not cached; a new request fails fast with the cause: a refused connect is not waited
        # out (the upstream "resume.test", same registry with 8 retries, takes ~15 s and fails
        # this bound).
        t0 = time.monotonic()
        s, _, body = self.proxy.get(self.path(layer.digest), timeout=60)
        took = time.monotonic() - t0
        self.assertEqual(s, 502, body[:300])
        self.assertRegex(pc.error_message(body), r"(?i)(refused|connect)")
        self.assertLess(took, FAIL_FAST_S, f"a refused upstream took {took:.1f} s to report")

    def test_3_down_upstream_cached_content_and_stale_tags(self):
        im = self.layout.images[0]
        warm = im.layers[2]
        self.assertFalse(self.reg.daemon.alive)
        stale0 = self.proxy.metric("shoal_proxy_stale_manifests_total")
        s, _, body = self.proxy.get(self.path(warm.digest))
        self.assertEqual((s, pc.sha256(body)), (200, warm.digest))
        s, _, body = self.proxy.get(self.path(warm.digest), headers={"Range": "bytes=0-9"})
        self.assertEqual(s, 206)
        s, h, body = self.proxy.get(self.path(im.manifest.digest, "manifests"),
                                    headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual((s, pc.sha256(body)), (200, im.manifest.digest))
        self.assertNotIn("warning", h)
        time.sleep(1.2)  # past tag_ttl
        for method in ("GET", "HEAD"):
            s, h, body = self.proxy.get(self.path("v1", "manifests"), method=method,
                                        headers={"Accept": pc.OCI_MANIFEST})
            self.assertEqual(s, 200, body[:300])
            self.assertEqual(h.get("docker-content-digest"), im.manifest.digest)
            # RFC 9111 section 5.5: warn-code SP warn-agent SP warn-text.
            self.assertRegex(h.get("warning", ""), r'^110 [^ "]+ "[^"]*"$')
        self.assertEqual(self.proxy.metric("shoal_proxy_stale_manifests_total") - stale0, 2)
        # Never cached: a clear error, quickly.
        t0 = time.monotonic()
        s, _, body = self.proxy.get(self.path("sha256:" + "3" * 64))
        self.assertEqual(s, 502)
        s, _, body = self.proxy.get(self.path("v2", "manifests"),
                                    headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(s, 502, body[:300])
        self.assertTrue(re.search(r"(?i)(refused|connect)", pc.error_message(body)))
        self.assertLess(time.monotonic() - t0, 40)


if __name__ == "__main__":
    unittest.main()
