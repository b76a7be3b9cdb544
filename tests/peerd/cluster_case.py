"""The base of peerd's multi-node integration tests (cluster_test.py, faults_test.py): one
namespaced cluster (tests/support/shoal_fixtures/cluster.py) per test class, started in
setUpClass, and the helpers both suites use. A subclass sets CLUSTER (keyword arguments of
Cluster: nodes, rate, torrent, peerd_extra), TMP_PREFIX and REPO_PREFIX (each test pushes its
own image under REPO_PREFIX/<name>, so no test depends on another's objects).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

from bt_fake_peer import Torrent
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.cluster import Cluster


class ClusterCase(FixtureTestCase):
    CLUSTER: dict[str, Any] = {}
    TMP_PREFIX = "shoal-peerd-"
    REPO_PREFIX = "test"
    c: Cluster
    timings: dict[str, float]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        t0 = time.monotonic()
        cls.c = cls.class_track(Cluster(cls.class_tmpdir(cls.TMP_PREFIX), **cls.CLUSTER))
        cls.c.start()
        cls.timings = {"cluster start": time.monotonic() - t0}

    @classmethod
    def tearDownClass(cls):
        print("\n" + "\n".join(f"  {k:<44} {v:6.1f} s" for k, v in cls.timings.items()), file=sys.stderr)
        super().tearDownClass()

    def push(self, name: str, sizes: list[int]):
        """Pushes an image of uncompressed layers of these sizes: (layout, ref, image)."""
        layers = [oci.LayerSpec(size=s, seed=f"{name}-{i}", compression="none") for i, s in enumerate(sizes)]
        layout, ref = self.c.push(layers, name=f"{self.REPO_PREFIX}/{name}")
        return layout, ref, layout.images[0]

    def status(self, i: int) -> dict:
        return self.c.peerds[i].status()

    def wait(self, pred: Callable[[], Any], timeout: float, what: str):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = pred()
            if v:
                return v
            time.sleep(0.2)
        self.fail(f"timed out after {timeout}s waiting for {what}")

    def object_path(self, i: int, digest: str) -> Path:
        return Path(self.c.peerds[i].dir) / "cache" / "objects" / "sha256" / digest[7:9] / digest[7:]

    def metainfo(self, digest: str, repo: str) -> bytes:
        """The object's .torrent from registry-proxy (which fetches the object first if needed)."""
        url = (f"{self.c.proxy.url}/shoal/v1/metainfo/{digest}?repo={repo}&wait_ms=5000"
               f"&ns={self.c.registry.host_port}")
        path = self.tmpdir() / "object.torrent"
        for _ in range(20):
            cp = self.c.curl(None, "-o", str(path), "-w", "%{http_code}", url, timeout=15)
            if cp.stdout.strip() == "200":
                body = path.read_bytes()
                Torrent(body)  # parses
                return body
            time.sleep(0.5)
        self.fail(f"no metainfo for {digest}")
