"""registry-proxy as the P2P origin: GET /shoal/v1/metainfo/<digest>?ns=..&repo=.. and seeding.

The .torrent must describe exactly the blob (length, name = hex digest, piece size by
common/metainfo.h's rule, one SHA-1 per piece of the bytes, private) and nothing else in its
info dict, so it is the same across requests, restarts and instances (the tracker list lives
outside the info dict). For an object not cached yet the request starts the single-flight fetch
and answers 200 once the metainfo exists, or 202 with JSON progress and Retry-After after the
bounded wait (wait_ms= lowers it). A plain libtorrent client (proxy_bt_fetch, built from
bt_fetch.cc) given only the .torrent and the Shoal-Seed endpoint downloads the blob.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.procs import run, wait_until
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, build_dir, upstream
from stub_upstream import StubUpstream

MIB = 1 << 20


def bt_fetch_binary() -> str:
    return os.environ.get("SHOAL_BT_FETCH") or str(
        build_dir() / "tests" / "registry-proxy" / "proxy_bt_fetch")


class MetainfoTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-metainfo-")
        cls.dir = d
        cls.reg = cls.class_track(Registry(d / "registry").start())
        # 3 MiB gets 64 KiB pieces; 70 MiB gets 128 KiB pieces (the rule's first doubling).
        cls.layout = oci.make_image(d / "img", [
            oci.LayerSpec(size=3 * MIB, seed="mi-small", gzip_level=0),
            oci.LayerSpec(size=70 * MIB, seed="mi-big", gzip_level=0),
            oci.LayerSpec(size=5 * MIB, seed="mi-other", gzip_level=0),
            oci.LayerSpec(size=24 * MIB, seed="mi-bt", gzip_level=0)])
        cls.reg.push(cls.layout, "team/app")
        cls.stub = cls.class_track(StubUpstream().start())
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url),
            upstream("stub.test", cls.stub.url, stall_timeout="10s")], torrent=True).start())

    def layer(self, i: int):
        return self.layout.images[0].layers[i]

    def path(self, digest: str, ns: str | None = None, repo: str = "team/app",
             extra: str = "") -> str:
        return f"/shoal/v1/metainfo/{digest}?ns={ns or self.reg.host_port}&repo={repo}{extra}"

    def check_torrent(self, body: bytes, headers: dict, digest: str, data: bytes) -> str:
        """Checks a .torrent against the blob's bytes; returns its info-hash (hex)."""
        t = pc.bdecode(body)
        info = t[b"info"]
        keys = {k for k in info if isinstance(k, bytes)}
        self.assertEqual(keys, {b"length", b"name", b"piece length", b"pieces", b"private"})
        self.assertEqual(info[b"length"], len(data))
        self.assertEqual(info[b"name"], digest.removeprefix("sha256:").encode())
        self.assertEqual(info[b"private"], 1)
        ps = info[b"piece length"]
        self.assertEqual(ps, pc.piece_size_for(len(data)))
        want = b"".join(hashlib.sha1(data[i:i + ps]).digest() for i in range(0, len(data), ps))
        self.assertEqual(info[b"pieces"], want, "piece SHA-1s must match the blob")
        info_hash = hashlib.sha1(t[(b"info", "raw")]).hexdigest()
        self.assertEqual(headers.get("shoal-info-hash"), info_hash)
        self.assertEqual(int(headers.get("shoal-piece-size", -1)), ps)
        self.assertEqual(int(headers.get("shoal-object-size", -1)), len(data))
        self.assertEqual(headers.get("content-type"), "application/x-bittorrent")
        return info_hash

    def test_metainfo_describes_the_cached_blob(self):
        layer = self.layer(0)
        data = self.layout.blob_path(layer.digest).read_bytes()
        s, _, body = self.proxy.get(f"/v2/team/app/blobs/{layer.digest}")
        self.assertEqual((s, pc.sha256(body)), (200, layer.digest))
        s, h, body = self.proxy.get(self.path(layer.digest))
        self.assertEqual(s, 200, body[:200])
        self.check_torrent(body, h, layer.digest, data)
        self.assertEqual(h.get("shoal-seed"), self.proxy.bt_endpoint)

    def test_metainfo_of_a_cold_object_fetches_it_once(self):
        layer = self.layer(1)
        data = self.layout.blob_path(layer.digest).read_bytes()
        mark = self.reg.mark()
        s, h, body = self.proxy.get(self.path(layer.digest), timeout=60)
        self.assertEqual(s, 200, body[:200])
        self.check_torrent(body, h, layer.digest, data)
        s, _, blob = self.proxy.get(f"/v2/team/app/blobs/{layer.digest}?ns={self.reg.host_port}")
        self.assertEqual((s, pc.sha256(blob)), (200, layer.digest))
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1)

    def test_metainfo_is_deterministic(self):
        layer = self.layer(2)
        first = self.proxy.get(self.path(layer.digest), timeout=60)
        self.assertEqual(first[0], 200)
        again = self.proxy.get(self.path(layer.digest))
        self.assertEqual(again[2], first[2])
        self.proxy.restart()
        after = self.proxy.get(self.path(layer.digest))
        self.assertEqual(after[2], first[2], "a restart must not change the metainfo")
        # Another instance with its own cache, fetching the blob itself, and with a tracker:
        # different .torrent bytes (announce), the same info dict and info-hash.
        other = self.track(RegistryProxy(self.tmpdir() / "other", upstreams=[
            upstream(self.reg.host_port, self.reg.url)], torrent=True,
            trackers=["http://127.0.0.1:9/announce"]).start())
        s, h, body = other.get(self.path(layer.digest), timeout=60)
        self.assertEqual(s, 200, body[:200])
        t1, t2 = pc.bdecode(first[2]), pc.bdecode(body)
        self.assertEqual(t2[(b"info", "raw")], t1[(b"info", "raw")])
        self.assertEqual(h.get("shoal-info-hash"), first[1].get("shoal-info-hash"))
        self.assertTrue(t2[b"announce"].startswith(b"http://127.0.0.1:9/announce"))
        self.assertNotIn(b"announce", t1)

    def test_slow_fetch_answers_202_with_progress_then_200(self):
        data = random.Random("mi-slow").randbytes(4 * MIB)
        digest = self.stub.add_blob(data, hold_at=MIB)
        self.addCleanup(self.stub.release)
        t0 = time.monotonic()
        s, h, body = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=300"))
        self.assertEqual(s, 202, body[:200])
        self.assertLess(time.monotonic() - t0, 5)
        progress = json.loads(body)
        self.assertEqual(progress["status"], "fetching")
        self.assertEqual(progress["size"], len(data))
        self.assertLessEqual(progress["bytes"], MIB)
        self.assertTrue(h.get("retry-after", "").isdigit())
        # A second asker joins the same fetch.
        s, _, _ = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=0"))
        self.assertEqual(s, 202)
        self.stub.release()

        def done():
            r = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=2000"))
            return r if r[0] == 200 else None
        s, h, body = wait_until(done, 20, "metainfo after the fetch")
        self.check_torrent(body, h, digest, data)
        self.assertEqual(len(self.stub.requests(digest, "GET")), 1)

    def chunk_list(self, digest: str, have: int, wait_ms: int = 2000) -> dict:
        s, _, body = self.proxy.get(f"/shoal/v1/chunks/{digest}?ns=stub.test&repo=team/app&have={have}"
                                    f"&wait_ms={wait_ms}", timeout=30)
        self.assertEqual(s, 200, body[:200])
        return json.loads(body)

    def test_chunks_swarm_before_the_blob_is_complete(self):
        # 40 MiB with chunks of 16 MiB: [16, 24]. The upstream holds at 20 MiB, so the first
        # chunk exists (cached, metainfo, seeded) while the blob is still incomplete.
        data = random.Random("mi-chunks").randbytes(40 * MIB)
        digest = self.stub.add_blob(data, hold_at=20 * MIB)
        self.addCleanup(self.stub.rearm)  # later tests' holds must hold again
        self.addCleanup(self.stub.release)
        t0 = time.monotonic()
        s, _, body = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=20000&chunks=1"), timeout=30)
        self.assertEqual(s, 202, body[:200])
        self.assertLess(time.monotonic() - t0, 10, "a chunked object must answer at once")
        self.assertEqual(json.loads(body)["chunk_size"], 16 * MIB)
        # Without chunks=1 nothing changes for the asker: a bounded wait, then 202 without layout.
        s, _, body = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=200"))
        self.assertEqual(s, 202)
        self.assertNotIn("chunk_size", json.loads(body))
        first = self.chunk_list(digest, 0, 10000)
        self.assertFalse(first["complete"])
        self.assertEqual(first["chunk_count"], 2)
        self.assertEqual(len(first["chunks"]), 1)
        c0 = first["chunks"][0]
        self.assertEqual((c0["offset"], c0["size"]), (0, 16 * MIB))
        self.assertEqual(c0["digest"], pc.sha256(data[:16 * MIB]))
        s, h, body = self.proxy.get(self.path(c0["digest"], ns="stub.test", extra=f"&parent={digest}"))
        self.assertEqual(s, 200, body[:200])
        self.check_torrent(body, h, c0["digest"], data[:16 * MIB])
        # The blob itself is not there yet; a chunk's metainfo needs the right parent.
        s, _, _ = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=0"))
        self.assertEqual(s, 202)
        other = self.stub.add_blob(b"x" * 100)
        s, _, _ = self.proxy.get(self.path(c0["digest"], ns="stub.test", extra=f"&parent={other}"))
        self.assertEqual(s, 404)
        # Waiting for more than there is answers after the bounded wait with what there is.
        t0 = time.monotonic()
        same = self.chunk_list(digest, 1, 500)
        self.assertEqual(len(same["chunks"]), 1)
        self.assertGreater(time.monotonic() - t0, 0.4)
        self.stub.release()
        done = wait_until(lambda: (lambda j: j if j["complete"] else None)(self.chunk_list(digest, 1)), 30,
                          "the chunk list to complete")
        c1 = done["chunks"][1]
        self.assertEqual((c1["offset"], c1["size"]), (16 * MIB, 24 * MIB))
        self.assertEqual(c1["digest"], pc.sha256(data[16 * MIB:]))

        def whole():
            r = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=2000"))
            return r if r[0] == 200 else None
        s, h, body = wait_until(whole, 20, "the blob's own metainfo")
        self.check_torrent(body, h, digest, data)
        self.assertEqual(len(self.stub.requests(digest, "GET")), 1)
        # Small objects are never cut.
        small = self.stub.add_blob(random.Random("mi-small-chunks").randbytes(MIB))
        s, _, body = self.proxy.get(self.path(small, ns="stub.test", extra="&wait_ms=10000&chunks=1"), timeout=30)
        self.assertEqual(s, 200, body[:200])
        s, _, _ = self.proxy.get(f"/shoal/v1/chunks/{small}?ns=stub.test&repo=team/app")
        self.assertEqual(s, 404)

    def test_chunks_of_a_blob_with_wrong_bytes_are_disowned(self):
        data = random.Random("mi-chunks-wrong").randbytes(33 * MIB)
        digest = self.stub.add_blob(data, wrong=True)
        s, _, body = self.proxy.get(self.path(digest, ns="stub.test", extra="&wait_ms=20000&chunks=1"), timeout=30)
        self.assertEqual(s, 202, body[:200])
        # Each chunk hashes to its own digest, but the blob does not: the list ends failed, so no
        # node joins the chunks into something it takes for the blob.
        end = wait_until(lambda: (lambda j: j if "error" in j else None)(self.chunk_list(digest, 99)), 30,
                         "the chunk list to fail")
        self.assertFalse(end["complete"])
        self.assertIn("digest", end["error"])

    def test_bad_requests(self):
        good = self.layer(0).digest
        cases = [
            ("/shoal/v1/metainfo/sha256:xyz?repo=team/app", 400, "DIGEST_INVALID"),
            ("/shoal/v1/metainfo/?repo=team/app", 400, "DIGEST_INVALID"),
            (f"/shoal/v1/metainfo/{good}", 400, "NAME_INVALID"),
            (f"/shoal/v1/metainfo/{good}?repo=UPPER", 400, "NAME_INVALID"),
            (f"/shoal/v1/metainfo/{good}?repo=team/app&ns=unknown.example", 404, "NAME_UNKNOWN"),
            (f"/shoal/v1/metainfo/{good}?repo=team/app&ns=%zz", 400, "NAME_INVALID"),
            (self.path("sha256:" + "4" * 64), 404, "BLOB_UNKNOWN"),
        ]
        for path, status, code in cases:
            with self.subTest(path=path):
                s, _, body = self.proxy.get(path)
                self.assertEqual(s, status, body[:200])
                self.assertEqual(pc.error_code(body), code)

    def test_libtorrent_downloads_the_blob_from_the_seed(self):
        # A cold object: the metainfo request fetches it, and the seed is loaded by the commit
        # and by the served metainfo at the same moment.
        layer = self.layer(3)
        s, h, body = self.proxy.get(self.path(layer.digest), timeout=60)
        self.assertEqual(s, 200, body[:200])
        d = self.tmpdir("shoal-bt-")
        (d / "blob.torrent").write_bytes(body)
        (d / "out").mkdir()
        cp = run([bt_fetch_binary(), str(d / "blob.torrent"), h["shoal-seed"], str(d / "out"),
                  "30"], timeout=60, what="proxy_bt_fetch", check=False)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        result = json.loads(cp.stdout.strip().splitlines()[-1])
        self.assertTrue(result["ok"], result)
        got = d / "out" / layer.digest.removeprefix("sha256:")
        self.assertEqual(oci.sha256_file(got), layer.digest)
        self.assertGreaterEqual(self.proxy.metric("shoal_proxy_torrents_loaded"), 1)


