"""registry-proxy's OCI pull API against the real registry (Debian docker-registry 2.8.2).

One proxy with three upstreams in front of two anonymous registries:
  A   (name = A's host:port, alias "alias.test:5000")      the default upstream
  B   (name "second.test", prefix "second")                 chosen by /v2/second/<repo>/...
  hub (name "docker.io", docker_hub, prefix "hub", url = A)  Docker Hub naming (library/)
Covers: /v2/, manifests by tag and digest (GET/HEAD, exact bytes and headers), Accept
negotiation for OCI indexes and Docker lists, blobs (GET/HEAD/Range, 206/416), spec JSON errors,
every malformed name/digest/tag/Range/ns form and a 1 MB request line, upstream selection and
that ns= never reaches an upstream or a cache key, digests cached for good (across a restart),
tag TTL, /metrics (promtool), /healthz, and --print-config loading back.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.procs import free_port, run
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, binary, upstream

TAG_TTL = 2.0


class ProxyApiTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-api-")
        cls.a = cls.class_track(Registry(d / "a").start())
        cls.b = cls.class_track(Registry(d / "b").start())
        cls.app = oci.make_image(d / "app", [oci.LayerSpec(size=300_000, seed="api-l1"),
                                             oci.LayerSpec(size=2_000, seed="api-l2")])
        cls.a.push(cls.app, "team/app")
        cls.dock = oci.make_image(d / "dock", [oci.LayerSpec(size=20_000, seed="api-d1")],
                                  fmt="docker")
        cls.a.push(cls.dock, "team/dock")
        cls.multi = oci.make_multiarch(d / "multi", [oci.LayerSpec(size=5_000, seed="api-m")],
                                       fmt="oci")
        cls.a.push(cls.multi, "team/multi")
        cls.dlist = oci.make_multiarch(d / "dlist", [oci.LayerSpec(size=5_000, seed="api-dl")],
                                       fmt="docker")
        cls.a.push(cls.dlist, "team/dlist")
        cls.hub = oci.make_image(d / "hub", [oci.LayerSpec(size=3_000, seed="api-hub")])
        cls.a.push(cls.hub, "library/hubimg")
        cls.a.push(cls.app, "team/sel")
        cls.b_app = oci.make_image(d / "bapp", [oci.LayerSpec(size=4_000, seed="api-b")])
        cls.b.push(cls.b_app, "team/sel")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.a.host_port, cls.a.url, aliases=["alias.test:5000"],
                     connect_timeout="2s", stall_timeout="5s"),
            upstream("second.test", cls.b.url, prefix="second"),
            upstream("docker.io", cls.a.url, docker_hub=True, prefix="hub"),
        ], extra={"default_upstream": cls.a.host_port,
                  "manifests": {"tag_ttl": f"{TAG_TTL}s"}}).start())

    # -- helpers ---------------------------------------------------------------------------------

    def ns(self, path: str) -> str:
        return f"{path}{'&' if '?' in path else '?'}ns={self.a.host_port}"

    def assert_manifest(self, status, headers, body, *, digest, media_type, data, head=False):
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(headers.get("docker-content-digest"), digest)
        self.assertEqual(headers.get("content-type"), media_type)
        self.assertEqual(int(headers.get("content-length", -1)), len(data))
        self.assertEqual(body, b"" if head else data)

    # -- tests -----------------------------------------------------------------------------------

    def test_base_endpoint(self):
        # Anonymous: challenged (so Docker-style clients know to send credentials they have).
        s, h, body = self.proxy.get("/v2/")
        self.assertEqual(s, 401)
        self.assertEqual(pc.error_code(body), "UNAUTHORIZED")
        self.assertTrue(h.get("www-authenticate", "").startswith("Basic realm="))
        # With credentials: the API version check.
        auth = {"Authorization": "Basic dXNlcjpwdw=="}
        s, h, body = self.proxy.get("/v2/", headers=auth)
        self.assertEqual(s, 200)
        self.assertEqual(h.get("content-type"), "application/json")
        self.assertEqual(json.loads(body), {})
        self.assertEqual(h.get("docker-distribution-api-version"), "registry/2.0")
        s, _, body = self.proxy.get("/v2", method="HEAD", headers=auth)
        self.assertEqual((s, body), (200, b""))
        s, h, body = self.proxy.get("/v2/team/app/manifests/v1", method="DELETE")
        self.assertEqual(s, 405)
        self.assertEqual(pc.error_code(body), "UNSUPPORTED")
        self.assertIn("GET", h.get("allow", ""))

    def test_manifest_by_tag_and_digest_get_and_head(self):
        for layout, repo in ((self.app, "team/app"), (self.dock, "team/dock")):
            im = layout.images[0]
            mt = layout.top.media_type
            for ref in ("v1", im.manifest.digest):
                for head in (False, True):
                    with self.subTest(repo=repo, ref=ref, head=head):
                        s, h, body = self.proxy.get(self.ns(f"/v2/{repo}/manifests/{ref}"),
                                                    headers={"Accept": mt},
                                                    method="HEAD" if head else "GET")
                        self.assert_manifest(s, h, body, digest=im.manifest.digest,
                                             media_type=mt, data=im.manifest_bytes, head=head)
            # By digest, the stored type comes back whatever the client accepts.
            s, h, body = self.proxy.get(self.ns(f"/v2/{repo}/manifests/{im.manifest.digest}"),
                                        headers={"Accept": "application/json"})
            self.assert_manifest(s, h, body, digest=im.manifest.digest, media_type=mt,
                                 data=im.manifest_bytes)

    def test_accept_is_passed_through_and_answer_matches_it(self):
        cases = [(self.multi, "team/multi", pc.OCI_INDEX, pc.OCI_MANIFEST),
                 (self.dlist, "team/dlist", pc.DOCKER_LIST, pc.DOCKER_MANIFEST)]
        for layout, repo, index_type, manifest_type in cases:
            accepts = [index_type, manifest_type, f"{manifest_type}, {index_type}",
                       f"{index_type};q=0.9, {manifest_type}", pc.ALL_MANIFESTS]
            # Twice: the second round is answered from the tag cache, which must keep the
            # answers for different Accept headers apart.
            for round_ in range(2):
                for accept in accepts:
                    with self.subTest(repo=repo, accept=accept, round=round_):
                        path = f"/v2/{repo}/manifests/v1"
                        ds, dh, dbody = self.a.request(path, headers={"Accept": accept})
                        s, h, body = self.proxy.get(self.ns(path), headers={"Accept": accept})
                        self.assertEqual(s, ds, body[:200])
                        if ds != 200:
                            continue
                        self.assertEqual(body, dbody, "proxy and registry chose differently")
                        self.assertEqual(h.get("content-type"), dh.get("Content-Type"))
                        self.assertEqual(h.get("docker-content-digest"), pc.sha256(body))
                        self.assertEqual(json.loads(body).get("mediaType"),
                                         h.get("content-type"))
            # The index itself when it is accepted.
            s, h, body = self.proxy.get(self.ns(f"/v2/{repo}/manifests/v1"),
                                        headers={"Accept": index_type})
            self.assertEqual(h.get("docker-content-digest"), layout.top.digest)

    def test_accept_sent_as_several_header_lines(self):
        # Go clients (skopeo, containerd) send one Accept line per media type.
        import http.client
        for repo, types, want in (("team/multi", [pc.OCI_MANIFEST, pc.OCI_INDEX],
                                   self.multi.top.digest),
                                  ("team/dock", ["application/json", pc.DOCKER_MANIFEST],
                                   self.dock.top.digest)):
            with self.subTest(repo=repo):
                conn = http.client.HTTPConnection(self.proxy.host, self.proxy.port, timeout=10)
                conn.putrequest("GET", self.ns(f"/v2/{repo}/manifests/v1"))
                for t in types:
                    conn.putheader("Accept", t)
                conn.endheaders()
                r = conn.getresponse()
                body = r.read()
                conn.close()
                self.assertEqual(r.status, 200, body[:200])
                self.assertEqual(r.getheader("Docker-Content-Digest"), want)
                self.assertEqual(pc.sha256(body), want)

    def test_blob_get_head_and_ranges(self):
        layer = self.app.images[0].layers[0]
        data = self.app.blob_path(layer.digest).read_bytes()
        path = self.ns(f"/v2/team/app/blobs/{layer.digest}")
        # HEAD before anything is cached: answered from upstream's HEAD.
        s, h, body = self.proxy.get(path, method="HEAD")
        self.assertEqual((s, body), (200, b""))
        self.assertEqual(h.get("docker-content-digest"), layer.digest)
        self.assertEqual(int(h["content-length"]), len(data))
        s, h, body = self.proxy.get(path)
        self.assertEqual(s, 200)
        self.assertEqual(pc.sha256(body), layer.digest)
        self.assertEqual(h.get("docker-content-digest"), layer.digest)
        self.assertEqual(h.get("content-type"), "application/octet-stream")
        self.assertEqual(int(h["content-length"]), len(data))
        s, h, body = self.proxy.get(path, method="HEAD")
        self.assertEqual((s, body), (200, b""))
        self.assertEqual(int(h["content-length"]), len(data))
        self.assertEqual(h.get("accept-ranges"), "bytes")
        n = len(data)
        satisfiable = {
            "bytes=0-9": (0, 9), "bytes=10-": (10, n - 1), "bytes=-100": (n - 100, n - 1),
            f"bytes={n - 1}-": (n - 1, n - 1), "bytes=0-99999999": (0, n - 1),
            f"bytes=-{n + 50}": (0, n - 1), "BYTES=5-5": (5, 5), "bytes = 7-8": (7, 8),
        }
        for rng, (first, last) in satisfiable.items():
            with self.subTest(range=rng):
                s, h, body = self.proxy.get(path, headers={"Range": rng})
                self.assertEqual(s, 206, body[:200])
                self.assertEqual(h.get("content-range"), f"bytes {first}-{last}/{n}")
                self.assertEqual(body, data[first:last + 1])
                self.assertEqual(h.get("docker-content-digest"), layer.digest)
        for rng in (f"bytes={n}-", f"bytes={n + 5}-{n + 10}", "bytes=-0", "bytes=99999999999-"):
            with self.subTest(range=rng):
                s, h, body = self.proxy.get(path, headers={"Range": rng})
                self.assertEqual(s, 416, body[:200])
                self.assertEqual(h.get("content-range"), f"bytes */{n}")
                self.assertNotIn(data[:64], body)
        # Ranges we do not serve are ignored: the whole blob, 200 (RFC 9110 allows it).
        for rng in ("bytes=abc", "bytes=5-2", "items=0-1", "bytes=0-1,0-", "bytes=",
                    "bytes=--1", "bytes=1-2-3", "bytes=+1-2", "bytes=0x10-", "=0-1",
                    "bytes=" + "9" * 30 + "-"):
            with self.subTest(range=rng):
                s, h, body = self.proxy.get(path, headers={"Range": rng})
                self.assertEqual(s, 200, body[:200])
                self.assertEqual(pc.sha256(body), layer.digest)
        # Several ranges (a lazy reader's): 206 multipart/byteranges, parts in the order asked.
        s, h, body = self.proxy.get(path, headers={"Range": f"bytes={n - 10}-,0-9,{n}-"})
        self.assertEqual(s, 206, body[:200])
        ctype = h.get("content-type", "")
        self.assertTrue(ctype.startswith("multipart/byteranges; boundary="), ctype)
        delim = b"--" + ctype.split("boundary=", 1)[1].encode()
        parts = body.split(delim)
        self.assertEqual(parts[0], b"")
        self.assertEqual(parts[-1], b"--\r\n")
        got = []
        for p in parts[1:-1]:
            head, _, payload = p.partition(b"\r\n\r\n")
            got.append((head.split(b"Content-Range: ")[1].decode(), payload.removesuffix(b"\r\n")))
        self.assertEqual(got, [(f"bytes {n - 10}-{n - 1}/{n}", data[-10:]), (f"bytes 0-9/{n}", data[:10])])

    def test_range_on_a_cold_blob(self):
        layer = self.app.images[0].layers[1]
        data = self.app.blob_path(layer.digest).read_bytes()
        s, h, body = self.proxy.get(self.ns(f"/v2/team/app/blobs/{layer.digest}"),
                                    headers={"Range": "bytes=100-199"})
        self.assertEqual(s, 206, body[:200])
        self.assertEqual(body, data[100:200])
        self.assertEqual(h.get("content-range"), f"bytes 100-199/{len(data)}")

    def test_unknown_content_gets_spec_errors(self):
        missing = "sha256:" + "0" * 64
        cases = [
            ("GET", f"/v2/team/app/blobs/{missing}", 404, "BLOB_UNKNOWN"),
            ("HEAD", f"/v2/team/app/blobs/{missing}", 404, None),
            ("GET", f"/v2/team/nosuchrepo/blobs/{missing}", 404, "BLOB_UNKNOWN"),
            ("GET", "/v2/team/app/manifests/nosuchtag", 404, "MANIFEST_UNKNOWN"),
            ("HEAD", "/v2/team/app/manifests/nosuchtag", 404, None),
            ("GET", f"/v2/team/app/manifests/{missing}", 404, "MANIFEST_UNKNOWN"),
            ("GET", "/v2/team/nosuchrepo/manifests/v1", 404, "MANIFEST_UNKNOWN"),
        ]
        for method, path, status, code in cases:
            with self.subTest(method=method, path=path):
                s, h, body = self.proxy.get(self.ns(path), method=method)
                self.assertEqual(s, status, body[:300])
                if code:
                    self.assertEqual(h.get("content-type"), "application/json")
                    self.assertEqual(pc.error_code(body), code)
                else:
                    self.assertEqual(body, b"")

    def test_malformed_requests_are_refused_before_any_upstream_call(self):
        good = "sha256:" + "a" * 64
        mark_a, mark_b = self.a.mark(), self.b.mark()
        names = ["UPPER/app", "a//b", "a/../b", "../etc", "-a/b", "a-/b", "a___b", ".a", "a.",
                 "a/" + "x" * 300, "%2e%2e/x", "a%20b", "caf%C3%A9", "a/b/", "_a", "a/./b",
                 "a%2Fb", "a%00b"]
        digests = ["sha256:xyz", "sha256:" + "a" * 63, "sha256:" + "a" * 65,
                   "sha256:" + "A" * 64, "sha512:" + "a" * 128, "md5:" + "a" * 32, "sha256",
                   ":" + "a" * 64, "sha256:" + "a" * 64 + "%00", "sha256:" + "g" * 64,
                   "sha256:%20" + "a" * 62, "SHA256:" + "a" * 64, "sha256::" + "a" * 64]
        tags = ["-bad", ".bad", "a" * 129, "bad%20tag", "ba*d", "t%00", "%2e", "tag%0d%0aX-y"]
        cases = []
        for n in names:
            cases.append((f"/v2/{n}/manifests/v1", 400, "NAME_INVALID"))
            cases.append((f"/v2/{n}/blobs/{good}", 400, "NAME_INVALID"))
        for d in digests:
            cases.append((f"/v2/team/app/blobs/{d}", 400, "DIGEST_INVALID"))
        for d in digests:
            if ":" in d:
                cases.append((f"/v2/team/app/manifests/{d}", 400, "DIGEST_INVALID"))
        for t in tags:
            cases.append((f"/v2/team/app/manifests/{t}", 400, "MANIFEST_INVALID"))
        cases += [
            ("/v2/team/app/manifests/", 400, "MANIFEST_INVALID"),
            ("/v2/team/app/blobs/", 400, "DIGEST_INVALID"),
            ("/v2/team/app/tags/list", 404, "UNSUPPORTED"),
            ("/v2/_catalog", 404, "UNSUPPORTED"),
            ("/v2/team/app", 404, "UNSUPPORTED"),
            ("/nonexistent", 404, "UNSUPPORTED"),
            ("/v2/team/app/manifests/v1?ns=bad%20host!", 400, "NAME_INVALID"),
            ("/v2/team/app/manifests/v1?ns=unknown.example", 404, "NAME_UNKNOWN"),
            (f"/v2/team/app/blobs/{good}?ns=", 400, "NAME_INVALID"),
            ("/v2/team/app/manifests/v1?ns=%zz", 400, "NAME_INVALID"),
            ("/v2/team/app/manifests/v1?a=1&ns=%4", 400, "NAME_INVALID"),
        ]
        for path, status, code in cases:
            for method in ("GET", "HEAD"):
                with self.subTest(path=path, method=method):
                    s, h, body = self.proxy.get(path, method=method)
                    self.assertEqual(s, status, body[:300])
                    if method == "GET":
                        self.assertEqual(h.get("content-type"), "application/json")
                        self.assertEqual(pc.error_code(body), code, body[:300])
        for method in ("PUT", "POST", "DELETE", "PATCH"):
            s, _, body = self.proxy.get("/v2/team/app/blobs/uploads/", method=method)
            self.assertEqual(s, 405)
            self.assertEqual(pc.error_code(body), "UNSUPPORTED")
        self.a.wait_log_quiet()
        self.assertEqual(self.a.access_log(mark_a), [], "malformed requests reached upstream A")
        self.assertEqual(self.b.access_log(mark_b), [], "malformed requests reached upstream B")

    def test_one_megabyte_request_line_and_header(self):
        line = b"GET /v2/" + b"a" * (1 << 20) + b"/manifests/v1 HTTP/1.1\r\nHost: x\r\n\r\n"
        header = b"GET /v2/ HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (1 << 20) + b"\r\n\r\n"
        mark = self.a.mark()
        for raw in (line, header):
            with self.subTest(kind="request line" if raw is line else "header"):
                out, closed = pc.raw_exchange(self.proxy.host, self.proxy.port, raw, timeout=10)
                self.assertTrue(closed, "the connection must be closed after a refused request")
                if out:
                    status = int(out.split(b" ", 2)[1])
                    self.assertIn(status, (400, 414, 431), out[:200])
                s, _, _ = self.proxy.get("/healthz")
                self.assertEqual(s, 200, "registry-proxy must survive a 1 MB request")
        self.a.wait_log_quiet()
        self.assertEqual(self.a.access_log(mark), [])

    def test_upstream_selection_and_ns_never_reaches_upstream(self):
        app_digest = self.app.top.digest
        mark_a, mark_b = self.a.mark(), self.b.mark()
        # By ns=, and by an alias of the same upstream: same tag cache entry (ns is not a key).
        hits0 = self.proxy.metric("shoal_proxy_tag_cache_hits_total")
        accept = {"Accept": pc.OCI_MANIFEST}
        s, h, _ = self.proxy.get(f"/v2/team/sel/manifests/v1?ns={self.a.host_port}",
                                 headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, app_digest))
        s, h, _ = self.proxy.get("/v2/team/sel/manifests/v1?ns=alias.test:5000", headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, app_digest))
        # No ns and no prefix: the default upstream (A), again the same cache entry.
        s, h, _ = self.proxy.get("/v2/team/sel/manifests/v1", headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, app_digest))
        self.assertGreaterEqual(self.proxy.metric("shoal_proxy_tag_cache_hits_total") - hits0, 2)
        # A path prefix without ns: upstream B, prefix stripped.
        s, h, _ = self.proxy.get("/v2/second/team/sel/manifests/v1", headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, self.b_app.top.digest))
        # A name equal to a prefix is a repository of the default upstream, not upstream B.
        s, _, body = self.proxy.get("/v2/second/manifests/v1", headers=accept)
        self.assertEqual(s, 404, body[:200])
        # Docker Hub naming, by ns= and by prefix.
        s, h, _ = self.proxy.get("/v2/hubimg/manifests/v1?ns=docker.io", headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, self.hub.top.digest))
        s, h, _ = self.proxy.get("/v2/hub/hubimg/manifests/v1", headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, self.hub.top.digest))
        # Blobs are global: asked under two ns values, fetched once.
        cfg = self.hub.images[0].config
        for ns in ("docker.io", "alias.test:5000"):
            repo = "hubimg" if ns == "docker.io" else "library/hubimg"
            s, _, body = self.proxy.get(f"/v2/{repo}/blobs/{cfg.digest}?ns={ns}")
            self.assertEqual((s, pc.sha256(body)), (200, cfg.digest))
        self.a.wait_log_quiet()
        self.b.wait_log_quiet()
        a_log, b_log = self.a.access_log(mark_a), self.b.access_log(mark_b)
        self.assertEqual(self.a.count_manifest_requests("v1", repo="team/sel", since=mark_a), 1,
                         [e.path for e in a_log])
        self.assertEqual(self.a.count_manifest_requests("v1", repo="second", since=mark_a), 1)
        self.assertEqual(self.a.count_manifest_requests("v1", repo="library/hubimg",
                                                        since=mark_a), 1)
        self.assertEqual(self.a.count_blob_gets(cfg.digest, since=mark_a), 1)
        self.assertEqual([e.path for e in b_log], ["/v2/team/sel/manifests/v1"])
        for e in [*a_log, *b_log]:
            self.assertNotIn("ns=", e.query, f"ns reached upstream: {e.path}?{e.query}")
            self.assertFalse(e.path.startswith(("/v2/hub/", "/v2/second/team/")), e.path)
        self.assertFalse(any(e.path.startswith("/v2/hubimg/") for e in a_log))

    def test_digests_cached_for_good_and_tags_for_their_ttl(self):
        d = self.tmpdir()
        one = oci.make_image(d / "one", [oci.LayerSpec(size=1_000, seed="ttl-1")])
        two = oci.make_image(d / "two", [oci.LayerSpec(size=1_000, seed="ttl-2")])
        self.a.push(one, "team/ttl")
        accept = {"Accept": pc.OCI_MANIFEST}
        mark = self.a.mark()
        by_digest = self.ns(f"/v2/team/ttl/manifests/{one.top.digest}")
        for _ in range(3):
            s, _, body = self.proxy.get(by_digest, headers=accept)
            self.assertEqual((s, pc.sha256(body)), (200, one.top.digest))
        # Cached for good: not asked again, not even after a restart.
        self.proxy.restart()
        s, _, body = self.proxy.get(by_digest, headers=accept)
        self.assertEqual((s, pc.sha256(body)), (200, one.top.digest))
        self.a.wait_log_quiet()
        self.assertEqual(self.a.count_manifest_requests(one.top.digest, since=mark), 1)
        # A tag: asked once per TTL; a moved tag shows up after the TTL, not before.
        by_tag = self.ns("/v2/team/ttl/manifests/v1")
        t0 = time.monotonic()
        s, h, _ = self.proxy.get(by_tag, headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, one.top.digest))
        self.a.push(two, "team/ttl")
        s, h, _ = self.proxy.get(by_tag, headers=accept)
        within_ttl = time.monotonic() - t0 < TAG_TTL * 0.8
        if within_ttl:  # (a very slow machine may have let the TTL pass already)
            self.assertEqual(h.get("docker-content-digest"), one.top.digest,
                             "a tag must be reused within its TTL")
        time.sleep(max(0.0, TAG_TTL + 0.3 - (time.monotonic() - t0)))
        s, h, _ = self.proxy.get(by_tag, headers=accept)
        self.assertEqual((s, h.get("docker-content-digest")), (200, two.top.digest),
                         "after its TTL a tag must be resolved upstream again")
        self.a.wait_log_quiet()
        gets = self.a.count_manifest_requests("v1", repo="team/ttl", since=mark)
        self.assertEqual(gets, 2 if within_ttl else 3, "one upstream GET per TTL period")

    def test_metrics_pass_promtool_with_bounded_labels(self):
        self.proxy.get(self.ns("/v2/team/app/manifests/v1"))
        self.proxy.get("/v2/UPPER/manifests/v1")
        self.proxy.get("/x/" + "y" * 50)
        text = self.proxy.metrics_text()
        cp = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)
        self.assertEqual(cp.returncode, 0, cp.stdout.decode() + cp.stderr.decode())
        for name in ("shoal_proxy_requests_total", "shoal_proxy_upstream_blob_gets_total",
                     "shoal_proxy_digest_mismatch_total", "shoal_proxy_stale_manifests_total",
                     "shoal_cache_bytes"):
            self.assertRegex(text, rf"(?m)^{name}(\{{| )", f"{name} missing")
        routes = set(re.findall(r'route="([^"]*)"', text))
        self.assertLessEqual(routes, {"base", "manifest", "blob", "metainfo", "ops",
                                      "v2_other", "other"})
        for line in text.splitlines():
            self.assertNotIn("sha256:", line, "a digest must never be a label value")
            self.assertNotIn("team/", line, "a repository must never be a label value")

    def test_healthz_and_readyz(self):
        for path in ("/healthz", "/readyz"):
            s, h, body = self.proxy.get(path)
            self.assertEqual(s, 200, body)
            self.assertEqual(json.loads(body).get("status"), "ok")

    def test_print_config_loads_back(self):
        printed = self.proxy.print_config()
        d = self.tmpdir()
        path = d / "printed.yaml"
        path.write_text(printed)
        again = run([str(binary("shoal-registry-proxy")), "-c", str(path), "--print-config"],
                    what="print-config of the printed file").stdout
        strip = lambda t: [ln for ln in t.splitlines() if not ln.startswith("# Effective")]  # noqa: E731
        self.assertEqual(strip(again), strip(printed))
        # And a daemon runs from it (on its own port and directories).
        port = free_port()
        other = RegistryProxy(d / "from-printed", upstreams=[upstream("x.test", "http://127.0.0.1:1")])
        other.config_path = path
        other.port = port
        other.daemon.argv = [str(binary("shoal-registry-proxy")), "-c", str(path),
                             "--set", f"http.listen=127.0.0.1:{port}",
                             "--set", f"cache.dir={d / 'c'}", "--set", f"state_dir={d / 's'}"]
        self.track(other)
        other.start()
        s, _, body = other.get(f"/v2/team/app/manifests/{self.app.top.digest}",
                               headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual((s, pc.sha256(body)), (200, self.app.top.digest))


if __name__ == "__main__":
    unittest.main()
