#!/usr/bin/env python3
"""Swarm faults on 3 namespaced nodes where registry-proxy does not seed over BitTorrent: the only
BitTorrent sources are other nodes (or a fake peer), and registry-proxy's HTTP blob URL is the
fallback. swarm.seed_idle_unload is 2 s so holders unload their torrents quickly.

  01 a stalled swarm (nobody seeds) falls back to HTTP ranges from registry-proxy
  02 a holder whose torrent was unloaded serves it when a peer asks (on_unknown_torrent)
  03 a holder's object corrupted on disk: the bad piece is never uploaded, the holder quarantines
     the object (cache, index, heartbeat), the downloader completes with correct bytes
  04 a fake peer announcing itself as a seed and sending garbage: pieces rejected (counted in
     shoal_peerd_hash_failures_total), the pull completes from good sources; raw garbage on the
     BitTorrent port does not hurt peerd
  05 the same with real bytes from the wrong place (another piece's data)
  06 plain mode says so: each peerd warned at start that credentials go in clear text,
     registry-proxy and the scheduler that nobody is authenticated; the metrics listener is plain
     HTTP on the node address, scraped from another node
  07 a reader waiting on one piece nobody sends while every other piece arrives, for longer than
     node2's http.write_timeout (4 s): its response is not cut off (curl got the whole object)
  08 a peer whose pieces each take longer than stall_timeout while its blocks keep coming (a
     crowded link): no HTTP range is fetched, the object comes from that peer alone

This suite is also the plain-mode smoke (`tls=False`: registry-proxy, the scheduler and peerd's
calls in plain HTTP, as `tls.enabled: false` gives a single-machine demo): its fake peers are
non-members that plain BitTorrent lets in, and every other multi-node suite runs with TLS on.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "support"))
sys.path.insert(0, str(HERE))

from cluster_case import ClusterCase  # noqa: E402
from shoal_fixtures import Daemon  # noqa: E402

MiB = 1 << 20
NODES = 3
PEERD = {"upstream": {"connect_timeout": "1s", "request_timeout": "3s", "metainfo_wait": "2s"},
         "swarm": {"stall_timeout": "3s", "fallback_deadline": "15s", "seed_idle_unload": "2s"}}


@unittest.skipUnless(os.geteuid() == 0, "needs root (network namespaces, containerd)")
class FaultsTest(ClusterCase):
    # node2's http.write_timeout is short so test 07 can outwait it.
    CLUSTER = {"nodes": NODES, "rate": "200mbit", "torrent": False, "peerd_extra": PEERD, "tls": False,
               "peerd_extra_by_node": {1: {"http": {"write_timeout": "4s"}}}}
    TMP_PREFIX = "shoal-peerd-faults-"
    REPO_PREFIX = "faults"

    # -- helpers ---------------------------------------------------------------------------------

    def metric(self, i: int, name: str) -> float:
        return self.c.metrics_of(self.c.peerds[i].url, i).get(name, 0.0)

    def wait_unloaded(self, i: int):
        # seed_idle_unload (2 s) plus the monitor's 5 s sweep.
        self.wait(lambda: self.status(i).get("torrents_loaded", 1) == 0, 15, f"node{i + 1} to unload its seeds")

    def held_at_scheduler(self, i: int) -> int:
        for n in self.c.scheduler.nodes(netns=self.c.infra_netns):
            if n["node"] == f"node{i + 1}":
                return n["objects"]
        return -1

    def torrent_file(self, digest: str, repo: str) -> Path:
        path = self.tmpdir() / "object.torrent"
        path.write_bytes(self.metainfo(digest, repo))
        return path

    def start_fake_peer(self, node: int, torrent: Path, mode: str, obj: Path | None = None,
                        extra: list[str] = ()) -> Daemon:
        ip = self.c.node_ip(node)
        argv = [sys.executable, str(HERE / "bt_fake_peer.py"), "--torrent", str(torrent), "--listen", f"{ip}:7001",
                "--announce", self.c.scheduler.url + "/announce", "--mode", mode, "--interval", "1", *extra]
        if obj:
            argv += ["--object", str(obj)]
        d = Daemon(f"fake-peer-{mode}", argv, log_path=self.tmpdir() / "fake.log", netns=self.c.netns(node))
        self.track(d.start())
        d.wait_log('"event": "announced"', timeout=15)
        return d

    def fake_events(self, d: Daemon, kind: str) -> list[dict]:
        out = []
        for line in d.log_text().splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                if e.get("event") == kind:
                    out.append(e)
        return out

    # -- tests -----------------------------------------------------------------------------------

    def test_01_stalled_swarm_falls_back_to_http(self):
        layout, ref, img = self.push("stall", [16 * MiB])
        before = self.status(0)
        r = self.c.containerds[0].pull(ref, timeout=120)
        self.timings["01 16 MiB, nobody seeds: HTTP fallback"] = r.seconds
        self.c.containerds[0].verify_unpacked(layout.images)
        after = self.status(0)
        size = sum(b.size for b in img.blobs())
        self.assertGreaterEqual(after["bytes"]["from_http_fallback"] - before["bytes"]["from_http_fallback"], size)
        self.assertEqual(after["bytes"]["from_origin"], 0, "registry-proxy does not seed in this cluster")
        self.assertGreater(after["counters"]["http_fallbacks"], before["counters"]["http_fallbacks"])
        self.assertTrue(self.object_path(0, img.layers[0].digest).exists())

    def test_02_unloaded_holder_serves_its_object(self):
        layout, ref, img = self.push("holder", [16 * MiB])
        layer = img.layers[0]
        self.c.containerds[0].pull(ref, timeout=120)
        self.wait_unloaded(0)
        # The scheduler knows node1 holds it (heartbeat), although node1 announced `stopped`.
        self.wait(lambda: self.held_at_scheduler(0) >= 2, 10, "node1's holdings at the scheduler")
        before = self.status(1)["bytes"]
        t0 = time.monotonic()
        self.c.containerds[1].pull(ref, timeout=120)
        self.timings["02 16 MiB from an unloaded holder"] = time.monotonic() - t0
        self.c.containerds[1].verify_unpacked(layout.images)
        after = self.status(1)["bytes"]
        from_peers = after["from_peers"] - before["from_peers"]
        from_http = after["from_http_fallback"] - before["from_http_fallback"]
        print(f"\n02: node2 got {from_peers / MiB:.1f} MiB from node1, {from_http / MiB:.1f} MiB over HTTP",
              file=sys.stderr)
        self.assertGreater(from_peers, layer.size * 0.5, "the holder did not serve")
        self.assertIn("loaded a seed on demand", self.c.peerds[0].log_text())
        # node1 reports what it uploaded (session statistics, refreshed every 5 s).
        self.wait(lambda: self.status(0)["bytes"]["uploaded_to_peers"] >= from_peers * 0.9, 12,
                  "node1's uploaded_to_peers to count the upload")

    def test_03_corrupt_holder_is_quarantined_and_never_uploads(self):
        layout, ref, img = self.push("corrupt", [8 * MiB])
        layer = img.layers[0]
        self.c.containerds[0].pull(ref, timeout=120)
        self.wait_unloaded(0)
        held = self.wait(lambda: self.held_at_scheduler(0) if self.held_at_scheduler(0) > 0 else None, 10,
                         "node1's holdings")
        path = self.object_path(0, layer.digest)
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.seek(layer.size // 2)
            f.write(os.urandom(4096))
        os.chmod(path, 0o444)
        q0 = self.status(0)["counters"]["quarantined"]
        hf0 = self.metric(2, "shoal_peerd_hash_failures_total")
        t0 = time.monotonic()
        self.c.containerds[2].pull(ref, timeout=120)
        self.timings["03 8 MiB from a corrupt holder"] = time.monotonic() - t0
        self.c.containerds[2].verify_unpacked(layout.images)
        self.wait(lambda: self.status(0)["counters"]["quarantined"] > q0, 10, "node1 to quarantine the object")
        self.assertFalse(path.exists(), "the corrupt object is still in node1's cache")
        self.assertTrue(list((Path(self.c.peerds[0].dir) / "cache" / "quarantine").glob(layer.digest[7:] + "*")))
        # The bad piece was checked before upload: the downloader never saw a wrong byte.
        self.assertEqual(self.metric(2, "shoal_peerd_hash_failures_total"), hf0)
        # node1 stops claiming it at the scheduler.
        self.wait(lambda: self.held_at_scheduler(0) == held - 1, 10, "node1's holdings to drop the object")
        # And a pull on node1 now fetches a good copy again.
        c = self.c.containerds[0]
        c.remove_image(ref)
        c.ctr("content", "rm", layer.digest, check=False)
        c.pull(ref, timeout=120)
        c.verify_unpacked(layout.images)
        self.assertEqual(hashlib.sha256(path.read_bytes()).hexdigest(), layer.digest[7:])

    def _bad_peer(self, mode: str, downloader: int, fake_node: int):
        layout, ref, img = self.push(f"bad-{mode}", [8 * MiB])
        layer = img.layers[0]
        torrent = self.torrent_file(layer.digest, f"faults/bad-{mode}")
        obj = None
        if mode == "wrong":
            obj = layout.blob_path(layer.digest)
        fake = self.start_fake_peer(fake_node, torrent, mode, obj)
        hf0 = self.metric(downloader, "shoal_peerd_hash_failures_total")
        t0 = time.monotonic()
        self.c.containerds[downloader].pull(ref, timeout=120)
        self.timings[f"0{4 if mode == 'garbage' else 5} 8 MiB with a {mode} peer"] = time.monotonic() - t0
        self.c.containerds[downloader].verify_unpacked(layout.images)
        sent = self.fake_events(fake, "block")
        self.assertTrue(sent, "the fake peer was never asked for data: the test proves nothing\n" + fake.log_tail())
        hf = self.metric(downloader, "shoal_peerd_hash_failures_total") - hf0
        print(f"\n0{4 if mode == 'garbage' else 5}: fake peer ({mode}) sent {len(sent)} blocks; "
              f"node{downloader + 1} rejected {hf:.0f} pieces", file=sys.stderr)
        self.assertGreaterEqual(hf, 1, "bad pieces were not counted as hash failures")
        self.assertTrue(self.object_path(downloader, layer.digest).exists())
        fake.stop()

    def test_04_garbage_peer(self):
        self._bad_peer("garbage", downloader=1, fake_node=2)
        # Raw garbage on the BitTorrent port: junk instead of a handshake, a handshake for an
        # unknown torrent, a message with an absurd length. peerd stays up and serving.
        target = f"{self.c.node_ip(1)}:{self.c.peerds[1].bt_port}"
        script = (
            "import os,socket,struct,sys\n"
            "h,p=sys.argv[1].rsplit(':',1)\n"
            "hs=bytes([19])+b'BitTorrent protocol'+bytes(8)\n"
            "for payload in (os.urandom(4096), hs+os.urandom(40), hs+os.urandom(40)+struct.pack('>I',2**31-1)+b'x'):\n"
            "    s=socket.create_connection((h,int(p)),timeout=5)\n"
            "    try:\n"
            "        s.sendall(payload); s.recv(100)\n"
            "    except OSError:\n"
            "        pass\n"
            "    s.close()\n")
        self.c.net.nodes[2 + 2].exec([sys.executable, "-c", script, target], timeout=30, check=False)
        self.assertTrue(self.c.peerds[1].daemon.alive)
        self.assertEqual(self.c.curl(1, "-o", "/dev/null", "-w", "%{http_code}",
                                     self.c.peerds[1].url + "/healthz").stdout, "200")

    def test_05_wrong_pieces_peer(self):
        self._bad_peer("wrong", downloader=0, fake_node=2)

    def test_06_plain_mode_warns_once(self):
        self.assertFalse(self.c.tls)
        for p in self.c.peerds:
            self.assertIn("credentials forwarded to registry-proxy", p.log_text(), p.name)
        self.assertIn("tls.enabled is false", self.c.proxy.log_text())
        self.assertIn("tls.enabled is false", self.c.scheduler.daemon.log_text())
        # The metrics listener is plain HTTP here, on the node address: another node scrapes it.
        url = self.c.peerds[0].metrics_url
        self.assertTrue(url.startswith(f"http://{self.c.node_ip(0)}:"), url)
        cp = self.c.curl(1, "-w", "\n%{http_code}", url + "/metrics", timeout=10)
        text, _, code = cp.stdout.rpartition("\n")
        self.assertEqual(code, "200", cp.stdout[-300:])
        self.assertIn("shoal_peerd_bytes_from_peers_total", text)
        self.assertNotIn("shoal_peerd_tls_", text)
        self.assertIn("metrics_listen serves plain HTTP", self.c.peerds[0].log_text())

    def test_07_reader_waiting_on_one_piece_outlasts_the_write_timeout(self):
        # 1 MiB (17 pieces of 64 KiB) from a peer that sends a block every 0.25 s and never piece
        # 1: pieces keep verifying (never a stall), and the reader from byte 0 waits on piece 1
        # until the rest is in and the swarm stalls (then piece 1 comes over HTTP), ~20 s, far
        # past node2's http.write_timeout of 4 s. The server's source timeout no longer cuts a
        # running download's reader off: before, curl got 64 KiB and exit 18 (at 32 nodes, a
        # first copy stuck on one connection did that to a pull whose download completed 11 s
        # later).
        layout, ref, img = self.push("stuck", [1 * MiB])
        layer = img.layers[0]
        torrent = self.torrent_file(layer.digest, "faults/stuck")
        fake = self.start_fake_peer(2, torrent, "slow", layout.blob_path(layer.digest),
                                    ["--block-delay", "0.25", "--withhold", "1"])
        url = f"{self.c.peerds[1].url}/v2/faults/stuck/blobs/{layer.digest}?ns={self.c.registry.host_port}"
        path = self.tmpdir() / "blob"
        t0 = time.monotonic()
        cp = self.c.curl(1, "-o", str(path), "-w", "%{http_code} %{size_download}", url, timeout=90)
        took = time.monotonic() - t0
        self.timings["07 1 MiB, piece 1 withheld, a block per 0.25 s"] = took
        self.assertEqual(cp.returncode, 0, f"curl exit {cp.returncode} after {took:.1f} s: {cp.stdout} {cp.stderr[-300:]}")
        self.assertEqual(cp.stdout.split()[0], "200")
        self.assertEqual("sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(), layer.digest)
        sent = self.fake_events(fake, "block")
        self.assertTrue(sent, "the peer sent nothing: the test proves nothing\n" + fake.log_tail())
        self.assertNotIn(1, {e["piece"] for e in sent})
        self.assertGreater(took, 4.0 + 4.0, "the reader never waited past the write timeout: the test proves nothing")
        fake.stop()

    def test_08_slow_peer_whose_blocks_keep_coming_is_not_a_stall(self):
        # 3 pieces of 64 KiB, one 16 KiB block every 1.2 s: each piece takes 4.8 s against a
        # stall_timeout of 3 s, and a block comes well within it. Before, every such piece was a
        # stall, and the node asked registry-proxy for the missing bytes over HTTP: at 32 nodes
        # waiting for their first pieces on registry-proxy's shared link that only loaded the link
        # more (registry-proxy sent 1.37-1.48 x the blob, 0.18 of it such ranges; docs/p2p.md
        # "Scale curve").
        layout, ref, img = self.push("slow", [192 * 1024])
        layer = img.layers[0]
        torrent = self.torrent_file(layer.digest, "faults/slow")
        fake = self.start_fake_peer(2, torrent, "slow", layout.blob_path(layer.digest), ["--block-delay", "1.2"])
        before = self.status(1)
        url = f"{self.c.peerds[1].url}/v2/faults/slow/blobs/{layer.digest}?ns={self.c.registry.host_port}"
        path = self.tmpdir() / "blob"
        t0 = time.monotonic()
        cp = self.c.curl(1, "-o", str(path), "-w", "%{http_code}", url, timeout=90, check=True)
        self.timings["08 192 KiB from a peer sending a block per 1.2 s"] = time.monotonic() - t0
        self.assertEqual(cp.stdout, "200")
        self.assertEqual("sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(), layer.digest)
        after = self.status(1)
        sent = self.fake_events(fake, "block")
        self.assertGreaterEqual(sum(e["length"] for e in sent), layer.size,
                                "the slow peer did not send the object: the test proves nothing\n" + fake.log_tail())
        # Each piece did take longer than stall_timeout (3 s) at the sender.
        first: dict[int, float] = {}
        last: dict[int, float] = {}
        for e in sent:
            first.setdefault(e["piece"], e["at"])
            last[e["piece"]] = e["at"]
        self.assertTrue(any(last[p] - first[p] > 3.0 for p in last), sent)
        self.assertEqual(after["bytes"]["from_http_fallback"] - before["bytes"]["from_http_fallback"], 0,
                         "a slow piece whose blocks kept coming was taken for a stall")
        self.assertEqual(after["counters"]["http_fallbacks"], before["counters"]["http_fallbacks"])
        self.assertGreaterEqual(after["bytes"]["from_peers"] - before["bytes"]["from_peers"], layer.size)
        fake.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
