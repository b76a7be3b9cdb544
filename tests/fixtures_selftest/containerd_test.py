"""Self-test of shoal_fixtures.containerd: a private containerd pulls and unpacks from a real
registry (OCI image, Docker schema 2 image, OCI index, Docker manifest list), through a mirror
configured in hosts.toml, with fallback to the upstream, and with token auth.

Each pull is checked three ways: the content store holds every expected digest with its exact
size (and the bytes hash to it), every file of every layer is in a snapshot with the right
content, and the registry's access log shows exactly one GET per blob.
"""

import os
import platform
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureTestCase, free_port, oci  # noqa: E402
from shoal_fixtures.containerd import Containerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.token_issuer import Rule, TokenIssuer  # noqa: E402

NATIVE = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
OTHER = "arm64" if NATIVE == "amd64" else "amd64"


@unittest.skipUnless(os.geteuid() == 0, "containerd needs root")
class ContainerdPullTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = cls.class_tmpdir("shoal-ctrd-")
        cls.reg = cls.class_track(Registry(cls.dir / "registry").start())
        cls.ctrd = cls.class_track(Containerd(cls.dir / "c1").start())
        cls.ctrd.configure_registry(cls.reg.host_port)

    def pull_and_check(self, layout, images, ref, **pull_args):
        """Pulls `ref` and checks content store, snapshots and registry log for `images`.

        Blobs already in the content store (e.g. the canonical empty layer, shared by several
        tests) must not be fetched again; every other blob exactly once.
        """
        before = set(self.ctrd.content())
        mark = self.reg.mark()
        result = self.ctrd.pull(ref, **pull_args)
        self.assertNotIn("failed to decode hosts.toml", result.output)
        content = self.ctrd.content(verify=True)
        expected = {layout.top.digest: layout.top.size}
        for im in images:
            expected[im.manifest.digest] = im.manifest.size
            for b in im.blobs():
                expected[b.digest] = b.size
        for digest, size in expected.items():
            self.assertEqual(content.get(digest), size, f"{digest} in containerd content store")
        self.assertGreater(self.ctrd.verify_unpacked(images), 0)
        self.reg.wait_log_quiet()
        gets = self.reg.blob_gets(since=mark)
        for im in images:
            for b in im.blobs():
                want = 0 if b.digest in before else 1
                self.assertEqual(gets.get(b.digest, 0), want, f"upstream GETs of {b.digest}")
        return content

    def test_oci_image(self):
        layout = oci.make_image(self.tmpdir() / "img", [
            oci.LayerSpec(size=300_000, seed="c-oci", files=2), oci.empty_layer(),
            oci.LayerSpec(size=20_000, seed="c-raw", compression="none")])
        ref = self.reg.push(layout, "ctrd/oci")
        self.pull_and_check(layout, layout.images, ref)
        self.assertIn(ref, self.ctrd.images())

    def test_docker_schema2_image(self):
        layout = oci.make_image(self.tmpdir() / "img", [oci.LayerSpec(size=100_000, seed="c-d2"),
                                                        oci.empty_layer()], fmt="docker")
        ref = self.reg.push(layout, "ctrd/docker")
        self.pull_and_check(layout, layout.images, ref)

    def test_multiarch_native_platform(self):
        layout = oci.make_multiarch(self.tmpdir() / "m", [oci.LayerSpec(size=50_000, seed="c-m")],
                                    shared=[oci.LayerSpec(size=10_000, seed="c-shared")])
        ref = self.reg.push(layout, "ctrd/multi-oci")
        mark = self.reg.mark()
        content = self.pull_and_check(layout, [layout.image(NATIVE)], ref)
        other = layout.image(OTHER)
        self.assertNotIn(other.layers[0].digest, content, "other platform's layer not fetched")
        self.assertEqual(self.reg.count_blob_gets(other.layers[0].digest, since=mark), 0)

    def test_manifest_list_other_platform(self):
        layout = oci.make_multiarch(self.tmpdir() / "m", [oci.LayerSpec(size=50_000,
                                                                        seed="c-list")],
                                    fmt="docker")
        ref = self.reg.push(layout, "ctrd/multi-docker")
        self.pull_and_check(layout, [layout.image(OTHER)], ref, platform=f"linux/{OTHER}")

    def test_mirror_first_then_upstream_fallback(self):
        d = self.tmpdir()
        mirror = self.track(Registry(d / "mirror").start())
        # A second containerd running at the same time as the class's one.
        node = self.track(Containerd(d / "c2").start())
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=40_000, seed="c-mirror")])
        ref = self.reg.push(layout, "ctrd/mirrored")
        mirror.push(layout, "ctrd/mirrored")
        node.configure_registry(self.reg.host_port, mirrors=[mirror.url])
        up_mark, mirror_mark = self.reg.mark(), mirror.mark()
        node.pull(ref)
        self.reg.wait_log_quiet()
        mirror.wait_log_quiet()
        self.assertEqual(self.reg.blob_gets(since=up_mark), {}, "upstream must not be asked")
        entries = [e for e in mirror.access_log(since=mirror_mark) if e.blob]
        self.assertEqual({e.blob[1] for e in entries},
                         {b.digest for b in layout.images[0].blobs()})
        for e in entries:
            # containerd names the upstream registry in the `ns` query parameter.
            self.assertEqual(e.query, f"ns={self.reg.host_port.replace(':', '%3A')}")
        node.verify_unpacked(layout.images)

        # A mirror that refuses connections: containerd falls back to the upstream.
        node.configure_registry(self.reg.host_port, mirrors=[f"http://127.0.0.1:{free_port()}"])
        other = oci.make_image(d / "img2", [oci.LayerSpec(size=30_000, seed="c-fallback")])
        ref2 = self.reg.push(other, "ctrd/fallback")
        up_mark = self.reg.mark()
        node.pull(ref2)
        self.reg.wait_log_quiet()
        for b in other.images[0].blobs():
            self.assertEqual(self.reg.count_blob_gets(b.digest, since=up_mark), 1)

    def test_native_snapshotter_also_works(self):
        d = self.tmpdir()
        native = self.track(Containerd(d / "native", snapshotter="native").start())
        native.configure_registry(self.reg.host_port)
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=30_000, seed="c-native-1"),
                                            oci.LayerSpec(size=30_000, seed="c-native-2")])
        ref = self.reg.push(layout, "ctrd/native")
        native.pull(ref)
        self.assertEqual(native.verify_unpacked(layout.images), 2)
        # native copies the parent into each snapshot: the top one holds both layers' files.
        top = [p for p in native.snapshot_dirs()
               if all((p / f[0]).is_file() for x in layout.images[0].layers for f in x.files)]
        self.assertEqual(len(top), 1)

    def test_token_auth_pull(self):
        d = self.tmpdir()
        issuer = self.track(TokenIssuer(d / "issuer", users={"alice": "wonderland"},
                                        rules=[Rule("alice", "private/*")]).start())
        reg = self.track(Registry(d / "registry", auth="token", token_issuer=issuer).start())
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=20_000, seed="c-token")])
        ref = reg.push(layout, "private/app")
        self.ctrd.configure_registry(reg.host_port)
        denied = self.ctrd.pull(ref, check=False)
        self.assertEqual(denied.content, {})
        self.assertNotIn(ref, self.ctrd.images())
        self.ctrd.pull(ref, user=("alice", "wonderland"))
        self.assertIn(ref, self.ctrd.images())
        self.ctrd.verify_unpacked(layout.images)
        self.assertTrue(any(t.user == "alice" and t.granted for t in issuer.issued))


if __name__ == "__main__":
    unittest.main(verbosity=2)
