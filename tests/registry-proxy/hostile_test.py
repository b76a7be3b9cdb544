"""registry-proxy's pull path against hostile clients and upstreams (docs/security-review.md,
findings 10, 15, 16, 21 and 22; 11 is in fetch_queue_test.py). One registry-proxy serves every
case, with three upstreams: the real registry, a scriptable stub (stub_upstream.py) and a second
stub whose 401s name a token realm on another host.

  - Accept variation: 200 tag requests whose Accept differ only by an unknown media type are one
    upstream manifest GET, not 200 (the tag cache is keyed by the set of known manifest types);
  - an upstream answering 200 and then bytes that do not match the digest does not make the
    object public: once an authorized client cached the real bytes, strangers still get 401;
  - a client joining a fetch started through another repository, or with another credential,
    gets its own answer, not the other fetch's 404/401;
  - many requests with unseen credentials for a cached private blob cost a bounded number of
    upstream checks and do not starve the worker pool: a cached public blob is served at once;
  - a token realm on a host other than the upstream's is never sent the client's credentials.
"""
from __future__ import annotations

import base64
import random
import threading
import time
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.procs import wait_until
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream
from stub_upstream import StubUpstream

ALICE = "Basic " + base64.b64encode(b"alice:alice-pw").decode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class HostileTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-hostile-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.image = oci.make_image(d / "img", [oci.LayerSpec(size=20_000, seed="hostile")])
        cls.reg.push(cls.image, "lib/app")
        cls.stub = cls.class_track(StubUpstream().start())
        # The realm's host is another loopback address: not the upstream's host.
        cls.realm = cls.class_track(StubUpstream(host="127.0.0.2").start())
        cls.realm_up = cls.class_track(StubUpstream().start())
        cls.realm_up.challenge = f'Bearer realm="{cls.realm.url}/token",service="realm.test"'
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url),
            upstream("stub.test", cls.stub.url, stall_timeout="10s"),
            upstream("realm.test", cls.realm_up.url, stall_timeout="10s")]).start())
        cls.rng = random.Random("hostile")

    def fetch(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, bool]:
        """Status, body and whether the body was complete (a cut-off body is no exception)."""
        conn, resp = self.proxy.open(path, headers=headers or {}, timeout=30)
        try:
            body, complete = pc.read_body_until_close(resp)
            return resp.status, body, complete
        finally:
            conn.close()

    def test_accept_variation_is_one_upstream_request(self):
        self.reg.wait_log_quiet()
        mark = self.reg.mark()
        digests = set()
        for i in range(200):
            s, h, body = self.proxy.get(f"/v2/lib/app/manifests/v1?ns={self.reg.host_port}",
                                        headers={"Accept": f"{pc.ALL_MANIFESTS}, x/y{i}"})
            self.assertEqual(s, 200, body[:200])
            digests.add(h.get("docker-content-digest"))
        self.reg.wait_log_quiet()
        n = self.reg.count_manifest_requests("v1", repo="lib/app", since=mark)
        self.assertLessEqual(n, 2, f"{n} of 200 tag requests differing only in an unknown Accept "
                                   "type went upstream")
        self.assertEqual(digests, {self.image.top.digest})

    def test_unverified_bytes_do_not_make_an_object_public(self):
        data = self.rng.randbytes(200_000)
        d = self.stub.add_blob(data, wrong=True)
        path = f"/v2/team/priv/blobs/{d}?ns=stub.test"
        # A hostile upstream answers 200 to an anonymous request, then sends junk.
        s, body, complete = self.fetch(path)
        self.assertFalse(s == 200 and complete and pc.sha256(body) == d)
        # Later the upstream serves the real bytes to alice only: she caches them.
        self.stub.add_blob(data, auth=ALICE)
        s, _, body = self.proxy.get(path, headers={"Authorization": ALICE})
        self.assertEqual((s, pc.sha256(body)), (200, d), body[:200])
        s, _, body = self.proxy.get(path)
        self.assertEqual(s, 401, "a private blob was served anonymously: it was marked public "
                                 "from the head of a response whose bytes were wrong")
        self.assertNotIn(data[:256], body)

    def joined(self, first: tuple[str, dict[str, str]], second: tuple[str, dict[str, str]],
               digest: str) -> tuple[tuple[int, bytes, bool], tuple[int, bytes, bool]]:
        """`first` starts a fetch of `digest`, `second` arrives while it is in flight."""
        out: dict[str, tuple[int, bytes, bool]] = {}
        before = len(self.stub.requests(digest, "GET"))
        t = threading.Thread(target=lambda: out.update(first=self.fetch(*first)))
        t.start()
        wait_until(lambda: len(self.stub.requests(digest, "GET")) > before, 5,
                   "the first fetch reached upstream")
        second_answer = self.fetch(*second)
        t.join(20)
        return out["first"], second_answer

    def test_joiners_get_their_own_answer(self):
        data = self.rng.randbytes(100_000)
        d = self.stub.add_blob(data, repos={"team/app"}, deny_delay=2.0)
        bad, good = self.joined((f"/v2/nowhere/x/blobs/{d}?ns=stub.test", {}),
                                (f"/v2/team/app/blobs/{d}?ns=stub.test", {}), d)
        self.assertEqual(bad[0], 404)
        self.assertEqual((good[0], pc.sha256(good[1])), (200, d),
                         "a client joining a fetch started through another repository got its "
                         f"answer: {good[0]} {good[1][:200]!r}")
        # An anonymous client's doomed fetch of a private blob; alice joins it.
        data = self.rng.randbytes(100_000)
        d = self.stub.add_blob(data, auth=ALICE, deny_delay=2.0)
        path = f"/v2/team/vault2/blobs/{d}?ns=stub.test"
        anon, alice = self.joined((path, {}), (path, {"Authorization": ALICE}), d)
        self.assertEqual(anon[0], 401)
        self.assertEqual((alice[0], pc.sha256(alice[1])), (200, d),
                         "alice joined an anonymous client's fetch and got its answer: "
                         f"{alice[0]} {alice[1][:200]!r}")

    def test_unseen_credentials_cost_bounded_checks(self):
        data = self.rng.randbytes(50_000)
        d = self.stub.add_blob(data, auth=ALICE, deny_delay=3.0)
        path = f"/v2/team/vault/blobs/{d}?ns=stub.test"
        s, _, body = self.proxy.get(path, headers={"Authorization": ALICE})
        self.assertEqual((s, pc.sha256(body)), (200, d))
        wait_until(lambda: f"blob cached digest={d}" in self.proxy.log_text(), 10, "committed")
        pub_data = self.rng.randbytes(50_000)
        pub = self.stub.add_blob(pub_data)
        pub_path = f"/v2/team/pub/blobs/{pub}?ns=stub.test"
        self.assertEqual(self.proxy.get(pub_path)[0], 200)
        mark = len(self.stub.requests())
        answers: list[tuple[int, dict[str, str], bytes]] = []
        lock = threading.Lock()

        def stranger(i: int) -> None:
            a = self.proxy.get(path, headers={"Authorization": basic(f"u{i}", f"pw{i}")},
                               timeout=60)
            with lock:
                answers.append(a)

        threads = [threading.Thread(target=stranger, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        s, _, body = self.proxy.get(pub_path, timeout=30)
        took = time.monotonic() - t0
        for t in threads:
            t.join(60)
        self.assertEqual((s, pc.sha256(body)), (200, pub))
        self.assertLess(took, 1.5, f"a cached public blob waited {took:.1f} s behind the upstream "
                                   "checks of 40 unseen credentials")
        checks = [r for r in self.stub.requests()[mark:] if d in r.path]
        self.assertLessEqual(len(checks), 20, f"{len(checks)} upstream checks for 40 credentials")
        statuses = sorted(a[0] for a in answers)
        self.assertEqual(len(statuses), 40)
        self.assertTrue(set(statuses) <= {401, 429}, statuses)
        limited = [a for a in answers if a[0] == 429]
        self.assertTrue(limited, f"no request was refused with 429: {statuses}")
        self.assertIn("credential", pc.error_message(limited[0][2]))
        self.assertIn("retry-after", limited[0][1])
        for a in answers:
            self.assertNotIn(data[:256], a[2])

    def test_token_realm_on_another_host_is_not_followed(self):
        data = self.rng.randbytes(10_000)
        d = self.realm_up.add_blob(data, auth="Bearer from-the-realm")
        s, body, _ = self.fetch(f"/v2/team/x/blobs/{d}?ns=realm.test",
                                headers={"Authorization": ALICE})
        sent = [(r.method, r.path, r.headers.get("authorization", "")) for r in self.realm.requests()]
        self.assertEqual([x for x in sent if x[2]], [],
                         "the client's credentials were sent to a token realm on another host")
        self.assertEqual(sent, [], "a token realm on another host was followed")
        self.assertEqual(s, 401, body[:200])
        self.assertIn("token realm", pc.error_message(body))


if __name__ == "__main__":
    unittest.main(verbosity=2)
