#!/usr/bin/env python3
"""A dataset of 100,000 small files and a few large ones on a real S3 endpoint (s3rver):
registry-proxy resolves it (every object read from the origin once, grouped into a handful of
packs), one peerd prefetches it, and its view is checked file by file (sha256) against the origin.

Caches live on /dev/shm: the cache commits every object with fdatasync and a synced index write,
which on this machine's disk costs ~1.5 ms per object (minutes for 100,000 objects, twice), and
this test is about Shoal's own work per file, not the disk's flush latency. The timings, files
resolved per second and peerd's peak RSS are printed as one JSON line (SCALE {...}); the peak
RssAnon (peerd's own memory) must stay <= RSS_ANON_MAX_MIB and VmRSS <= RSS_MAX_MIB.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset_common as dc  # noqa: E402
from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.procs import rmtree_sealed  # noqa: E402
from shoal_fixtures.s3 import S3rver  # noqa: E402

FILES = int(os.environ.get("SHOAL_SCALE_FILES", "100000"))
# peerd's peak memory while it prefetches the 100,000 files (docs/datasets.md pins these):
# RssAnon is peerd's own memory; VmRSS adds the file pages libtorrent maps while it writes.
RSS_ANON_MAX_MIB = 512
RSS_MAX_MIB = 768


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """VmRSS counts the file pages libtorrent has mapped (it writes through mmap); RssAnon is
    peerd's own memory."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class RssSampler:
    def __init__(self, pid: int):
        self.pid, self.peak, self.peak_anon, self.stop = pid, 0.0, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(0.25):
            self.peak = max(self.peak, rss_mib(self.pid))
            self.peak_anon = max(self.peak_anon, rss_mib(self.pid, "RssAnon"))

    def finish(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.peak


class HundredThousandFiles(FixtureTestCase):
    def test_100k_files(self):
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
        d = Path(tempfile.mkdtemp(prefix="shoal-scale-", dir=shm))
        self.addCleanup(rmtree_sealed, d)
        s3 = self.track(S3rver(d / "s3").start())
        creds = d / "creds"
        s3.credentials_file(creds)
        t0 = time.monotonic()
        expected: dict[str, bytes] = {}
        # 1,000 files per directory keep s3rver's directory walk per listing page cheap.
        for i in range(FILES):
            data = dc.content(f"f{i}", 100 + (i * 7919) % 1900)
            key = f"d{i // 1000:03d}/f{i:06d}.bin"
            expected[key] = data
            s3.write_object("scale/" + key, data)
        for i in range(3):
            key = f"large/shard-{i}.bin"
            expected[key] = dc.content(f"large{i}", (8 << 20) + i)
            s3.write_object("scale/" + key, expected[key])
        gen_s = time.monotonic() - t0
        proxy = self.track(dc.dataset_proxy(d / "proxy", credentials_dir=creds, origins=[s3], extra={
            "datasets": {"small_file_max": "4MiB", "pack_target": "64MiB", "parallel_fetches": 16,
                         "stall_timeout": "30s"}}).start())
        node = self.track(dc.dataset_peerd(d / "node", "node", proxy.url).start())

        t0 = time.monotonic()
        code, body = dc.declare(proxy.url, dc.s3_declaration("scale", "v1", s3, "scale/"))
        self.assertIn(code, (200, 202), body)
        st = dc.wait_dataset(proxy.url, "scale@v1", timeout=600)
        resolve_s = time.monotonic() - t0
        self.assertEqual(st["files"], len(expected))
        self.assertLess(st["groups"], 20, "small files are packed: a handful of torrents, not 100,000")

        sampler = RssSampler(node.daemon.pid)
        t0 = time.monotonic()
        cp = dc.shoalctl("dataset", "prefetch", "scale@v1", peerd=node.url, timeout=900)
        prefetch_s = time.monotonic() - t0
        peak = sampler.finish()
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)

        t0 = time.monotonic()
        n = dc.verify_view(dc.view_dir(node, "scale@v1"), expected)
        verify_s = time.monotonic() - t0
        self.assertEqual(n, len(expected))
        gets = s3.object_gets()
        self.assertEqual(len(gets), len(expected))
        self.assertEqual(max(gets.values()), 1, "every object read from the origin once")
        report = {"files": len(expected), "generate_s": round(gen_s, 1), "resolve_s": round(resolve_s, 1),
                  "manifest_files_s": round(st["files_per_second"], 1), "groups": st["groups"],
                  "prefetch_s": round(prefetch_s, 1), "verify_s": round(verify_s, 1),
                  "peerd_rss_mib": round(peak, 1), "peerd_rss_anon_mib": round(sampler.peak_anon, 1)}
        print("SCALE " + json.dumps(report), flush=True)
        # The peak is pinned, not only printed (sampled every 0.25 s during the prefetch).
        self.assertGreater(sampler.peak_anon, 0, "peerd's memory was never sampled")
        self.assertLessEqual(sampler.peak_anon, RSS_ANON_MAX_MIB, f"peerd's peak RssAnon: {report}")
        self.assertLessEqual(peak, RSS_MAX_MIB, f"peerd's peak VmRSS: {report}")


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
