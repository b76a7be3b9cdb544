#!/usr/bin/env python3
"""peerd's cache is no back door for private content, and peerd relays no path it did not parse
(security review findings 5 and 20), against the real daemons on loopback.

Set-up (one start shared by every case): a docker-registry with htpasswd auth holds a private
image (every repository needs credentials), a second registry without auth holds a public one;
registry-proxy (seeding over BitTorrent) fronts both, the private one as its default upstream;
one peerd mirrors registry-proxy. Pinned down here:
  - alice pulls a private blob through peerd (200); then the same blob from peerd's cache is
    refused to an anonymous client (401 with a challenge, same repository, another repository,
    no ns=) and to a wrong password (401), HEAD included, and none of them gets a byte;
  - alice again is served from the cache without another confirmation (the positive answer is
    cached by a salted hash of her credential);
  - a public blob is served anonymously, and once registry-proxy said it is public no further
    request confirms anything (shoal_peerd_access_checks_total stays put);
  - after a restart peerd knows nothing about visibility and still refuses anonymous clients
    (fail closed), serves alice after one confirmation and the public blob after at most one;
  - the pull API (POST /shoal/v1/pull) tells whether a blob was cached before only to a
    caller allowed to fetch it: a public image whose manifest lists the cached private layer as
    a foreign (non-distributable) layer learns nothing about it (no cached_before, not ok),
    while alice pulling the private image hears cached_before for its layer;
  - `/v2/../<path>`, `/v2/%2e%2e/<path>` and other dot segments, empty segments and
    backslashes are refused 400 before anything is relayed: registry-proxy sees no request.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import sys
import urllib.error
import urllib.request
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, parse_metrics, upstream  # noqa: E402

USERS = {"alice": "alice-pw"}
CHECKS = "shoal_peerd_access_checks_total"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, the path sent exactly as given (no normalization)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def metrics(port: int) -> dict[str, float]:
    _, _, body = request(port, "GET", "/metrics")
    return parse_metrics(body.decode())


def checks(port: int) -> float:
    return sum(v for k, v in metrics(port).items() if k.startswith(CHECKS))


class PeerdPrivateContentTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-peerd-private-")
        cls.reg = cls.class_track(Registry(d / "private-registry", auth="htpasswd",
                                           users=dict(USERS)).start())
        # Foreign-layer URLs allowed (test_7 pushes such a manifest).
        cls.pub = cls.class_track(Registry(d / "public-registry", extra_config={
            "validation": {"manifests": {"urls": {"allow": ["^https?://"]}}}}).start())
        cls.private = oci.make_image(d / "priv", [oci.LayerSpec(size=150_000, seed="peerd-priv")])
        cls.public = oci.make_image(d / "pub", [oci.LayerSpec(size=90_000, seed="peerd-pub")])
        cls.reg.push(cls.private, "team/app")
        cls.pub.push(cls.public, "library/app")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", torrent=True, log_level="info", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url), upstream(cls.pub.host_port, cls.pub.url)]).start())
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="private-node", registry_proxy=cls.proxy.url, extra={
            "upstream": {"request_timeout": "5s", "metainfo_wait": "1s"},
            "swarm": {"stall_timeout": "500ms", "fallback_deadline": "10s"}}).start())
        cls.layer = cls.private.images[0].layers[0]
        cls.layer_bytes = cls.private.blob_path(cls.layer.digest).read_bytes()
        cls.path = f"/v2/team/app/blobs/{cls.layer.digest}?ns={cls.reg.host_port}"
        cls.pub_layer = cls.public.images[0].layers[0]
        cls.pub_path = f"/v2/library/app/blobs/{cls.pub_layer.digest}?ns={cls.pub.host_port}"

    @property
    def port(self) -> int:
        return self.peerd.http_port

    def assert_bytes(self, status: int, body: bytes, digest: str) -> None:
        self.assertEqual(status, 200, body[:300])
        self.assertEqual("sha256:" + hashlib.sha256(body).hexdigest(), digest)

    def assert_refused_everywhere(self) -> None:
        """The cached private blob is refused to strangers, by every name and method."""
        d = self.layer.digest
        cases = [
            ("anonymous", self.path, {}),
            ("anonymous, another repository", f"/v2/other/thing/blobs/{d}?ns={self.reg.host_port}", {}),
            ("anonymous, no ns", f"/v2/anything/else/blobs/{d}", {}),
            ("wrong password", self.path, basic("alice", "wrong")),
            ("unknown user", f"/v2/anything/else/blobs/{d}", basic("mallory", "x")),
        ]
        for what, path, headers in cases:
            for method in ("GET", "HEAD"):
                with self.subTest(what=what, method=method):
                    s, h, body = request(self.port, method, path, headers)
                    self.assertIn(s, (401, 403, 404), f"{what} {method} {path}: {s} {body[:200]!r}")
                    self.assertNotIn(self.layer_bytes[:256], body)
                    if s == 401:
                        self.assertIn("www-authenticate", h, what)

    def test_1_alice_pulls_a_private_blob_through_peerd(self):
        s, _, body = request(self.port, "GET", self.path, basic("alice", USERS["alice"]))
        self.assert_bytes(s, body, self.layer.digest)

    def test_2_strangers_never_get_the_cached_private_blob(self):
        self.assert_refused_everywhere()

    def test_3_alice_again_needs_no_new_confirmation(self):
        s, _, body = request(self.port, "GET", self.path, basic("alice", USERS["alice"]))
        self.assert_bytes(s, body, self.layer.digest)
        before = checks(self.port)
        s, _, body = request(self.port, "GET", self.path, basic("alice", USERS["alice"]))
        self.assert_bytes(s, body, self.layer.digest)
        self.assertEqual(checks(self.port), before, "alice's positive answer was not cached")

    def test_4_public_blob_is_served_anonymously_without_round_trips(self):
        before = checks(self.port)
        s, _, body = request(self.port, "GET", self.pub_path)  # the metainfo answer says public
        self.assert_bytes(s, body, self.pub_layer.digest)
        s, _, body = request(self.port, "GET", self.pub_path)  # from the cache now
        self.assert_bytes(s, body, self.pub_layer.digest)
        for path in (self.pub_path, f"/v2/some/other/blobs/{self.pub_layer.digest}"):
            for method in ("GET", "HEAD"):
                s, _, body = request(self.port, method, path)
                self.assertEqual(s, 200, f"{method} {path}: {body[:200]!r}")
        self.assertEqual(checks(self.port), before, "a blob known public was confirmed again")

    def test_5_dot_segments_are_refused_before_anything_is_relayed(self):
        def proxy_requests() -> float:
            return sum(v for k, v in self.proxy.metrics().items()
                       if k.startswith("shoal_proxy_requests_total") and 'route="ops"' not in k)

        before = proxy_requests()
        for path in ("/v2/../shoal/v1/datasets", "/v2/%2e%2e/metrics", "/v2/%2E%2e/shoal/v1/datasets",
                     "/v2/team/app/../../../metrics", "/v2/./team/app/manifests/v1",
                     "/v2/team//app/manifests/v1", "/v2/team\\..\\..\\metrics",
                     "/v2/team/app/manifests/..%2f..%2fmetrics", "/v2/.%2e/shoal/v1/datasets"):
            for method in ("GET", "HEAD"):
                with self.subTest(path=path, method=method):
                    s, _, body = request(self.port, method, path)
                    self.assertEqual(s, 400, f"{method} {path}: {s} {body[:200]!r}")
                    if method == "GET":
                        self.assertIn(b"NAME_INVALID", body)
                        self.assertNotIn(b"shoal_proxy", body)
        self.assertEqual(proxy_requests(), before, "a refused path reached registry-proxy")

    def test_6_a_restarted_peerd_still_refuses_strangers(self):
        self.peerd.stop()
        self.peerd.start()
        self.assert_refused_everywhere()
        s, _, body = request(self.port, "GET", self.path, basic("alice", USERS["alice"]))
        self.assert_bytes(s, body, self.layer.digest)
        request(self.port, "GET", self.pub_path)
        before = checks(self.port)
        s, _, body = request(self.port, "GET", self.pub_path)
        self.assert_bytes(s, body, self.pub_layer.digest)
        self.assertEqual(checks(self.port), before, "public visibility was not learned again")

    def pull_api(self, image: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request("POST", "/shoal/v1/pull", body=json.dumps({"image": image}),
                      headers={"Content-Type": "application/json", **(headers or {})})
            r = c.getresponse()
            return r.status, json.loads(r.read())
        finally:
            c.close()

    def test_7_pull_api_tells_cached_before_only_to_callers_allowed_the_blob(self):
        request(self.port, "GET", self.path, basic("alice", USERS["alice"]))  # cached here
        # A public image naming the private layer as a foreign layer (the registry checks no
        # foreign layer's presence): a stranger's probe of peerd's cache.
        im = self.public.images[0]
        manifest = json.loads(im.manifest_bytes)
        manifest["layers"].append({
            "mediaType": "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
            "digest": self.layer.digest, "size": self.layer.size,
            "urls": ["http://example.invalid/layer"]})
        put = urllib.request.Request(f"{self.pub.url}/v2/library/app/manifests/probe",
                                     data=json.dumps(manifest).encode(), method="PUT",
                                     headers={"Content-Type": manifest["mediaType"]})
        try:
            with urllib.request.urlopen(put, timeout=10) as r:
                self.assertEqual(r.status, 201)
        except urllib.error.HTTPError as e:
            self.fail(f"manifest PUT: {e.code} {e.read()[:300]!r}\n{self.pub.diagnostics()[-3000:]}")
        s, out = self.pull_api(f"{self.pub.host_port}/library/app:probe")
        by_digest = {b["digest"]: b for b in out.get("blobs", [])}
        self.assertIn(self.layer.digest, by_digest, out)
        probe = by_digest[self.layer.digest]
        self.assertNotIn("cached_before", probe, f"the probe learnt the private blob is cached: {out}")
        self.assertFalse(probe["ok"], out)
        self.assertEqual(s, 502, out)
        self.assertTrue(by_digest[self.pub_layer.digest]["ok"], out)  # its own blobs: as before
        self.assertIn("cached_before", by_digest[self.pub_layer.digest])
        # alice may: she hears it.
        s, out = self.pull_api(self.private.reference, basic("alice", USERS["alice"]))
        self.assertEqual(s, 200, out)
        by_digest = {b["digest"]: b for b in out["blobs"]}
        self.assertIs(by_digest[self.layer.digest].get("cached_before"), True, out)


if __name__ == "__main__":
    unittest.main()
