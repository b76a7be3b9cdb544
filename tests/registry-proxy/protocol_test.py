"""registry-proxy and the origin protocol's version (common/origin_protocol.h, docs/design.md).

A rolling upgrade runs peerds and registry-proxies of different releases side by side. Pinned
down here, against the real shoal-registry-proxy binary:
  - a request with `Shoal-Protocol: 1` (this release) is served, and so is one without the
    header (a peerd from before the header): the same answers as ever;
  - a request naming a major this registry-proxy does not serve (a newer peerd, or garbage) is
    answered 400 with the spec's JSON error body: code UNSUPPORTED, a message naming both the
    version asked for and the versions served, the same numbers in `detail.shoal_protocol`, and
    a `Shoal-Protocol` header with the server's own major. That holds on every endpoint peerd
    uses (metainfo, chunk list, datasets, /v2), and the body stays valid UTF-8 whatever bytes
    the header carried;
  - containerd and skopeo never send the header: /v2 without it is untouched.
"""

from __future__ import annotations

import json
import random
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase
from shoal_fixtures.shoal import RegistryProxy, upstream
from stub_upstream import StubUpstream

CURRENT = 1  # origin::protocol_version of this build


class ProtocolVersionTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-protocol-")
        cls.stub = cls.class_track(StubUpstream().start())
        cls.data = random.Random("proto").randbytes(300 * 1024)
        cls.digest = cls.stub.add_blob(cls.data)
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream("stub.test", cls.stub.url)], torrent=True).start())

    def metainfo_path(self) -> str:
        return f"/shoal/v1/metainfo/{self.digest}?ns=stub.test&repo=team/app&wait_ms=10000"

    def assert_mismatch(self, status: int, headers: dict, body: bytes, requested: str) -> None:
        self.assertEqual(status, 400, body[:300])
        self.assertEqual(pc.error_code(body), "UNSUPPORTED")
        self.assertEqual(headers.get("shoal-protocol"), str(CURRENT))
        doc = json.loads(body.decode("utf-8"))  # valid UTF-8 JSON whatever was sent
        err = doc["errors"][0]
        self.assertIn(f"speaks Shoal origin protocol {CURRENT} to {CURRENT}", err["message"])
        self.assertIn("the request asked for", err["message"])
        detail = err["detail"]["shoal_protocol"]
        self.assertEqual(detail["current"], CURRENT)
        self.assertEqual(detail["oldest"], CURRENT)
        self.assertEqual(detail["requested"], requested)

    def test_current_version_and_no_header_are_served_alike(self):
        s1, h1, b1 = self.proxy.get(self.metainfo_path(), {"Shoal-Protocol": str(CURRENT)})
        s0, h0, b0 = self.proxy.get(self.metainfo_path())
        self.assertEqual(s1, 200, b1[:300])
        self.assertEqual(s0, 200, b0[:300])
        self.assertEqual(h1.get("content-type"), "application/x-bittorrent")
        self.assertEqual(pc.bdecode(b1)[(b"info", "raw")], pc.bdecode(b0)[(b"info", "raw")])
        self.assertEqual(h1.get("shoal-info-hash"), h0.get("shoal-info-hash"))
        self.assertEqual(int(h1.get("shoal-object-size", -1)), len(self.data))
        # The blob itself, as peerd's HTTP fallback asks for it.
        s, _, body = self.proxy.get(f"/v2/team/app/blobs/{self.digest}?ns=stub.test",
                                    {"Shoal-Protocol": str(CURRENT)})
        self.assertEqual(s, 200)
        self.assertEqual(body, self.data)

    def test_future_version_gets_a_clear_error_on_every_endpoint(self):
        fresh = self.stub.add_blob(random.Random("proto-fresh").randbytes(100 * 1024))
        for path in (f"/shoal/v1/metainfo/{fresh}?ns=stub.test&repo=team/app&wait_ms=1000",
                     f"/shoal/v1/chunks/{fresh}?ns=stub.test&repo=team/app&have=0&wait_ms=0",
                     "/shoal/v1/datasets",
                     "/shoal/v1/dataset-metainfo/ds@1/0",
                     f"/v2/team/app/blobs/{fresh}?ns=stub.test",
                     "/v2/team/app/manifests/latest?ns=stub.test"):
            with self.subTest(path=path):
                s, h, body = self.proxy.get(path, {"Shoal-Protocol": str(CURRENT + 1)})
                self.assert_mismatch(s, h, body, str(CURRENT + 1))
        # The refused requests did nothing: the upstream never heard of the object.
        self.assertEqual(self.stub.requests(fresh), [])

    def test_malformed_versions_are_refused_and_echoed_safely(self):
        for sent, echoed in ((b"0", "0"), (b"abc", "abc"), (b"1.5", "1.5"), (b"99999", "99999"),
                             (b"2\xff\xfe", "2??")):
            with self.subTest(sent=sent):
                raw = (b"GET " + self.metainfo_path().encode() + b" HTTP/1.1\r\nHost: x\r\n"
                       b"Shoal-Protocol: " + sent + b"\r\nConnection: close\r\n\r\n")
                out, _ = pc.raw_exchange(self.proxy.host, self.proxy.port, raw)
                head, _, body = out.partition(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                headers = {}
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    headers[k.strip().lower().decode()] = v.strip().decode("latin-1")
                self.assert_mismatch(status, headers, body, echoed)

    def test_containerd_requests_without_the_header_are_untouched(self):
        s, h, _ = self.proxy.get("/v2/", {"Authorization": "Basic dTpw"})
        self.assertEqual(s, 200)
        self.assertNotIn("shoal-protocol", h)
        s, _, body = self.proxy.get(f"/v2/team/app/blobs/{self.digest}?ns=stub.test")
        self.assertEqual(s, 200)
        self.assertEqual(body, self.data)


if __name__ == "__main__":
    unittest.main(verbosity=2)
