#!/usr/bin/env python3
"""peerd as containerd's mirror, on loopback, against a scripted registry-proxy (fake_proxy.py).

What is pinned down here (no BitTorrent peers: every blob comes through the HTTP fallback after
swarm.stall_timeout, which is what a stalled swarm looks like):
  - /v2/ is answered locally; manifests are forwarded with ns= and the client's Authorization
    and Accept, and the answer (status, digest, type, WWW-Authenticate) comes back unchanged;
  - a missing blob asks registry-proxy for its metainfo (repo, ns, Authorization), streams to
    the client in order while it arrives (first bytes long before the last), then is cached and
    served from the cache with Range and HEAD; concurrent readers share one download;
  - HEAD, Range and several ranges (multipart/byteranges) of a blob while it downloads;
  - containerd 2.1's parallel layer fetch, emulated (open-ended `bytes=N-` parts, several at
    once, each closed after its part): one download behind them, correct Content-Range;
  - a client joining a download of a private blob another client started gets registry-proxy's
    answer for its own credential (401), not the bytes (security review finding 5);
  - an image manifest served with GET starts the fetch of its config and every layer not held
    (with the client's repo, ns and Authorization) before containerd asks for any, once per blob;
    HEAD and an index start none;
  - bad requests are refused without reaching registry-proxy;
  - registry-proxy refusing connections, or accepting and never answering: every answer is an
    error within a bounded time (containerd then falls back to its next host);
  - /shoal/v1/status reports bytes by source; /metrics passes `promtool check metrics`;
  - a poisoned metainfo (piece hashes of junk, name of the real blob) never yields a whole wrong
    body: the last byte waits for the object's sha256, so a full GET and a Range to the end are
    cut short, the object is not cached and the hash failure is counted and logged.
  - TLS start-up checks (PeerdTlsStart): with tls.enabled an http:// registry-proxy URL stops the
    start (credentials would go in clear); a certificate naming another node is logged; the
    metrics listener serves TLS with the node certificate and only /metrics and /healthz.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE))

from bt_fake_peer import make_torrent  # noqa: E402
from fake_proxy import FakeProxy  # noqa: E402
from shoal_fixtures import FixtureTestCase, free_port  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402
from shoal_fixtures.shoal import parse_metrics  # noqa: E402

STALL, DEADLINE, REQUEST_TIMEOUT, METAINFO_WAIT = 1.0, 4.0, 2.0, 1.0


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            timeout: float = 30) -> tuple[int, dict[str, str], bytes, float]:
    """One request on a fresh connection: (status, lower-case headers, body, seconds)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body, time.monotonic() - t0
    finally:
        c.close()


def timed_get(port: int, path: str, timeout: float = 60) -> tuple[int, bytes, float, float]:
    """GET reading the body as it comes: (status, body, seconds to first byte, seconds total)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        first = r.read(1)
        ttfb = time.monotonic() - t0
        rest = r.read()
        return r.status, first + rest, ttfb, time.monotonic() - t0
    finally:
        c.close()


def partial_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, int, bytes, bool]:
    """GET that tolerates a body cut short: (status, Content-Length, bytes read, whole body?)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        n = int(r.getheader("Content-Length", "-1"))
        try:
            return r.status, n, r.read(), True
        except http.client.IncompleteRead as e:
            return r.status, n, e.partial, False
    finally:
        c.close()


