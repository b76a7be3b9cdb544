#!/usr/bin/env python3
"""Datasets when things go wrong, on loopback:

- an origin object changed under a resolved version: the version keeps its bytes; once the object
  must be fetched again (registry-proxy lost its cache) the change is refused with "origin changed
  under version ...: declare a new version", and a new version resolves the new bytes;
- an origin that dies in the middle of a transfer: the resolution fails with the object named,
  and once the origin is back it resumes with a Range request from the bytes already staged;
- path traversal and odd names in origin keys (`../`, absolute, NUL, control characters,
  backslash, over-long) from an HTTP listing and from an S3 listing: refused with the rule named;
- a full cache disk during a prefetch (a small tmpfs; root only): a clear error, peerd stays up.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path
from xml.sax.saxutils import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nginx import Nginx  # noqa: E402
from shoal_fixtures.procs import http_status, wait_until  # noqa: E402
from shoal_fixtures.s3 import S3rver  # noqa: E402


class FakeOrigin:
    """An HTTP server answering crafted listings: nginx-style JSON for http origins and
    ListObjectsV2 XML for S3 ones (keys as given, XML-escaped)."""

    def __init__(self):
        self.listings: dict[str, str] = {}  # path → JSON text
        self.s3_keys: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path, _, query = self.path.partition("?")
                if "list-type=2" in query:
                    body = "".join(f"<Contents><Key>{k}</Key><Size>1</Size><ETag>\"x\"</ETag></Contents>"
                                   for k in owner.s3_keys)
                    xml = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
                           f"<IsTruncated>false</IsTruncated>{body}</ListBucketResult>").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml)))
                    self.end_headers()
                    self.wfile.write(xml)
                    return
                text = owner.listings.get(path)
                data = (text or "not found").encode()
                self.send_response(200 if text is not None else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def diagnostics(self) -> str:
        return ""


class DatasetFaults(FixtureTestCase):
    def setUp(self):
        super().setUp()
        d = self.tmpdir("datasets-faults")
        self.d = d
        self.creds = d / "creds"

    def proxy(self, name: str = "proxy", origins=(), **extra):
        return self.track(dc.dataset_proxy(self.d / name, credentials_dir=self.creds, origins=origins,
                                           extra=extra or None).start())

    def test_origin_changed_under_a_version(self):
        s3 = self.track(S3rver(self.d / "s3").start())
        s3.credentials_file(self.creds)
        files = {"chg/a.txt": b"alpha\n", "chg/big.bin": dc.content("big", 600_000),
                 "chg/small.bin": dc.content("small", 9000)}
        for k, v in files.items():
            s3.write_object(k, v)
        proxy = self.proxy(origins=[s3])
        decl = dc.s3_declaration("chg", "v1", s3, "chg/")
        code, body = dc.declare(proxy.url, decl)
        self.assertIn(code, (200, 202), body)
        v1 = dc.wait_dataset(proxy.url, "chg@v1")
        # The object changes at the origin (same size, other bytes).
        s3.write_object("chg/big.bin", dc.content("big-changed", 600_000))
        code, again = dc.declare(proxy.url, decl)
        self.assertEqual(code, 200, again)
        self.assertEqual(again["manifest"], v1["manifest"], "a version keeps its manifest")
        # registry-proxy loses its cache: the objects must come again from the origin.
        proxy.stop()
        shutil.rmtree(Path(proxy.dir) / "cache")
        proxy.start()
        node = self.track(dc.dataset_peerd(self.d / "node", "node", proxy.url).start())
        cp = dc.shoalctl("dataset", "prefetch", "chg@v1", peerd=node.url, timeout=120)
        self.assertNotEqual(cp.returncode, 0, cp.stdout)
        self.assertIn("origin changed under version v1", cp.stdout + cp.stderr)
        self.assertIn("declare a new version", cp.stdout + cp.stderr)
        self.assertGreaterEqual(proxy.metric("shoal_proxy_dataset_origin_changed_total"), 1)
        self.assertFalse(dc.view_dir(node, "chg@v1").exists(), "no view of bytes that do not match the version")
        # A new version takes the new bytes.
        code, body = dc.declare(proxy.url, dict(decl, version="v2"))
        self.assertIn(code, (200, 202), body)
        v2 = dc.wait_dataset(proxy.url, "chg@v2")
        self.assertNotEqual(v2["manifest"], v1["manifest"])
        cp = dc.shoalctl("dataset", "prefetch", "chg@v2", peerd=node.url, timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        dc.verify_view(dc.view_dir(node, "chg@v2"),
                       {"a.txt": files["chg/a.txt"], "big.bin": dc.content("big-changed", 600_000),
                        "small.bin": files["chg/small.bin"]})

    def test_origin_dies_midway_and_the_resolution_resumes(self):
        www = self.d / "www"
        files = {f"f/small-{i}.bin": dc.content(f"sm{i}", 2000 + i) for i in range(20)}
        big = dc.content("huge", 24 << 20)
        files["f/huge.bin"] = big
        for k, v in files.items():
            p = www / k
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(v)
        nginx = self.track(Nginx(self.d / "nginx", www, limit_rate="4m").start())
        proxy = self.proxy(origins=[nginx.url], datasets={"max_retries": 1, "stall_timeout": "2s"})
        decl = dc.http_declaration("dies", "v1", nginx.url + "f/")
        code, body = dc.declare(proxy.url, decl)
        self.assertIn(code, (200, 202), body)
        # Kill the origin once a good part of the large object arrived.
        wait_until(lambda: dc.http_json(f"{proxy.url}/shoal/v1/datasets/dies@v1")[1]["progress"]["bytes_done"]
                   > 6 << 20, 60, "the large object half way")
        nginx.kill()
        failed = dc.wait_dataset(proxy.url, "dies@v1", states=("failed",), timeout=60)
        self.assertIn("huge.bin", failed["error"])
        staged = failed["progress"]["bytes_done"]
        # The origin comes back; declaring again resumes where the bytes stopped.
        nginx.start()
        code, body = dc.declare(proxy.url, decl)
        self.assertIn(code, (200, 202), body)
        ready = dc.wait_dataset(proxy.url, "dies@v1", timeout=120)
        self.assertGreater(ready["progress"]["resumed_bytes"], 4 << 20, ready)
        ranges = [e for e in nginx.access_log() if e.path == "/f/huge.bin" and e.range]
        self.assertTrue(ranges, "the resumed fetch asked for a Range")
        first = int(ranges[0].range.split("=")[1].split("-")[0])
        self.assertGreater(first, 4 << 20)
        self.assertLessEqual(first, staged + (8 << 20))
        node = self.track(dc.dataset_peerd(self.d / "node", "node", proxy.url).start())
        cp = dc.shoalctl("dataset", "prefetch", "dies@v1", peerd=node.url, timeout=180)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        dc.verify_view(dc.view_dir(node, "dies@v1"), {k[2:]: v for k, v in files.items()})

    def test_odd_origin_keys_are_refused(self):
        fake = self.track(FakeOrigin())
        self.creds.mkdir(parents=True, exist_ok=True)
        (self.creds / "fake.creds").write_text("AK:SK\n")
        proxy = self.proxy(origins=[{"url": fake.url, "credentials_file": "fake.creds"}])
        http_cases = [
            ("../../etc/passwd", "'..'"),
            ("/etc/passwd", "absolute"),
            ("a\u0000b", "NUL"),
            ("bell\u0007", "control character"),
            ("back\\slash", "backslash"),
            ("x" * 300, "longer than 255"),
        ]
        for i, (name, rule) in enumerate(http_cases):
            fake.listings[f"/odd{i}/"] = json.dumps([{"name": "fine.txt", "type": "file", "size": 1},
                                                     {"name": name, "type": "file", "size": 1}])
            code, body = dc.declare(proxy.url, dc.http_declaration(f"odd{i}", "v1", f"{fake.url}/odd{i}/"))
            # 409 when the resolution already failed within the declaration's own wait (a fast
            # machine, or an origin listing answered at once): the answer then carries the error.
            self.assertIn(code, (200, 202, 409), body)
            if code == 409:
                self.assertIn(rule, body.get("error", ""), body)
            st = dc.wait_dataset(proxy.url, f"odd{i}@v1", states=("failed",), timeout=30)
            self.assertIn("cannot be a dataset path", st["error"], name)
            self.assertIn(rule, st["error"], name)
        s3_cases = [
            ("p/../../x", "'..'"),
            ("p//abs", "absolute"),
            ("p/" + "y" * 300, "longer than 255"),
            ("p/a&#1;b", "control character"),
            ("p/nul&#0;", "XML character reference"),
        ]
        for i, (key, rule) in enumerate(s3_cases):
            fake.s3_keys = ["p/fine.txt", key]
            decl = {"name": f"odds3-{i}", "version": "v1",
                    "origin": {"url": "s3://b/p/", "endpoint": fake.url, "credentials_file": "fake.creds"}}
            code, body = dc.declare(proxy.url, decl)
            self.assertIn(code, (200, 202, 409), body)
            if code == 409:
                self.assertIn(rule, body.get("error", ""), body)
            st = dc.wait_dataset(proxy.url, f"odds3-{i}@v1", states=("failed",), timeout=30)
            self.assertIn(rule, st["error"], key)
        # Nothing was written outside registry-proxy's own directories.
        self.assertFalse((self.d / "etc").exists())
        self.assertEqual(proxy.metric("shoal_proxy_dataset_origin_bytes_total"), 0)

    @unittest.skipUnless(os.geteuid() == 0, "mounting a small tmpfs needs root")
    def test_full_cache_disk_during_prefetch(self):
        s3 = self.track(S3rver(self.d / "s3").start())
        s3.credentials_file(self.creds)
        files = {f"full/part-{i}.bin": dc.content(f"full{i}", 3 << 20) for i in range(12)}
        for k, v in files.items():
            s3.write_object(k, v)
        proxy = self.proxy(origins=[s3])
        code, body = dc.declare(proxy.url, dc.s3_declaration("full", "v1", s3, "full/"))
        self.assertIn(code, (200, 202), body)
        dc.wait_dataset(proxy.url, "full@v1")
        vol = self.d / "vol"
        vol.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(vol)], check=True)
        self.addCleanup(lambda: subprocess.run(["umount", "-l", str(vol)], check=False))
        node = self.track(dc.dataset_peerd(self.d / "node", "node", proxy.url,
                                           extra={"cache": {"dir": str(vol / "cache"), "quota": 0,
                                                            "fs_share": 1.0}}).start())
        cp = dc.shoalctl("dataset", "prefetch", "full@v1", peerd=node.url, timeout=180)
        self.assertNotEqual(cp.returncode, 0, cp.stdout)
        out = (cp.stdout + cp.stderr).lower()
        self.assertTrue("space" in out, out)
        self.assertEqual(http_status(node.url + "/healthz"), 200, "peerd survives a full disk")
        cp = dc.shoalctl("dataset", "status", "full@v1", "--json", peerd=node.url)
        self.assertEqual(json.loads(cp.stdout)["state"], "failed")
        cp = dc.shoalctl("dataset", "rm", "full@v1", peerd=node.url)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        time.sleep(0.2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
