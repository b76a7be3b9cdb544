"""Self-test of shoal_fixtures.token_issuer with a real docker-registry in token-auth mode.

Checks the whole Bearer flow (challenge, token request, retry), per-user rules (anonymous may
pull public/*, alice may pull private/*), both JWT key headers distribution 2.8 accepts (`kid`
as a libtrust fingerprint, `x5c`), and that the registry refuses tokens it must refuse.
"""

import base64
import json
import os
import re
import sys
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureError, FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.token_issuer import Rule, TokenIssuer, decode_jwt  # noqa: E402

RULES = [Rule("*", "public/*", ("pull",)), Rule("alice", "private/*", ("pull",))]


def http(url, headers=None, data=None):
    req = urllib.request.Request(url, headers=dict(headers or {}), data=data)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers.items()), e.read()


def parse_challenge(value):
    scheme, _, rest = value.partition(" ")
    return scheme, dict(re.findall(r'(\w+)="([^"]*)"', rest))


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class TokenAuthBase(FixtureTestCase):
    key_header = "kid"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-token-")
        cls.issuer = cls.class_track(TokenIssuer(d / "issuer", users={"alice": "wonderland"},
                                                 rules=RULES, key_header=cls.key_header).start())
        cls.reg = cls.class_track(Registry(d / "registry", auth="token",
                                           token_issuer=cls.issuer).start())
        cls.layout = oci.make_image(d / "img", [oci.LayerSpec(size=5000, seed="tok")])
        cls.reg.push(cls.layout, "private/app")
        cls.reg.push(cls.layout, "public/app")

    def manifest_url(self, repo):
        return f"{self.reg.url}/v2/{repo}/manifests/{self.layout.tag}"

    def bearer_get(self, repo, token):
        return http(self.manifest_url(repo), {"Authorization": f"Bearer {token}",
                                              "Accept": self.layout.top.media_type})

    def test_bearer_flow_over_http(self):
        status, headers, _ = http(self.manifest_url("private/app"))
        self.assertEqual(status, 401)
        scheme, params = parse_challenge(headers["Www-Authenticate"])
        self.assertEqual(scheme, "Bearer")
        self.assertEqual(params["realm"], self.issuer.realm)
        self.assertEqual(params["service"], self.issuer.service)
        self.assertEqual(params["scope"], "repository:private/app:pull")

        query = urllib.parse.urlencode({"service": params["service"], "scope": params["scope"]})
        status, _, body = http(f"{params['realm']}?{query}", basic("alice", "wonderland"))
        self.assertEqual(status, 200)
        answer = json.loads(body)
        self.assertEqual(answer["token"], answer["access_token"])
        self.assertGreaterEqual(answer["expires_in"], 60)
        self.assertIn("issued_at", answer)
        header, claims = decode_jwt(answer["token"])
        self.assertEqual(header["alg"], "RS256")
        self.assertIn(self.key_header, header)
        self.assertEqual(claims["access"], [{"type": "repository", "name": "private/app",
                                             "actions": ["pull"]}])
        status, headers, body = self.bearer_get("private/app", answer["token"])
        self.assertEqual(status, 200)
        self.assertEqual(headers["Docker-Content-Digest"], self.layout.top.digest)

        # An anonymous token carries no access to private/*: the registry refuses it.
        status, _, body = http(f"{params['realm']}?{query}")
        anon = json.loads(body)["token"]
        self.assertEqual(decode_jwt(anon)[1]["access"], [])
        status, headers, _ = self.bearer_get("private/app", anon)
        self.assertEqual(status, 401)
        self.assertIn('error="insufficient_scope"', headers["Www-Authenticate"])

        # Wrong password: the issuer itself answers 401.
        self.assertEqual(http(f"{params['realm']}?{query}", basic("alice", "bad"))[0], 401)

    def test_oauth_post_form(self):
        form = urllib.parse.urlencode({"grant_type": "password", "username": "alice",
                                       "password": "wonderland", "service": self.issuer.service,
                                       "scope": "repository:private/app:pull",
                                       "client_id": "selftest"}).encode()
        status, _, body = http(self.issuer.realm, data=form)
        self.assertEqual(status, 200)
        self.assertEqual(self.bearer_get("private/app", json.loads(body)["access_token"])[0], 200)

    def test_skopeo_per_user_rules(self):
        d = self.tmpdir()
        public = f"{self.reg.host_port}/public/app:v1"
        private = f"{self.reg.host_port}/private/app:v1"
        self.assertIn(self.layout.top.digest, oci.verify_dir(self.reg.pull(public, d / "pub",
                                                                           creds=False)))
        with self.assertRaises(FixtureError) as cm:
            self.reg.pull(private, d / "anon", creds=False)
        self.assertIn("denied", str(cm.exception))
        got = oci.verify_dir(self.reg.pull(private, d / "alice", creds=("alice", "wonderland")))
        self.assertEqual(set(got), set(self.layout.all_blobs()))
        with self.assertRaises(FixtureError):
            self.reg.pull(private, d / "bad", creds=("alice", "not-her-password"))
        log = self.issuer.issued
        self.assertTrue(any(t.user == "alice" and t.status == 200 and t.granted for t in log))
        self.assertTrue(any(t.user == "alice" and t.status == 401 for t in log))
        self.assertTrue(any(t.user == "" and t.requested == ["repository:private/app:pull"]
                            and t.granted == [] for t in log))

    def test_injected_issuer_failure(self):
        self.issuer.fail_with = 503
        try:
            status, _, _ = http(f"{self.issuer.realm}?service={self.issuer.service}")
            self.assertEqual(status, 503)
            with self.assertRaises(FixtureError):
                self.reg.pull(f"{self.reg.host_port}/public/app:v1", self.tmpdir() / "x",
                              creds=False)
        finally:
            self.issuer.fail_with = None
        self.assertEqual(self.issuer.issued[-1].status, 503)

    def test_registry_refuses_bad_tokens(self):
        access = [{"type": "repository", "name": "public/app", "actions": ["pull"]}]
        good = self.issuer.make_token("alice", access)
        self.assertEqual(self.bearer_get("public/app", good)[0], 200)
        d = self.tmpdir()
        # A different key with the same issuer and service names: an impostor.
        impostor = TokenIssuer(d / "impostor", service=self.issuer.service,
                               issuer=self.issuer.issuer, key_header=self.key_header)
        bad = {
            "wrong audience": self.issuer.make_token("alice", access, audience="other"),
            "wrong issuer": self.issuer.make_token("alice", access, issuer="someone-else"),
            "expired": self.issuer.make_token("alice", access, expires_in=-300),
            "untrusted key": impostor.make_token("alice", access),
            "tampered": good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"),
        }
        for what, token in bad.items():
            with self.subTest(what):
                self.assertEqual(self.bearer_get("public/app", token)[0], 401)


class TokenAuthKidTest(TokenAuthBase):
    key_header = "kid"

    def test_kid_is_libtrust_fingerprint(self):
        kid = self.issuer.key.libtrust_kid
        self.assertRegex(kid, r"^([A-Z2-7]{4}:){11}[A-Z2-7]{4}$")


class TokenAuthX5cTest(TokenAuthBase):
    key_header = "x5c"


del TokenAuthBase  # only the concrete variants run

if __name__ == "__main__":
    unittest.main(verbosity=2)
