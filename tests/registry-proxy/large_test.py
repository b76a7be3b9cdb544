"""An image with a 300 MiB layer through registry-proxy: containerd pulls and unpacks it (every
file of every layer checked), skopeo copies it (every digest recomputed), and the registry's log
shows the big layer fetched once. Moves ~1 GiB in all: RUN_SERIAL in ctest.
"""

from __future__ import annotations

import os
import unittest

import proxy_common  # noqa: F401 - sets sys.path
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.containerd import Containerd
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream

MIB = 1 << 20


class LargeLayerTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-large-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.layout = oci.make_image(d / "img", [oci.large_layer(300 * MIB, seed="proxy-large"),
                                                oci.LayerSpec(size=100_000, seed="large-small")])
        cls.reg.push(cls.layout, "team/large")
        cls.mark = cls.reg.mark()
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)]).start())

    @unittest.skipUnless(os.geteuid() == 0, "containerd needs root")
    def test_1_containerd(self):
        node = self.track(Containerd(self.tmpdir("shoal-ctr-") / "node").start())
        node.configure_registry(self.reg.host_port, mirrors=[self.proxy.url])
        res = node.pull(f"{self.reg.host_port}/team/large:v1")
        content = node.content(verify=True)
        for b in self.layout.all_blobs().values():
            self.assertEqual(content.get(b.digest), b.size, b.digest)
        self.assertGreater(node.verify_unpacked(self.layout.images), 0)
        print(f"\ncontainerd pulled 300 MiB through registry-proxy in {res.seconds:.1f}s")

    def test_2_skopeo(self):
        back = self.reg.pull(f"{self.proxy.host_port}/team/large:v1", self.tmpdir() / "back")
        self.assertEqual(oci.verify_dir(back),
                         {d: b.size for d, b in self.layout.all_blobs().items()})

    def test_3_each_blob_fetched_once(self):
        self.reg.wait_log_quiet()
        gets = self.reg.blob_gets(self.mark)
        for b in self.layout.images[0].blobs():
            self.assertEqual(gets.get(b.digest, 0), 1, b.digest)
        big = self.layout.images[0].layers[0]
        sizes = [e.size for e in self.reg.access_log(self.mark)
                 if e.blob and e.blob[1] == big.digest and e.method == "GET"]
        self.assertEqual(sizes, [big.size], "the big layer must come across whole, once")


if __name__ == "__main__":
    unittest.main()
