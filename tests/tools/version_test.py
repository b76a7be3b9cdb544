"""`--version` on every binary and `shoal_build_info` on every daemon's /metrics, checked against
what the machine says independently of Shoal's code:

- the version is the one cmake/version.cmake's rule gives for the source tree now (`git describe
  --always --dirty`, prefixed with the project version when no tag exists; "-dirty" aside, which
  an edit after the build changes), so a binary built from another commit fails;
- each library line is the version of the library the binary really loads: libtorrent from the
  file name of the shared object `ldd` resolves, RocksDB likewise or, linked statically (Debian's
  CMake package), from its headers when its build-properties string is in the binary, OpenSSL
  from `openssl version`, Boost from boost/version.hpp; a binary lists libtorrent/RocksDB exactly
  when it links them;
- cmake/version.cmake itself: a tagless repository gives 0.1.0-g<commit>, a new commit a new
  version, an edit "-dirty", a tag its describe, no .git "0.1.0-unknown", SHOAL_VERSION wins, and
  an unchanged version leaves the header untouched (no rebuild);
- only one object file of the build depends on the generated header (ninja's dependency log), so
  a new commit recompiles one file and relinks, and ccache serves every other object;
- each daemon (registry-proxy, peerd, scheduler) exposes shoal_build_info with the same labels
  as its --version, value 1.

Three daemons started on loopback with default-ish configs; a few seconds in all.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Peerd, Scheduler  # noqa: E402
from shoal_fixtures.shoal import REPO, RegistryProxy, build_dir  # noqa: E402

BINARIES = {
    "shoal-peerd": "peerd/shoal-peerd",
    "shoal-registry-proxy": "registry-proxy/shoal-registry-proxy",
    "shoal-scheduler": "scheduler/shoal-scheduler",
    "shoal-netsetup": "netsetup/shoal-netsetup",
    "shoalctl": "tools/shoalctl",
}
SCRIPT = REPO / "cmake" / "version.cmake"


def project_version() -> str:
    m = re.search(r"project\(shoal VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    assert m, "no project(shoal VERSION ...) in CMakeLists.txt"
    return m.group(1)


def expected_version(src: Path) -> str:
    """cmake/version.cmake's rule, written again here."""
    if not (src / ".git").exists():
        return project_version() + "-unknown"
    d = subprocess.run(["git", "--no-optional-locks", "-C", str(src), "describe", "--always",
                        "--dirty"], capture_output=True, text=True, check=True).stdout.strip()
    return f"{project_version()}-g{d}" if re.fullmatch(r"[0-9a-f]+(-dirty)?", d) else d


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


def linked(binary: Path) -> dict[str, str]:
    """library -> the real file ldd resolves it to."""
    out = run(["ldd", str(binary)]).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            libs[m.group(1)] = os.path.realpath(m.group(2))
    return libs


def so_version(path: str) -> str:
    """'.../librocksdb.so.7.8.3' -> '7.8.3'."""
    return path.rsplit(".so.", 1)[1]


def machine_versions(binary: Path) -> dict[str, str]:
    """What the binary should report, learnt from the machine."""
    want = {}
    ssl = run(["openssl", "version"]).stdout.split()
    want["openssl"] = ssl[1]
    text = Path("/usr/include/boost/version.hpp").read_text()
    v = int(re.search(r"#define BOOST_VERSION (\d+)", text).group(1))
    want["boost"] = f"{v // 100000}.{v // 100 % 1000}.{v % 100}"
    for soname, path in linked(binary).items():
        if soname.startswith("librocksdb.so"):
            want["rocksdb"] = so_version(path)
        if soname.startswith("libtorrent-rasterbar.so"):
            want["libtorrent"] = so_version(path)
    # Debian's RocksDB CMake package links librocksdb.a: no ldd line, but the library's build
    # properties string is in the binary; its version is then the headers'.
    if "rocksdb" not in want and b"rocksdb_build_git_sha" in binary.read_bytes():
        text = Path("/usr/include/rocksdb/version.h").read_text()
        parts = [re.search(rf"#define ROCKSDB_{p} (\d+)", text).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        want["rocksdb"] = ".".join(parts)
    return want


def parse_version_text(text: str) -> tuple[str, str, dict[str, str]]:
    lines = text.rstrip("\n").split("\n")
    name, _, version = lines[0].partition(" ")
    libs = {}
    for line in lines[1:]:
        assert line.startswith("  "), f"library line not indented: {line!r}"
        k, _, v = line.strip().partition(" ")
        libs[k] = v
    return name, version, libs


def build_info(metrics_text: str) -> list[dict[str, str]]:
    """The label sets of every shoal_build_info sample whose value is 1."""
    out = []
    for line in metrics_text.splitlines():
        m = re.fullmatch(r"shoal_build_info\{(.*)\} (\S+)", line)
        if m:
            assert float(m.group(2)) == 1.0, line
            out.append(dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))))
    return out


