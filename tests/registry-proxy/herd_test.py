"""Single flight: a herd of concurrent clients on one cold blob costs the upstream one GET.

The registry runs on a shaped link (200 Mbit/s, root only; plain loopback otherwise) so a 32 MiB
blob takes more than a second to arrive and every client of the herd asks while it is still in
flight. 50 clients GET the whole blob; a second herd mixes whole GETs, Range GETs, HEADs and
metainfo requests on another cold blob. Every body is hashed; the registry's own access log must
show exactly one GET of each blob. 50 clients asking one cold tag cost one manifest GET too.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase, oci
from shoal_fixtures.netns import Network, Shape
from shoal_fixtures.registry import Registry
from shoal_fixtures.shoal import RegistryProxy, upstream

MIB = 1 << 20
CLIENTS = 50


class HerdTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-herd-")
        host, netns = "127.0.0.1", None
        cls.shaped = os.geteuid() == 0
        if cls.shaped:
            net = cls.class_track(Network(1, shape=Shape("200mbit")).create())
            host, netns = net.nodes[0].ip, net.nodes[0].name
        cls.reg = cls.class_track(Registry(d / "registry", host=host, netns=netns).start())
        cls.layout = oci.make_image(d / "img", [
            oci.LayerSpec(size=32 * MIB, seed="herd-1", gzip_level=0),
            oci.LayerSpec(size=32 * MIB, seed="herd-2", gzip_level=0)])
        cls.reg.push(cls.layout, "team/herd")
        cls.proxy = cls.class_track(RegistryProxy(d / "proxy", upstreams=[
            upstream(cls.reg.host_port, cls.reg.url)], torrent=True).start())

    def herd(self, requests: list[tuple[str, dict[str, str], str]]) -> list[tuple]:
        """Runs one request per thread, all released at once by a barrier. Each result is
        (status, headers, sha256 of the body, body length, method)."""
        barrier = threading.Barrier(len(requests))
        results: list = [None] * len(requests)

        def client(i: int, path: str, headers: dict[str, str], method: str) -> None:
            conn = http.client.HTTPConnection(self.proxy.host, self.proxy.port, timeout=60)
            try:
                conn.connect()
                barrier.wait(30)
                conn.request(method, path, headers=headers)
                r = conn.getresponse()
                h, n = hashlib.sha256(), 0
                while chunk := r.read(1 << 20):
                    h.update(chunk)
                    n += len(chunk)
                results[i] = (r.status, {k.lower(): v for k, v in r.getheaders()},
                              "sha256:" + h.hexdigest(), n, method)
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                results[i] = ("error", {}, repr(e), 0, method)
            finally:
                conn.close()
        threads = [threading.Thread(target=client, args=(i, *req)) for i, req in
                   enumerate(requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "a client hung")
        return results

    def test_50_clients_one_cold_blob_one_upstream_get(self):
        layer = self.layout.images[0].layers[0]
        mark = self.reg.mark()
        joins0 = self.proxy.metric("shoal_proxy_singleflight_joins_total")
        gets0 = self.proxy.metric("shoal_proxy_upstream_blob_gets_total")
        path = f"/v2/team/herd/blobs/{layer.digest}?ns={self.reg.host_port}"
        results = self.herd([(path, {}, "GET")] * CLIENTS)
        for status, headers, digest, n, _ in results:
            self.assertEqual(status, 200, digest)
            self.assertEqual((digest, n), (layer.digest, layer.size))
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1,
                         "the herd must cost upstream exactly one GET")
        self.assertEqual(self.proxy.metric("shoal_proxy_upstream_blob_gets_total") - gets0, 1)
        joins = self.proxy.metric("shoal_proxy_singleflight_joins_total") - joins0
        print(f"\nherd: {CLIENTS} clients, 1 upstream GET, {joins:.0f} joined the fetch in flight")
        if self.shaped:  # on plain loopback the blob may be cached before the herd arrives
            self.assertGreaterEqual(joins, CLIENTS // 2, "most of the herd must join the fetch")

    def test_50_clients_one_tag_one_upstream_get(self):
        """Manifests too: 50 clients asking one tag (and the same tag with the Accept spelled
        another way, which normalizes to the same key) wait for one upstream GET."""
        layout = oci.make_image(self.tmpdir(), [oci.LayerSpec(size=1_000, seed="herd-tag")])
        self.reg.push(layout, "team/herdtag", "v1")
        mark = self.reg.mark()
        joined0 = self.proxy.metric("shoal_proxy_manifest_flights_joined_total")
        path = f"/v2/team/herdtag/manifests/v1?ns={self.reg.host_port}"
        accepts = [pc.ALL_MANIFESTS, ", ".join(reversed(pc.ALL_MANIFESTS.split(", ")))]
        results = self.herd([(path, {"Accept": accepts[i % 2]}, "GET") for i in range(CLIENTS)])
        for status, _, digest, _, _ in results:
            self.assertEqual((status, digest), (200, layout.top.digest))
        self.reg.wait_log_quiet()
        gets = self.reg.count_manifest_requests("v1", repo="team/herdtag", since=mark)
        joined = self.proxy.metric("shoal_proxy_manifest_flights_joined_total") - joined0
        print(f"\nmanifest herd: {CLIENTS} clients, {gets} upstream GET(s), {joined:.0f} waited "
              "for the fetch in flight")
        self.assertEqual(gets, 1, "a tag herd must cost upstream exactly one GET")

    def test_mixed_herd_get_range_head_and_metainfo(self):
        layer = self.layout.images[0].layers[1]
        data = self.layout.blob_path(layer.digest).read_bytes()
        mark = self.reg.mark()
        blob = f"/v2/team/herd/blobs/{layer.digest}?ns={self.reg.host_port}"
        meta = f"/shoal/v1/metainfo/{layer.digest}?ns={self.reg.host_port}&repo=team/herd"
        reqs = []
        for i in range(CLIENTS):
            kind = i % 4
            if kind == 0:
                reqs.append((blob, {}, "GET"))
            elif kind == 1:
                first = (i * 997 * 1024) % (layer.size - MIB)
                reqs.append((blob, {"Range": f"bytes={first}-{first + MIB - 1}"}, "GET"))
            elif kind == 2:
                reqs.append((blob, {}, "HEAD"))
            else:
                reqs.append((meta, {}, "GET"))
        results = self.herd(reqs)
        for (path, headers, method), (status, h, digest, n, _) in zip(reqs, results):
            with self.subTest(path=path, headers=headers, method=method):
                if path == meta:
                    self.assertEqual(status, 200, digest)
                    self.assertEqual(h.get("content-type"), "application/x-bittorrent")
                elif method == "HEAD":
                    self.assertEqual((status, n), (200, 0))
                    self.assertEqual(int(h["content-length"]), layer.size)
                elif "Range" in headers:
                    first = int(headers["Range"].split("=")[1].split("-")[0])
                    self.assertEqual(status, 206)
                    self.assertEqual(digest, pc.sha256(data[first:first + MIB]))
                else:
                    self.assertEqual((status, digest), (200, layer.digest))
        self.reg.wait_log_quiet()
        self.assertEqual(self.reg.count_blob_gets(layer.digest, since=mark), 1)


if __name__ == "__main__":
    unittest.main()
