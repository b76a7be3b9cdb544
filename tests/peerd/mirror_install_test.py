#!/usr/bin/env python3
"""`shoal-peerd mirror install|uninstall` against the real containerd fixture (CRI plugin on, its
`config_path` the fixture's certs.d, which already holds the operator's hosts.toml for the
registry), a real registry, registry-proxy and peerd on loopback:

  1. a containerd config without config_path: install exits 3, says which lines to add, writes
     nothing;
  2. install (checked against the fixture's real config.toml) → `ctr images pull` goes through
     peerd (its /shoal/v1/status counts the image's bytes, registry-proxy's log shows ns=) →
     uninstall → the original hosts.toml is back byte for byte with its mode, no file of
     Shoal's is left → with peerd stopped, the image pulls again straight from the registry
     (its access log shows containerd's own GETs);
  3. (podman present) the registries.conf.d drop-in: `podman pull` in a mount namespace where
     the drop-in dir is bind-mounted over /etc/containers/registries.conf.d goes through
     peerd (CRI-O reads the same file with the same library, containers/image).

Needs root (containerd, mount namespaces); skips otherwise.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))

from shoal_fixtures import FixtureTestCase, oci  # noqa: E402
from shoal_fixtures.containerd import Containerd  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, binary, upstream  # noqa: E402

IS_ROOT = os.geteuid() == 0
HAVE_PODMAN = shutil.which("podman") is not None and shutil.which("unshare") is not None


def image_bytes(layout: oci.ImageLayout) -> int:
    return sum(b.size for b in layout.images[0].blobs())


@unittest.skipUnless(IS_ROOT and shutil.which("containerd"), "needs root and containerd")
class MirrorInstallTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.d = cls.class_tmpdir("shoal-mirror-install-")
        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.app = oci.make_image(d / "app", [oci.LayerSpec(size=600_000, seed="mirror-install")])
        cls.pod = oci.make_image(d / "pod", [oci.LayerSpec(size=300_000, seed="mirror-podman")])
        cls.reg.push(cls.app, "test/app")
        cls.reg.push(cls.pod, "test/pod")
        # prefix: CRI-O and podman send no ns=, so registry-proxy routes /v2/local/... here.
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", torrent=True, log_level="info", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url, prefix="local")]).start())
        registries = [{"host": cls.reg.host_port, "server": cls.reg.url, "prefix": "local"}]
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="mirror-install", registry_proxy=cls.proxy.url, extra={
            "upstream": {"request_timeout": "5s", "metainfo_wait": "1s"},
            "swarm": {"stall_timeout": "500ms", "fallback_deadline": "10s"},
            "mirror": {"registries": registries}}).start())
        cls.ctrd = cls.class_track(Containerd(d / "ctrd", cri=True).start())
        cls.backup = d / "backup"

    def mirror(self, *args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
        cp = subprocess.run([str(binary("shoal-peerd")), "mirror", *args], capture_output=True,
                            text=True, timeout=30)
        if check_rc is not None:
            self.assertEqual(cp.returncode, check_rc, f"mirror {' '.join(args)}:\n{cp.stdout}\n{cp.stderr}")
        return cp

    def install_args(self, containerd_config: Path, dropin: Path) -> list[str]:
        return ["install", "-c", str(self.peerd.config_path), "--certs-dir", str(self.ctrd.hosts_dir),
                "--containerd-config", str(containerd_config), "--backup-dir", str(self.backup),
                "--registries-conf-d", str(dropin)]

    def test_1_refuses_when_config_path_points_elsewhere(self):
        conf = self.tmpdir() / "config.toml"
        conf.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n'
                        '  config_path = "/etc/containerd/certs.d"\n')
        cp = self.mirror(*self.install_args(conf, self.d / "none" / "registries.conf.d"), check_rc=3)
        self.assertIn(f'{conf}:3 sets config_path = "/etc/containerd/certs.d"', cp.stderr)
        self.assertIn(f'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{self.ctrd.hosts_dir}"',
                      cp.stderr)
        self.assertFalse(self.backup.exists(), "a refused install wrote its backup dir")

    def test_2_install_pull_through_peerd_uninstall_then_pull_direct(self):
        original = self.ctrd.configure_registry(self.reg.host_port)  # the operator's own file
        original.chmod(0o640)
        orig_bytes, orig_mode = original.read_bytes(), stat.S_IMODE(original.stat().st_mode)
        t0 = time.monotonic()
        cp = self.mirror(*self.install_args(self.ctrd.config_path, self.d / "none" / "registries.conf.d"))
        self.assertIn(f"containerd reads {self.ctrd.hosts_dir}", cp.stdout)
        self.assertIn(f"backed up {original}", cp.stdout)
        self.assertIn(f"wrote {self.ctrd.hosts_dir}/_default/hosts.toml", cp.stdout)
        written = original.read_text()
        self.assertIn(f'server = "{self.reg.url}"', written)
        self.assertIn(f'[host."{self.peerd.url}"]', written)

        ref = f"{self.reg.host_port}/test/app:v1"
        before = self.peerd.status().get("cache", {}).get("bytes", 0)
        self.ctrd.pull(ref)
        want = image_bytes(self.app)
        st = self.peerd.status()
        self.assertGreaterEqual(st["cache"]["bytes"] - before, want - 2000,
                                f"peerd did not hold the image's blobs: {st}")
        got = st["bytes"]["from_origin"] + st["bytes"]["from_peers"] + st["bytes"]["from_http_fallback"]
        self.assertGreaterEqual(got, self.app.images[0].layers[0].size, st)
        mark = self.reg.mark()

        cp = self.mirror("uninstall", "--certs-dir", str(self.ctrd.hosts_dir), "--backup-dir", str(self.backup))
        self.assertIn(f"restored {original}", cp.stdout)
        self.assertEqual(original.read_bytes(), orig_bytes, "the original hosts.toml is not back byte for byte")
        self.assertEqual(stat.S_IMODE(original.stat().st_mode), orig_mode)
        self.assertFalse((self.ctrd.hosts_dir / "_default").exists())
        self.assertFalse((self.backup / "manifest.json").exists())

        # Peerd down: containerd's own hosts.toml sends it straight to the registry.
        self.ctrd.remove_image(ref)
        self.peerd.stop()
        self.ctrd.pull(ref)
        self.reg.wait_log_quiet()
        direct = [e for e in self.reg.access_log(mark) if e.blob is not None and e.method == "GET"]
        self.assertTrue(direct, "the second pull did not reach the registry")
        self.assertTrue(all(not e.user_agent.startswith("shoal/") for e in direct),
                        [e.user_agent for e in direct])
        self.peerd.start()
        print(f"install, pull through peerd, uninstall, direct pull: {time.monotonic() - t0:.1f} s",
              file=sys.stderr)

    @unittest.skipUnless(HAVE_PODMAN, "podman is not installed")
    def test_3_podman_pulls_through_the_dropin(self):
        d = self.tmpdir("shoal-mirror-podman-")
        system_dir = Path("/etc/containers/registries.conf.d")
        if not system_dir.is_dir():
            self.skipTest(f"{system_dir} missing (podman's package makes it)")
        dropin = d / "containers" / "registries.conf.d"
        dropin.mkdir(parents=True)
        backup = d / "backup"
        cp = self.mirror("install", "-c", str(self.peerd.config_path), "--skip-containerd",
                         "--registries-conf-d", str(dropin), "--backup-dir", str(backup))
        conf = dropin / "50-shoal.conf"
        text = conf.read_text()
        self.assertIn(f'location = "127.0.0.1:{self.peerd.http_port}/local"', text)
        before = self.peerd.status()["cache"]["bytes"]
        store = d / "storage"
        script = (f"mount --bind {dropin} {system_dir} && exec podman --root {store}/root "
                  f"--runroot {store}/run --storage-driver vfs pull "
                  f"{self.reg.host_port}/test/pod:v1")
        cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=120)
        self.assertEqual(cp.returncode, 0, f"podman pull:\n{cp.stdout}\n{cp.stderr}")
        st = self.peerd.status()
        self.assertGreaterEqual(st["cache"]["bytes"] - before, self.pod.images[0].layers[0].size,
                                f"podman did not pull through peerd: {st}\n{cp.stderr}")
        self.mirror("uninstall", "--backup-dir", str(backup))
        self.assertFalse(conf.exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
