#!/usr/bin/env python3
"""Dataset views against the real daemons: two peerd nodes in network namespaces (root only),
registry-proxy and the scheduler on a third, s3rver on a fourth (docs/datasets.md "Views",
"Expiry"; security review findings 8 and 19).

- F19, a write through a view: root in a training pod ignores the view's 0444. On this ext4 as
  root a view's files are sealed hard links to the cache objects (immutable: the open for writing
  is refused, even to root); a second view of the same objects (twin@v1) gets copies, and a write
  into a copy stays in it. Either way the cache object of that node keeps its bytes, the node
  quarantines nothing, and another node that fetches the dataset from it (registry-proxy's link is
  slow, node 1's is not) gets the origin's bytes with no piece failing its hash. Removing the
  sealed view leaves the cache object with its bytes, unsealed, on an inode of its own.
- F8, expiry: with datasets.pin_ttl 8 s, a view that is renewed (`shoalctl dataset renew`) stays;
  one that is not (its expiry survives a restart of peerd) is removed with its record after the
  TTL, its objects lose their pins and are evicted once another dataset needs the space (cache
  quota 20 MiB: 12 MiB of junk and 12 MiB more do not fit); the renewed one expires as soon as the renewals stop, and the expiry counter
  says so.

One cluster serves both cases.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.cluster import Cluster  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402

TTL = 8  # datasets.pin_ttl of both nodes, seconds
MIB = 1 << 20

POISON = {"big.bin": dc.content("poison-big", 3 * MIB + 1234),
          **{f"small/s{i:02d}.bin": dc.content(f"poison{i}", 3000 + i * 111) for i in range(20)}}
KEEP = {f"k{i}.bin": dc.content(f"keep{i}", 5000 + i) for i in range(10)}
JUNK = {f"junk-{i}.bin": dc.content(f"junk{i}", 4 * MIB + i) for i in range(3)}
BIG2 = {f"big2-{i}.bin": dc.content(f"big2-{i}", 4 * MIB + 7 * i) for i in range(3)}
DATASETS = {"poison": POISON, "twin": POISON, "keep": KEEP, "junk": JUNK, "big2": BIG2}


def object_file(peerd, data: bytes) -> Path:
    h = hashlib.sha256(data).hexdigest()
    return Path(peerd.dir) / "cache" / "objects" / "sha256" / h[:2] / h


@unittest.skipUnless(os.geteuid() == 0, "network namespaces need root")
class Views(FixtureTestCase):
    cluster: Cluster

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # registry-proxy's link is slow, the nodes' are not: node 2 fetches from node 1.
        cls.cluster = cls.class_track(Cluster(
            cls.class_tmpdir("datasets-views-"), nodes=2, rate=None, infra_rate="40mbit", containerd=False,
            registry_origin=False, s3_origin=True,
            proxy_extra={"datasets": {"small_file_max": "1MiB", "pack_target": "1MiB"}},
            peerd_extra={"cache": {"quota": "20MiB"},
                         # seed_idle_unload: a loaded seed pins its object (3 x this). registry-proxy asks
                         # node 2 for some junk@v1 objects every 4-6 s (each ask loads a seed); at 2 s
                         # (6 s pins) two of them stayed pinned all along on a loaded machine, at 1 s
                         # (3 s pins) they come and go, so the view's own pins can be seen gone.
                         "swarm": {"stall_timeout": "5s", "fallback_deadline": "30s", "seed_idle_unload": "1s"},
                         "datasets": {"pin_ttl": f"{TTL}s", "expiry_check_interval": "500ms"}},
            # Node 1 is the seed node 2 must fetch from in test_1, after the twin view's writes: with
            # TLS a seed unloaded for idleness is not handed out (docs/p2p.md, "SSL torrents and
            # unloaded seeds"), and at 1 s the 5 s unload tick sometimes came first (node 2 then got
            # every byte from registry-proxy). Node 1's pins play no part in test_2.
            peerd_extra_by_node={0: {"swarm": {"seed_idle_unload": "120s"}}}))
        cls.cluster.start()
        for name, files in DATASETS.items():
            for k, v in files.items():
                cls.cluster.s3.write_object(f"{name}/{k}", v)
            decl = dc.s3_declaration(name, "v1", cls.cluster.s3, f"{name}/")
            code, body = dc.curl_json(cls.cluster, None, cls.cluster.proxy.url + "/shoal/v1/datasets", "-X",
                                      "POST", "-H", "Content-Type: application/json", "--data-binary",
                                      json.dumps(decl))
            assert code in (200, 202), body
        for name in DATASETS:
            wait_until(lambda n=name: dc.curl_json(cls.cluster, None,
                                                   f"{cls.cluster.proxy.url}/shoal/v1/datasets/{n}@v1")[0] == 200,
                       120, f"{name}@v1 resolved")

    def prefetch(self, i: int, ref: str):
        p = self.cluster.peerds[i]
        cp = dc.shoalctl("dataset", "prefetch", ref, peerd=p.url, netns=self.cluster.netns(i), timeout=200)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)

    def status(self, i: int, ref: str) -> tuple[int, object]:
        return dc.curl_json(self.cluster, i, f"{self.cluster.peerds[i].url}/shoal/v1/datasets/{ref}")

    def test_1_write_through_a_view_stays_in_it(self):
        c = self.cluster
        n1, n2 = c.peerds
        view_files = lambda: {k: c.metrics_of(n1.url, 0).get(f"shoal_peerd_dataset_view_files_{k}_total", 0)
                              for k in ("cloned", "sealed", "copied")}
        before = view_files()
        self.prefetch(0, "poison@v1")
        made = {k: v - before[k] for k, v in view_files().items()}
        view = dc.view_dir(n1, "poison@v1")
        self.assertEqual(dc.sha((view / "big.bin").read_bytes()), dc.sha(POISON["big.bin"]))
        obj = object_file(n1, POISON["big.bin"])
        self.assertTrue(obj.exists(), obj)
        # ext4 (no clones) as root: every file a sealed link to its cache object.
        self.assertEqual(made, {"cloned": 0, "sealed": len(POISON), "copied": 0})
        self.assertEqual(os.stat(view / "big.bin").st_ino, obj.stat().st_ino)
        # Root in a pod: 0444 does not stop it, the seal does.
        for name in ("big.bin", "small/s03.bin"):
            with self.assertRaises(PermissionError, msg=f"{name} opened for writing"):
                open(view / name, "r+b")
        with self.assertRaises(PermissionError):
            os.unlink(view / "big.bin")
        # A second view of the same objects: copies (one view per sealed inode). Root writes into
        # them; the writes stay there.
        self.prefetch(0, "twin@v1")
        self.assertEqual(view_files()["copied"] - before["copied"], len(POISON))
        twin = dc.view_dir(n1, "twin@v1")
        with open(twin / "big.bin", "r+b") as f:
            f.write(b"POISON" * 100_000)
        with open(twin / "small" / "s03.bin", "r+b") as f:
            f.write(b"X" * 100)
        for name in ("big.bin", "small/s03.bin"):
            self.assertNotEqual(dc.sha((twin / name).read_bytes()), dc.sha(POISON[name]))
            self.assertEqual(dc.sha((view / name).read_bytes()), dc.sha(POISON[name]))
        # The cache object (what this node seeds) still has the origin's bytes.
        self.assertEqual(dc.sha(obj.read_bytes()), dc.sha(POISON["big.bin"]),
                         "a write through the view reached node 1's cache object")

        self.prefetch(1, "poison@v1")
        dc.verify_view(dc.view_dir(n2, "poison@v1"), POISON, cache_objects=Path(n2.dir) / "cache" / "objects")
        _, st = self.status(1, "poison@v1")
        m1, m2 = c.metrics_of(n1.url, 0), c.metrics_of(n2.url, 1)
        print("VIEWS " + json.dumps({"node2_from_peers": st["from_peers"], "node2_from_origin": st["from_origin"],
                                     "node2_from_http": st["from_http"],
                                     "node2_hash_failures": m2.get("shoal_peerd_hash_failures_total"),
                                     "node1_uploaded": m1.get("shoal_peerd_bytes_uploaded_total")}), flush=True)
        self.assertEqual(m2.get("shoal_peerd_hash_failures_total", 0), 0, "node 1 served pieces that fail their hash")
        self.assertEqual(m1.get("shoal_peerd_quarantined_total", 0), 0)
        self.assertGreater(st["from_peers"], 0, f"node 2 got nothing from node 1: {st}")
        # Removing the sealed view: gone, and the cache keeps the object's bytes on an inode no
        # view shares, without the seal.
        inode = obj.stat().st_ino
        code, body = dc.curl_json(c, 0, f"{n1.url}/shoal/v1/datasets/poison@v1", "-X", "DELETE")
        self.assertEqual(code, 200, body)
        self.assertFalse(view.exists(), "the sealed view is still there")
        self.assertTrue(obj.exists(), "the cache lost the object with the view")
        self.assertNotEqual(obj.stat().st_ino, inode)
        self.assertEqual(obj.stat().st_nlink, 1)
        self.assertEqual(dc.sha(obj.read_bytes()), dc.sha(POISON["big.bin"]))
        with open(obj, "r+b"):
            pass  # not sealed any more (root may open it; 0444 is all that is left)

    def test_2_views_expire_unless_renewed(self):
        c = self.cluster
        n1, n2 = c.peerds
        self.prefetch(0, "keep@v1")
        keep_ready = time.monotonic()
        self.prefetch(1, "junk@v1")
        _, before = self.status(1, "junk@v1")
        # The expiry is persisted with the record: a restart neither loses nor resets it.
        c.restart_peerd(1)
        code, st = self.status(1, "junk@v1")
        self.assertEqual(code, 200, st)
        self.assertEqual(st.get("expires"), before.get("expires"), st)
        # node 1 renews keep@v1 (shoalctl dataset renew) all along; nobody renews junk@v1 on node 2.
        stop, errors = threading.Event(), []

        def renew():
            while not stop.is_set():
                cp = dc.shoalctl("dataset", "renew", "keep@v1", peerd=n1.url, netns=c.netns(0), timeout=30)
                if cp.returncode != 0:
                    errors.append(cp.stdout + cp.stderr)
                stop.wait(1.5)
        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        try:
            wait_until(lambda: self.status(1, "junk@v1")[0] == 404, 2 * TTL + 5, "junk@v1 expired on node 2",
                       diagnostics=lambda: json.dumps(self.status(1, "junk@v1")))
            self.assertFalse(dc.view_dir(n2, "junk@v1").exists(), "the expired view is still there")
            self.assertIsNotNone(before.get("expires"), before)
            self.assertLessEqual(before["expires_in_seconds"], TTL, before)
            # The view's pins are gone; a seed loaded for a peer pins its object while it is used
            # (3 x swarm.seed_idle_unload), and registry-proxy keeps asking for one of them.
            wait_until(lambda: c.metrics_of(n2.url, 1).get("shoal_cache_pinned_objects", 99) <= 1, 20,
                       "node 2 with at most one (seed) pinned object",
                       diagnostics=lambda: str(c.metrics_of(n2.url, 1).get("shoal_cache_pinned_objects")))
            # Its objects lost their pins: another dataset that needs the space gets it by eviction.
            self.prefetch(1, "big2@v1")
            dc.verify_view(dc.view_dir(n2, "big2@v1"), BIG2)
            # (A peer that keeps asking node 2 for one of them may keep that one loaded as a seed,
            # which pins it while it is used: at most one of the three stays.)
            wait_until(lambda: sum(object_file(n2, v).exists() for v in JUNK.values()) <= 1, 30,
                       "junk@v1's objects evicted from node 2's cache")
            self.assertTrue(all(object_file(n2, v).exists() for v in BIG2.values()),
                            "big2@v1's pinned objects went")
            self.assertGreaterEqual(c.metrics_of(n2.url, 1).get("shoal_peerd_dataset_views_expired_total", 0), 1)
            # Renewed for longer than the TTL: still here, pinned, with its expiry in the listing.
            time.sleep(max(0.0, keep_ready + TTL + 2 - time.monotonic()))
            code, st = self.status(0, "keep@v1")
            self.assertEqual(code, 200, f"keep@v1 expired although renewed: {st}")
            self.assertTrue(dc.view_dir(n1, "keep@v1").is_dir())
            self.assertGreater(st["expires_in_seconds"], 0, st)
            self.assertLessEqual(st["expires_in_seconds"], TTL, st)
            cp = dc.shoalctl("dataset", "ls", peerd=n1.url, netns=c.netns(0))
            self.assertIn("keep@v1", cp.stdout)
        finally:
            stop.set()
            renewer.join(40)
        self.assertEqual(errors, [], "shoalctl dataset renew failed")
        # Renewals stopped: keep@v1 goes too.
        wait_until(lambda: self.status(0, "keep@v1")[0] == 404, 2 * TTL + 5, "keep@v1 expired on node 1")
        self.assertFalse(dc.view_dir(n1, "keep@v1").exists())

if __name__ == "__main__":
    unittest.main(verbosity=2)
