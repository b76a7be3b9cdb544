"""Upstream authentication and private content, against the real registry with token auth (a
test token issuer) and with htpasswd Basic auth.

Token rules: anyone (anonymous included) may pull public/*; alice and carol may pull private/*;
bob may pull nothing. registry-proxy itself is anonymous upstream. What must hold:
  - public content is pulled anonymously and served from the cache without any upstream call;
  - private content fetched with alice's credentials is served from the cache to a later client
    only after upstream confirmed that client's own credentials (a HEAD with them, which the
    token issuer's log shows); anonymous clients get 401 and bob 401/403, never the bytes;
  - a layer cached as private content of one repository is served to anonymous clients asking
    in a repository upstream serves it from anonymously (one anonymous HEAD there);
  - skopeo (--src-creds) and containerd (ctr --user) send their credentials to registry-proxy
    after its 401 challenge and pull private images through it.
With htpasswd every repository needs credentials; an upstream configured with registry-proxy's
own credentials (auth: basic) serves anonymous clients (the content is then public).
"""

from __future__ import annotations

import base64
import os
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.containerd import Containerd
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream
from shoal_fixtures.token_issuer import Rule, TokenIssuer

USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class PrivateContentChecks:
    """Assertions shared by the token and htpasswd classes (mixed into FixtureTestCase)."""

    reg: Registry
    proxy: RegistryProxy
    private: oci.ImageLayout
    repo: str

    def private_paths(self) -> list[tuple[str, str]]:
        im = self.private.images[0]
        out = [("manifest", f"/v2/{self.repo}/manifests/v1"),
               ("manifest", f"/v2/{self.repo}/manifests/{im.manifest.digest}")]
        out += [("blob", f"/v2/{self.repo}/blobs/{b.digest}") for b in im.blobs()]
        return out

    def assert_refused(self, headers: dict[str, str], allowed: tuple[int, ...]):
        layer_bytes = self.private.blob_path(self.private.images[0].layers[0].digest).read_bytes()
        for kind, path in self.private_paths():
            for method in ("GET", "HEAD"):
                s, h, body = self.proxy.get(path, method=method, headers={
                    **headers, "Accept": pc.OCI_MANIFEST})
                self.assertIn(s, allowed, f"{method} {path}: {s} {body[:200]!r}")
                if method == "GET":
                    self.assertIn(pc.error_code(body), ("UNAUTHORIZED", "DENIED"))
                    self.assertNotIn(layer_bytes[:256], body)
                    if s == 401:
                        self.assertIn("www-authenticate", h)

    def assert_served(self, headers: dict[str, str]):
        for kind, path in self.private_paths():
            s, h, body = self.proxy.get(path, headers={**headers, "Accept": pc.OCI_MANIFEST})
            self.assertEqual(s, 200, f"{path}: {body[:200]!r}")
            self.assertEqual(pc.sha256(body), h.get("docker-content-digest"))


