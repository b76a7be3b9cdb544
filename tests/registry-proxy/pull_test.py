"""Real clients pull through registry-proxy from the real registry: containerd 1.6 (`ctr images
pull` with a hosts.toml whose mirror is registry-proxy, so every request carries ?ns=) and
skopeo 1.9 (registry-proxy as the registry itself, no ns: the default upstream).

Images: an OCI image (with an empty and an uncompressed layer), a Docker schema 2 image, an OCI
index and a Docker manifest list (two platforms, one shared layer), and two images sharing a
layer. Every digest is recomputed from what the clients stored (containerd's content store and
unpacked snapshots, skopeo's dir: copies), and the registry's access log must show each blob
fetched exactly once, by registry-proxy, with no ns= ever reaching it.
"""

from __future__ import annotations

import os
import unittest

import proxy_common  # noqa: F401 - sets sys.path
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.containerd import Containerd
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream

IS_ROOT = os.geteuid() == 0


class PullThroughProxyTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-pull-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        shared = oci.LayerSpec(size=120_000, seed="pull-shared")
        cls.images = {
            "team/oci": oci.make_image(d / "oci", [
                oci.LayerSpec(size=400_000, seed="pull-oci", files=3), oci.empty_layer(),
                oci.LayerSpec(size=30_000, seed="pull-raw", compression="none")]),
            "team/docker": oci.make_image(d / "docker", [
                oci.LayerSpec(size=200_000, seed="pull-docker"), oci.empty_layer()],
                fmt="docker"),
            "team/index": oci.make_multiarch(d / "index", [oci.LayerSpec(size=50_000,
                                                                         seed="pull-idx")],
                                             fmt="oci", shared=[shared]),
            "team/dlist": oci.make_multiarch(d / "dlist", [oci.LayerSpec(size=50_000,
                                                                         seed="pull-dl")],
                                             fmt="docker", shared=[shared]),
            "team/one": oci.make_image(d / "one", [shared, oci.LayerSpec(size=10_000,
                                                                         seed="pull-one")]),
            "team/two": oci.make_image(d / "two", [shared, oci.LayerSpec(size=10_000,
                                                                         seed="pull-two")]),
        }
        for name, layout in cls.images.items():
            cls.reg.push(layout, name)
        cls.mark = cls.reg.mark()
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)]).start())
        cls.node = None
        if IS_ROOT:
            cls.node = cls.class_track(Containerd(d / "node").start())
            cls.node.configure_registry(cls.reg.host_port, mirrors=[cls.proxy.url],
                                        dial_timeout="1s")

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()

    def ctr_pull(self, name: str, **kw):
        if self.node is None:
            self.skipTest("containerd needs root")
        layout = self.images[name]
        res = self.node.pull(f"{self.reg.host_port}/{name}:v1", **kw)
        content = self.node.content(verify=True)
        return layout, res, content

    def skopeo_pull(self, name: str) -> dict[str, int]:
        back = self.reg.pull(f"{self.proxy.host_port}/{name}:v1", self.tmpdir() / "back")
        got = oci.verify_dir(back)
        want = {d: b.size for d, b in self.images[name].all_blobs().items()}
        self.assertEqual(got, want, f"skopeo's copy of {name} must be byte-identical")
        return got

    # Test names carry a number: unittest runs them in name order, and the last one checks
    # the registry's log for the whole class.

    def test_1_containerd_oci_image(self):
        layout, _, content = self.ctr_pull("team/oci")
        for b in layout.all_blobs().values():
            self.assertEqual(content.get(b.digest), b.size, b.digest)
        self.assertGreater(self.node.verify_unpacked(layout.images), 0)

    def test_2_containerd_docker_image(self):
        layout, _, content = self.ctr_pull("team/docker")
        for b in layout.all_blobs().values():
            self.assertEqual(content.get(b.digest), b.size, b.digest)
        self.node.verify_unpacked(layout.images)

    def test_3_containerd_oci_index_all_platforms(self):
        layout, _, content = self.ctr_pull("team/index", all_platforms=True)
        for b in layout.all_blobs().values():
            self.assertEqual(content.get(b.digest), b.size, b.digest)
        self.node.verify_unpacked([layout.image("amd64")])

    def test_4_containerd_docker_list_other_platform(self):
        layout, _, content = self.ctr_pull("team/dlist", platform="linux/arm64")
        arm = layout.image("arm64")
        for b in [layout.top, arm.manifest, *arm.blobs()]:
            self.assertEqual(content.get(b.digest), b.size, b.digest)
        self.assertNotIn(layout.image("amd64").layers[0].digest, content)
        self.node.verify_unpacked([arm])

    def test_5_containerd_two_images_sharing_a_layer(self):
        for name in ("team/one", "team/two"):
            layout, _, content = self.ctr_pull(name)
            for b in layout.all_blobs().values():
                self.assertEqual(content.get(b.digest), b.size, b.digest)
            self.node.verify_unpacked(layout.images)

    def test_6_skopeo_pulls_every_image(self):
        for name in self.images:
            with self.subTest(image=name):
                self.skopeo_pull(name)

    def test_7_registry_saw_each_blob_once_and_never_ns(self):
        self.reg.wait_log_quiet()
        entries = self.reg.access_log(self.mark)
        self.assertTrue(entries, "nothing reached the registry")
        blobs = {}
        for layout in self.images.values():
            for im in layout.images:
                for b in im.blobs():
                    blobs[b.digest] = b
        gets = self.reg.blob_gets(self.mark)
        for digest in blobs:
            self.assertEqual(gets.get(digest, 0), 1, f"{digest} fetched {gets.get(digest, 0)} "
                             "times from upstream")
        for e in entries:
            self.assertEqual(e.query, "", f"a query string reached upstream: {e.path}?{e.query}")
            self.assertTrue(e.user_agent.startswith("shoal/"),
                            f"a client bypassed registry-proxy: {e.user_agent} {e.path}")
        if self.node is not None:
            # containerd really used the mirror (ns= in registry-proxy's own request log).
            # containerd percent-encodes the ':' of host:port.
            ns = self.reg.host_port.replace(":", "%3A")
            self.assertTrue(f"?ns={ns}" in self.proxy.log_text() or
                            f"?ns={self.reg.host_port}" in self.proxy.log_text(),
                            "containerd did not go through the mirror")


if __name__ == "__main__":
    unittest.main()
