"""A CA rotation with two-root swarms, against the real daemons on loopback (mutual TLS, SSL
torrents, the scheduler's tracker over HTTPS; docs/certificates.md "Rotating the CA").

Mid-rotation state: every party's tls.ca_file holds both CAs (old first, for all of them: the
primary root is the CA that issued a party's own tls.cert_file, not the bundle's first
certificate). registry-proxy and the node `both` hold a leaf of each CA (tls.swarm_extra_*), the
node `old` only an old-CA leaf, the node `new` only a new-CA leaf. The scheduler's certificate
is an old-CA leaf sent with the old CA cross-signed by the new one, so announces of either root's
torrents verify it.

One layer is pulled through `both` first, then through `old` and `new` at once:
  - each gets its metainfo in its own root (registry-proxy answers in the root of the caller's
    certificate), and each completes with the right bytes;
  - each received at least a piece from a peer over BitTorrent (from_peers): `both` seeds the
    object under both roots, so it is the one peer of both swarms, and its upload counter covers
    what both received. How much comes from `both` rather than registry-proxy is a race on
    loopback (libtorrent does not rate-limit local peers): from 6% to 93% of the layer here;
    without `both`'s new-CA leaf `new` gets 0 B from peers;
  - registry-proxy seeds the object under both roots.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import ssl
import sys
import time
import unittest
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, certs, oci  # noqa: E402
from shoal_fixtures.nodes import Peerd, Scheduler  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, upstream  # noqa: E402

MIB = 1 << 20
LAYER = 4 * MIB
PIECE = 64 * 1024  # piece_size_for(4 MiB)
PEERD_EXTRA = {"upstream": {"connect_timeout": "1s", "request_timeout": "5s", "metainfo_wait": "5s"},
               "swarm": {"stall_timeout": "5s", "fallback_deadline": "20s"}}


def bencode_ssl_cert(torrent: bytes) -> bytes:
    """The info dict's ssl-cert of a .torrent (the PEM bytes), found without a bencode library:
    the key is unique in Shoal's torrents."""
    at = torrent.index(b"8:ssl-cert") + len(b"8:ssl-cert")
    colon = torrent.index(b":", at)
    n = int(torrent[at:colon])
    return torrent[colon + 1:colon + 1 + n]


class RotationTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-rotation-")
        old = certs.make_ca(d / "old-ca", "shoal rotation old CA")
        new = certs.make_ca(d / "new-ca", "shoal rotation new CA")
        cls.old_ca, cls.new_ca = old, new
        bundle = d / "ca-bundle.pem"
        bundle.write_text(old.pem() + new.pem())
        ip = "127.0.0.1"

        def leaf(ca, name, uri, dns=("*",)):
            return certs.issue(ca, d / name, name, dns=list(dns), uris=[uri], ips=[ip], days=30)

        def section(cert, extra=None):
            s = {"enabled": True, "ca_file": str(bundle), "cert_file": str(cert.cert),
                 "key_file": str(cert.key), "reload_interval": "1s"}
            if extra is not None:
                s["swarm_extra_cert_file"] = str(extra.cert)
                s["swarm_extra_key_file"] = str(extra.key)
            return s

        # The tracker: an old-CA leaf, then the old CA cross-signed by the new one.
        sched = leaf(old, "scheduler", "shoal://scheduler/s1", dns=())
        cross = certs.cross_sign(old, "shoal rotation old CA", new, d / "cross" / "old-by-new.pem")
        chain = d / "scheduler" / "chain.pem"
        chain.write_text(sched.cert.read_text() + cross.read_text())
        cls.sched_party = certs.TLSParty(bundle, certs.Cert(chain, sched.key))

        proxy_old = leaf(old, "proxy-old", "shoal://registry-proxy")
        proxy_new = leaf(new, "proxy-new", "shoal://registry-proxy")
        cls.node_certs = {
            "both": (leaf(old, "both-old", certs.node_uri("both")),
                     leaf(new, "both-new", certs.node_uri("both"))),
            "old": (leaf(old, "old-only", certs.node_uri("old")), None),
            "new": (leaf(new, "new-only", certs.node_uri("new")), None),
        }
        cls.bundle = bundle

        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.layout = oci.make_image(d / "img", [oci.LayerSpec(size=LAYER, seed="rotation",
                                                              gzip_level=0)])
        cls.reg.push(cls.layout, "team/app")
        cls.sched = cls.class_track(Scheduler(d / "sched", tls=cls.sched_party,
                                              client=certs.TLSParty(bundle, proxy_old)).start())
        cls.proxy = cls.class_track(RegistryProxy(
            d / "proxy", upstreams=[upstream(cls.reg.host_port, cls.reg.url)], torrent=True,
            trackers=[cls.sched.url + "/announce"], tls=certs.TLSParty(bundle, proxy_old),
            extra={"tls": section(proxy_old, proxy_new)}))
        cls.proxy.daemon.start()
        cls.proxy.daemon.wait_tcp(cls.proxy.port, cls.proxy.host, timeout=30)
        cls.peerds = {}
        for name, (primary, extra) in cls.node_certs.items():
            cls.peerds[name] = cls.class_track(Peerd(
                d / name, name=name, registry_proxy=cls.proxy.url, scheduler=cls.sched.url,
                extra={**PEERD_EXTRA, "tls": section(primary, extra)}).start())

    def https(self, cert: certs.Cert) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.bundle))
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
        return ctx

    def metainfo(self, cert: certs.Cert, digest: str) -> bytes:
        url = f"{self.proxy.url}/shoal/v1/metainfo/{digest}?ns={self.reg.host_port}&repo=team/app"
        with urllib.request.urlopen(url, timeout=30, context=self.https(cert)) as r:
            return r.read()

    def pull(self, name: str, layer) -> bytes:
        url = f"{self.peerds[name].url}/v2/team/app/blobs/{layer.digest}?ns={self.reg.host_port}"
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()

    def der(self, pem: bytes | str) -> bytes:
        return ssl.PEM_cert_to_DER_cert(pem.decode() if isinstance(pem, bytes) else pem)

    def test_old_and_new_leaves_each_pull_peer_to_peer_in_their_root(self):
        layer = self.layout.images[0].layers[0]
        want = layer.digest.split(":", 1)[1]
        # registry-proxy answers each caller in the root its certificate is from.
        old_t = self.metainfo(self.node_certs["old"][0], layer.digest)
        new_t = self.metainfo(self.node_certs["new"][0], layer.digest)
        self.assertEqual(self.der(bencode_ssl_cert(old_t)), self.der(self.old_ca.pem()))
        self.assertEqual(self.der(bencode_ssl_cert(new_t)), self.der(self.new_ca.pem()))

        body = self.pull("both", layer)
        self.assertEqual(hashlib.sha256(body).hexdigest(), want)
        both = self.peerds["both"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "seeding under another root" not in both.log_text():
            time.sleep(0.1)
        self.assertIn("seeding under another root", both.log_text(),
                      "the node with both leaves did not seed the other root")

        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            bodies = dict(zip(("old", "new"), ex.map(lambda n: self.pull(n, layer), ("old", "new"))))
        report = {}
        for name in ("old", "new"):
            self.assertEqual(hashlib.sha256(bodies[name]).hexdigest(), want, name)
            report[name] = self.peerds[name].status().get("bytes", {})
        report["both"] = both.status().get("bytes", {})
        print(f"rotation: bytes by source {report}", file=sys.stderr)
        for name in ("old", "new"):
            b = report[name]
            self.assertGreaterEqual(b.get("from_peers", 0), PIECE,
                               f"{name}: too little from peers over BitTorrent in its root: {b}\n"
                               + self.peerds[name].log_text()[-3000:])
        # `both` is the only other node (`old` and `new` share no swarm): it served both swarms.
        # Its upload counter follows libtorrent's periodic session stats, so it may lag a little.
        want_up = int(0.9 * (report["old"]["from_peers"] + report["new"]["from_peers"]))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            up = both.status().get("bytes", {}).get("uploaded_to_peers", 0)
            if up >= want_up:
                break
            time.sleep(0.5)
        self.assertGreaterEqual(up, want_up, report)
        self.assertIn("seeding under another root", self.proxy.daemon.log_text())


if __name__ == "__main__":
    unittest.main()
