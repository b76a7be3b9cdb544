"""Every configuration example a user is shown works as shown:

- each daemon's `--help`: every `--set KEY=VALUE` example is accepted by that daemon;
- docs/config.md: each daemon command line in a code block runs (its `-c` files replaced by empty
  ones) with `--print-config`; each `--set` example in the text is accepted (by the daemon it
  names, else by at least one daemon); each duration and byte-size example of the value-type
  table parses as such a field (including Kubernetes quantities such as `10Gi`);
- the error examples block: each line is what a daemon really prints for an input kept here, so
  the block cannot drift from the code (a line without an input here fails the test).

Runs the three daemon binaries with --print-config only (nothing listens); about a second.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures.shoal import REPO, build_dir  # noqa: E402

DAEMONS = {
    "shoal-registry-proxy": "registry-proxy/shoal-registry-proxy",
    "shoal-peerd": "peerd/shoal-peerd",
    "shoal-scheduler": "scheduler/shoal-scheduler",
}
DOC = REPO / "docs" / "config.md"
# A field of each scalar type on peerd, to try the value-type table's examples on.
TYPE_FIELDS = {"duration": "cache.idle_ttl", "byte size": "cache.quota"}

# The error examples of docs/config.md: doc line -> (daemon, {file name: text}, extra args).
# Files are given with -c in the order listed.
ERROR_INPUTS = {
    'registry-proxy.yaml:3: upstreams[1].auth: expected a string, got a map':
        ("shoal-registry-proxy",
         {"registry-proxy.yaml": "upstreams:\n  - {name: a, url: 'http://a'}\n"
                                 "  - {name: b, url: 'http://b', auth: {user: x}}\n"}, []),
    'registry-proxy.yaml:2: cache.quot: unknown key (did you mean "quota"?)':
        ("shoal-registry-proxy", {"registry-proxy.yaml": "cache:\n  quot: 10Gi\n"}, []),
    'registry-proxy.yaml:2: manifests.tag_ttl: duration "30" has no unit; write e.g. "30s" or '
    '"30ms" (units: ns, us, ms, s, m, h, d)':
        ("shoal-registry-proxy", {"registry-proxy.yaml": "manifests:\n  tag_ttl: 30\n"}, []),
    'site.yaml:1: worker_threads: must be at most 256, got 300':
        ("shoal-registry-proxy", {"base.yaml": "worker_threads: 8\n",
                                  "site.yaml": "worker_threads: 300\n"}, []),
    'base.yaml:2: upstreams[0].url: required key is missing':
        ("shoal-registry-proxy", {"base.yaml": "upstreams:\n  - name: hub\n"}, []),
    'registry-proxy.yaml:1: cache: cache.low_watermark must be below cache.high_watermark':
        ("shoal-registry-proxy",
         {"registry-proxy.yaml": "cache:\n  high_watermark: 0.5\n  low_watermark: 0.6\n"}, []),
    'registry-proxy.yaml:3:1: illegal tab when looking for indentation':
        ("shoal-registry-proxy", {"registry-proxy.yaml": "cache:\n  quota: 1Gi\n\tdir: /x\n"},
         []),
    'registry-proxy.yaml:2:10: unclosed quote: the string runs to the end of the file':
        ("shoal-registry-proxy", {"registry-proxy.yaml": 'log:\n  level: "info\n'}, []),
    '--set worker_threads=lots: worker_threads: expected an integer, got "lots"':
        ("shoal-registry-proxy", {}, ["--set", "worker_threads=lots"]),
}


def binary(name: str) -> Path:
    return build_dir() / DAEMONS[name]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def accepted(daemon: str, args: list[str]) -> subprocess.CompletedProcess:
    return run([str(binary(daemon)), *args, "--print-config"])


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def set_examples(text: str) -> list[tuple[str | None, str]]:
    """(daemon or None, KEY=VALUE) for each inline `[daemon] --set KEY=VALUE` span."""
    out = []
    for span in re.findall(r"`([^`\n]*--set [^`\n]*)`", text):
        m = re.fullmatch(r"(?:(shoal-[a-z-]+) )?--set (.+)", span.strip())
        if m and m.group(2) != "KEY=VALUE":
            out.append((m.group(1), m.group(2)))
    return out


class HelpExamples(unittest.TestCase):
    def test_set_examples_in_help(self):
        for daemon in DAEMONS:
            with self.subTest(daemon=daemon):
                cp = run([str(binary(daemon)), "--help"])
                self.assertEqual(cp.returncode, 0, cp.stderr)
                sets = [kv for kv in re.findall(r"--set (\S+=\S+)", cp.stdout)
                        if not kv.startswith("KEY=")]
                self.assertTrue(sets, f"{daemon} --help shows no --set example")
                for kv in sets:
                    cp = accepted(daemon, ["--set", kv])
                    self.assertEqual(cp.returncode, 0, f"{daemon} --set {kv}: {cp.stderr}")


class DocExamples(unittest.TestCase):
    def setUp(self):
        self.text = DOC.read_text()
        self.dir = Path(tempfile.mkdtemp(prefix="shoal-config-examples-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_command_lines(self):
        lines = [ln for block in code_blocks(self.text) for ln in block.splitlines()
                 if ln.split(" ", 1)[0] in DAEMONS]
        self.assertTrue(lines, "docs/config.md shows no daemon command line")
        for line in lines:
            with self.subTest(line=line):
                argv = line.split()
                args, i = [], 1
                while i < len(argv):
                    if argv[i] in ("-c", "--config"):
                        f = self.dir / Path(argv[i + 1]).name
                        f.write_text("")
                        args += ["-c", str(f)]
                        i += 2
                    else:
                        args.append(argv[i])
                        i += 1
                cp = accepted(argv[0], args)
                self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_set_examples(self):
        examples = set_examples(self.text)
        self.assertGreaterEqual(len(examples), 3, examples)
        for daemon, kv in examples:
            with self.subTest(example=kv):
                tried = [daemon] if daemon else list(DAEMONS)
                results = {d: accepted(d, ["--set", kv]) for d in tried}
                self.assertTrue(any(r.returncode == 0 for r in results.values()),
                                {d: r.stderr for d, r in results.items()})

    def test_value_type_examples(self):
        for type_name, field in TYPE_FIELDS.items():
            row = re.search(rf"^\| {type_name} \| ([^|]*) \|", self.text, re.M)
            self.assertIsNotNone(row, f"no {type_name} row in the value-type table")
            examples = re.findall(r"`([^`]+)`", row.group(1))
            self.assertTrue(examples)
            for ex in examples:
                with self.subTest(type=type_name, example=ex):
                    cp = accepted("shoal-peerd", ["--set", f"{field}={ex}"])
                    self.assertEqual(cp.returncode, 0, cp.stderr)
        row = re.search(r"^\| byte size \| ([^|]*) \|", self.text, re.M).group(1)
        for quantity in ("10Gi", "500Mi", "1G", "1k"):
            self.assertIn(f"`{quantity}`", row)

    def test_error_examples(self):
        block = next((b for b in code_blocks(self.text) if "unknown key" in b), None)
        self.assertIsNotNone(block, "no error examples block")
        for line in block.strip().splitlines():
            with self.subTest(line=line):
                key = line if line in ERROR_INPUTS else None
                self.assertIsNotNone(key, "no input in config_examples_test.py reproduces it")
                daemon, files, extra = ERROR_INPUTS[key]
                args = []
                for name, text in files.items():
                    (self.dir / name).write_text(text)
                    args += ["-c", str(self.dir / name)]
                cp = accepted(daemon, args + extra)
                self.assertEqual(cp.returncode, 2, cp.stdout)
                got = [ln.removeprefix(str(self.dir) + "/")
                       for ln in cp.stderr.splitlines()]
                self.assertTrue(any(line in g for g in got), f"{line!r} not in {got}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