class VersionFlag(unittest.TestCase):
    def test_every_binary(self):
        want_version = expected_version(REPO)
        for name, rel in BINARIES.items():
            with self.subTest(binary=name):
                path = build_dir() / rel
                self.assertTrue(path.exists(), f"{path} not built")
                cp = run([str(path), "--version"])
                self.assertEqual(cp.returncode, 0, cp.stderr)
                self.assertEqual(cp.stderr, "")
                got_name, version, libs = parse_version_text(cp.stdout)
                self.assertEqual(got_name, name)
                # The commit must match; "-dirty" may change by an edit after the build.
                self.assertEqual(version.removesuffix("-dirty"), want_version.removesuffix("-dirty"),
                                 "the binary was built from another commit: rebuild")
                self.assertEqual(libs, machine_versions(path))

    def test_help_lists_version(self):
        for name, rel in BINARIES.items():
            with self.subTest(binary=name):
                cp = run([str(build_dir() / rel), "--help"])
                self.assertEqual(cp.returncode, 0, cp.stderr)
                self.assertIn("--version", cp.stdout)

    def test_only_version_cc_depends_on_the_header(self):
        if not (build_dir() / "build.ninja").exists():
            self.skipTest("not a Ninja build tree")
        deps = run(["ninja", "-C", str(build_dir()), "-t", "deps"]).stdout
        users, target = [], None
        for line in deps.splitlines():
            if line and not line.startswith(" "):
                target = line.split(":")[0]
            elif line.strip().endswith("shoal_build_version.h"):
                users.append(target)
        self.assertEqual([u for u in users if not u.endswith("common.dir/src/version.cc.o")], [],
                         "only common/src/version.cc may include the version header")
        self.assertEqual(len(users), 1, deps[:2000] if not users else users)


class VersionScript(unittest.TestCase):
    """cmake/version.cmake on a scratch repository."""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="shoal-version-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.src = self.dir / "src"
        self.src.mkdir()
        self.out = self.dir / "gen" / "shoal_build_version.h"
        self.git_env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.src), *args], capture_output=True, text=True,
                              check=True, env=self.git_env).stdout.strip()

    def generate(self, override: str = "") -> str:
        cp = run(["cmake", f"-DSOURCE_DIR={self.src}", f"-DOUT={self.out}",
                  "-DPROJECT_VERSION=0.1.0", f"-DOVERRIDE={override}", "-P", str(SCRIPT)])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        m = re.search(r'#define SHOAL_BUILD_VERSION "([^"]*)"', self.out.read_text())
        self.assertIsNotNone(m, self.out.read_text())
        return m.group(1)

    def test_versions(self):
        self.assertEqual(self.generate(), "0.1.0-unknown")
        self.assertEqual(self.generate("1.2.3-deb1"), "1.2.3-deb1")
        self.git("init", "-q")
        (self.src / "a").write_text("a\n")
        self.git("add", "a")
        self.git("commit", "-qm", "one")
        first = self.generate()
        self.assertEqual(first, "0.1.0-g" + self.git("rev-parse", "--short", "HEAD"))
        (self.src / "a").write_text("b\n")
        self.assertEqual(self.generate(), first + "-dirty")
        self.git("commit", "-qam", "two")
        second = self.generate()
        self.assertNotEqual(second, first)
        self.assertEqual(second, "0.1.0-g" + self.git("rev-parse", "--short", "HEAD"))
        self.git("tag", "-a", "v0.2.0", "-m", "v0.2.0")  # describe reads annotated tags
        self.assertEqual(self.generate(), "v0.2.0")
        (self.src / "b").write_text("c\n")
        self.git("add", "b")
        self.git("commit", "-qm", "three")
        self.assertRegex(self.generate(), r"^v0\.2\.0-1-g[0-9a-f]+$")

    def test_unchanged_version_leaves_the_header_alone(self):
        self.generate("9.9.9")
        os.utime(self.out, (1_000_000, 1_000_000))
        self.generate("9.9.9")
        self.assertEqual(self.out.stat().st_mtime, 1_000_000)
        self.generate("9.9.10")
        self.assertNotEqual(self.out.stat().st_mtime, 1_000_000)


class BuildInfoMetric(FixtureTestCase):
    def check(self, name: str, metrics_url: str):
        version = parse_version_text(run([str(build_dir() / BINARIES[name]), "--version"]).stdout)
        with urllib.request.urlopen(metrics_url, timeout=5) as r:
            text = r.read().decode()
        self.assertIn("# TYPE shoal_build_info gauge", text)
        samples = build_info(text)
        self.assertEqual(samples, [dict(version=version[1], **version[2])])

    def test_registry_proxy(self):
        d = self.tmpdir()
        p = self.track(RegistryProxy(d, upstreams=[{"name": "hub", "url": "http://127.0.0.1:1"}],
                                     log_level="info"))
        p.start()
        self.check("shoal-registry-proxy", p.url + "/metrics")

    def test_scheduler(self):
        d = self.tmpdir()
        s = self.track(Scheduler(d))
        s.start()
        self.check("shoal-scheduler", s.url + "/metrics")

    def test_peerd(self):
        d = self.tmpdir()
        n = self.track(Peerd(d, name="n1", registry_proxy="http://127.0.0.1:1"))
        n.start()
        self.check("shoal-peerd", n.url + "/metrics")


if __name__ == "__main__":
    unittest.main(verbosity=2)
