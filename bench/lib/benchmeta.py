"""What every benchmark's JSON carries besides its figures, and how verdicts are made.

`meta(options)` describes the run: the machine (CPU model, cores, `openssl speed sha256` and
`openssl speed -evp aes-128-gcm` at 16 KiB blocks, the system CPU a page-cache write of new
pages costs, /proc/loadavg before the run), the commit (and whether the tree was dirty), the command
line and options, and a `condition` key: the options that change what is measured (everything
but output paths). Runs are only compared or pooled when their benchmark, condition and commit
are equal (tools/bench-docs does that; a phase's verdict counts only like-for-like runs).

`target(value, op, bound)` is one verdict, compared on the unrounded value: 1.6004 is not <= 1.6.
A target whose phase failed is missed whatever its value (`ok=False`).
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OPS = {"<=": lambda v, b: v <= b, ">=": lambda v, b: v >= b, "==": lambda v, b: v == b,
       "<": lambda v, b: v < b, ">": lambda v, b: v > b}


def _run(cmd: list[str], timeout: float = 30) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def openssl_sha256_bytes_per_s() -> float | None:
    """`openssl speed -seconds 1 -bytes 16384 sha256`: one core's SHA-256 throughput in bytes/s."""
    out = _run(["openssl", "speed", "-seconds", "1", "-bytes", "16384", "sha256"], timeout=30)
    m = re.search(r"^sha256\s+([\d.]+)k", out, re.M)
    return float(m[1]) * 1000 if m else None


def openssl_aes_128_gcm_bytes_per_s() -> float | None:
    """`openssl speed -seconds 1 -bytes 16384 -evp aes-128-gcm`: one core's AES-128-GCM throughput
    in bytes/s (what TLS 1.3 costs per byte between the daemons, before any overhead)."""
    out = _run(["openssl", "speed", "-seconds", "1", "-bytes", "16384", "-evp", "aes-128-gcm"],
               timeout=30)
    m = re.search(r"^AES-128-GCM\s+([\d.]+)k", out, re.M)
    return float(m[1]) * 1000 if m else None


def page_cache_write_s_per_gib(mib: int = 256) -> float | None:
    """System CPU seconds per GiB to write `mib` MiB of new pages into the page cache (a fresh file
    in the temp directory, 256 KiB writes, no fsync), measured at the start of the run. Every
    daemon's cache write pays it. On the Firecracker VMs here it is about 0.23 s/GiB most of the
    time, and ten times that when the pages come from memory the guest left idle for a while (the
    host backs them again): a run's CPU per GiB written varies with it (docs/p2p.md, "Machine")."""
    import tempfile
    try:
        fd, path = tempfile.mkstemp(prefix="shoal-bench-pagecache-")
    except OSError:
        return None
    try:
        buf = os.urandom(256 << 10)
        t0 = os.times()
        for off in range(0, mib << 20, len(buf)):
            os.pwrite(fd, buf, off)
        t1 = os.times()
        return (t1.system - t0.system) * 1024 / mib
    except OSError:
        return None
    finally:
        os.close(fd)
        os.unlink(path)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    return {"cpu_model": cpu_model(), "cores": os.cpu_count(),
            "openssl_sha256_16k_bytes_per_s": openssl_sha256_bytes_per_s(),
            "openssl_aes_128_gcm_16k_bytes_per_s": openssl_aes_128_gcm_bytes_per_s(),
            "page_cache_write_s_per_gib": page_cache_write_s_per_gib(),
            "kernel": platform.release(), "loadavg_before": loadavg()}


def commit() -> dict[str, Any]:
    head = _run(["git", "-C", str(REPO), "rev-parse", "HEAD"]).strip()
    dirty = _run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]).strip()
    return {"commit": head, "dirty": bool(dirty)}


def meta(bench: str, options: dict[str, Any], ignore: tuple[str, ...] = ("json", "keep", "logs", "workdir",
                                                                        "perf", "out")) -> dict[str, Any]:
    """The run's description; `condition` is the sorted options minus output-only ones."""
    cond = {k: v for k, v in sorted(options.items()) if k not in ignore}
    return {"benchmark": bench, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": sys.argv[1:], "options": options, "condition": cond, "machine": machine(), **commit()}


def finish(m: dict[str, Any]) -> dict[str, Any]:
    m["machine"]["loadavg_after"] = loadavg()
    m["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return m


def target(value: float | None, op: str, bound: float, ok: bool = True, note: str = "") -> dict[str, Any]:
    met = bool(ok and value is not None and OPS[op](value, bound))
    out = {"value": value, "op": op, "bound": bound, "met": met}
    if not ok:
        out["note"] = note or "the phase failed on some node"
    elif note:
        out["note"] = note
    return out


def print_verdicts(targets: dict[str, dict[str, Any]], out=sys.stdout) -> None:
    for name, t in targets.items():
        v = t["value"]
        shown = "n/a" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))
        print(f"  verdict {name}: {shown} {t['op']} {t['bound']:g}: {'met' if t['met'] else 'MISSED'}"
              + (f" ({t['note']})" if t.get("note") else ""), file=out)


def write(path: str | os.PathLike, data: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
