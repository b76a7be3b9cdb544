#!/usr/bin/env python3
"""Hostile dataset declarations and origins against the real registry-proxy, on loopback
(docs/datasets.md "Where datasets may come from", "Bounded work", "No input ends the process"):

- SSRF: an allowed origin redirects to an internal service (another port of 127.0.0.1) or to the
  cloud metadata address; a host name of an allowed origin resolves to loopback; a declaration
  names an origin the configuration does not list. Nothing is fetched from where it was not
  allowed, and no error tells the size or content of what was refused.
- Confused deputy: a declaration chooses credentials, or an S3 endpoint of its own: refused; S3
  requests are signed with the credentials the configuration binds to the endpoint.
- Crash loop: a redirect to a Location of non-UTF-8 bytes fails the dataset with a readable error;
  registry-proxy stays up, and again after a restart.
- Staging: an object listed at 10 TB is refused before a byte is fetched; a failed fetch leaves no
  staging file; leftovers of an earlier run are removed at start.
- Work keyed by request data: a glob of many "**" over a 60-level path resolves at once; the
  resolver is a bounded pool whose queue refuses with 429 when full.

One registry-proxy serves every case (max_resolving 1, so the cases' resolutions run in turn).
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.httpstub import StubServer  # noqa: E402
from shoal_fixtures.procs import http_status, wait_until  # noqa: E402

def numbers_in(text: str) -> list[str]:
    """The free-standing numbers in an error: not a URL's port or a digit inside a word or path
    (a random port such as 42795 contains "79")."""
    return re.findall(r"(?<![\w:/.])\d+(?![\w.])", text)


SECRET = b'{"AccessKeyId":"ASIA-INTERNAL-ONLY","SecretAccessKey":"do-not-leak-0123456789"}'
DEEP = 60  # directory levels of the glob case


def listing(*entries: tuple[str, str, int]) -> bytes:
    return json.dumps([{"name": n, "type": t, "size": s} for n, t, s in entries]).encode()


class Origin:
    """The attacker's origin: nginx-style listings and crafted answers by path, every request kept
    (path, Host, Authorization). `hold` blocks /slow/ listings until set."""

    def __init__(self, name: str):
        self.requests: list[tuple[str, str, str]] = []
        self.routes: dict[str, tuple[int, list[tuple[str, str]], bytes]] = {}
        self.hold = threading.Event()
        self.stub = StubServer(self.handle, methods=["GET", "HEAD"], name=name).start()
        self.port = self.stub.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [p for p, _, _ in self.requests]

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        path = req.path.partition("?")[0]
        self.requests.append((req.path, req.headers.get("Host", ""), req.headers.get("Authorization", "")))
        status, headers, body = self.answer(req.path, path)
        req.send_response(status)
        for k, v in headers:
            req.send_header(k, v)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if method != "HEAD":
            req.wfile.write(body)

    def answer(self, full: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        if "list-type=2" in full:  # an S3 ListObjectsV2: an empty bucket
            return 200, [("Content-Type", "application/xml")], (
                b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
                b"<IsTruncated>false</IsTruncated></ListBucketResult>")
        if path.startswith("/slow/"):
            self.hold.wait(30)
            return 200, [], listing()
        if path.startswith("/deep/"):
            level = path.count("/") - 2
            return 200, [], listing(("file", "file", 1) if level >= DEEP else (f"d{level}", "directory", 0))
        if path == "/deep":
            return 404, [], b""
        return self.routes.get(path, (404, [], b"not found"))

    def stop(self) -> None:
        self.hold.set()
        self.stub.stop()


class HostileDatasets(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("datasets-hostile")
        cls.origin = cls.class_track(Origin("origin"))
        cls.secret = cls.class_track(Origin("internal"))
        cls.secret.routes["/latest/meta-data"] = (200, [], SECRET)
        cls.creds = d / "creds"
        cls.creds.mkdir()
        (cls.creds / "bound.creds").write_text("BOUNDKEY:bound-secret\n")
        (cls.creds / "teamA.creds").write_text("TEAMAKEY:team-a-secret\n")
        cls.s3 = cls.class_track(Origin("s3"))
        cls.proxy = cls.class_track(dc.dataset_proxy(
            d / "proxy", credentials_dir=cls.creds,
            origins=[cls.origin.url,
                     # A host name: allowed as an origin, but it resolves to loopback, which the
                     # entry does not name.
                     f"http://localhost:{cls.origin.port}",
                     {"url": cls.s3.url, "credentials_file": "bound.creds"}],
            extra={"datasets": {"max_resolving": 1, "max_queued": 1, "max_retries": 1}}).start())
        cls.staging = Path(cls.proxy.dir) / "dataset-staging"

    def declare(self, name: str, url: str, **extra) -> tuple[int, dict]:
        return dc.declare(self.proxy.url, dc.http_declaration(name, "v1", url, **extra))

    def failed(self, name: str) -> dict:
        st = dc.wait_dataset(self.proxy.url, f"{name}@v1", states=("failed", "ready"), timeout=30)
        self.assertEqual(st["state"], "failed", st)
        return st

    def assert_no_leak(self, st: dict) -> None:
        self.assertNotIn("ASIA-INTERNAL-ONLY", json.dumps(st))
        self.assertNotIn(str(len(SECRET)), numbers_in(st["error"]),
                         f"the error tells the refused answer's size: {st['error']}")
        self.assertEqual(self.secret.requests, [], "registry-proxy reached the internal service")

    def assert_no_staging(self) -> None:
        self.assertEqual(sorted(p.name for p in self.staging.glob("*.part")), [])

    def test_ssrf_redirects_and_addresses_are_refused(self):
        o = self.origin
        o.routes["/loot/"] = (200, [], listing(("creds.json", "file", len(SECRET))))
        o.routes["/loot/creds.json"] = (302, [("Location", f"{self.secret.url}/latest/meta-data")], b"")
        o.routes["/meta/"] = (200, [], listing(("creds.json", "file", len(SECRET))))
        o.routes["/meta/creds.json"] = (302, [("Location", "http://169.254.169.254/latest/meta-data")], b"")
        for name in ("loot", "meta"):
            code, body = self.declare(name, f"{o.url}/{name}/")
            self.assertIn(code, (200, 202), body)
            st = self.failed(name)
            self.assertIn("allowed_origins", st["error"])
            self.assert_no_leak(st)
            sha = hashlib.sha256(SECRET).hexdigest()
            code, _ = dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/{name}@v1/objects/sha256:{sha}")
            self.assertNotEqual(code, 200)
        # An allowed host name that resolves to loopback: refused at the connection, after DNS.
        o.routes["/named/"] = (200, [], listing(("a.txt", "file", 3)))
        code, body = self.declare("named", f"http://localhost:{o.port}/named/")
        self.assertIn(code, (200, 202), body)
        st = self.failed("named")
        self.assertIn("loopback", st["error"])
        self.assertNotIn(f"localhost:{o.port}", [h for _, h, _ in o.requests])
        # An origin the configuration does not list: refused before anything is kept or fetched.
        code, body = self.declare("direct", f"{self.secret.url}/latest/")
        self.assertEqual(code, 403, body)
        self.assertIn("allowed_origins", body["error"])
        self.assertEqual(dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/direct@v1")[0], 404)
        self.assert_no_leak({"error": body["error"]})
        self.assert_no_staging()

    def test_credentials_and_endpoints_are_the_configurations(self):
        def s3(name: str, endpoint: str, **origin) -> tuple[int, dict]:
            return dc.declare(self.proxy.url, {"name": name, "version": "v1",
                                               "origin": {"url": "s3://other-teams-bucket/", "endpoint": endpoint,
                                                          **origin}})
        code, body = s3("deputy", self.s3.url, credentials_file="teamA.creds")
        self.assertEqual(code, 403, body)
        self.assertIn("credentials_file", body["error"])
        code, body = s3("exfil", self.secret.url, credentials_file="bound.creds")
        self.assertEqual(code, 403, body)
        self.assertEqual(self.secret.requests, [], "a signed request went to the client's endpoint")
        # Without a credentials_file, requests are signed with the endpoint's bound credentials.
        code, body = s3("bound", self.s3.url)
        self.assertIn(code, (200, 202), body)
        dc.wait_dataset(self.proxy.url, "bound@v1", states=("failed", "ready"), timeout=30)
        auths = [a for _, _, a in self.s3.requests]
        self.assertTrue(auths and all("Credential=BOUNDKEY/" in a for a in auths), auths)

    def test_staging_is_bounded_and_cleaned(self):
        o = self.origin
        o.routes["/huge/"] = (200, [], listing(("big.bin", "file", 10 ** 13)))
        o.routes["/huge/big.bin"] = (200, [], b"\0" * (1 << 20))
        code, body = self.declare("huge", f"{o.url}/huge/")
        self.assertIn(code, (200, 202), body)
        st = self.failed("huge")
        self.assertIn("quota", st["error"])
        self.assertNotIn("/huge/big.bin", o.paths(), "bytes were fetched for an object that cannot fit")
        # A body shorter than listed: the fetch fails and removes what it staged.
        o.routes["/short/"] = (200, [], listing(("f", "file", 100)))
        o.routes["/short/f"] = (200, [], b"s" * 80)
        code, body = self.declare("short", f"{o.url}/short/")
        self.assertIn(code, (200, 202), body)
        st = self.failed("short")
        self.assertIn("shorter than the listing", st["error"])
        # The size received (80) is not told.
        self.assertNotIn("80", numbers_in(st["error"]), st["error"])
        self.assert_no_staging()

    def test_many_double_stars_and_a_bounded_resolver_queue(self):
        t0 = time.monotonic()
        code, body = self.declare("glob", f"{self.origin.url}/deep/", include=["**/" * 8 + "nomatch"])
        self.assertIn(code, (200, 202), body)
        st = dc.wait_dataset(self.proxy.url, "glob@v1", states=("failed", "ready"), timeout=20)
        self.assertLess(time.monotonic() - t0, 20, st)
        self.assertEqual(st["files"], 0, st)
        # One resolver (max_resolving 1) held by a slow listing, one declaration queued
        # (max_queued 1): the next is refused and nothing of it is kept.
        self.origin.hold.clear()
        try:
            # slow2 is declared once slow1 runs: declared together, slow2 could find slow1 still
            # in the queue (max_queued 1) and be refused.
            for name in ("slow1", "slow2"):
                code, body = self.declare(name, f"{self.origin.url}/slow/{name}/")
                self.assertIn(code, (200, 202), body)
                wait_until(lambda: "/slow/slow1/" in self.origin.paths(), 10, "the first resolution runs")
            self.assertTrue(dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/slow2@v1")[1].get("queued"))
            code, body = self.declare("slow3", f"{self.origin.url}/slow/slow3/")
            self.assertEqual(code, 429, body)
            self.assertEqual(dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/slow3@v1")[0], 404)
        finally:
            self.origin.hold.set()
        for name in ("slow1", "slow2"):
            dc.wait_dataset(self.proxy.url, f"{name}@v1", states=("failed", "ready"), timeout=30)

    def test_non_utf8_location_neither_crashes_nor_loops(self):
        o = self.origin
        o.routes["/crash/"] = (200, [], listing(("x", "file", 10)))
        o.routes["/crash/x"] = (302, [("Location", "http://\xff\xfe.invalid/x")], b"")
        code, body = self.declare("crash", f"{o.url}/crash/")
        self.assertIn(code, (200, 202), body)
        st = self.failed("crash")
        self.assertIn("\ufffd", st["error"])
        self.assertTrue(self.proxy.daemon.alive, "registry-proxy died")
        record = Path(self.proxy.dir) / "datasets" / "datasets" / "crash@v1.json"
        # The record is written after the state changes in memory (the API may say "failed" a
        # moment before the file does): bounded wait, then it must say so.
        wait_until(lambda: json.loads(record.read_bytes().decode("utf-8"))["state"] == "failed", 10,
                   "the dataset record on disk says failed")
        # A restart neither replays it nor keeps an earlier run's staging files.
        self.staging.mkdir(exist_ok=True)
        (self.staging / "leftover.part").write_bytes(b"x" * 1000)
        self.proxy.restart()
        time.sleep(1)
        self.assertTrue(self.proxy.daemon.alive, "registry-proxy died after a restart")
        self.assertEqual(http_status(self.proxy.url + "/healthz"), 200)
        code, st = dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/crash@v1")
        self.assertEqual(st["state"], "failed", st)
        self.assertIn("\ufffd", st["error"])
        self.assert_no_staging()


if __name__ == "__main__":
    unittest.main(verbosity=2)
