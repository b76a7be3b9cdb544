#!/usr/bin/env python3
"""Datasets end to end on loopback: a real S3 endpoint (s3rver) and nginx as origins,
registry-proxy resolving declarations, two peerds prefetching through the swarm with shoalctl.

Checks: every file of a view is byte-identical to the origin (sha256), files 0444 and directories
0555, files of their own (clones or copies, never the cache objects themselves); each origin
object is read from the origin once however many nodes prefetch; include/exclude globs;
ls/status/rm (rm removes the view and its record); re-declaring a version with other globs is refused; the scheduler-facing manifest endpoint.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nginx import Nginx  # noqa: E402
from shoal_fixtures.s3 import S3rver  # noqa: E402


class LoopbackDatasets(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("datasets-origin")
        cls.s3 = cls.class_track(S3rver(d / "s3").start())
        cls.www = d / "www"
        cls.www.mkdir()
        cls.nginx = cls.class_track(Nginx(d / "nginx", cls.www).start())
        creds = d / "creds"
        cls.s3.credentials_file(creds)
        cls.proxy = cls.class_track(dc.dataset_proxy(d / "proxy", credentials_dir=creds,
                                                      origins=[cls.s3, cls.nginx.url]).start())
        cls.a = cls.class_track(dc.dataset_peerd(d / "a", "node-a", cls.proxy.url).start())
        cls.b = cls.class_track(dc.dataset_peerd(d / "b", "node-b", cls.proxy.url).start())
        cls.decl_dir = d / "decl"
        cls.decl_dir.mkdir()

    def declare_file(self, decl: dict) -> Path:
        p = self.decl_dir / f"{decl['name']}@{decl['version']}.json"
        p.write_text(json.dumps(decl))
        return p

    def test_s3_dataset_prefetched_on_two_nodes(self):
        files = dc.small_tree("s3a/")
        for k, v in files.items():
            self.s3.write_object(k, v)
        self.s3.write_object("s3a/scratch/junk.tmp", b"excluded by a glob")
        decl = dc.s3_declaration("s3a", "v1", self.s3, "s3a/", exclude=["*.tmp"])
        cp = dc.shoalctl("dataset", "declare", str(self.declare_file(decl)), proxy=self.proxy.url)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        st = dc.wait_dataset(self.proxy.url, "s3a@v1", timeout=120)
        self.assertEqual(st["files"], len(files))
        self.assertGreater(st["groups"], 2)
        expected = {k[len("s3a/"):]: v for k, v in files.items()}

        # The manifest is content addressed: its digest is the sha256 of the bytes served.
        code, manifest = dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/s3a@v1/manifest")
        self.assertEqual(code, 200)
        kinds = {g["kind"] for g in manifest["groups"]}
        self.assertEqual(kinds, {"pack", "single"})
        self.assertEqual({f["path"] for f in manifest["files"]}, set(expected))

        for node in (self.a, self.b):
            cp = dc.shoalctl("dataset", "prefetch", "s3a@v1", peerd=node.url, timeout=300)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            self.assertIn("s3a@v1 ready", cp.stdout)
            self.assertIn("view ", cp.stdout)
            n = dc.verify_view(dc.view_dir(node, "s3a@v1"), expected,
                               cache_objects=Path(node.dir) / "cache" / "objects")
            self.assertEqual(n, len(expected))
        # Each object was read from the origin once: by the resolution, never by the nodes.
        gets = {k: n for k, n in self.s3.object_gets().items() if k.startswith("s3a/")}
        self.assertEqual(set(gets), set(k for k, v in files.items() if v), "objects read from the origin")
        self.assertEqual(max(gets.values()), 1, {k: n for k, n in gets.items() if n > 1})
        self.assertNotIn("s3a/scratch/junk.tmp", gets)

        # ls, status, rm.
        cp = dc.shoalctl("dataset", "ls", peerd=self.a.url)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertRegex(cp.stdout, r"s3a@v1\s+ready")
        cp = dc.shoalctl("dataset", "status", "s3a@v1", "--json", peerd=self.a.url)
        status = json.loads(cp.stdout)
        self.assertEqual(status["state"], "ready")
        self.assertEqual(status["bytes_done"], status["bytes"])
        cp = dc.shoalctl("dataset", "rm", "s3a@v1", peerd=self.a.url)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("unpinned", cp.stdout)
        self.assertFalse(dc.view_dir(self.a, "s3a@v1").exists())
        code, _ = dc.http_json(f"{self.a.url}/shoal/v1/datasets/s3a@v1")
        self.assertEqual(code, 404)
        # The other node's view is untouched.
        dc.verify_view(dc.view_dir(self.b, "s3a@v1"), expected)

    def test_http_origin_served_by_nginx(self):
        files = dc.small_tree("", files=60, large=1)
        root = self.www / "web"
        for k, v in files.items():
            p = root / k
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(v)
        decl = dc.http_declaration("web", "2026.1", self.nginx.url + "web/")
        code, body = dc.declare(self.proxy.url, decl)
        self.assertIn(code, (200, 202), body)
        st = dc.wait_dataset(self.proxy.url, "web@2026.1", timeout=120)
        self.assertEqual(st["files"], len(files))
        cp = dc.shoalctl("dataset", "prefetch", "web@2026.1", peerd=self.a.url, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        dc.verify_view(dc.view_dir(self.a, "web@2026.1"), files)
        gets = {k: n for k, n in self.nginx.file_gets().items() if k.startswith("web/")}
        self.assertEqual(set(gets), {"web/" + k for k, v in files.items() if v})
        self.assertEqual(max(gets.values()), 1)

    def test_a_version_pins_its_declaration(self):
        for k, v in dc.small_tree("pin/", files=5, large=0).items():
            self.s3.write_object(k, v)
        decl = dc.s3_declaration("pinned", "v1", self.s3, "pin/")
        code, body = dc.declare(self.proxy.url, decl)
        self.assertIn(code, (200, 202), body)
        first = dc.wait_dataset(self.proxy.url, "pinned@v1")
        code, again = dc.declare(self.proxy.url, decl)
        self.assertEqual(code, 200, again)
        self.assertEqual(again["manifest"], first["manifest"])
        other = dict(decl, include=["*.md"])
        code, body = dc.declare(self.proxy.url, other)
        self.assertEqual(code, 409, body)
        self.assertIn("declare a new version", body["error"])
        # Bad declarations are refused with the reason.
        # Credentials are the configuration's: a declaration naming others is forbidden.
        for bad, status, why in (({"name": "x", "version": "v1", "origin": {"url": "ftp://x"}}, 400, "s3://"),
                                 ({"name": "X", "version": "v1", "origin": {"url": "s3://b/p"}}, 400, "name"),
                                 (dict(decl, name="creds",
                                       origin=dict(decl["origin"], credentials_file="../../etc/shadow")),
                                  403, "credentials_file")):
            code, body = dc.declare(self.proxy.url, bad)
            self.assertEqual(code, status, body)
            self.assertIn(why, body["error"])
        # Unknown datasets are errors on both daemons.
        code, _ = dc.http_json(f"{self.proxy.url}/shoal/v1/datasets/nope@v1")
        self.assertEqual(code, 404)
        cp = dc.shoalctl("dataset", "prefetch", "nope@v1", peerd=self.a.url, timeout=60)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("unknown dataset", cp.stdout + cp.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
