"""BitTorrent between members, against the real daemons: registry-proxy (the origin seeder) and
peerd with `tls.enabled`, every torrent an SSL torrent rooted at the cluster CA.

One layer is pulled through peerd's loopback mirror, so registry-proxy loads its seed (metainfo
served, with a grant for node n1) and peerd downloads it over BitTorrent from the origin,
presenting that grant, then seeds it. peerd's bytes must have come from the origin over
BitTorrent (not the HTTP fallback), which proves the daemons speak SSL BitTorrent to each other
and accept each other's grants. Then three python3-libtorrent clients (Debian's, the build peerd
links) are given the object's real .torrent (so its info-hash) and both daemons' BitTorrent ports:
  - member: a certificate of the cluster CA in the profile, but no grant (it cannot send one);
  - foreign: the same profile signed by another CA;
  - no_cert: no certificate at all;
all three must download 0 bytes: the last two are refused in the TLS handshake, the member after
it (both daemons count and log a refusal for want of a grant).

registry-proxy's HTTP API may or may not speak TLS (its `tls` section also covers the API once
that is wired): the test asks it with the node's certificate over HTTPS first, plain HTTP if
that handshake fails, and points peerd at whichever answered.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ssl
import sys
import time
import unittest
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, certs, oci  # noqa: E402
from shoal_fixtures.nodes import Peerd  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, upstream  # noqa: E402

try:
    import libtorrent as lt
except ImportError:  # pragma: no cover - depends on the machine
    lt = None

MIB = 1 << 20
WINDOW_S = 5.0  # how long the refused clients keep trying


def tls_section(ca: certs.CA, cert: certs.Cert) -> dict:
    return {"enabled": True, "ca_file": str(ca.cert), "cert_file": str(cert.cert),
            "key_file": str(cert.key), "reload_interval": "1s"}


def lt_settings() -> dict:
    return {
        "listen_interfaces": "127.0.0.1:0s",
        "enable_dht": False, "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
        "enable_outgoing_utp": False, "enable_incoming_utp": False,
        "allow_multiple_connections_per_ip": True, "min_reconnect_time": 1,
        "alert_mask": lt.alert.category_t.all_categories if lt else 0,
        "user_agent": "shoal-daemon-members-test",
    }


class Client:
    """One python3-libtorrent session with the object's torrent, dialling `ports`."""

    def __init__(self, name: str, torrent: bytes, save: Path, cert: certs.Cert | None, dh: Path,
                 ports: list[int]):
        self.name = name
        self.ses = lt.session(lt_settings())
        atp = lt.add_torrent_params()
        atp.ti = lt.torrent_info(lt.bdecode(torrent))
        atp.save_path = str(save)
        atp.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
        self.handle = self.ses.add_torrent(atp)
        if cert is not None:
            self.handle.set_ssl_certificate(str(cert.cert), str(cert.key), str(dh))
        self.ports = ports
        self.reasons: list[str] = []
        self.dial()

    def dial(self):
        for p in self.ports:
            self.handle.connect_peer(("127.0.0.1", p))

    def pump(self):
        for a in self.ses.pop_alerts():
            if isinstance(a, (lt.peer_disconnected_alert, lt.peer_error_alert)):
                self.reasons.append(a.message())

    def payload(self) -> int:
        return self.handle.status().total_payload_download

    def complete(self) -> bool:
        return self.handle.status().is_seeding


