#!/usr/bin/env python3
"""The tiers of docs/design.md, checked on the source tree and on the built binaries.

- Includes: a component includes only its own headers and those of the tiers below it
  (common <- cache, swarm <- the daemons; netsetup <- scheduler). No daemon includes another's.
- libtorrent: only swarm/, peerd/, registry-proxy/ and their tests name a libtorrent header, and
  only shoal-peerd and shoal-registry-proxy load libtorrent-rasterbar (ldd, not grep: a link
  line can drag the library in without a single include).
- Doors: a daemon with an include/<daemon>/ directory keeps its public headers there and the rest
  in src/. (a) A public header's quoted includes resolve to public headers (its own door or
  another component's include/), never to the daemon's src/. (b) Its consumers (tests/<daemon>/
  and every tests/ or bench/ directory whose CMakeLists.txt names the daemon's library) include
  nothing that only src/ holds, and no file under tests/ or bench/ reaches into <daemon>/src/.

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
DAEMONS = ("peerd", "registry-proxy", "scheduler")
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


def resolve(inc, dirs):
    """The first of dirs holding inc, as the compiler searches a quoted include."""
    for d in dirs:
        p = os.path.normpath(os.path.join(d, inc))
        if os.path.isfile(p):
            return p
    return None


def quoted_includes(path):
    for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        m = INCLUDE.match(line)
        if m:
            yield n, m.group(1)


def cmake_include_dirs(root, directory):
    """The project-rooted directories a CMakeLists.txt adds with target_include_directories."""
    path = os.path.join(directory, "CMakeLists.txt")
    if not os.path.exists(path):
        return []
    dirs = []
    for call in re.findall(r"target_include_directories\(([^)]*)\)", open(path).read()):
        for m in re.finditer(r"\$\{(PROJECT_SOURCE_DIR|CMAKE_CURRENT_SOURCE_DIR)\}(/[^\s)]*)?",
                             call):
            base = root if m.group(1) == "PROJECT_SOURCE_DIR" else directory
            dirs.append(os.path.normpath(base + (m.group(2) or "")))
    return dirs


def daemon_library(root, daemon):
    m = re.search(r"add_library\((\w+)", open(os.path.join(root, daemon, "CMakeLists.txt")).read())
    return m.group(1) if m else None


def check_doors(root):
    bad = []
    root = os.path.abspath(root)
    public = [os.path.join(root, c, "include") for c in sorted(ALLOWED)
              if os.path.isdir(os.path.join(root, c, "include"))]
    for daemon in DAEMONS:
        door = os.path.join(root, daemon, "include", daemon)
        if not os.path.isdir(door):
            continue  # no doors yet: everything in src/ is reachable, nothing to hold it to
        src = os.path.join(root, daemon, "src") + os.sep
        # (a) The public set is closed: a door includes doors and other components' include/.
        for f in sorted(os.listdir(door)):
            path = os.path.join(door, f)
            for n, inc in quoted_includes(path):
                got = resolve(inc, [door] + public)
                where = f"{os.path.relpath(path, root)}:{n}"
                if got is None and os.path.isfile(os.path.join(src, inc)):
                    bad.append(f"{where}: public header includes \"{inc}\", private to {daemon}/src/ "
                               f"(make it a door in {daemon}/include/{daemon}/ or drop the include)")
                elif got is None:
                    bad.append(f"{where}: public header includes \"{inc}\", which is no public header")
                elif got.startswith(src):
                    bad.append(f"{where}: public header reaches into {daemon}/src/ with \"{inc}\"")
        # (b) Consumers use the doors: tests/<daemon>/ and the tests/ and bench/ directories
        # whose CMakeLists.txt links the daemon's library; and nothing under tests/ or bench/
        # names a path into <daemon>/src/.
        lib = daemon_library(root, daemon)
        word = re.compile(rf"(?<![\w-]){re.escape(lib)}(?![\w-])") if lib else None
        for top in ("tests", "bench"):
            for dirpath, _, files in os.walk(os.path.join(root, top)):
                cml = os.path.join(dirpath, "CMakeLists.txt")
                consumer = (dirpath == os.path.join(root, "tests", daemon) or
                            (word is not None and os.path.exists(cml) and
                             word.search(open(cml).read()) is not None))
                dirs = [dirpath] + cmake_include_dirs(root, dirpath) + public
                for f in sorted(files):
                    if not f.endswith((".h", ".cc")):
                        continue
                    path = os.path.join(dirpath, f)
                    for n, inc in quoted_includes(path):
                        got = resolve(inc, dirs)
                        where = f"{os.path.relpath(path, root)}:{n}"
                        if got is not None and got.startswith(src):
                            bad.append(f"{where}: includes \"{inc}\" from {daemon}/src/ (private; "
                                       f"use a header of {daemon}/include/{daemon}/)")
                        elif got is None and consumer and os.path.isfile(os.path.join(src, inc)):
                            bad.append(f"{where}: includes \"{inc}\", private to {daemon}/src/ "
                                       f"(include \"{daemon}/...\" from {daemon}/include/{daemon}/, "
                                       f"or make it a door: tools/doors)")
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
    problems = (check_includes(root) + check_libtorrent_headers(root) + check_doors(root) +
                check_binaries(binaries))
    for p in problems:
        print("tiers:", p, file=sys.stderr)
    doors = [d for d in DAEMONS if os.path.isdir(os.path.join(root, d, "include", d))]
    print(f"tiers: {len(binaries)} binaries checked with ldd, includes of {len(ALLOWED)} components, "
          f"doors of {', '.join(doors) or 'no daemon'}; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