def promtool_check(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


def metrics(port: int) -> dict[str, float]:
    _, _, body, _ = request(port, "GET", "/metrics")
    return parse_metrics(body.decode())


class MirrorTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-peerd-mirror-")
        cls.fake = cls.class_track(FakeProxy())
        swarm = {"stall_timeout": f"{STALL}s", "fallback_deadline": f"{DEADLINE}s"}
        upstream = {"request_timeout": f"{REQUEST_TIMEOUT}s", "metainfo_wait": f"{METAINFO_WAIT}s",
                    "connect_timeout": "500ms"}
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="mirror-node", registry_proxy=cls.fake.url,
                                          extra={"swarm": swarm, "upstream": upstream}).start())
        # A second node whose registry-proxy address refuses connections.
        dead = f"http://127.0.0.1:{free_port()}"
        cls.orphan = cls.class_track(Peerd(d / "orphan", name="orphan-node", registry_proxy=dead,
                                           extra={"swarm": swarm, "upstream": upstream}).start())
        cls.port = cls.peerd.http_port

    def test_v2_base_is_answered_locally(self):
        n = len(self.fake.requests())
        status, headers, _, _ = request(self.port, "GET", "/v2/")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("docker-distribution-api-version"), "registry/2.0")
        self.assertEqual(len(self.fake.requests()), n, "GET /v2/ reached registry-proxy")

    def test_manifest_forwarded_with_ns_authorization_and_accept(self):
        body = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}'
        dig = "sha256:" + hashlib.sha256(body).hexdigest()
        self.fake.manifests[("team/app", "v1")] = (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                                                         "Docker-Content-Digest": dig}, body)
        accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"
        hdrs = {"Authorization": "Bearer token-of-the-client", "Accept": accept}
        status, headers, got, _ = request(self.port, "GET", "/v2/team/app/manifests/v1?ns=registry.example:5000", hdrs)
        self.assertEqual(status, 200)
        self.assertEqual(got, body)
        self.assertEqual(headers.get("docker-content-digest"), dig)
        self.assertEqual(headers.get("content-type"), "application/vnd.oci.image.manifest.v1+json")
        seen = [s for s in self.fake.requests("/v2/team/app/manifests/v1") if s.method == "GET"]
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0].query.get("ns"), "registry.example:5000")
        self.assertEqual(seen[0].headers.get("authorization"), "Bearer token-of-the-client")
        self.assertEqual(seen[0].headers.get("accept"), accept)
        # HEAD goes through as HEAD, with the length and no body.
        status, headers, got, _ = request(self.port, "HEAD", "/v2/team/app/manifests/v1?ns=registry.example:5000", hdrs)
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("content-length"), str(len(body)))
        self.assertEqual(headers.get("docker-content-digest"), dig)
        self.assertTrue(any(s.method == "HEAD" for s in self.fake.requests("/v2/team/app/manifests/v1")))

    def test_image_manifest_starts_every_layer_fetch(self):
        cfg, l1, l2 = os.urandom(1000), os.urandom(300 << 10), os.urandom(200 << 10)
        dc, d1, d2 = (self.fake.add_blob(x) for x in (cfg, l1, l2))
        oci_m = "application/vnd.oci.image.manifest.v1+json"
        layer_t = "application/vnd.oci.image.layer.v1.tar"
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": oci_m,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": dc, "size": len(cfg)},
            "layers": [{"mediaType": layer_t, "digest": d1, "size": len(l1)},
                       {"mediaType": layer_t, "digest": d2, "size": len(l2)},
                       {"mediaType": layer_t, "digest": "sha256:nothex", "size": 1},
                       "not a descriptor"]}).encode()
        mdig = "sha256:" + hashlib.sha256(manifest).hexdigest()
        self.fake.manifests[("team/pre", "v1")] = (200, {"Content-Type": oci_m, "Docker-Content-Digest": mdig},
                                                   manifest)
        index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": [{"mediaType": oci_m, "digest": mdig, "size": len(manifest)}],
                            "layers": "not a list"}).encode()
        self.fake.manifests[("team/pre", "multi")] = (200, {"Content-Type": "application/vnd.oci.image.index.v1+json"},
                                                      index)
        path = "/v2/team/pre/manifests/{}?ns=r.example:5000"
        hdrs = {"Authorization": "Bearer prefetch-client"}
        before = metrics(self.port).get("shoal_peerd_layer_prefetches_total", 0)

        def asked(d: str) -> list:
            return self.fake.requests(f"/shoal/v1/metainfo/{d}")
        # HEAD and an index name no blobs to fetch.
        self.assertEqual(request(self.port, "HEAD", path.format("v1"), hdrs)[0], 200)
        self.assertEqual(request(self.port, "GET", path.format("multi"), hdrs)[0], 200)
        time.sleep(0.5)
        self.assertEqual([d for d in (dc, d1, d2) if asked(d)], [])
        # GET of the image manifest: its body unchanged, and the three fetches start at once.
        status, _, got, _ = request(self.port, "GET", path.format("v1"), hdrs)
        self.assertEqual((status, got), (200, manifest))
        wait_until(lambda: all(asked(d) for d in (dc, d1, d2)), 10, "metainfo requests for every blob",
                   diagnostics=self.fake.diagnostics)
        for d in (dc, d1, d2):
            seen = asked(d)[0]
            self.assertEqual(seen.query.get("repo"), "team/pre")
            self.assertEqual(seen.query.get("ns"), "r.example:5000")
            self.assertEqual(seen.headers.get("authorization"), "Bearer prefetch-client")
        self.assertEqual(metrics(self.port).get("shoal_peerd_layer_prefetches_total", 0) - before, 3)
        # The blobs arrive (HTTP fallback, no peers here); containerd's GETs join or hit the cache.
        for d, data in ((dc, cfg), (d1, l1), (d2, l2)):
            status, _, body, _ = request(self.port, "GET", f"/v2/team/pre/blobs/{d}?ns=r.example:5000", hdrs)
            self.assertEqual(status, 200)
            self.assertEqual(hashlib.sha256(body).hexdigest(), d.removeprefix("sha256:"))
        # Held or in flight: serving the manifest again starts nothing.
        self.assertEqual(request(self.port, "GET", path.format("v1"), hdrs)[0], 200)
        self.assertEqual(metrics(self.port).get("shoal_peerd_layer_prefetches_total", 0) - before, 3)
        self.assertEqual([len(asked(d)) for d in (dc, d1, d2)], [1, 1, 1])

    def test_upstream_refusals_pass_through(self):
        self.fake.manifests[("private/app", "v1")] = (
            401, {"Content-Type": "application/json", "WWW-Authenticate": 'Bearer realm="http://auth/token"'},
            b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}')
        status, headers, _, _ = request(self.port, "GET", "/v2/private/app/manifests/v1?ns=r.example")
        self.assertEqual(status, 401)
        self.assertEqual(headers.get("www-authenticate"), 'Bearer realm="http://auth/token"')
        status, _, _, _ = request(self.port, "GET", "/v2/team/app/manifests/nope?ns=r.example")
        self.assertEqual(status, 404)

    def test_blob_miss_asks_for_metainfo_with_repo_ns_and_credentials(self):
        missing = "sha256:" + "ab" * 32
        status, _, body, _ = request(self.port, "GET", f"/v2/team/app/blobs/{missing}?ns=r.example:5000",
                                     {"Authorization": "Basic dTpw"})
        self.assertEqual(status, 404)
        self.assertIn(b"BLOB_UNKNOWN", body)
        seen = self.fake.requests(f"/shoal/v1/metainfo/{missing}")
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0].query.get("repo"), "team/app")
        self.assertEqual(seen[0].query.get("ns"), "r.example:5000")
        self.assertEqual(seen[0].headers.get("authorization"), "Basic dTpw")
        # registry-proxy's refusal of the client's credentials reaches the client as such.
        denied = "sha256:" + "cd" * 32
        self.fake.metainfo_status[denied] = (401, b'{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}')
        status, _, body, _ = request(self.port, "GET", f"/v2/team/app/blobs/{denied}?ns=r.example:5000")
        self.assertEqual(status, 401)
        # A metainfo that is not a valid torrent for the digest is a 502, never a download.
        bogus = "sha256:" + "ef" * 32
        self.fake.metainfo_status[bogus] = (200, b"d4:infod6:lengthi5eee")
        status, _, _, _ = request(self.port, "GET", f"/v2/team/app/blobs/{bogus}?ns=r.example:5000")
        self.assertEqual(status, 502)
        self.assertEqual(self.peerd.status().get("downloads"), [])

    def test_bad_requests_never_reach_registry_proxy(self):
        n = len(self.fake.requests())
        cases = [
            ("GET", "/v2/team/app/blobs/sha256:abc", 400),                      # short digest
            ("GET", "/v2/team/app/blobs/md5:" + "0" * 32, 400),                  # unknown algorithm
            ("GET", "/v2/Team/App/blobs/sha256:" + "0" * 64, 400),               # upper-case name
            ("GET", "/v2/team/app/blobs/sha256:" + "0" * 64 + "?ns=bad%20host", 400),
            ("PUT", "/v2/team/app/blobs/uploads/", 405),
            ("DELETE", "/v2/team/app/manifests/v1", 405),
            ("GET", "/nothing/here", 404),
        ]
        for method, path, want in cases:
            with self.subTest(path=path, method=method):
                status, _, _, _ = request(self.port, method, path)
                self.assertEqual(status, want)
        self.assertEqual(len(self.fake.requests()), n, [s.path for s in self.fake.requests()[n:]])

    def test_missing_blob_streams_in_order_then_is_served_from_the_cache(self):
        data = os.urandom(4 << 20)
        dig = self.fake.add_blob(data)
        self.fake.rate = 1.5e6  # 4 MiB in ~2.8 s after the stall timeout
        try:
            path = f"/v2/team/app/blobs/{dig}?ns=r.example:5000"
            with concurrent.futures.ThreadPoolExecutor(2) as ex:
                a = ex.submit(timed_get, self.port, path)
                time.sleep(0.3)
                b = ex.submit(timed_get, self.port, path)
                (sa, body_a, ttfb_a, total_a), (sb, body_b, _, _) = a.result(60), b.result(60)
        finally:
            self.fake.rate = None
        self.assertEqual((sa, sb), (200, 200))
        self.assertEqual(hashlib.sha256(body_a).hexdigest(), dig[7:], "client A got wrong bytes")
        self.assertEqual(hashlib.sha256(body_b).hexdigest(), dig[7:], "client B got wrong bytes")
        print(f"\nstreaming over the HTTP fallback: first byte {ttfb_a:.2f}s, complete {total_a:.2f}s")
        # The first piece reaches the client long before the object is complete.
        self.assertLess(ttfb_a, total_a * 0.6, (ttfb_a, total_a))
        self.assertGreaterEqual(ttfb_a, STALL * 0.8, "bytes before the stall timeout: where from?")
        # One metainfo request and about one copy fetched over HTTP, for two readers.
        self.assertEqual(len(self.fake.requests(f"/shoal/v1/metainfo/{dig}")), 1)
        fetched = sum(s.bytes_sent for s in self.fake.requests(f"/v2/team/app/blobs/{dig}"))
        self.assertLessEqual(fetched, len(data) * 1.1)
        # Every fallback request carried the repository's ns.
        for s in self.fake.requests(f"/v2/team/app/blobs/{dig}"):
            self.assertEqual(s.query.get("ns"), "r.example:5000")
        # Now cached: full GET, Range and HEAD come from the cache, registry-proxy sees nothing.
        self._wait_cached(dig)
        n = len(self.fake.requests())
        status, _, got, secs = request(self.port, "GET", path)
        self.assertEqual((status, got == data), (200, True))
        status, headers, got, _ = request(self.port, "GET", path, {"Range": "bytes=1000-1999"})
        self.assertEqual(status, 206)
        self.assertEqual(got, data[1000:2000])
        self.assertEqual(headers.get("content-range"), f"bytes 1000-1999/{len(data)}")
        status, headers, got, _ = request(self.port, "GET", path, {"Range": f"bytes={len(data) - 10}-"})
        self.assertEqual((status, got), (206, data[-10:]))
        # A lazy reader's several ranges: one multipart/byteranges answer from the cache.
        status, headers, got, _ = request(self.port, "GET", path, {"Range": "bytes=7-9,3000000-3000004"})
        self.assertEqual(status, 206)
        ctype = headers.get("content-type", "")
        self.assertTrue(ctype.startswith("multipart/byteranges; boundary="), ctype)
        delim = b"--" + ctype.split("boundary=", 1)[1].encode()
        self.assertEqual(got, delim + b"\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 7-9/"
                         + str(len(data)).encode() + b"\r\n\r\n" + data[7:10] + b"\r\n" + delim
                         + b"\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 3000000-3000004/"
                         + str(len(data)).encode() + b"\r\n\r\n" + data[3000000:3000005] + b"\r\n" + delim
                         + b"--\r\n")
        status, headers, got, _ = request(self.port, "HEAD", path)
        self.assertEqual((status, got), (200, b""))
        self.assertEqual(headers.get("content-length"), str(len(data)))
        self.assertEqual(headers.get("docker-content-digest"), dig)
        status, _, _, _ = request(self.port, "GET", path, {"Range": f"bytes={len(data) + 5}-"})
        self.assertEqual(status, 416)
        self.assertEqual(len(self.fake.requests()), n, "a cached blob went to registry-proxy")
        st = self.peerd.status()
        self.assertGreaterEqual(st["bytes"]["from_http_fallback"], len(data))
        self.assertEqual(st["bytes"]["from_peers"], 0)
        self.assertEqual(st["bytes"]["from_origin"], 0)
        self.assertGreaterEqual(st["counters"]["http_fallbacks"], 1)

    def test_joining_a_private_download_in_flight_needs_own_access(self):
        data = os.urandom(3 << 20)
        dig = self.fake.add_blob(data)
        alice = {"Authorization": "Basic YWxpY2U6cHc="}
        self.fake.private[dig] = alice["Authorization"]
        self.fake.rate = 1.5e6  # in flight for ~2 s after the stall timeout
        path = f"/v2/team/app/blobs/{dig}?ns=r.example:5000"
        try:
            with concurrent.futures.ThreadPoolExecutor(2) as ex:
                a = ex.submit(request, self.port, "GET", path, alice)
                time.sleep(STALL + 0.3)
                # A stranger joins alice's download (or, a moment earlier, her metainfo request).
                s, h, body, secs = request(self.port, "GET", path)
                self.assertEqual(s, 401, body[:200])
                self.assertEqual(h.get("www-authenticate"), 'Basic realm="fake"')
                self.assertNotIn(data[:4096], body)
                self.assertLess(secs, 2.0, "the refusal waited for the download")
                self.assertEqual(request(self.port, "HEAD", f"/v2/other/repo/blobs/{dig}")[0], 401)
                c = ex.submit(request, self.port, "GET", path, alice)  # alice again: joins, served
                (sa, _, body_a, _), (sc, _, body_c, _) = a.result(60), c.result(60)
        finally:
            self.fake.rate = None
        self.assertEqual((sa, sc), (200, 200))
        self.assertEqual(body_a, data)
        self.assertEqual(body_c, data)
        heads = [q for q in self.fake.requests(f"/v2/team/app/blobs/{dig}") if q.method == "HEAD"]
        self.assertTrue(any("authorization" not in q.headers for q in heads), "the stranger was not checked")
        # Cached now: still only for alice.
        self.assertEqual(request(self.port, "GET", path)[0], 401)
        self.assertEqual(request(self.port, "GET", path, alice)[0], 200)

    def test_head_and_range_while_downloading(self):
        data = os.urandom(3 << 20)
        dig = self.fake.add_blob(data)
        path = f"/v2/team/app/blobs/{dig}?ns=r.example"
        deadlines0 = metrics(self.port).get("shoal_peerd_range_deadline_pieces_total", 0)
        self.fake.rate = 1e6
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                full = ex.submit(timed_get, self.port, path)
                self._wait(lambda: self.peerd.status().get("downloads"), 10, "the download to start")
                status, headers, body, secs = request(self.port, "HEAD", path, timeout=15)
                self.assertEqual((status, body), (200, b""))
                self.assertEqual(headers.get("content-length"), str(len(data)))
                self.assertLess(secs, 2.0, "HEAD waited for the download")
                # The whole body from byte 0 leaves the order to the swarm: no deadlines.
                self.assertEqual(metrics(self.port).get("shoal_peerd_range_deadline_pieces_total", 0), deadlines0)
                status, headers, body, _ = request(self.port, "GET", path, {"Range": "bytes=2000000-2000099"},
                                                   timeout=30)
                self.assertEqual(status, 206)
                self.assertEqual(body, data[2000000:2000100])
                # The range's piece (one: 100 bytes inside a piece) got a deadline, unless it had
                # already landed.
                added = metrics(self.port)["shoal_peerd_range_deadline_pieces_total"] - deadlines0
                self.assertLessEqual(added, 1)
                # Several ranges while it downloads: one multipart/byteranges answer, each part
                # from the download as its pieces verify.
                status, headers, body, _ = request(self.port, "GET", path, {"Range": "bytes=5-9,1000000-1000009"},
                                                   timeout=30)
                self.assertEqual(status, 206)
                ctype = headers.get("content-type", "")
                self.assertTrue(ctype.startswith("multipart/byteranges; boundary="), ctype)
                delim = b"--" + ctype.split("boundary=", 1)[1].encode()
                size = str(len(data)).encode()
                self.assertEqual(body, delim + b"\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 5-9/"
                                 + size + b"\r\n\r\n" + data[5:10] + b"\r\n" + delim
                                 + b"\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes "
                                 + b"1000000-1000009/" + size + b"\r\n\r\n" + data[1000000:1000010] + b"\r\n"
                                 + delim + b"--\r\n")
                s, got, _, _ = full.result(60)
        finally:
            self.fake.rate = None
        self.assertEqual((s, got == data), (200, True))
        print(f"\nrange while downloading: {added:.0f} piece(s) given a deadline")

    def test_parallel_open_ended_ranges_share_one_download(self):
        """containerd 2.1's parallel layer fetch (`max_concurrent_downloads` > 1 with
        `concurrent_layer_fetch_buffer`), emulated: containerd 2 is not in Debian 12. Its fetcher
        opens `Range: bytes=0-`, then `bytes=<i × buffer>-` for every further part, several at
        once; each request reads one buffer's worth and closes its connection. Behind them all:
        one download (one metainfo request, upstream bytes about the blob's size once), every 206
        with the Content-Range containerd checks, and the closed requests do not cancel it."""
        data = os.urandom(6 << 20)
        dig = self.fake.add_blob(data)
        path = f"/v2/team/app/blobs/{dig}?ns=r.example"
        part = 1 << 20

        def fetch_part(i: int) -> bytes:
            start = i * part
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                c.request("GET", path, headers={"Range": f"bytes={start}-"})
                r = c.getresponse()
                self.assertEqual(r.status, 206, f"part {i}")
                self.assertEqual(r.getheader("Content-Range"), f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.assertEqual(int(r.getheader("Content-Length")), len(data) - start)
                got = r.read(min(part, len(data) - start))
                return got
            finally:
                c.close()  # early, as containerd does: the rest of the open-ended range is unread

        self.fake.rate = 8e6
        t0 = time.monotonic()
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                parts = list(ex.map(fetch_part, range(len(data) // part)))
        finally:
            self.fake.rate = None
        secs = time.monotonic() - t0
        self.assertEqual(b"".join(parts), data)
        self.assertEqual(len(self.fake.requests(f"/shoal/v1/metainfo/{dig}")), 1, "one download per blob")
        upstream = sum(q.bytes_sent for q in self.fake.requests(f"/v2/team/app/blobs/{dig}"))
        self.assertLessEqual(upstream, len(data) + (1 << 20), "each early-closed request fetched its own copy")
        # The download outlived the closed requests: the blob ends up cached whole.
        self._wait(lambda: not any(d["digest"] == dig for d in self.peerd.status().get("downloads", [])),
                   30, "the download to finish")
        status, _, body, _ = request(self.port, "GET", path)
        self.assertEqual((status, body == data), (200, True))
        self.assertEqual(len(self.fake.requests(f"/shoal/v1/metainfo/{dig}")), 1)
        print(f"\ncontainerd-2-style parallel parts: 6 x 1 MiB, 4 at once, {secs:.1f} s, "
              f"{upstream} bytes from registry-proxy")

    def test_hung_registry_proxy_gets_a_bounded_error(self):
        self.fake.hang = True
        try:
            t0 = time.monotonic()
            status, _, _, secs = request(self.port, "GET", "/v2/team/app/manifests/hung?ns=r.example", timeout=60)
            self.assertIn(status, (502, 504))
            # One attempt, ended by upstream.request_timeout of silence: no retry after a stall, so
            # containerd can fall back to its next host quickly.
            self.assertLess(secs, REQUEST_TIMEOUT + 3, "manifest answer not bounded by upstream.request_timeout")
            self.assertEqual(len(self.fake.requests("/v2/team/app/manifests/hung")), 1)
            missing = "sha256:" + "12" * 32
            status, _, _, secs = request(self.port, "GET", f"/v2/team/app/blobs/{missing}?ns=r.example", timeout=60)
            self.assertIn(status, (502, 504))
            # The metainfo long-poll gives up after metainfo_wait plus 3 s of silence, once.
            self.assertLess(secs, METAINFO_WAIT + 3 + 3, "blob answer not bounded")
            print(f"\nhung registry-proxy: errors after {time.monotonic() - t0:.1f}s for a manifest and a blob")
        finally:
            self.fake.hang = False

    def test_unreachable_registry_proxy_fails_fast(self):
        port = self.orphan.http_port
        before = metrics(port).get("shoal_peerd_forward_errors_total", 0)
        for path in ("/v2/team/app/manifests/v1?ns=r.example", "/v2/team/app/blobs/sha256:" + "34" * 32 + "?ns=r.example"):
            with self.subTest(path=path):
                status, _, _, secs = request(port, "GET", path, timeout=30)
                self.assertEqual(status, 502)
                self.assertLess(secs, 3.0)
        code, body = self.orphan.pull("127.0.0.1:5000/team/app:v1", timeout=30)
        self.assertEqual(code, 502, body)
        self.assertGreaterEqual(metrics(port).get("shoal_peerd_forward_errors_total", 0), before + 2)

    def test_pull_api_refuses_bad_input(self):
        for method, body, want in (("GET", None, 405), ("POST", b"not json", 400), ("POST", b'{"img": "x"}', 400),
                                   ("POST", b'{"image": 42}', 400), ("POST", b'{"image": "UPPER/Case::"}', 400)):
            with self.subTest(body=body):
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                c.request(method, "/shoal/v1/pull", body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                self.assertEqual(r.status, want)
                self.assertIn("error", json.loads(r.read()))
                c.close()

    def test_status_and_metrics(self):
        st = self.peerd.status()
        self.assertEqual(st["node"], "mirror-node")
        for k in ("from_origin", "from_peers", "from_http_fallback", "served_local", "uploaded_to_peers"):
            self.assertIsInstance(st["bytes"][k], int, k)
        for k in ("downloads_ok", "downloads_failed", "hash_failures", "quarantined", "http_fallbacks"):
            self.assertIsInstance(st["counters"][k], int, k)
        self.assertIsInstance(st["downloads"], list)
        _, _, text, _ = request(self.port, "GET", "/metrics")
        p = promtool_check(text.decode())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m = metrics(self.port)
        for name in ("shoal_peerd_hash_failures_total", "shoal_peerd_bytes_from_peers_total",
                     "shoal_peerd_bytes_from_http_fallback_total", "shoal_peerd_quarantined_total",
                     "shoal_peerd_downloads_active", "shoal_cache_bytes"):
            self.assertIn(name, m)

    def test_threads_carry_names(self):
        # top -H and perf tell a daemon's parts apart by these (docs/operations.md, "Threads");
        # the main thread keeps the process's name, which pgrep and ps match.
        pid = self.peerd.daemon.pid
        names = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names[int(tid)] = f.read().strip()
        self.assertEqual(names[pid], "shoal-peerd")
        for want in ("io-pool", "worker", "http-client", "libtorrent", "lt-alerts", "swarm-monitor",
                     "cache-upkeep"):
            self.assertIn(want, names.values(), sorted(set(names.values())))
        # Every worker thread got the name, not one thread twice.
        self.assertEqual(sum(1 for n in names.values() if n == "worker"), 16)

    def test_poisoned_metainfo_never_completes_a_wrong_body(self):
        real = os.urandom(1536 << 10)
        junk = os.urandom(len(real))
        dig = "sha256:" + hashlib.sha256(real).hexdigest()
        # registry-proxy's HTTP fallback and metainfo both describe the junk under the real digest:
        # every piece passes its SHA-1, only the object's sha256 can tell.
        self.fake.blobs[dig] = junk
        self.fake.metainfo_status[dig] = (200, make_torrent(junk, name=dig[7:]))
        before = self.peerd.status()["counters"]
        path = f"/v2/team/app/blobs/{dig}?ns=r.example"
        tail = len(real) - 1000
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            full = ex.submit(partial_get, self.port, path, {})
            self._wait(lambda: self.peerd.status().get("downloads"), 10, "the download to start")
            ranged = ex.submit(partial_get, self.port, path, {"Range": f"bytes={tail}-"})
            (s1, n1, got1, whole1), (s2, n2, got2, whole2) = full.result(60), ranged.result(60)
        print(f"\npoisoned metainfo: full GET {s1} got {len(got1)} of {n1}, range {s2} got {len(got2)} of {n2}")
        self.assertEqual((s1, n1), (200, len(real)))
        self.assertFalse(whole1, "peerd completed a wrong body")
        self.assertLess(len(got1), len(real))
        self.assertEqual(got1, junk[:len(got1)], "bytes other than the download's")
        self.assertEqual((s2, n2), (206, 1000))
        self.assertFalse(whole2, "peerd completed a wrong range at the object's end")
        self.assertLess(len(got2), 1000)
        after = self.peerd.status()["counters"]
        self.assertGreater(after["hash_failures"], before["hash_failures"])
        self.assertGreater(after["downloads_failed"], before["downloads_failed"])
        self.assertIn(dig, self.peerd.log_text(), "the hash failure is not logged with its digest")
        self.assertFalse(any(d["digest"] == dig for d in self.peerd.status().get("downloads", [])))

    # -- helpers ---------------------------------------------------------------------------------

    def _wait(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = pred()
            if v:
                return v
            time.sleep(0.1)
        self.fail(f"timed out after {timeout}s waiting for {what}")

    def _wait_cached(self, dig):
        self._wait(lambda: not any(d["digest"] == dig for d in self.peerd.status().get("downloads", [])), 15,
                   f"{dig} to be committed")


class PeerdTlsStart(FixtureTestCase):
    """peerd's `tls` section at start (no registry-proxy needed: nothing is fetched)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from shoal_fixtures.certs import ClusterPKI
        cls.pki = ClusterPKI(cls.class_tmpdir("shoal-peerd-tls-") / "pki")

    def exits(self, p: Peerd, timeout: float = 10) -> int:
        p.daemon.start()
        end = time.monotonic() + timeout
        while p.daemon.returncode is None and time.monotonic() < end:
            time.sleep(0.05)
        rc = p.daemon.returncode
        self.assertIsNotNone(rc, "peerd kept running")
        return rc

    def test_plain_url_with_tls_refuses_to_start(self):
        p = self.track(Peerd(self.tmpdir() / "p", name="n1", registry_proxy="http://127.0.0.1:9",
                             tls=self.pki.node("n1", ["127.0.0.1"])))
        self.assertNotEqual(self.exits(p), 0)
        self.assertIn("upstream.registry_proxy is http://127.0.0.1:9: with tls.enabled it must be an https:// URL",
                      p.log_text())

    def test_certificate_of_another_node_is_logged_and_metrics_listener_serves_tls(self):
        port = free_port()
        p = self.track(Peerd(self.tmpdir() / "p", name="n2", registry_proxy="https://127.0.0.1:9",
                             tls=self.pki.node("n1", ["127.0.0.1"]), metrics_port=port))
        p.start()
        p.daemon.wait_log("the certificate does not name this node")
        self.assertIn('expected=shoal://node/n2', p.log_text())
        me = self.pki.node("n1", ["127.0.0.1"]).curl_args()
        for path, want in (("/metrics", "200"), ("/healthz", "200"), ("/v2/", "404"), ("/shoal/v1/status", "404")):
            cp = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *me,
                                 p.metrics_url + path], capture_output=True, text=True, timeout=20)
            self.assertEqual(cp.stdout, want, path)
        cp = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                             str(self.pki.ca.cert), p.metrics_url + "/metrics"], capture_output=True, text=True,
                            timeout=20)
        self.assertEqual(cp.stdout, "000", "served a client without a certificate")


if __name__ == "__main__":
    unittest.main(verbosity=2)