class SmallCacheChunksTest(FixtureTestCase):
    """A blob is cut into chunk objects only when the cache can hold it twice.

    Every chunk stays pinned while it is seeded, beside the blob itself. A cache short of that
    room would evict chunks nodes still need (and the just-cut chunk before its seed pins it),
    breaking every pull of the blob part-way; the blob is left whole instead, and nodes wait for
    it and swarm it once it is cached.
    """

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-smallcache-")
        cls.stub = cls.class_track(StubUpstream().start())
        # 128 MiB: the high watermark (0.85) is 108.8 MiB.
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream("stub.test", cls.stub.url, stall_timeout="10s")], torrent=True,
            extra={"cache": {"quota": "128MiB"}}).start())

    def metainfo(self, digest: str, extra: str) -> tuple[int, dict, bytes]:
        return self.proxy.get(f"/shoal/v1/metainfo/{digest}?ns=stub.test&repo=team/app{extra}",
                              timeout=60)

    def whole(self, digest: str) -> None:
        def answered():
            r = self.metainfo(digest, "&wait_ms=2000&chunks=1")
            return r if r[0] == 200 else None
        wait_until(answered, 60, "the blob's own metainfo")

    def test_a_blob_the_cache_cannot_hold_twice_is_not_cut(self):
        # 34 MiB fits twice under the watermark (68 MiB): cut into [16, 18] MiB.
        first = random.Random("sc-first").randbytes(34 * MIB)
        d1 = self.stub.add_blob(first)
        s, _, body = self.metainfo(d1, "&wait_ms=20000&chunks=1")
        if s == 202:
            self.assertEqual(json.loads(body).get("chunk_size"), 16 * MIB, body[:200])
        self.whole(d1)
        s, _, body = self.proxy.get(f"/shoal/v1/chunks/{d1}?ns=stub.test&repo=team/app&have=0")
        self.assertEqual(s, 200, body[:200])
        self.assertTrue(json.loads(body)["complete"])
        self.assertEqual(self.proxy.metric("shoal_proxy_chunking_skipped_total"), 0)
        # The blob and its chunks, each pinned by its seed.
        self.assertGreaterEqual(self.proxy.metric("shoal_cache_pinned_bytes"), 68 * MIB)
        # 60 MiB does not: the first blob and its chunks stay pinned by their seeds (68 MiB), so
        # 60 more in flight and 60 of chunks would pass the watermark. Left whole.
        second = random.Random("sc-second").randbytes(60 * MIB)
        d2 = self.stub.add_blob(second)
        s, _, body = self.metainfo(d2, "&wait_ms=500&chunks=1")
        if s == 202:
            self.assertNotIn("chunk_size", json.loads(body), body[:200])
        self.whole(d2)
        s, _, body = self.proxy.get(f"/shoal/v1/chunks/{d2}?ns=stub.test&repo=team/app&have=0")
        self.assertEqual(s, 404, body[:200])
        self.assertEqual(self.proxy.metric("shoal_proxy_chunking_skipped_total"), 1)
        self.assertIn("blob not cut into chunks", self.proxy.log_text())
        # Nothing was lost: both blobs are whole in the cache, fetched once each.
        for d, data in ((d1, first), (d2, second)):
            s, _, got = self.proxy.get(f"/v2/team/app/blobs/{d}?ns=stub.test", timeout=60)
            self.assertEqual(s, 200)
            self.assertEqual(hashlib.sha256(got).hexdigest(), d.removeprefix("sha256:"))
            self.assertEqual(len(self.stub.requests(d, "GET")), 1)
        self.assertEqual(self.proxy.metric("shoal_cache_evictions_total"), 0)


if __name__ == "__main__":
    unittest.main()
