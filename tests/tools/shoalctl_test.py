"""shoalctl's command line (CLI11): output formats, per-command help, and pull.

- `-o json`, `-o yaml` and the table on `status` (a real peerd), `nodes` and `prewarm status`
  (a real scheduler that peerd heartbeats to): json and yaml carry the same document, the node
  the daemons know; `--json` is `-o json` and may follow the command words; a bad format or an
  unknown flag exits 2;
- `shoalctl prewarm --help` (and every other command's) lists that command's own flags;
- `pull` against a scripted peerd: the request asks for this machine's platform unless
  --platform says otherwise, and the progress line counts only the pulled image's blobs (the
  platform's manifest from the index), not another download the node runs at the same time.

One scheduler, one peerd and a stub; a few seconds.
"""
from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

import yaml  # noqa: E402

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.httpstub import StubServer  # noqa: E402
from shoal_fixtures.nodes import Peerd, Scheduler  # noqa: E402
from shoal_fixtures.shoal import binary  # noqa: E402


def ctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary("shoalctl")), *args], capture_output=True, text=True,
                          timeout=timeout)


def host_platform() -> str:
    m = platform.machine()
    return "linux/" + {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


class Formats(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir()
        cls.sched = cls.class_track(Scheduler(d / "scheduler")).start()
        cls.peerd = cls.class_track(Peerd(d / "n1", name="n1", registry_proxy="http://127.0.0.1:1",
                                          scheduler=cls.sched.url)).start()
        deadline = time.monotonic() + 20
        while not any(n.get("node") == "n1" for n in cls.sched.nodes()):
            if time.monotonic() > deadline:
                raise AssertionError("n1 never heartbeat to the scheduler")
            time.sleep(0.2)

    def formats(self, *args: str):
        """(json document, yaml document, table text) of one command."""
        j = ctl(*args, "-o", "json")
        self.assertEqual(j.returncode, 0, j.stderr)
        y = ctl(*args, "-o", "yaml")
        self.assertEqual(y.returncode, 0, y.stderr)
        t = ctl(*args)
        self.assertEqual(t.returncode, 0, t.stderr)
        with self.assertRaises(ValueError, msg="the table is not JSON"):
            json.loads(t.stdout)
        return json.loads(j.stdout), yaml.safe_load(y.stdout), t.stdout

    def test_status(self):
        j, y, t = self.formats("--peerd", self.peerd.url, "status")
        self.assertEqual(j["node"], "n1")
        self.assertEqual(y["node"], "n1")
        self.assertEqual(set(j), set(y))
        self.assertEqual(j["cache"]["capacity"], y["cache"]["capacity"])
        self.assertIn("node        n1", t)

    def test_nodes(self):
        j, y, t = self.formats("--scheduler", self.sched.url, "nodes")
        self.assertEqual([n["node"] for n in j], ["n1"])
        self.assertEqual([n["node"] for n in y], ["n1"])
        self.assertEqual(j[0]["platform"], y[0]["platform"])
        self.assertRegex(t, r"(?m)^NODE\s+STATE")
        self.assertRegex(t, r"(?m)^n1\s+healthy")  # the failure detector's state
        self.assertEqual(j[0]["state"]["state"], "healthy")

    def test_prewarm_status(self):
        j, y, t = self.formats("--scheduler", self.sched.url, "prewarm", "status")
        self.assertEqual(j, [])
        self.assertEqual(y, [])
        self.assertRegex(t, r"^ID\s+STATE")

    def test_json_flag_after_the_command(self):
        cp = ctl("status", "--json", "--peerd", self.peerd.url)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(json.loads(cp.stdout)["node"], "n1")

    def test_refusals(self):
        cp = ctl("--peerd", self.peerd.url, "status", "-o", "xml")
        self.assertEqual(cp.returncode, 2)
        self.assertIn("xml", cp.stderr)
        cp = ctl("status", "--frobnicate")
        self.assertEqual(cp.returncode, 2)
        self.assertIn("frobnicate", cp.stderr)
        cp = ctl()
        self.assertEqual(cp.returncode, 2)


class Help(unittest.TestCase):
    def test_help_per_command(self):
        cases = {
            ("prewarm",): ["--node", "--selector", "--job", "--no-wait", "--timeout", "status"],
            ("place",): ["--nodes", "--gpus", "--dry-run", "--selector"],
            ("pull",): ["--platform", host_platform()],
            ("dataset", "renew"): ["--ttl"],
            ("dataset", "prefetch"): ["--no-wait", "--timeout"],
            (): ["status", "pull", "nodes", "place", "prewarm", "dataset", "certs", "--version",
                 "--output", "--peerd", "--scheduler", "--registry-proxy", "--ca", "--cert",
                 "--key", "--token-file"],
        }
        for words, wanted in cases.items():
            with self.subTest(command=" ".join(words)):
                cp = ctl(*words, "--help")
                self.assertEqual(cp.returncode, 0, cp.stderr)
                for w in wanted:
                    self.assertIn(w, cp.stdout)
        self.assertNotIn("--ttl", ctl("prewarm", "--help").stdout)


class Pull(FixtureTestCase):
    """A scripted peerd: an index with two platforms, one download of the image in progress and
    one unrelated 1 GB download on the node."""

    SIZES = {"amd64": (100, 1000, 3000), "arm64": (200, 7000, 9000)}

    def setUp(self):
        super().setUp()
        self.pulls: list[dict] = []
        arch = host_platform().split("/")[1]
        self.mine = self.blobs(arch if arch in self.SIZES else "amd64")
        stub = StubServer(self.handle, methods=["GET", "POST"], name="peerd-stub")
        self.stub = self.track(stub.start())
        self.url = f"http://127.0.0.1:{self.stub.port}"

    @staticmethod
    def digest(name: str) -> str:
        return "sha256:" + (name.encode().hex() * 64)[:64]

    def blobs(self, arch: str) -> list[tuple[str, int]]:
        return [(self.digest(f"{arch}-{i}"), s) for i, s in enumerate(self.SIZES[arch])]

    def send(self, req, code: int, doc) -> None:
        body = json.dumps(doc).encode()
        req.send_response(code)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def handle(self, req, method: str) -> None:
        path = urllib.parse.urlsplit(req.path).path
        if method == "POST" and path == "/shoal/v1/pull":
            body = json.loads(req.rfile.read(int(req.headers["Content-Length"])))
            self.pulls.append(body)
            time.sleep(1.5)
            blobs = [{"digest": d, "size": s, "ok": True, "cached_before": False}
                     for d, s in self.mine]
            return self.send(req, 200, {"image": body["image"], "bytes": 4100, "seconds": 1.5,
                                        "blobs": blobs})
        if path == "/shoal/v1/status":
            layer, size = self.mine[1]
            downloads = [{"digest": layer, "size": size, "pieces": 4, "pieces_done": 2,
                          "download_rate": 100},
                         {"digest": self.digest("other"), "size": 10**9, "pieces": 100,
                          "pieces_done": 1, "download_rate": 10**6}]
            return self.send(req, 200, {"node": "stub", "downloads": downloads})
        m = re.fullmatch(r"/v2/(.+)/manifests/(.+)", path)
        if m and m.group(2) == "v1":
            return self.send(req, 200, {
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"digest": self.digest(f"m-{a}"), "size": 1,
                               "platform": {"os": "linux", "architecture": a}}
                              for a in self.SIZES]})
        for a in self.SIZES:
            if m and m.group(2) == self.digest(f"m-{a}"):
                cfg, *layers = self.blobs(a)
                return self.send(req, 200, {
                    "schemaVersion": 2, "config": {"digest": cfg[0], "size": cfg[1]},
                    "layers": [{"digest": d, "size": s} for d, s in layers]})
        self.send(req, 404, {"error": "no"})

    def test_default_platform_and_image_bytes(self):
        cp = ctl("--peerd", self.url, "pull", "reg.example:5000/app:v1")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(self.pulls[-1]["platform"], host_platform())
        self.assertEqual(self.pulls[-1]["image"], "reg.example:5000/app:v1")
        self.assertIn("reg.example:5000/app:v1: 4.0 KiB", cp.stdout)
        progress = [ln for ln in cp.stderr.splitlines() if "ETA" in ln]
        self.assertTrue(progress, cp.stderr)
        total = sum(s for _, s in self.mine)
        for line in progress:
            # Half of the image's first layer is here; the node's 1 GB download is not this pull's.
            self.assertIn(f"{self.mine[1][1] // 2} B / {total / 1024:.1f} KiB", line)
            self.assertIn("100 B/s", line)
            self.assertNotIn("MiB", line)

    def test_platform_flag_and_json(self):
        cp = ctl("--peerd", self.url, "pull", "reg.example:5000/app:v1", "--platform",
                 "linux/arm64", "-o", "json")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(self.pulls[-1]["platform"], "linux/arm64")
        self.assertEqual(json.loads(cp.stdout)["bytes"], 4100)
        # The arm64 manifest's blobs are not downloading: no byte of them is counted.
        total = sum(self.SIZES["arm64"])
        for line in (ln for ln in cp.stderr.splitlines() if "ETA" in ln):
            self.assertIn(f"  0 B / {total / 1024:.1f} KiB", line)


if __name__ == "__main__":
    unittest.main(verbosity=2)
