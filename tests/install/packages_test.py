"""The Debian packages (packaging/): built with cpack from this build tree, read back with
dpkg-deb, installed with dpkg, checked in place, purged.

- Contents (any user): one .deb per binary, each holding exactly its binary, its unit, its
  /etc/shoal config (declared a conffile), its copyright and, where it has a unit, its maintainer
  scripts; the version is the binaries' own `--version` turned into a Debian version by the rule
  of packaging/cpack-version.cmake, written again here; Depends computed by dpkg-shlibdeps
  (libc6, libtorrent for the swarm daemons) plus adduser where a daemon runs as `shoal`.
- Installed (root): `dpkg -i` of all five; each binary's `--version` is the build tree's, byte for
  byte; each daemon's `--print-config --config /etc/shoal/<name>.yaml` (netsetup: `--policy ...
  --print-policy`) accepts the packaged config; the copyright is LICENSE; no unit is enabled by the
  install; the daemons' user `shoal` is a system user.
- Units: `systemd-analyze verify` (offline: PID 1 is not systemd here) reports nothing about our
  units, and the unit systemd loaded (its debug dump) has every [Service] value the file sets:
  systemd ignores a misspelt capability silently, and only warns about an unknown key or a bad
  value. The same check fails on a copy with a deliberate typo of each kind, and passes on one
  naming a user that does not exist (that is the host's business, not the unit's).
- Purge (root): after `systemctl enable` of every unit and state in /var/lib/shoal (an immutable
  file among it, as peerd's sealed views are), `dpkg --purge` leaves no file of any package, no
  /etc/shoal, no /var/lib/shoal and no enablement link.

The machine is left as found: everything is purged in a finally, and the `shoal` user is deleted
when this test created it (the packages keep it on purge, as Debian packages do). The test skips
when it is not root, and refuses (skips, saying why) to touch a machine that already has Shoal
packages, /etc/shoal or /var/lib/shoal. About 15 s, most of it cpack.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures.shoal import REPO, build_dir  # noqa: E402

# package -> what it ships. `config`: the file under /etc/shoal; `check`: the argv that makes the
# binary parse it; `user`: the system user its unit runs as; `state`: its state under
# /var/lib/shoal, removed on purge.
PACKAGES = {
    "shoal-peerd": dict(binary="peerd/shoal-peerd", config="peerd.yaml", unit=True,
                        user="shoal", state="peerd",
                        check=["--print-config", "--config", "/etc/shoal/peerd.yaml"]),
    "shoal-registry-proxy": dict(binary="registry-proxy/shoal-registry-proxy",
                                 config="registry-proxy.yaml", unit=True, user="shoal",
                                 state="registry-proxy",
                                 check=["--print-config", "--config",
                                        "/etc/shoal/registry-proxy.yaml"]),
    "shoal-scheduler": dict(binary="scheduler/shoal-scheduler", config="scheduler.yaml",
                            unit=True, user="shoal", state=None,
                            check=["--print-config", "--config", "/etc/shoal/scheduler.yaml"]),
    "shoal-netsetup": dict(binary="netsetup/shoal-netsetup", config="netsetup.yaml", unit=True,
                           user=None, state="netsetup",
                           check=["--policy", "/etc/shoal/netsetup.yaml", "--print-policy"]),
    "shoalctl": dict(binary="tools/shoalctl", config=None, unit=False, user=None, state=None,
                     check=None),
}
UNIT_DIR = Path("/usr/lib/systemd/system")
SHOAL_USER = "shoal"


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def debian_version(built: str) -> str:
    """packaging/cpack-version.cmake's rule, written again here."""
    v = re.sub(r"^v([0-9])", r"\1", built)
    dirty = ""
    if v.endswith("-dirty"):
        v, dirty = v[: -len("-dirty")], "+dirty"
    if m := re.fullmatch(r"([0-9][0-9.]*)-([0-9]+)-g([0-9a-f]+)", v):
        v = f"{m[1]}+{m[2]}.g{m[3]}"
    elif m := re.fullmatch(r"([0-9][0-9.]*)-g([0-9a-f]+)", v):
        v = f"{m[1]}~g{m[2]}"
    elif m := re.fullmatch(r"([0-9][0-9.]*)-unknown", v):
        v = f"{m[1]}~unknown"
    else:
        v = re.sub(r"[^A-Za-z0-9.+~-]", ".", v)
        if not re.match(r"[0-9]", v):
            v = "0~" + v
    return v + dirty


