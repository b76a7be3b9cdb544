"""Shared helpers of the dataset integration tests: deterministic dataset contents, the daemons
(s3rver, nginx, registry-proxy, peerd) wired for datasets, shoalctl, and the checks every test
makes on a view (every file byte-identical to the origin, read-only, files of their own: clones or
copies of the cache's objects, never their inodes).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.procs import FixtureError, is_sealed, run, wait_until  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, binary  # noqa: E402

# A dummy upstream: registry-proxy wants one; dataset tests never pull images.
DUMMY_UPSTREAM = [{"name": "127.0.0.1:9", "url": "http://127.0.0.1:9"}]


def content(seed: str, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def small_tree(prefix: str = "", *, files: int = 120, large: int = 2, large_size: int = 3 << 20) -> dict[str, bytes]:
    """A dataset with nested directories, odd but valid names, an empty file, duplicate contents,
    many small files and a few large ones."""
    out: dict[str, bytes] = {}
    for i in range(files):
        out[f"{prefix}train/c{i % 7}/img_{i:05d}.bin"] = content(f"{prefix}s{i}", 500 + (i * 397) % 20000)
    out[f"{prefix}README.md"] = b"# a test dataset\n"
    out[f"{prefix}empty.txt"] = b""
    out[f"{prefix}unicode dir \u00fc/file with spaces & symbols (1).txt"] = b"odd but valid names\n"
    out[f"{prefix}dup/a.bin"] = content("dup", 3000)
    out[f"{prefix}dup/b.bin"] = content("dup", 3000)  # same bytes, another path
    for i in range(large):
        out[f"{prefix}shards/part-{i}.bin"] = content(f"{prefix}L{i}", large_size + i * 12345)
    return out


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def http_json(url: str, *, method: str = "GET", body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, method=method, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def curl_json(cluster, node, url: str, *args: str) -> tuple[int, object]:
    """curl from node (None: the infra node) of a Cluster: the status and the JSON body (the raw
    text if it is not JSON)."""
    cp = cluster.curl(node, "-w", "\n%{http_code}", *args, url, timeout=30)
    text, _, code = cp.stdout.rpartition("\n")
    try:
        return int(code or 0), json.loads(text) if text else None
    except ValueError:
        return int(code or 0), text


def allowed_origin(origin: Any) -> dict:
    """A datasets.allowed_origins entry: a URL (its scheme://host:port is kept), an S3rver (its
    endpoint, with the credentials s3_declaration names bound to it), or an entry as a dict."""
    if isinstance(origin, dict):
        return origin
    if hasattr(origin, "endpoint") and hasattr(origin, "bucket"):
        return {"url": origin.endpoint, "credentials_file": "s3rver.creds"}
    u = urllib.parse.urlsplit(str(origin))
    return {"url": f"{u.scheme}://{u.netloc}"}


def dataset_proxy(directory: Path, *, credentials_dir: Path, origins=(), extra: Mapping[str, Any] | None = None,
                  host: str = "127.0.0.1", netns: str | None = None, port: int | None = None,
                  bt_port: int | None = None, trackers=(), log_level: str = "info") -> RegistryProxy:
    """registry-proxy for datasets; `origins` (URLs, S3rvers or entries, see allowed_origin) are
    the only places datasets may come from (datasets.allowed_origins)."""
    cfg: dict[str, Any] = {
        "datasets": {"credentials_dir": str(credentials_dir), "small_file_max": "256KiB", "pack_target": "1MiB",
                     "stall_timeout": "3s", "connect_timeout": "2s", "max_retries": 2, "parallel_fetches": 8,
                     "allowed_origins": [allowed_origin(o) for o in origins]},
    }
    if extra:
        from shoal_fixtures.shoal import _merge
        _merge(cfg, extra)
    return RegistryProxy(directory, upstreams=DUMMY_UPSTREAM, torrent=True, extra=cfg, host=host, netns=netns,
                         port=port, bt_port=bt_port, trackers=trackers, log_level=log_level)


def dataset_peerd(directory: Path, name: str, proxy_url: str, *, extra: Mapping[str, Any] | None = None,
                  **kw) -> Peerd:
    cfg: dict[str, Any] = {"swarm": {"stall_timeout": "3s", "fallback_deadline": "20s"}}
    if extra:
        from shoal_fixtures.shoal import _merge
        _merge(cfg, extra)
    return Peerd(directory, name=name, registry_proxy=proxy_url, extra=cfg, **kw)


def s3_declaration(name: str, version: str, s3, prefix: str, **extra) -> dict:
    return {"name": name, "version": version,
            "origin": {"url": f"s3://{s3.bucket}/{prefix}", "endpoint": s3.endpoint, "region": "us-east-1",
                       "credentials_file": "s3rver.creds"}, **extra}


def http_declaration(name: str, version: str, url: str, **extra) -> dict:
    return {"name": name, "version": version, "origin": {"url": url}, **extra}


def declare(proxy_url: str, decl: dict) -> tuple[int, Any]:
    return http_json(proxy_url + "/shoal/v1/datasets", method="POST", body=decl)


def wait_dataset(proxy_url: str, ref: str, *, timeout: float = 120, states=("ready",)) -> dict:
    last: dict = {}

    def done() -> bool:
        nonlocal last
        code, body = http_json(f"{proxy_url}/shoal/v1/datasets/{ref}")
        last = body if isinstance(body, dict) else {"http": code, "body": body}
        if isinstance(body, dict) and body.get("state") == "failed" and "failed" not in states:
            raise FixtureError(f"dataset {ref} failed: {body.get('error')}")
        return isinstance(body, dict) and body.get("state") in states

    wait_until(done, timeout, f"dataset {ref} in state {states}", diagnostics=lambda: json.dumps(last))
    return last


def shoalctl(*args: str, peerd: str = "", proxy: str = "", netns: str | None = None, timeout: float = 300,
             check: bool = False):
    argv = [str(binary("shoalctl"))]
    if peerd:
        argv += ["--peerd", peerd]
    if proxy:
        argv += ["--registry-proxy", proxy]
    argv += list(args)
    return run(argv, timeout=timeout, check=check, netns=netns, what="shoalctl " + " ".join(args))


def view_dir(peerd: Peerd, ref: str) -> Path:
    return Path(peerd.dir) / "views" / ref


def verify_view(view: Path, expected: Mapping[str, bytes], *, cache_objects: Path | None = None) -> int:
    """Every expected file is in the view with the same bytes (sha256), nothing else is; files are
    0444, directories 0555, non-empty files are files of their own (not the cache's objects) or
    sealed links to them (immutable: nobody can write them): a write through a view must not reach
    the cache, security review F19. Returns files checked."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(view):
        st = os.stat(dirpath)
        if stat.S_IMODE(st.st_mode) != 0o555:
            raise AssertionError(f"view directory {dirpath} has mode {oct(stat.S_IMODE(st.st_mode))}, not 0555")
        for f in filenames:
            p = Path(dirpath) / f
            rel = str(p.relative_to(view))
            st = os.stat(p)
            if stat.S_IMODE(st.st_mode) != 0o444:
                raise AssertionError(f"view file {rel} has mode {oct(stat.S_IMODE(st.st_mode))}, not 0444")
            data = p.read_bytes()
            seen[rel] = sha(data)
            if st.st_size > 0 and not is_sealed(p):
                if st.st_nlink != 1:
                    raise AssertionError(f"view file {rel} has {st.st_nlink} links, not its own inode")
                if cache_objects is not None:
                    obj = cache_objects / "sha256" / seen[rel][:2] / seen[rel]
                    if obj.exists() and os.stat(obj).st_ino == st.st_ino:
                        raise AssertionError(f"view file {rel} is the cache's object {obj} itself")
    want = {k: sha(v) for k, v in expected.items()}
    missing = sorted(set(want) - set(seen))
    extra = sorted(set(seen) - set(want))
    wrong = sorted(k for k in set(want) & set(seen) if want[k] != seen[k])
    if missing or extra or wrong:
        raise AssertionError(f"view {view} differs from the origin: missing {missing[:5]} ({len(missing)}), "
                             f"extra {extra[:5]} ({len(extra)}), different {wrong[:5]} ({len(wrong)})")
    return len(seen)


def wait_for(predicate, timeout: float, what: str) -> None:
    wait_until(predicate, timeout, what)


def now() -> float:
    return time.monotonic()


__all__ = ["FixtureError", "content", "small_tree", "sha", "http_json", "dataset_proxy", "dataset_peerd",
           "s3_declaration", "http_declaration", "declare", "wait_dataset", "shoalctl", "view_dir", "verify_view",
           "wait_for", "now"]