class TokenAuthTest(FixtureTestCase, PrivateContentChecks):
    repo = "private/app"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-token-")
        cls.ti = cls.class_track(TokenIssuer(d / "issuer", users=dict(USERS), rules=[
            Rule("*", "public/*"), Rule("alice", "private/*"), Rule("carol", "private/*")]).start())
        cls.reg = cls.class_track(Registry(d / "registry", auth="token",
                                           token_issuer=cls.ti).start())
        cls.public = oci.make_image(d / "pub", [oci.LayerSpec(size=200_000, seed="tok-pub")])
        cls.private = oci.make_image(d / "priv", [oci.LayerSpec(size=150_000, seed="tok-priv"),
                                                  oci.LayerSpec(size=1_000, seed="tok-priv2")])
        cls.private_ctr = oci.make_image(d / "privctr", [oci.LayerSpec(size=90_000,
                                                                       seed="tok-ctr")])
        cls.reg.push(cls.public, "public/app")
        cls.reg.push(cls.private, "private/app")
        cls.reg.push(cls.private_ctr, "private/ctr")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)]).start())

    def issued_to(self, user: str, since: int) -> list:
        return [t for t in self.ti.issued[since:] if t.user == user]

    def test_1_public_pull_is_anonymous_and_then_needs_no_upstream(self):
        back = self.reg.pull(f"{self.proxy.host_port}/public/app:v1", self.tmpdir() / "back",
                             creds=False)
        self.assertEqual(oci.verify_dir(back),
                         {d: b.size for d, b in self.public.all_blobs().items()})
        self.reg.wait_log_quiet()
        mark = self.reg.mark()
        for b in self.public.images[0].blobs():
            s, _, body = self.proxy.get(f"/v2/public/app/blobs/{b.digest}")
            self.assertEqual((s, pc.sha256(body)), (200, b.digest))
        s, _, _ = self.proxy.get(f"/v2/public/app/manifests/{self.public.top.digest}",
                                 headers={"Accept": pc.OCI_MANIFEST})
        self.assertEqual(s, 200)
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.access_log(mark), [], "cached public content needs no check")

    def test_2_private_is_refused_without_credentials_before_caching(self):
        self.assert_refused({}, (401,))

    def test_3_alice_pulls_private_with_skopeo(self):
        mark = self.reg.mark()
        back = self.reg.pull(f"{self.proxy.host_port}/private/app:v1", self.tmpdir() / "back",
                             creds=("alice", USERS["alice"]))
        self.assertEqual(oci.verify_dir(back),
                         {d: b.size for d, b in self.private.all_blobs().items()})
        self.reg.wait_log_quiet()
        for b in self.private.images[0].blobs():
            self.assertEqual(self.reg.count_blob_gets(b.digest, since=mark, status=200), 1)

    def test_4_strangers_never_get_cached_private_bytes(self):
        mark, tmark = self.reg.mark(), len(self.ti.issued)
        self.assert_refused({}, (401,))
        self.reg.wait_log_quiet()
        # Cached objects are refused without asking upstream; a tag asked with an Accept never
        # seen before is a cache miss and goes upstream, anonymously, and is refused there.
        log = self.reg.access_log(mark)
        self.assertEqual([(e.method, e.path) for e in log if e.blob or e.status != 401
                          or "/manifests/sha256:" in e.path], [],
                         "anonymous clients must be refused without fetching anything")
        self.assert_refused(basic("bob", USERS["bob"]), (401, 403))
        self.assert_refused(basic("alice", "wrong-password"), (401, 403))
        self.assert_refused({"Authorization": "Bearer not-a-token"}, (401, 403))
        self.reg.wait_log_quiet()
        log = self.reg.access_log(mark)
        self.assertEqual([e for e in log if e.method == "GET" and e.blob], [],
                         "checking a stranger must never fetch the blob")
        self.assertTrue(any(e.method == "HEAD" for e in log), "bob's access was not checked")
        self.assertTrue(self.issued_to("bob", tmark), "no token was asked for bob")

    def test_5_another_allowed_user_is_served_from_cache_after_a_head(self):
        mark, tmark = self.reg.mark(), len(self.ti.issued)
        self.assert_served(basic("carol", USERS["carol"]))
        self.reg.wait_log_quiet()
        log = self.reg.access_log(mark)
        blob_digests = {b.digest for b in self.private.images[0].blobs()}
        self.assertEqual([e for e in log if e.method == "GET" and e.blob], [],
                         "carol must be served from the cache")
        heads = {e.blob[1] for e in log if e.method == "HEAD" and e.blob and e.status == 200}
        self.assertTrue(blob_digests <= heads, "each private blob needs carol's own HEAD")
        granted = [g for t in self.issued_to("carol", tmark) for g in t.granted]
        self.assertTrue(any(g["name"] == "private/app" for g in granted))

    def test_6_metainfo_of_private_blob_needs_credentials(self):
        layer = self.private.images[0].layers[0]
        path = f"/shoal/v1/metainfo/{layer.digest}?repo=private/app"
        s, _, body = self.proxy.get(path)
        self.assertEqual((s, pc.error_code(body)), (401, "UNAUTHORIZED"))
        s, _, body = self.proxy.get(path, headers=basic("bob", USERS["bob"]))
        self.assertIn(s, (401, 403))
        s, h, body = self.proxy.get(path, headers=basic("alice", USERS["alice"]))
        self.assertEqual(s, 200, body[:200])
        self.assertEqual(h.get("content-type"), "application/x-bittorrent")

    @unittest.skipUnless(os.geteuid() == 0, "containerd needs root")
    def test_7_containerd_pulls_private_with_user(self):
        node = self.track(Containerd(self.tmpdir("shoal-ctr-") / "node").start())
        node.configure_registry(self.reg.host_port, mirrors=[self.proxy.url])
        mark = self.reg.mark()
        node.pull(f"{self.reg.host_port}/private/ctr:v1", user=("alice", USERS["alice"]))
        content = node.content(verify=True)
        for b in self.private_ctr.all_blobs().values():
            self.assertEqual(content.get(b.digest), b.size)
        node.verify_unpacked(self.private_ctr.images)
        self.reg.wait_log_quiet()
        for e in self.reg.access_log(mark):
            self.assertTrue(e.user_agent.startswith("shoal/"), "containerd bypassed the mirror")
        # Without credentials the same image is refused, through the mirror and upstream alike.
        other = self.track(Containerd(self.tmpdir("shoal-ctr-") / "node").start())
        other.configure_registry(self.reg.host_port, mirrors=[self.proxy.url])
        res = other.pull(f"{self.reg.host_port}/private/ctr:v1", check=False)
        self.assertEqual(res.content, {})


    def test_8_a_layer_private_elsewhere_is_served_where_upstream_serves_it_anonymously(self):
        """A base layer shared by a private image and a public one, cached by alice's pull of
        the private one: an anonymous client asking for it in the public repository is served
        (upstream confirms, anonymously, that this repository serves it), and is refused in the
        private one without asking upstream. Before, every anonymous request for it was refused
        until the object left the cache."""
        shared = oci.make_image(self.tmpdir(), [oci.LayerSpec(size=120_000, seed="tok-shared")])
        self.reg.push(shared, "private/shared")
        self.reg.push(shared, "public/shared")
        d = shared.images[0].layers[0].digest
        s, _, body = self.proxy.get(f"/v2/private/shared/blobs/{d}",
                                    headers=basic("alice", USERS["alice"]))
        self.assertEqual((s, pc.sha256(body)), (200, d))
        mark = self.reg.mark()
        s, _, body = self.proxy.get(f"/v2/private/shared/blobs/{d}")
        self.assertEqual((s, pc.error_code(body)), (401, "UNAUTHORIZED"))
        # A repository upstream does not serve anonymously is asked once, then refused from
        # what registry-proxy remembers.
        for _ in range(3):
            s, _, body = self.proxy.get(f"/v2/private/other/blobs/{d}")
            self.assertEqual((s, pc.error_code(body)), (401, "UNAUTHORIZED"))
        self.reg.wait_log_quiet()
        log = self.reg.access_log(mark)
        self.assertEqual([e.path for e in log if e.blob and "private/shared" in e.path], [],
                         "the private repository must be refused without asking upstream")
        heads = [e for e in log if e.method == "HEAD" and e.blob and e.status == 200]
        self.assertEqual(heads, [])
        self.assertLessEqual(len([e for e in log if e.blob and "private/other" in e.path]), 2,
                             "a made-up repository must be asked once (a 401, then with a token)")
        mark = self.reg.mark()
        for _ in range(2):
            s, _, body = self.proxy.get(f"/v2/public/shared/blobs/{d}")
            self.assertEqual((s, pc.sha256(body)), (200, d), body[:200])
        self.reg.wait_log_quiet()
        log = self.reg.access_log(mark)
        self.assertEqual([e for e in log if e.method == "GET" and e.blob], [],
                         "the bytes must come from the cache")
        self.assertEqual(len([e for e in log if e.method == "HEAD" and e.blob and
                              e.status == 200]), 1, "one anonymous HEAD, then it is public")