def package_status(pkg: str) -> str:
    cp = run(["dpkg-query", "-W", "-f=${db:Status-Status}", pkg])
    return cp.stdout.strip() if cp.returncode == 0 else "not-installed"


# ---- systemd-analyze verify ---------------------------------------------------------------

def unit_service_settings(text: str) -> list[tuple[str, str]]:
    """(key, value) of the [Service] section, continuation lines joined."""
    out, section, pending = [], "", ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            k, _, v = line.partition("=")
            out.append((k.strip(), v.strip()))
    return out


def dump_blocks(text: str) -> dict[str, list[str]]:
    """unit name -> the lines of its block in systemd-analyze's debug dump."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.fullmatch(r"\t-> Unit (\S+):", line)
        if m:
            current = blocks.setdefault(m[1], [])
        elif current is not None and line.startswith("\t\t"):
            current.append(line[2:])
        else:
            current = None
    return blocks


def normalize(key: str, value: str) -> str:
    value = " ".join(value.split())
    if value.lower() in ("yes", "true", "on", "1") and key not in ("LimitNOFILE",):
        return "yes"
    if value.lower() in ("no", "false", "off", "0") and key not in ("LimitNOFILE",):
        return "no"
    if key.endswith("Capabilities") or key == "CapabilityBoundingSet":
        return " ".join(sorted(value.lower().split()))
    return value


# Messages about the host rather than the unit: a user that does not exist yet (packages create
# theirs in postinst). systemd 252 prints none; later versions may.
HOST_MESSAGES = re.compile(r"(user|group)\b.*\b(not found|unknown|does not exist|no such)", re.I)


# Dumped in another form than the file's: RestrictNamespaces=yes (no namespace type allowed) is
# dumped as the empty set, "n/a". A bad value there is a parse warning (step 1).
NOT_COMPARED = {"RestrictNamespaces"}


def verify_units(paths: list[Path]) -> tuple[list[str], str]:
    """Problems systemd finds in these unit files, and everything it printed."""
    env = dict(os.environ, SYSTEMD_LOG_TARGET="console", SYSTEMD_LOG_COLOR="0",
               SYSTEMD_PAGER="")
    argv = ["systemd-analyze", "verify", "--man=no", *map(str, paths)]
    problems = []
    # 1. What systemd says at notice level and above, and its exit status. Lines about other
    #    units of the host (a dependency's own quirks) are not ours.
    cp = run(argv, env=dict(env, SYSTEMD_LOG_LEVEL="notice"), cwd="/")
    names = [p.name for p in paths] + [str(p) for p in paths]
    if cp.returncode != 0:
        problems.append(f"systemd-analyze verify exited {cp.returncode}")
    for line in (cp.stdout + cp.stderr).splitlines():
        if any(n in line for n in names) and not HOST_MESSAGES.search(line):
            problems.append(line)
    log = cp.stdout + cp.stderr
    # 2. The unit as systemd loaded it: each [Service] value the file sets must be there.
    #    Settings the dump does not show (NoNewPrivileges, RestrictAddressFamilies, ...) are
    #    covered by step 1's parse warnings.
    cp = run(argv, env=dict(env, SYSTEMD_LOG_LEVEL="debug"), cwd="/")
    blocks = dump_blocks(cp.stdout)
    for p in paths:
        block = blocks.get(p.name)
        if block is None:
            problems.append(f"{p.name}: not in systemd-analyze's dump")
            continue
        loaded = {}
        for line in block:
            k, sep, v = line.partition(": ")
            if sep or line.endswith(":"):
                loaded.setdefault(k.rstrip(":"), v)
        commands = {}
        for i, line in enumerate(block):
            m = re.fullmatch(r"-> (Exec\w+):", line)
            if m and i + 1 < len(block) and block[i + 1].startswith("\tCommand Line: "):
                commands.setdefault(m[1], block[i + 1][len("\tCommand Line: "):])
        for key, value in unit_service_settings(p.read_text()):
            if key == "ExecStart":
                if " ".join(commands.get(key, "").split()) != " ".join(value.split()):
                    problems.append(f"{p.name}: ExecStart={value} loaded as {commands.get(key)!r}")
            elif key.startswith("Exec"):
                if key not in commands:
                    problems.append(f"{p.name}: {key} not loaded")
            elif key in NOT_COMPARED:
                continue
            elif key in loaded and normalize(key, loaded[key]) != normalize(key, value):
                problems.append(f"{p.name}: {key}={value} loaded as {loaded[key]!r}")
    return problems, log


# ---- the packages ---------------------------------------------------------------------------

class Built:
    """cpack's output for this build tree, made once for both test classes."""
    dir: Path | None = None
    debs: dict[str, Path] = {}
    error = ""


