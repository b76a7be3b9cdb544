#!/usr/bin/env python3
"""peerd meeting a registry-proxy of another release (the origin protocol's version rule).

The real peerd binary runs against a stand-in registry-proxy that, like a registry-proxy which
no longer serves this peerd's protocol major, answers every request 400 with the version-mismatch
body (common/origin_protocol.h). Pinned down here:
  - peerd sends `Shoal-Protocol: 1` on what it asks registry-proxy (metainfo, manifests);
  - a blob pull, a forwarded manifest and the pull API each end in a bounded time with an error
    whose message says that registry-proxy does not speak this peerd's protocol and which
    versions it speaks, instead of a bare "HTTP 400";
  - the other direction (this peerd against a registry-proxy that predates the header and
    ignores it) is mirror_test.py's whole run: fake_proxy.py never looks at the header.
The pull API against a stand-in that sends image indexes whose entries are all malformed (a 404,
the process lives) and with more pulls at once than half the workers (429 with Retry-After).
"""
from __future__ import annotations

import http.client
import http.server
import json
import sys
import threading
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402

DIGEST = "sha256:" + "ab" * 32
MISMATCH = json.dumps({"errors": [{
    "code": "UNSUPPORTED",
    "message": "this registry-proxy speaks Shoal origin protocol 2 to 3, the request asked for \"1\"",
    "detail": {"shoal_protocol": {"requested": "1", "oldest": 2, "current": 3}}}]}).encode()
EXPECTED = "does not speak Shoal origin protocol 1 (it speaks 2 to 3)"


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes, float]:
    """One request on a fresh connection: (status, lower-case headers, body, seconds)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.monotonic() - t0
    finally:
        c.close()


class StandIn:
    """A registry-proxy stand-in on loopback: `answer(path)` gives (status, headers, body) for
    every GET and HEAD; records each request's path and Shoal-Protocol header."""

    def __init__(self, answer):
        self.seen: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                with outer.lock:
                    outer.seen.append((self.path, self.headers.get("Shoal-Protocol")))
                status, headers, body = answer(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        h, p = self.server.server_address[:2]
        return f"http://{h}:{p}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def newer_proxy() -> StandIn:
    """Answers everything as a registry-proxy serving majors 2 to 3 only."""
    return StandIn(lambda path: (400, {"Content-Type": "application/json",
                                       "Shoal-Protocol": "3"}, MISMATCH))


class PeerdProtocolTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-peerd-protocol-")
        cls.fake = cls.class_track(newer_proxy())
        upstream = {"request_timeout": "2s", "metainfo_wait": "1s", "connect_timeout": "500ms"}
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="protocol-node", registry_proxy=cls.fake.url,
                                          extra={"upstream": upstream}).start())
        cls.port = cls.peerd.http_port

    def assert_clear(self, body: bytes, seconds: float) -> None:
        self.assertLess(seconds, 15)
        self.assertIn(EXPECTED, body.decode("utf-8", "replace"))

    def test_blob_pull_names_the_versions(self):
        status, _, body, secs = request(self.port, "GET", f"/v2/team/app/blobs/{DIGEST}?ns=registry.example")
        self.assertGreaterEqual(status, 500, body[:300])
        self.assertEqual(json.loads(body)["errors"][0]["code"], "UNSUPPORTED")
        self.assert_clear(body, secs)
        with self.fake.lock:
            sent = [v for p, v in self.fake.seen if p.startswith("/shoal/v1/metainfo/")]
        self.assertTrue(sent, "peerd never asked for the metainfo")
        self.assertTrue(all(v == "1" for v in sent), sent)

    def test_forwarded_manifest_names_the_versions(self):
        status, _, body, secs = request(self.port, "GET", "/v2/team/app/manifests/v1?ns=registry.example")
        self.assertEqual(status, 502, body[:300])
        self.assert_clear(body, secs)
        with self.fake.lock:
            sent = [v for p, v in self.fake.seen if "/manifests/" in p]
        self.assertEqual(sent[-1:], ["1"])

    def test_pull_api_names_the_versions(self):
        body = json.dumps({"image": "registry.example/team/app:v1"}).encode()
        status, _, out, secs = request(self.port, "POST", "/shoal/v1/pull", body,
                                       {"Content-Type": "application/json"})
        self.assertEqual(status, 502, out[:300])
        self.assert_clear(out, secs)


HOSTILE_INDEX = json.dumps({"schemaVersion": 2, "manifests": [
    7, None, "x",
    {"platform": "linux/amd64", "digest": DIGEST},
    {"platform": None, "digest": DIGEST},
    {"platform": {"os": 1, "architecture": "amd64"}, "digest": DIGEST},
    {"platform": {"os": "linux", "architecture": ["amd64"]}, "digest": DIGEST},
    {"platform": {"os": "linux", "architecture": "amd64"}, "digest": 42}]}).encode()


def index_proxy() -> StandIn:
    """For the pull API: tag "hostile" is an image index whose every entry is malformed, tag
    "slow" answers 404 after 3 s."""

    def answer(path: str):
        if "/manifests/slow" in path:
            time.sleep(3)
            return 404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
        if "/manifests/hostile" in path:
            return 200, {"Content-Type": "application/vnd.oci.image.index.v1+json"}, HOSTILE_INDEX
        return 404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"NAME_UNKNOWN"}]}'

    return StandIn(answer)


class PullApiTest(FixtureTestCase):
    """The pull API against foreign indexes and under load, on a peerd with two workers."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-peerd-pull-api-")
        cls.fake = cls.class_track(index_proxy())
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="pull-api-node",
                                          registry_proxy=cls.fake.url,
                                          extra={"worker_threads": 2}).start())
        cls.port = cls.peerd.http_port

    def pull(self, tag: str) -> tuple[int, dict[str, str], bytes, float]:
        body = json.dumps({"image": f"registry.example/team/app:{tag}"}).encode()
        return request(self.port, "POST", "/shoal/v1/pull", body,
                       {"Content-Type": "application/json"})

    def test_a_malformed_index_is_a_404_not_a_crash(self):
        """A platform that is a string or null, fields of other types, a digest that is a number:
        before, nlohmann threw on a worker thread and the process aborted."""
        status, _, out, _ = self.pull("hostile")
        self.assertEqual(status, 404, out[:300])
        self.assertIn("no manifest for platform linux/amd64", json.loads(out)["error"])
        status, _, _, _ = request(self.port, "GET", "/healthz")
        self.assertEqual(status, 200)
        self.assertTrue(self.peerd.daemon.alive, "peerd exited")

    def test_more_pulls_than_half_the_workers_are_told_to_come_back(self):
        first: list = []
        t = threading.Thread(target=lambda: first.append(self.pull("slow")))
        t.start()
        try:
            time.sleep(0.8)  # the first pull holds its worker, waiting for the manifest
            status, headers, out, secs = self.pull("slow")
            self.assertEqual(status, 429, out[:300])
            self.assertEqual(headers.get("retry-after"), "1")
            self.assertIn("pulls are running on this node", json.loads(out)["error"])
            self.assertLess(secs, 1.0)
        finally:
            t.join(30)
        self.assertEqual(first[0][0], 502, first[0][2][:300])
        # Its slot is free again.
        status, _, out, _ = self.pull("hostile")
        self.assertEqual(status, 404, out[:300])

if __name__ == "__main__":
    unittest.main(verbosity=2)
