#!/usr/bin/env python3
"""Shoal's images, built as `make images` builds them: this build's Debian packages (cpack into
<build>/packages), then tools/build-images into <build>/images. Checked here, from the OCI archives
themselves:

- the four images (shoal/peerd, shoal/registry-proxy, shoal/scheduler, shoal/redis) exist, tagged
  with the packages' version, for this machine's architecture;
- each is a valid OCI image (index -> manifest -> config and layers, digests verified) whose
  entrypoint is its daemon and whose labels carry the version and the license;
- all four share their first layer (the Debian root filesystem), so a node stores it once;
- the daemon's binary inside each of Shoal's images has exactly the bytes of this build's package;
- shoal/redis holds Debian's redis-server, redis-sentinel and redis-cli and every command
  deploy/base/redis.yaml's start.sh and probes run.

tests/peerd/cluster_test.py (test 15) then pushes them into the cluster's registry, pulls them on
every node through Shoal and runs `--version` inside one with containerd.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHOAL_BUILD_DIR", ROOT / "build" / "release"))
REDIS_DAEMON = "redis-server"  # shoal/redis's entrypoint (tools/build-images)


def sha256(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


class OciArchive:
    def __init__(self, path: Path):
        self.tar = tarfile.open(path)

    def __del__(self):
        self.tar.close()

    def read(self, name: str) -> bytes:
        return self.tar.extractfile(name).read()

    def blob(self, digest: str) -> bytes:
        algo, hexd = digest.split(":", 1)
        data = self.read(f"blobs/{algo}/{hexd}")
        assert sha256(data) == digest, f"blob {digest} does not match its digest"
        return data


@unittest.skipUnless(os.geteuid() == 0, "needs root (mmdebstrap, buildah)")
class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        t0 = time.monotonic()
        debs = BUILD / "packages"
        for stale in debs.glob("*.deb"):  # as `make packages` does: this build's packages only
            stale.unlink()
        subprocess.run(["cpack", "-G", "DEB", "-B", str(debs)], cwd=BUILD, check=True,
                       capture_output=True, timeout=300)
        cp = subprocess.run([str(ROOT / "tools" / "build-images"), "--debs", str(debs), "--out",
                             str(BUILD / "images")], capture_output=True, text=True, timeout=1500)
        print(cp.stderr, file=sys.stderr)
        if cp.returncode != 0:
            raise AssertionError(f"tools/build-images failed ({cp.returncode}):\n{cp.stderr[-4000:]}")
        cls.seconds = time.monotonic() - t0
        cls.meta = json.loads((BUILD / "images" / "images.json").read_text())
        cls.version = subprocess.run(["dpkg-deb", "-f", str(next(debs.glob("shoal-peerd_*.deb"))), "Version"],
                                     capture_output=True, text=True, check=True).stdout.strip()

    def manifest_of(self, img: dict) -> tuple[OciArchive, dict, dict]:
        a = OciArchive(Path(img["archive"]))
        index = json.loads(a.read("index.json"))
        self.assertEqual(len(index["manifests"]), 1)
        desc = index["manifests"][0]
        self.assertEqual(desc["annotations"]["org.opencontainers.image.ref.name"], f"{img['name']}:{img['tag']}")
        manifest = json.loads(a.blob(desc["digest"]))
        config = json.loads(a.blob(manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            a.blob(layer["digest"])  # present and verified
        return a, manifest, config

    def test_four_images_with_the_packages_version(self):
        names = sorted(i["name"] for i in self.meta["images"])
        self.assertEqual(names, ["shoal/peerd", "shoal/redis", "shoal/registry-proxy", "shoal/scheduler"])
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
        self.assertEqual(self.meta["arch"], arch)
        self.assertEqual(self.meta["version"], self.version)
        for img in self.meta["images"]:
            _, _, config = self.manifest_of(img)
            self.assertEqual(config["architecture"], arch)
            self.assertEqual(config["os"], "linux")
            daemon = REDIS_DAEMON if img["name"] == "shoal/redis" else "shoal-" + img["name"].split("/")[1]
            self.assertEqual(config["config"]["Entrypoint"], [f"/usr/bin/{daemon}"])
            labels = config["config"]["Labels"]
            self.assertEqual(labels["org.opencontainers.image.version"], self.version)
            self.assertEqual(labels["org.opencontainers.image.licenses"], "Apache-2.0")
        print(f"\n  images built in {self.seconds:.0f} s: " + ", ".join(
            f"{i['name']}:{i['tag']} {i['size'] >> 20} MiB" for i in self.meta["images"]), file=sys.stderr)

    def test_the_base_layer_is_shared(self):
        firsts = {self.manifest_of(img)[1]["layers"][0]["digest"] for img in self.meta["images"]}
        self.assertEqual(len(firsts), 1, firsts)

    def test_the_daemon_inside_is_the_packaged_one(self):
        """Each image's own layer holds its daemon with exactly the bytes of this build's package
        (tests/install checks the package against the build)."""
        for img in self.meta["images"]:
            if img["name"] == "shoal/redis":
                continue  # Debian's packages (test_redis_image_runs_start_sh)
            a, manifest, _ = self.manifest_of(img)
            daemon = "shoal-" + img["name"].split("/")[1]
            deb = next((BUILD / "packages").glob(f"{daemon}_*.deb"))
            fsys = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(fsys)) as dt:
                want = dt.extractfile(next(m for m in dt.getmembers()
                                           if m.name.lstrip("./") == f"usr/bin/{daemon}")).read()
            found = None
            for layer in manifest["layers"][1:]:
                with tarfile.open(fileobj=io.BytesIO(a.blob(layer["digest"]))) as lt:
                    for m in lt.getmembers():
                        if m.name.lstrip("./") == f"usr/bin/{daemon}":
                            found = lt.extractfile(m).read()
            self.assertIsNotNone(found, f"{daemon} not in {img['name']}'s own layer")
            self.assertEqual(sha256(found), sha256(want), f"{daemon} in {img['name']} is not {deb.name}'s")

    def paths_in(self, name: str) -> set[str]:
        """Every path in the image's layers (without a leading ./)."""
        img = next(i for i in self.meta["images"] if i["name"] == name)
        a, manifest, _ = self.manifest_of(img)
        names = set()
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(a.blob(layer["digest"]))) as lt:
                names |= {m.name.lstrip("./") for m in lt.getmembers()}
        return names

    def test_redis_image_runs_start_sh(self):
        """deploy/base/redis.yaml runs `sh start.sh server|sentinel` in shoal/redis: the Redis
        daemons, redis-cli (sentinel queries, probes) and the tools start.sh and tls-reload.sh
        call are there."""
        names = self.paths_in("shoal/redis")
        # /bin and /sbin are links to usr/ on a merged-/usr root filesystem.
        found = lambda tool: any(f"{d}/{tool}" in names for d in ("usr/bin", "bin", "usr/sbin", "sbin"))
        for tool in ("redis-server", "redis-sentinel", "redis-cli", "sh", "sed", "sha256sum", "cut",
                     "tr", "head", "seq", "sleep", "timeout", "getent", "cat", "grep", "od"):
            self.assertTrue(found(tool), f"{tool} is not in shoal/redis")

    def test_scheduler_image_runs_the_redis_tunnel(self):
        """deploy/base/scheduler.yaml's sidecar runs stunnel4 from shoal/scheduler (TLS to Redis)."""
        names = self.paths_in("shoal/scheduler")
        for tool in ("stunnel4", "sh", "sleep"):  # kill: a builtin of sh
            self.assertTrue(any(f"{d}/{tool}" in names for d in ("usr/bin", "bin")),
                            f"{tool} is not in shoal/scheduler")


if __name__ == "__main__":
    unittest.main()
