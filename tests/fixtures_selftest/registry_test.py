"""Self-test of shoal_fixtures.registry: real docker-registry, skopeo push and pull, access log.

Images of each kind are pushed with skopeo, copied back with skopeo, and every digest is
recomputed from the copied bytes. Basic auth must refuse a wrong password.
"""

import base64
import hashlib
import json
import os
import re
import socket
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureError, FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402


class AnonymousRegistryTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = cls.class_tmpdir("shoal-reg-")
        cls.reg = cls.class_track(Registry(cls.dir / "registry").start())

    def push_and_copy_back(self, layout, name):
        ref = self.reg.push(layout, name)
        self.assertEqual(layout.reference, ref)
        raw = self.reg.inspect_raw(ref)
        self.assertEqual("sha256:" + hashlib.sha256(raw).hexdigest(), layout.top.digest)
        self.assertEqual(json.loads(raw)["mediaType"], layout.top.media_type)
        back = self.reg.pull(ref, self.tmpdir() / "back")
        got = oci.verify_dir(back)
        want = {d: b.size for d, b in layout.all_blobs().items()}
        self.assertEqual(got, want, "every blob and manifest must come back byte-identical")
        return ref

    def test_oci_image_with_empty_and_uncompressed_layers(self):
        layout = oci.make_image(self.tmpdir() / "img", [
            oci.LayerSpec(size=50_000, seed="r-oci"), oci.empty_layer(),
            oci.LayerSpec(size=3_000, seed="r-raw", compression="none")])
        self.push_and_copy_back(layout, "selftest/oci")

    def test_docker_schema2_image(self):
        layout = oci.make_image(self.tmpdir() / "img", [oci.LayerSpec(size=40_000, seed="r-d2"),
                                                        oci.empty_layer()], fmt="docker")
        self.push_and_copy_back(layout, "selftest/docker")

    def test_multiarch_oci_index_and_docker_manifest_list(self):
        for fmt in ("oci", "docker"):
            with self.subTest(fmt=fmt):
                layout = oci.make_multiarch(self.tmpdir() / fmt,
                                            [oci.LayerSpec(size=8_000, seed=f"r-m-{fmt}")],
                                            fmt=fmt, shared=[oci.LayerSpec(size=2_000,
                                                                           seed="r-shared")])
                ref = self.push_and_copy_back(layout, f"selftest/multi-{fmt}")
                # Each platform's manifest is addressable by digest.
                for image in layout.images:
                    status, headers, body = self.reg.request(
                        f"/v2/selftest/multi-{fmt}/manifests/{image.manifest.digest}",
                        headers={"Accept": image.manifest.media_type})
                    self.assertEqual(status, 200, ref)
                    self.assertEqual(headers["Docker-Content-Digest"], image.manifest.digest)
                    self.assertEqual(body, image.manifest_bytes)

    def test_shared_layer_is_one_blob(self):
        d = self.tmpdir() / "shared"
        base = oci.LayerSpec(size=30_000, seed="r-base")
        one = oci.make_image(d, [base, oci.LayerSpec(size=500, seed="r-a")], tag="one")
        two = oci.make_image(d, [base, oci.LayerSpec(size=500, seed="r-b")], tag="two")
        self.reg.push(one, "selftest/shared-a")
        self.reg.push(two, "selftest/shared-b")
        shared = one.images[0].layers[0].digest
        self.assertEqual(shared, two.images[0].layers[0].digest)
        blob_dir = self.dir / "registry" / "data" / "docker" / "registry" / "v2" / "blobs"
        stored = list(blob_dir.rglob(shared.removeprefix("sha256:")))
        self.assertEqual(len(stored), 1, "the registry stores a shared layer once")

    def test_access_log_counts_every_request(self):
        layout = oci.make_image(self.tmpdir() / "img", [oci.LayerSpec(size=20_000, seed="r-log"),
                                                        oci.LayerSpec(size=10_000, seed="r-l2")])
        ref = self.reg.push(layout, "selftest/log")
        mark = self.reg.mark()
        self.reg.pull(ref, self.tmpdir() / "pulled")
        self.reg.wait_log_quiet()
        gets = self.reg.blob_gets(since=mark)
        for blob in layout.images[0].blobs():
            self.assertEqual(gets.get(blob.digest), 1, blob)
            self.assertEqual(self.reg.count_blob_gets(blob.digest, "selftest/log", since=mark), 1)
        self.assertEqual(len(gets), 3)  # config + 2 layers, nothing else

        # HEAD, 404 and the query string are recorded too.
        mark = self.reg.mark()
        missing = "sha256:" + "0" * 64
        self.assertEqual(self.reg.request(f"/v2/selftest/log/blobs/{missing}", method="HEAD")[0],
                         404)
        # distribution 2.8 answers 404 MANIFEST_UNKNOWN for an OCI manifest requested without
        # an Accept header that lists the OCI type.
        self.assertEqual(self.reg.request("/v2/selftest/log/manifests/v1?ns=example.org")[0],
                         404)
        self.assertEqual(self.reg.request("/v2/selftest/log/manifests/v1?ns=example.org",
                                          headers={"Accept": layout.top.media_type})[0], 200)
        self.reg.wait_log_quiet()
        entries = self.reg.access_log(since=mark)
        self.assertEqual([(e.method, e.status) for e in entries],
                         [("HEAD", 404), ("GET", 404), ("GET", 200)])
        self.assertEqual(entries[0].blob, ("selftest/log", missing))
        self.assertEqual(entries[2].manifest, ("selftest/log", "v1"))
        self.assertEqual(entries[2].query, "ns=example.org")
        self.assertEqual(entries[2].size, layout.top.size)
        self.assertEqual(self.reg.count_manifest_requests("v1", since=mark), 2)
        self.assertEqual(self.reg.count("HEAD", re.compile(r"/blobs/"), 404, since=mark), 1)

    def test_truncated_transfer_is_logged_with_bytes_written(self):
        layout = oci.make_image(self.tmpdir() / "img", [oci.large_layer(16 * oci.MIB, "r-cut")])
        self.reg.push(layout, "selftest/cut")
        layer = layout.images[0].layers[0]
        mark = self.reg.mark()
        with socket.create_connection((self.reg.host, self.reg.port), timeout=10) as s:
            s.sendall(f"GET /v2/selftest/cut/blobs/{layer.digest} HTTP/1.1\r\n"
                      f"Host: {self.reg.host_port}\r\n\r\n".encode())
            got = 0
            while got < oci.MIB:
                chunk = s.recv(65536)
                self.assertTrue(chunk)
                got += len(chunk)
        wait_until(lambda: self.reg.access_log(since=mark), 10, "access log entry of cut GET")
        (entry,) = self.reg.access_log(since=mark)
        self.assertEqual((entry.method, entry.status, entry.blob[1]), ("GET", 200, layer.digest))
        self.assertLess(entry.size, layer.size, "the log records the bytes actually written")

    def test_restart_keeps_storage(self):
        d = self.tmpdir()
        reg = self.track(Registry(d / "r").start())
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=1000, seed="r-restart")])
        reg.push(layout, "selftest/restart")
        port = reg.port
        reg.kill()
        with self.assertRaises(OSError):  # URLError: connection refused while down
            reg.request("/v2/")
        reg.start()
        self.assertEqual(reg.port, port, "a restart keeps the address")
        status, headers, _ = reg.request(f"/v2/selftest/restart/manifests/{layout.top.digest}",
                                         method="HEAD",
                                         headers={"Accept": layout.top.media_type})
        self.assertEqual(status, 200)


