#!/usr/bin/env python3
"""The tiers of docs/design.md, checked on the source tree and on the built binaries.

- Includes: a component includes only its own headers and those of the tiers below it
  (common <- cache, swarm <- the daemons; netsetup <- scheduler). No daemon includes another's.
- libtorrent: only swarm/, peerd/, registry-proxy/ and their tests name a libtorrent header, and
  only shoal-peerd and shoal-registry-proxy load libtorrent-rasterbar (ldd, not grep: a link
  line can drag the library in without a single include).

Usage: tiers_test.py SOURCE_DIR BINARY...  (each BINARY as name=path)
"""
import os
import re
import subprocess
import sys

# component -> the project include prefixes it may use (its own always allowed).
ALLOWED = {
    "common": set(),
    "cache": {"common"},
    "swarm": {"common"},
    "netsetup": {"common"},
    "registry-proxy": {"common", "cache", "swarm"},
    "peerd": {"common", "cache", "swarm"},
    "scheduler": {"common", "netsetup"},
    "tools": {"common", "netsetup"},
}
PROJECT_PREFIXES = set(ALLOWED)
LIBTORRENT_DIRS = ("swarm/", "peerd/", "registry-proxy/", "tests/swarm/", "tests/peerd/",
                   "tests/registry-proxy/")
LINKS_LIBTORRENT = {"shoal-peerd", "shoal-registry-proxy"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    for top in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".h", ".cc")):
                    yield top, os.path.join(dirpath, f)


def check_includes(root):
    bad = []
    for comp, path in sources(root):
        text = open(path, encoding="utf-8", errors="replace").read()
        for inc in INCLUDE.findall(text):
            first = inc.split("/", 1)[0]
            if "/" in inc and first in PROJECT_PREFIXES and first != comp and first not in ALLOWED[comp]:
                bad.append(f"{os.path.relpath(path, root)} includes \"{inc}\" ({comp} may use "
                           f"{sorted(ALLOWED[comp]) or 'nothing of the project'})")
    return bad


def check_libtorrent_headers(root):
    bad = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "build") and not d.startswith("build")]
        for f in files:
            if not f.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            if rel.startswith(LIBTORRENT_DIRS):
                continue
            if "libtorrent/" in open(path, encoding="utf-8", errors="replace").read():
                bad.append(f"{rel} names a libtorrent header outside swarm/, peerd/, registry-proxy/")
    return bad


def check_binaries(binaries):
    bad = []
    for spec in binaries:
        name, path = spec.split("=", 1)
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
        loads = "libtorrent-rasterbar" in out
        want = name in LINKS_LIBTORRENT
        if loads != want:
            bad.append(f"{name} ({path}) {'loads' if loads else 'does not load'} libtorrent-rasterbar; "
                       f"expected {'it' if want else 'only peerd and registry-proxy'} to")
    return bad


def main():
    root, binaries = sys.argv[1], sys.argv[2:]
    if not binaries:
        print("tiers_test: no binaries given", file=sys.stderr)
        return 2
    problems = check_includes(root) + check_libtorrent_headers(root) + check_binaries(binaries)
    for p in problems:
        print("tiers:", p, file=sys.stderr)
    print(f"tiers: {len(binaries)} binaries checked with ldd, includes of {len(ALLOWED)} components; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