@unittest.skipIf(lt is None, "python3-libtorrent is not installed")
class DaemonMembersTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-daemon-members-")
        ca = certs.make_ca(d / "ca", "shoal-test-ca")
        other = certs.make_ca(d / "other-ca", "shoal-other-ca")
        cls.dh = certs.dh_params(d / "dh.pem")
        proxy_cert = certs.issue(ca, d / "proxy", "shoal-registry-proxy", dns=["*"],
                                 uris=["shoal://registry-proxy"], ips=["127.0.0.1"])
        node_cert = certs.issue(ca, d / "n1", "n1", dns=["*"], uris=[certs.node_uri("n1")],
                                ips=["127.0.0.1"])
        cls.ca, cls.node_cert = ca, node_cert
        cls.member = certs.issue_node(ca, d / "member", "member")
        cls.foreign = certs.issue_node(other, d / "foreign", "member")

        cls.reg = cls.class_track(Registry(d / "registry").start())
        cls.layout = oci.make_image(d / "img", [oci.LayerSpec(size=3 * MIB, seed="members",
                                                              gzip_level=0)])
        cls.reg.push(cls.layout, "team/app")
        cls.proxy = cls.class_track(RegistryProxy(
            d / "proxy", upstreams=[upstream(cls.reg.host_port, cls.reg.url)], torrent=True,
            extra={"tls": tls_section(ca, proxy_cert)}))
        cls.proxy.daemon.start()
        cls.proxy_url = cls.wait_proxy()
        cls.peerd = cls.class_track(Peerd(
            d / "peerd", name="n1", registry_proxy=cls.proxy_url,
            extra={"tls": tls_section(ca, node_cert)}).start())
        cls.dir = d

    @classmethod
    def https_context(cls) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(cls.ca.cert))
        ctx.load_cert_chain(str(cls.node_cert.cert), str(cls.node_cert.key))
        return ctx

    @classmethod
    def wait_proxy(cls, timeout: float = 20) -> str:
        """registry-proxy's base URL once /healthz answers, over HTTPS or plain HTTP."""
        host, port = cls.proxy.host, cls.proxy.port
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for scheme in ("https", "http"):
                try:
                    if scheme == "https":
                        conn = http.client.HTTPSConnection(host, port, timeout=2,
                                                           context=cls.https_context())
                    else:
                        conn = http.client.HTTPConnection(host, port, timeout=2)
                    conn.request("GET", "/healthz")
                    if conn.getresponse().status == 200:
                        return f"{scheme}://{host}:{port}"
                except (OSError, ssl.SSLError, http.client.HTTPException):
                    pass
            time.sleep(0.1)
        raise AssertionError("registry-proxy did not come up:\n" + cls.proxy.diagnostics())

    def proxy_get(self, path: str) -> tuple[int, dict, bytes]:
        ctx = self.https_context() if self.proxy_url.startswith("https") else None
        req = urllib.request.Request(self.proxy_url + path)
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {}, e.read()

    def test_non_members_download_nothing_from_either_daemon(self):
        layer = self.layout.images[0].layers[0]
        ns = self.reg.host_port
        with urllib.request.urlopen(
                f"{self.peerd.url}/v2/team/app/blobs/{layer.digest}?ns={ns}", timeout=60) as r:
            body = r.read()
        self.assertEqual(len(body), layer.size)
        st = self.peerd.status()
        self.assertGreater(st["bytes"]["from_origin"], 0,
                           f"peerd got nothing over BitTorrent from the origin: {st['bytes']}\n"
                           + self.peerd.log_text()[-3000:])

        s, h, torrent = self.proxy_get(f"/shoal/v1/metainfo/{layer.digest}?ns={ns}&repo=team/app")
        self.assertEqual(s, 200, torrent[:200])
        info = lt.bdecode(torrent)[b"info"]
        # The cluster CA, as OpenSSL re-encodes it (the same DER).
        self.assertEqual(ssl.PEM_cert_to_DER_cert(info[b"ssl-cert"].decode()),
                         ssl.PEM_cert_to_DER_cert(self.ca.cert.read_text()))

        # The node's metainfo answer carries registry-proxy's grant for n1 and this swarm.
        self.assertIn("shoal-grant", h, "no grant on a metainfo answer to a node")
        g = lt.bdecode(base64.b64decode(h["shoal-grant"]))
        ih = hashlib.sha1(lt.bencode(info)).digest()
        self.assertEqual((g[b"n"], g[b"h"], g[b"v"]), (b"n1", ih, 1))
        self.assertGreater(g[b"e"], time.time() + 60)
        self.assertGreater(self.metric_of(self.peerd.url, "shoal_peerd_swarm_grants_accepted_total")
                           + self.metric_of(self.proxy_url, "shoal_proxy_swarm_grants_accepted_total"),
                           0, "no daemon accepted a grant, yet peerd got bytes over BitTorrent")
        refused_before = (self.metric_of(self.proxy_url, "shoal_proxy_swarm_grant_refusals_total"),
                          self.metric_of(self.peerd.url, "shoal_peerd_swarm_grant_refusals_total"))

        ports = [self.proxy.bt_port, self.peerd.bt_port]
        clients = {name: Client(name, torrent, self.dir / ("dl-" + name), cert, self.dh, ports)
                   for name, cert in (("member", self.member), ("foreign", self.foreign),
                                      ("no_cert", None))}
        # A member of the CA that holds the info-hash but no grant: both daemons accept its TLS
        # handshake, then refuse its first request and close. It retries (min_reconnect_time 1 s).
        end = time.monotonic() + WINDOW_S
        next_dial = time.monotonic() + 2
        while time.monotonic() < end:
            for c in clients.values():
                c.pump()
            time.sleep(0.1)
            if time.monotonic() > next_dial:
                clients["member"].dial()
                next_dial += 2
        refused = (self.metric_of(self.proxy_url, "shoal_proxy_swarm_grant_refusals_total"),
                   self.metric_of(self.peerd.url, "shoal_peerd_swarm_grant_refusals_total"))
        for name in ("member", "foreign", "no_cert"):
            c = clients[name]
            self.assertEqual(c.payload(), 0, f"{name} downloaded bytes")
            self.assertFalse(c.complete())
        for who, before, after in zip(("registry-proxy", "peerd"), refused_before, refused):
            self.assertGreater(after, before,
                               f"{who} did not refuse the member without a grant: "
                               f"{clients['member'].reasons[-4:]}")
        log = self.proxy.log_text() + self.peerd.log_text()
        self.assertIn("without a valid grant", log)
        self.assertIn("no grant in its extension handshake", log)
        for name in ("foreign", "no_cert"):
            c = clients[name]
            # Refused in the TLS handshake by both daemons ("unknown ca", "certificate required").
            for port in ports:
                self.assertTrue(any(f":{port} " in r and "asio.ssl" in r for r in c.reasons),
                                f"{name}: no TLS refusal from port {port}: {c.reasons[-4:]}")

    def metric_of(self, base: str, name: str) -> float:
        if base.startswith("https"):
            s, _, body = self.proxy_get("/metrics")
            self.assertEqual(s, 200)
        else:
            with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
                body = r.read()
        for line in body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rpartition(" ")[2])
        return 0.0


if __name__ == "__main__":
    unittest.main()