class HtpasswdRegistryTest(FixtureTestCase):
    def test_basic_auth(self):
        d = self.tmpdir("shoal-reg-auth-")
        reg = self.track(Registry(d / "r", auth="htpasswd", users={"bob": "builder"}).start())
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=2000, seed="r-auth")])
        ref = reg.push(layout, "secret/app")  # as the admin account

        back = reg.pull(ref, d / "bob", creds=("bob", "builder"))
        self.assertIn(layout.top.digest, oci.verify_dir(back))
        with self.assertRaises(FixtureError) as cm:
            reg.pull(ref, d / "wrong", creds=("bob", "wrong-password"))
        self.assertIn("unauthorized", str(cm.exception).lower())
        with self.assertRaises(FixtureError):
            reg.pull(ref, d / "anon", creds=False)

        # The same at the HTTP level, with the challenge the registry sends.
        status, headers, _ = reg.request("/v2/")
        self.assertEqual(status, 401)
        self.assertIn('Basic realm="shoal-test"', headers.get("Www-Authenticate", ""))

        def basic(u, p):
            return {"Authorization": "Basic " + base64.b64encode(f"{u}:{p}".encode()).decode()}
        self.assertEqual(reg.request("/v2/", headers=basic("bob", "builder"))[0], 200)
        self.assertEqual(reg.request("/v2/", headers=basic("bob", "nope"))[0], 401)
        self.assertEqual(reg.request("/v2/", headers=basic("mallory", "builder"))[0], 401)
        reg.wait_log_quiet()
        self.assertGreaterEqual(reg.count("GET", "/v2/", 401), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
