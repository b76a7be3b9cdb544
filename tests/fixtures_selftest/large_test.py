"""Heavy self-test: a ~300 MiB layer goes generator → skopeo → registry → containerd (unpacked).

Prints the time of each stage. Runs serially in ctest (RUN_SERIAL) to keep the 2 cores free.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.containerd import Containerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402

SIZE = 300 * oci.MIB


@unittest.skipUnless(os.geteuid() == 0, "containerd needs root")
class LargeLayerTest(FixtureTestCase):
    def test_300_mib_layer_end_to_end(self):
        d = self.tmpdir("shoal-large-")
        times = {}
        t = time.monotonic()
        layout = oci.make_image(d / "img", [oci.LayerSpec(size=4096, seed="large-small"),
                                            oci.large_layer(SIZE, seed="large-300")])
        times["generate"] = time.monotonic() - t
        big = layout.images[0].layers[1]
        self.assertGreaterEqual(big.size, SIZE)

        reg = self.track(Registry(d / "registry").start())
        ctrd = self.track(Containerd(d / "ctrd").start())
        ctrd.configure_registry(reg.host_port)
        t = time.monotonic()
        ref = reg.push(layout, "large/app")
        times["skopeo push"] = time.monotonic() - t

        mark = reg.mark()
        result = ctrd.pull(ref, timeout=400)
        times["ctr pull+unpack"] = result.seconds
        t = time.monotonic()
        content = ctrd.content(verify=True)
        self.assertEqual(content.get(big.digest), big.size)
        self.assertEqual(ctrd.verify_unpacked(layout.images), 2)
        times["verify"] = time.monotonic() - t
        reg.wait_log_quiet()
        gets = [e for e in reg.access_log(since=mark) if e.blob and e.blob[1] == big.digest]
        self.assertEqual([(e.method, e.status, e.size) for e in gets], [("GET", 200, big.size)])
        print("\n" + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()) +
              f" (layer {big.size / oci.MIB:.0f} MiB)", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
