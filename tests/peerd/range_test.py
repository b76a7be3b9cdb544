#!/usr/bin/env python3
"""A lazy reader's small Range of a cold blob that registry-proxy is still cutting into chunks
(peerd/include/peerd/chunked.h, want_range; swarm.range_direct_bytes), against the real
registry-proxy and peerd on loopback, with a scripted upstream (tests/registry-proxy/
stub_upstream.py) that holds the blob at 20 MiB so "not cut yet" is deterministic.

The blob is 40 MiB, cut into chunks of 16 MiB ([0, 16) and [16, 40) MiB): while the upstream
holds, chunk 0 exists and chunk 1 cannot.
- A 1 MiB Range inside chunk 1 is answered while the upstream still holds: peerd asks
  registry-proxy for it directly (registry-proxy has those bytes from its own fetch), and the
  bytes are right. Before this, the reader waited for the whole chunk to be cut and swarmed.
- An open-ended `bytes=N-` Range (containerd 2's parallel layer fetch, or any reader of the rest
  of the blob) is not asked directly: it gets its first byte only once the upstream goes on and
  the chunk exists, so such readers do not multiply registry-proxy's load.
- registry-proxy fetched the blob from upstream once; the whole blob through peerd afterwards
  is the right one.
- A small range far beyond the bytes registry-proxy's fetch holds (more than
  `ranges.upstream_ahead`, 4 MiB here) is asked of upstream on its own, by registry-proxy, so it
  is answered while the upstream still holds the whole blob, through peerd and at registry-proxy
  alone; the blob is still fetched whole once. An upstream that ignores Range gets the range
  served from the fetch instead (once its bytes are there), with the right bytes.
- registry-proxy killed and started again while a client reads such a blob (the first chunk
  listed, the upstream held): it no longer lists the chunks, peerd takes the rest as ranges of
  the blob from it once it is back (chunked.h, take_tail), and the client's one GET receives the
  whole blob.
- A client reading the whole blob from byte 0 waits for chunk 1 far past peerd's
  `http.write_timeout` (4 s here) while the upstream holds, and still gets the whole blob: the
  waits of a chunked fetch are bounded by the fetch itself, not by the server's source timeout.
- registry-proxy stalled (SIGSTOP) for longer than one metainfo call may take (`metainfo_wait`
  + 3 s) while a client asks peerd for a blob: peerd asks again while `fallback_deadline`
  allows, and the client gets the blob once registry-proxy answers, not a 504 (at 32 nodes a
  metainfo answer lost on the congested origin link failed a pull that way).
"""
from __future__ import annotations

import hashlib
import http.client
import json
import random
import signal
import sys
import threading
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE.parents[0] / "registry-proxy"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, parse_metrics, upstream  # noqa: E402
from stub_upstream import StubUpstream  # noqa: E402

MIB = 1 << 20


class RangeTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-peerd-range-")
        cls.stub = cls.class_track(StubUpstream().start())
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream("stub.test", cls.stub.url, stall_timeout="60s")], torrent=True,
            extra={"ranges": {"upstream_ahead": "4MiB"}}).start())
        cls.peerd = cls.class_track(Peerd(d / "peerd", name="range-node", registry_proxy=cls.proxy.url,
                                          extra={"swarm": {"stall_timeout": "2s",
                                                           "fallback_deadline": "60s"},
                                                 "http": {"write_timeout": "4s"}}).start())

    def metric(self, name: str) -> float:
        c = http.client.HTTPConnection("127.0.0.1", self.peerd.http_port, timeout=10)
        try:
            c.request("GET", "/metrics")
            return parse_metrics(c.getresponse().read().decode()).get(name, 0)
        finally:
            c.close()

    def get(self, path: str, headers: dict[str, str], out: dict) -> None:
        """GET through peerd recording status, headers, body and when the first body byte came."""
        c = http.client.HTTPConnection("127.0.0.1", self.peerd.http_port, timeout=90)
        try:
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            out["status"], out["headers"] = r.status, {k.lower(): v for k, v in r.getheaders()}
            first = r.read(1)
            out["first_byte_at"] = time.monotonic()
            out["body"] = first + r.read()
        except Exception as e:  # reported by the test, not lost in a thread
            out["error"] = repr(e)
        finally:
            c.close()

    def get_range(self, path: str, lo: int, hi: int, data: bytes) -> float:
        """GETs bytes lo..hi through peerd, checks the 206 and its bytes; returns the seconds."""
        got: dict = {}
        t0 = time.monotonic()
        self.get(path, {"Range": f"bytes={lo}-{hi}"}, got)
        took = time.monotonic() - t0
        self.assertNotIn("error", got)
        self.assertEqual(got["status"], 206, got.get("body", b"")[:300])
        self.assertEqual(got["headers"].get("content-range"), f"bytes {lo}-{hi}/{len(data)}")
        self.assertEqual(got["body"], data[lo:hi + 1])
        return took

    def assert_whole_fetched_once(self, path: str, digest: str) -> None:
        """The whole blob through peerd is right, and registry-proxy fetched it whole once (GETs
        upstream without a Range)."""
        whole: dict = {}
        self.get(path, {}, whole)
        self.assertEqual(whole.get("status"), 200, whole)
        self.assertEqual(hashlib.sha256(whole["body"]).hexdigest(), digest.removeprefix("sha256:"))
        plain = [r for r in self.stub.requests(digest, "GET") if "range" not in r.headers]
        self.assertEqual(len(plain), 1)

    def held_blob(self, seed: str, repo: str, **behaviour: object) -> tuple[bytes, str, str]:
        """A 40 MiB blob the upstream holds at 20 MiB until released (released and re-armed at
        the test's end, so later tests' holds hold again): its bytes, digest and path via peerd."""
        data = random.Random(seed).randbytes(40 * MIB)
        digest = self.stub.add_blob(data, hold_at=20 * MIB, **behaviour)
        self.addCleanup(self.stub.rearm)
        self.addCleanup(self.stub.release)
        return data, digest, f"/v2/team/{repo}/blobs/{digest}?ns=stub.test"

    def cut_chunks(self, digest: str) -> int:
        s, _, body = self.proxy.get(f"/shoal/v1/chunks/{digest}?ns=stub.test&repo=team/lazy&have=0&wait_ms=0")
        self.assertEqual(s, 200, body[:300])
        return len(json.loads(body)["chunks"])

    def test_small_range_of_an_uncut_chunk_comes_from_registry_proxy_at_once(self):
        data, digest, path = self.held_blob("peerd-range-direct", "lazy")
        direct0 = self.metric("shoal_peerd_range_direct_total")
        bytes0 = self.metric("shoal_peerd_range_direct_bytes_total")

        lo, hi = 17 * MIB + 12345, 18 * MIB + 12344  # 1 MiB inside chunk 1 ([16, 40) MiB)
        took = self.get_range(path, lo, hi, data)
        print(f"\n1 MiB range of the uncut chunk answered in {took:.2f} s while the upstream holds")
        # Still held: chunk 1 does not exist, so the bytes did not come from it.
        self.assertEqual(self.cut_chunks(digest), 1)
        self.assertEqual(self.metric("shoal_peerd_range_direct_total") - direct0, 1)
        self.assertEqual(self.metric("shoal_peerd_range_direct_bytes_total") - bytes0, hi - lo + 1)

        # An open-ended range is not asked directly: no byte before the chunk exists, although
        # registry-proxy holds its first MiB (the upstream is at 20 MiB). (The range above is
        # kept for reads inside it: an open-ended range from `lo` would start with those bytes.)
        lo = 19 * MIB
        rest: dict = {}
        t = threading.Thread(target=self.get, args=(path, {"Range": f"bytes={lo}-"}, rest), daemon=True)
        t.start()
        time.sleep(2.0)
        self.assertNotIn("first_byte_at", rest, "an open-ended range was answered before its chunk existed")
        released = time.monotonic()
        self.stub.release()
        t.join(90)
        self.assertFalse(t.is_alive(), "the open-ended range never ended")
        self.assertNotIn("error", rest)
        self.assertEqual(rest["status"], 206)
        self.assertGreaterEqual(rest["first_byte_at"], released)
        self.assertEqual(rest["body"], data[lo:])
        self.assertEqual(self.metric("shoal_peerd_range_direct_total") - direct0, 1)

        # The whole blob through peerd; registry-proxy fetched it whole once. (Had the range
        # come while its fetch was more than 4 MiB short of it, registry-proxy asked upstream
        # for the range alone: the test that follows.)
        self.assert_whole_fetched_once(path, digest)

    def test_a_range_far_ahead_of_the_fetch_is_asked_of_upstream(self):
        data, digest, path = self.held_blob("proxy-range-upstream", "ahead")
        ranges0 = self.proxy.metric("shoal_proxy_upstream_ranges_total")
        bytes0 = self.proxy.metric("shoal_proxy_upstream_range_bytes_total")
        direct0 = self.metric("shoal_peerd_range_direct_total")

        # Through peerd: 1 MiB in chunk 1, 10 MiB beyond the 20 the fetch can have.
        lo, hi = 30 * MIB + 7, 31 * MIB + 6
        took = self.get_range(path, lo, hi, data)
        print(f"\n1 MiB range 10 MiB ahead of the held fetch answered in {took:.2f} s through peerd")
        self.assertEqual(self.metric("shoal_peerd_range_direct_total") - direct0, 1)
        # At registry-proxy alone, another one.
        a, b = 36 * MIB, 36 * MIB + 99
        s, h, body = self.proxy.get(path, headers={"Range": f"bytes={a}-{b}"}, timeout=10)
        self.assertEqual((s, body), (206, data[a:b + 1]))
        self.assertEqual(h.get("content-range"), f"bytes {a}-{b}/{len(data)}")
        # Still held: neither came from the fetch.
        self.assertEqual(self.cut_chunks(digest), 1)
        self.assertEqual(self.stub.script(digest).gets_finished, 2)  # the two ranges' GETs
        self.assertEqual(self.proxy.metric("shoal_proxy_upstream_ranges_total") - ranges0, 2)
        self.assertEqual(self.proxy.metric("shoal_proxy_upstream_range_bytes_total") - bytes0,
                         (hi - lo + 1) + (b - a + 1))
        asked = sorted(r.headers.get("range", "") for r in self.stub.requests(digest, "GET"))
        self.assertEqual(asked, ["", f"bytes={lo}-{hi}", f"bytes={a}-{b}"])
        # A range with the last byte waits for the fetch: that byte goes out only verified.
        tail: dict = {}
        t = threading.Thread(target=lambda: tail.update(r=self.proxy.get(
            path, headers={"Range": f"bytes={len(data) - 100}-"}, timeout=60)), daemon=True)
        t.start()
        time.sleep(0.5)
        self.assertNotIn("r", tail, "the last byte went out before the blob was verified")
        self.assertEqual(len(self.stub.requests(digest, "GET")), 3)

        # The whole blob through peerd: right, and fetched whole once.
        self.stub.release()
        t.join(60)
        self.assertEqual((tail["r"][0], tail["r"][2]), (206, data[-100:]))
        self.assert_whole_fetched_once(path, digest)

    def test_a_range_upstream_does_not_answer_comes_from_the_fetch(self):
        data, digest, path = self.held_blob("proxy-range-ignored", "ignored", ignore_range=True)
        fallbacks0 = self.proxy.metric("shoal_proxy_upstream_range_fallbacks_total")
        ranges0 = self.proxy.metric("shoal_proxy_upstream_ranges_total")
        # The whole blob's fetch first, held at 20 MiB.
        c = http.client.HTTPConnection("127.0.0.1", self.proxy.port, timeout=60)
        self.addCleanup(c.close)
        c.request("GET", path)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(MIB), data[:MIB])
        a, b = 30 * MIB, 30 * MIB + 99
        late: dict = {}

        def ask():
            late["r"] = self.proxy.get(path, headers={"Range": f"bytes={a}-{b}"}, timeout=60)
        t = threading.Thread(target=ask, daemon=True)
        t.start()
        wait_until(lambda: self.proxy.metric("shoal_proxy_upstream_range_fallbacks_total") > fallbacks0,
                   10, "the range upstream answered with the whole blob falls back to the fetch")
        time.sleep(0.3)
        self.assertNotIn("r", late, "answered before the fetch had the bytes")
        self.stub.release()
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual((late["r"][0], late["r"][2]), (206, data[a:b + 1]))
        self.assertEqual(self.proxy.metric("shoal_proxy_upstream_ranges_total"), ranges0)
        self.assertIn("range asked of upstream not answered", self.proxy.log_text())
        self.assertEqual(r.read(), data[MIB:])

    def test_registry_proxy_restarted_mid_blob_the_client_still_gets_it_whole(self):
        data, digest, path = self.held_blob("peerd-range-restart", "restart")
        tails0 = self.metric("shoal_peerd_chunked_tails_total")
        c = http.client.HTTPConnection("127.0.0.1", self.peerd.http_port, timeout=60)
        self.addCleanup(c.close)
        t0 = time.monotonic()
        c.request("GET", path)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        first = r.read(1 * MIB)
        self.assertEqual(len(first), MIB)
        self.proxy.kill()
        self.proxy.start()
        restarted = time.monotonic() - t0
        self.stub.release()
        rest = r.read()
        took = time.monotonic() - t0
        print(f"\nregistry-proxy restarted {restarted:.2f} s into a 40 MiB chunked blob: "
              f"{(len(first) + len(rest)) >> 20} MiB received in {took:.2f} s")
        self.assertEqual(first + rest, data)
        self.assertEqual(self.metric("shoal_peerd_chunked_tails_total") - tails0, 1)

    def test_a_reader_waiting_for_a_chunk_outlasts_the_write_timeout(self):
        # The upstream holds at 20 MiB for 10 s: the reader gets chunk 0 ([0, 16) MiB) and then
        # waits for chunk 1, which is cut only after the hold, far past peerd's write timeout of
        # 4 s. Before, the server's source timeout cut the body off after chunk 0 (http.client:
        # IncompleteRead) although the fetch went on and completed.
        data, digest, path = self.held_blob("peerd-chunk-wait", "patient")
        got: dict = {}
        t0 = time.monotonic()
        t = threading.Thread(target=self.get, args=(path, {}, got), daemon=True)
        t.start()
        wait_until(lambda: "first_byte_at" in got, 30, "the reader's first byte")
        time.sleep(10.0)
        self.assertEqual(self.cut_chunks(digest), 1, "chunk 1 exists: the reader never waited")
        self.stub.release()
        t.join(90)
        took = time.monotonic() - t0
        print(f"\nwhole 40 MiB chunked blob read from byte 0 across a 10 s hold in {took:.2f} s")
        self.assertFalse(t.is_alive(), "the read never ended")
        self.assertNotIn("error", got)
        self.assertEqual(got["status"], 200)
        self.assertEqual(hashlib.sha256(got["body"]).hexdigest(), digest.removeprefix("sha256:"))
        # The joined blob is seeded at once (chunked_blob::seed_whole), and its log line says so.
        wait_until(lambda: any("loaded a seed at once" in ln and digest in ln
                               for ln in self.peerd.log_text().splitlines()), 20,
                   "the joined blob's seed loaded at once")

    def test_a_stalled_metainfo_call_is_asked_again(self):
        # A blob below the chunking size, cached at registry-proxy first (the upstream is not
        # what this is about). registry-proxy then stops answering for 10 s: the metainfo call
        # peerd makes meanwhile stalls past its bound (metainfo_wait 5 s + 3 s).
        data = random.Random("peerd-metainfo-stall").randbytes(1 * MIB)
        digest = self.stub.add_blob(data)
        path = f"/v2/team/stalled/blobs/{digest}?ns=stub.test"
        s, _, body = self.proxy.get(path, timeout=30)
        self.assertEqual((s, hashlib.sha256(body).hexdigest()), (200, digest.removeprefix("sha256:")))
        self.proxy.daemon.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: self.proxy.daemon.send_signal(signal.SIGCONT))
        retries0 = self.metric("shoal_peerd_metainfo_retries_total")
        got: dict = {}
        t0 = time.monotonic()
        t = threading.Thread(target=self.get, args=(path, {}, got), daemon=True)
        t.start()
        time.sleep(10.0)
        self.proxy.daemon.send_signal(signal.SIGCONT)
        t.join(60)
        took = time.monotonic() - t0
        print(f"\nblob through peerd across a 10 s registry-proxy stall: HTTP {got.get('status')} in {took:.2f} s")
        self.assertFalse(t.is_alive(), "the GET never ended")
        self.assertNotIn("error", got)
        self.assertEqual(got["status"], 200, got.get("body", b"")[:300])
        self.assertEqual(got["body"], data)
        self.assertGreater(took, 10.0, "answered while registry-proxy was stopped: the test proves nothing")
        self.assertEqual(self.metric("shoal_peerd_metainfo_retries_total") - retries0, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