def setUpModule():
    build = build_dir()
    if not (build / "CPackConfig.cmake").exists():
        Built.error = f"{build}/CPackConfig.cmake missing: configure the build tree first"
        return
    Built.dir = Path(tempfile.mkdtemp(prefix="shoal-packages-"))
    cp = run(["cpack", "-G", "DEB", "-B", str(Built.dir), "--config",
              str(build / "CPackConfig.cmake")], cwd=build, timeout=300)
    if cp.returncode != 0:
        Built.error = f"cpack failed:\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}"
        return
    for deb in Built.dir.glob("*.deb"):
        Built.debs[deb.name.split("_")[0]] = deb


def tearDownModule():
    if Built.dir:
        shutil.rmtree(Built.dir, ignore_errors=True)


def built_version() -> str:
    cp = run([str(build_dir() / PACKAGES["shoalctl"]["binary"]), "--version"])
    return cp.stdout.split("\n")[0].split(" ", 1)[1]


def deb_files(deb: Path) -> dict[str, str]:
    """path -> 'mode owner' of every non-directory in the package."""
    out = {}
    for line in run(["dpkg-deb", "-c", str(deb)]).stdout.splitlines():
        mode, owner, _size, _date, _time, path = line.split(None, 5)
        if not mode.startswith("d"):
            out[path.removeprefix(".").split(" -> ")[0]] = f"{mode} {owner}"
    return out


def expected_files(pkg: str, spec: dict) -> dict[str, str]:
    want = {f"/usr/bin/{Path(spec['binary']).name}": "-rwxr-xr-x root/root",
            f"/usr/share/doc/{pkg}/copyright": "-rw-r--r-- root/root"}
    if spec["unit"]:
        want[f"/usr/lib/systemd/system/{pkg}.service"] = "-rw-r--r-- root/root"
    if spec["config"]:
        want[f"/etc/shoal/{spec['config']}"] = "-rw-r--r-- root/root"
    return want


class PackageContents(unittest.TestCase):
    def setUp(self):
        if Built.error:
            self.fail(Built.error)

    def test_one_package_per_binary(self):
        self.assertEqual(sorted(Built.debs), sorted(PACKAGES))

    def test_contents_and_control(self):
        version = debian_version(built_version())
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        for pkg, spec in PACKAGES.items():
            with self.subTest(package=pkg):
                deb = Built.debs[pkg]
                self.assertEqual(deb.name, f"{pkg}_{version}_{arch}.deb")
                self.assertEqual(deb_files(deb), expected_files(pkg, spec))
                field = lambda name: run(["dpkg-deb", "-f", str(deb), name]).stdout.strip()  # noqa
                self.assertEqual(field("Package"), pkg)
                self.assertEqual(field("Version"), version)
                self.assertEqual(field("Architecture"), arch)
                depends = [d.strip().split(" ")[0] for d in field("Depends").split(",")]
                self.assertIn("libc6", depends, "no shared-library Depends: dpkg-shlibdeps")
                self.assertIn("libssl3", depends)
                if pkg in ("shoal-peerd", "shoal-registry-proxy"):
                    self.assertTrue(any(d.startswith("libtorrent-rasterbar") for d in depends),
                                    depends)
                self.assertEqual("adduser" in depends, spec["user"] is not None, depends)
                members = run(["dpkg-deb", "-I", str(deb)]).stdout
                conffiles = run(["dpkg-deb", "-I", str(deb), "conffiles"])
                if spec["config"]:
                    self.assertEqual(conffiles.stdout.split(), [f"/etc/shoal/{spec['config']}"])
                else:
                    self.assertNotEqual(conffiles.returncode, 0, "conffiles without a config")
                for script in ("postinst", "prerm", "postrm"):
                    self.assertEqual(re.search(rf"\s{script}\s", members) is not None,
                                     spec["unit"], f"{script} in {members}")

    def test_version_rule(self):
        cases = {
            "v0.2.0": "0.2.0", "0.2.0": "0.2.0", "v0.2.0-3-gabc1234": "0.2.0+3.gabc1234",
            "v0.2.0-3-gabc1234-dirty": "0.2.0+3.gabc1234+dirty",
            "0.1.0-gabc1234": "0.1.0~gabc1234", "0.1.0-gabc1234-dirty": "0.1.0~gabc1234+dirty",
            "0.1.0-unknown": "0.1.0~unknown", "1.2.3-1": "1.2.3-1", "nightly_7": "0~nightly.7",
        }
        for built, want in cases.items():
            self.assertEqual(debian_version(built), want, built)
        # The ordering the rule promises, by dpkg's own comparison.
        for lo, hi in (("0.1.0~gabc1234", "0.1.0"), ("0.2.0", "0.2.0+3.gabc1234"),
                       ("0.2.0+3.gabc1234", "0.2.0+3.gabc1234+dirty")):
            self.assertEqual(run(["dpkg", "--compare-versions", lo, "lt", hi]).returncode, 0,
                             f"{lo} < {hi}")