class HtpasswdAuthTest(FixtureTestCase, PrivateContentChecks):
    repo = "team/app"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-htpasswd-")
        cls.reg = cls.class_track(Registry(d / "registry", auth="htpasswd",
                                           users={"alice": USERS["alice"],
                                                  "bob": USERS["bob"]}).start())
        cls.private = oci.make_image(d / "img", [oci.LayerSpec(size=120_000, seed="ht-1")])
        cls.reg.push(cls.private, "team/app")
        cls.other = oci.make_image(d / "other", [oci.LayerSpec(size=60_000, seed="ht-2")])
        cls.reg.push(cls.other, "team/other")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)]).start())
        creds = d / "upstream-creds"
        creds.write_text(f"{cls.reg.admin[0]}:{cls.reg.admin[1]}\n")
        cls.own = cls.class_track(RegistryProxy(d / "own", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url, auth="basic",
                     credentials_file=str(creds))]).start())

    def test_1_anonymous_is_refused(self):
        self.assert_refused({}, (401,))

    def test_2_alice_pulls_then_strangers_are_refused_and_bob_checked(self):
        back = self.reg.pull(f"{self.proxy.host_port}/team/app:v1", self.tmpdir() / "back",
                             creds=("alice", USERS["alice"]))
        self.assertEqual(oci.verify_dir(back),
                         {d: b.size for d, b in self.private.all_blobs().items()})
        self.reg.wait_log_quiet()
        mark = self.reg.mark()
        self.assert_refused({}, (401,))
        self.assert_refused(basic("mallory", "x"), (401, 403))
        self.assert_refused(basic("alice", "wrong"), (401, 403))
        self.assert_served(basic("bob", USERS["bob"]))
        self.reg.wait_log_quiet()
        log = self.reg.access_log(mark)
        self.assertEqual([e for e in log if e.method == "GET" and e.blob], [])
        self.assertTrue(any(e.method == "HEAD" and e.status == 200 for e in log))

    def test_3_own_credentials_serve_anonymous_clients(self):
        back = self.reg.pull(f"{self.own.host_port}/team/other:v1", self.tmpdir() / "back",
                             creds=False)
        self.assertEqual(oci.verify_dir(back),
                         {d: b.size for d, b in self.other.all_blobs().items()})


if __name__ == "__main__":
    unittest.main()