class InstallVerifyPurge(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root: dpkg -i and dpkg --purge of the packages")
        if Built.error:
            self.fail(Built.error)
        found = [p for p in PACKAGES if package_status(p) != "not-installed"]
        found += [d for d in ("/etc/shoal", "/var/lib/shoal") if os.path.lexists(d)]
        if found:
            self.skipTest(f"this machine already has {', '.join(found)}: the test would "
                          "replace and purge them")
        self.user_existed = run(["getent", "passwd", SHOAL_USER]).returncode == 0

    def purge(self) -> subprocess.CompletedProcess:
        return run(["dpkg", "--purge", *PACKAGES])

    def cleanup(self):
        if any(package_status(p) != "not-installed" for p in PACKAGES):
            self.purge()
        if not self.user_existed and run(["getent", "passwd", SHOAL_USER]).returncode == 0:
            run(["deluser", "--system", "--quiet", SHOAL_USER])
        if not self.user_existed and run(["getent", "group", SHOAL_USER]).returncode == 0:
            run(["delgroup", "--system", "--quiet", SHOAL_USER])
        for link in Path("/etc/systemd/system").glob("*.wants/shoal-*.service"):
            link.unlink()
        # Neither existed before the test (setUp): whatever a failed purge left goes too.
        for d in ("/etc/shoal", "/var/lib/shoal"):
            if os.path.lexists(d):
                run(["chattr", "-R", "-i", d])
                shutil.rmtree(d, ignore_errors=True)

    def test_install_verify_purge(self):
        try:
            self.check_all()
        finally:
            self.cleanup()

    def check_all(self):
        cp = run(["dpkg", "-i", *map(str, Built.debs.values())])
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        for pkg in PACKAGES:
            self.assertEqual(package_status(pkg), "installed", pkg)

        for pkg, spec in PACKAGES.items():
            name = Path(spec["binary"]).name
            with self.subTest(step="--version", package=pkg):
                want = run([str(build_dir() / spec["binary"]), "--version"]).stdout
                cp = run([f"/usr/bin/{name}", "--version"])
                self.assertEqual(cp.returncode, 0, cp.stderr)
                self.assertEqual(cp.stdout, want)
                self.assertTrue(cp.stdout.startswith(f"{name} "), cp.stdout)
            with self.subTest(step="copyright", package=pkg):
                self.assertEqual(Path(f"/usr/share/doc/{pkg}/copyright").read_bytes(),
                                 (REPO / "LICENSE").read_bytes())
            if spec["check"]:
                with self.subTest(step="packaged config", package=pkg):
                    cp = run([f"/usr/bin/{name}", *spec["check"]])
                    self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
                    self.assertIn("\n", cp.stdout)
                    if "--print-config" in spec["check"]:
                        self.assertTrue(cp.stdout.startswith(
                            f"# Effective configuration of {name} from "
                            f"/etc/shoal/{spec['config']}"), cp.stdout[:200])
            if spec["config"]:
                with self.subTest(step="conffile", package=pkg):
                    cp = run(["dpkg-query", "-W", "-f=${Conffiles}", pkg])
                    self.assertIn(f"/etc/shoal/{spec['config']}", cp.stdout)
            if spec["unit"]:
                with self.subTest(step="not enabled by the install", package=pkg):
                    cp = run(["systemctl", "is-enabled", f"{pkg}.service"])
                    self.assertEqual(cp.stdout.strip(), "disabled", cp.stdout + cp.stderr)

        with self.subTest(step="user"):
            cp = run(["getent", "passwd", SHOAL_USER])
            self.assertEqual(cp.returncode, 0, "postinst did not create the user shoal")
            fields = cp.stdout.strip().split(":")
            self.assertLess(int(fields[2]), 1000, "not a system user")
            self.assertTrue(fields[6].endswith("nologin"), fields)

        units = [UNIT_DIR / f"{p}.service" for p, s in PACKAGES.items() if s["unit"]]
        with self.subTest(step="systemd-analyze verify"):
            problems, log = verify_units(units)
            self.assertEqual(problems, [], log)
        with self.subTest(step="units run the packaged config"):
            for pkg, spec in PACKAGES.items():
                if not spec["unit"]:
                    continue
                settings = dict(unit_service_settings((UNIT_DIR / f"{pkg}.service").read_text()))
                self.assertTrue(settings["ExecStart"].startswith(f"/usr/bin/{pkg} "), pkg)
                self.assertIn(f"/etc/shoal/{spec['config']}", settings["ExecStart"])
                self.assertEqual(settings.get("User"), spec["user"], pkg)
                if pkg != "shoal-netsetup":  # a oneshot at boot
                    self.assertEqual(settings.get("Restart"), "on-failure", pkg)
        with self.subTest(step="the unit check catches broken units"):
            self.check_broken_units()

        # What an operator does before a purge: enable the units; the daemons made their state.
        for pkg, spec in PACKAGES.items():
            if spec["unit"]:
                cp = run(["systemctl", "enable", f"{pkg}.service"])
                self.assertEqual(cp.returncode, 0, cp.stderr)
            if spec["state"]:
                d = Path("/var/lib/shoal") / spec["state"]
                (d / "cache" / "objects").mkdir(parents=True)
                (d / "cache" / "objects" / "blob").write_bytes(b"x" * 4096)
                shutil.chown(d, SHOAL_USER if spec["user"] else "root")
        sealed = Path("/var/lib/shoal/peerd/views/ds@1/file")
        sealed.parent.mkdir(parents=True)
        sealed.write_bytes(b"view")
        run(["chattr", "+i", str(sealed)])  # where the file system can (ext4, xfs)

        files = set()
        for deb in Built.debs.values():
            files |= set(deb_files(deb))
        cp = self.purge()
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        for pkg in PACKAGES:
            self.assertEqual(package_status(pkg), "not-installed", pkg)
        left = sorted(f for f in files if os.path.lexists(f))
        left += [d for d in ("/etc/shoal", "/var/lib/shoal") if os.path.lexists(d)]
        left += [str(p) for p in Path("/etc/systemd/system").glob("*.wants/shoal-*.service")]
        self.assertEqual(left, [], "left behind by dpkg --purge")

    def check_broken_units(self):
        """verify_units on copies of the peerd unit: each typo must be found, a user this host
        does not have must not be."""
        good = (UNIT_DIR / "shoal-peerd.service").read_text()
        cases = {
            "unknown key": ("Restart=on-failure", "Restrat=on-failure"),
            "bad value": ("Restart=on-failure", "Restart=on-failur"),
            "misspelt capability": ("CapabilityBoundingSet=CAP_LINUX_IMMUTABLE",
                                    "CapabilityBoundingSet=CAP_LINUX_IMUTABLE"),
            "misspelt section": ("[Service]", "[Servce]"),
            "missing binary": ("ExecStart=/usr/bin/shoal-peerd ", "ExecStart=/usr/bin/shoal-perd "),
            "bad hardening value": ("ProtectSystem=full", "ProtectSystem=fulll"),
        }
        with tempfile.TemporaryDirectory(prefix="shoal-units-") as tmp:
            unit = Path(tmp) / "shoal-peerd.service"
            unit.write_text(good.replace("User=shoal", "User=shoal-no-such-user"))
            problems, log = verify_units([unit])
            self.assertEqual(problems, [], "a user this host lacks is not a unit error\n" + log)
            for what, (old, new) in cases.items():
                self.assertIn(old, good, what)
                unit.write_text(good.replace(old, new))
                problems, log = verify_units([unit])
                self.assertNotEqual(problems, [], f"{what} not caught\n{log}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
