"""registry-proxy with mutual TLS (the `tls` section): who may call which route, and what a
client without a good certificate gets.

One proxy with TLS on in front of the stub upstream (stub_upstream.py), certificates from one
cluster CA in docs/security.md's profile (certs.ClusterPKI) plus an unrelated CA, an expired
certificate and one without a shoal:// identity. Covers: a plaintext request on the TLS port
(400, counted in shoal_proxy_tls_plaintext_refused_total); a certificate of another CA, an expired
one, and none at all (handshake refused, counted in shoal_proxy_tls_handshakes_failed_total, a
log line saying why); the route table of docs/registry-proxy.md ("Who may call what"): a node
pulls manifests and blobs, lists and reads datasets but may not declare one (403 with a JSON
error naming the roles), the scheduler reads manifests but not metainfo, kube-scheduler and a
certificate without a role reach only /metrics and /healthz, an operator may do everything.
Plain mode is what every other registry-proxy suite runs.
"""

from __future__ import annotations

import http.client
import json
import ssl
import unittest

import proxy_common as pc
from shoal_fixtures import FixtureTestCase
from shoal_fixtures.certs import ClusterPKI, TLSParty, issue, issue_node, make_ca
from shoal_fixtures.procs import wait_until
from shoal_fixtures.shoal import RegistryProxy, upstream
from stub_upstream import StubUpstream

MANIFEST = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",' \
           b'"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,' \
           b'"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[]}'


class ProxyTlsTest(FixtureTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.class_tmpdir("shoal-proxy-tls-")
        cls.stub = cls.class_track(StubUpstream().start())
        cls.blob = b"tls-test-blob " * 100
        cls.blob_digest = cls.stub.add_blob(cls.blob)
        cls.stub.add_manifest("team/app", "v1", MANIFEST, pc.OCI_MANIFEST)
        cls.pki = ClusterPKI(d / "pki")
        ca = cls.pki.ca.cert
        cls.node = cls.pki.node("node-a", ["127.0.0.1"])
        cls.sched = cls.pki.scheduler(["127.0.0.1"])
        cls.op = cls.pki.operator()
        cls.kube = TLSParty(ca, issue(cls.pki.ca, d / "kube", "shoal-kube-scheduler",
                                      uris=["shoal://kube-scheduler"], eku="clientAuth"))
        cls.norole = TLSParty(ca, issue(cls.pki.ca, d / "norole", "someone", eku="clientAuth"))
        cls.expired = TLSParty(ca, issue_node(cls.pki.ca, d / "expired", "node-old", expired=True))
        other = make_ca(d / "other", "Not the cluster CA")
        cls.foreign = TLSParty(ca, issue_node(other, d / "foreign", "node-a"))
        cls.proxy = cls.class_track(RegistryProxy(
            d / "proxy", upstreams=[upstream(cls.stub.host_port, cls.stub.url)],
            tls=cls.pki.registry_proxy(["127.0.0.1"]), client=cls.op, log_level="info").start())

    # -- helpers ---------------------------------------------------------------------------------

    def call(self, who: TLSParty | None, path: str, method: str = "GET", body: bytes | None = None
             ) -> tuple[int, bytes]:
        """One request over TLS presenting `who`'s certificate (None: none)."""
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        if who is not None:
            ctx.load_cert_chain(str(who.cert.cert), str(who.cert.key))
        conn = http.client.HTTPSConnection(self.proxy.host, self.proxy.port, timeout=15, context=ctx)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def v2(self, path: str) -> str:
        return f"/v2/team/app/{path}?ns={self.stub.host_port}"

    def assert_refused(self, who: TLSParty | None, path: str, method: str = "GET", body: bytes | None = None,
                       *, roles: str) -> str:
        status, data = self.call(who, path, method, body)
        self.assertEqual(status, 403, data[:300])
        msg = pc.error_message(data)
        self.assertEqual(pc.error_code(data), "DENIED")
        self.assertIn(f"certificate with role {roles}", msg)
        return msg

    def assert_allowed(self, who: TLSParty, path: str, method: str = "GET", body: bytes | None = None) -> int:
        status, data = self.call(who, path, method, body)
        self.assertNotEqual(status, 403, data[:300])
        return status

    def handshake_fails(self, who: TLSParty | None) -> str:
        with self.assertRaises((ssl.SSLError, ConnectionResetError, BrokenPipeError)) as cm:
            self.call(who, "/healthz")
        return str(cm.exception)

    # -- tests -----------------------------------------------------------------------------------

    def test_plaintext_is_refused_with_400_and_counted(self):
        before = self.proxy.metric("shoal_proxy_tls_plaintext_refused_total")
        upstream_before = len(self.stub.requests("/blobs/"))
        conn = http.client.HTTPConnection(self.proxy.host, self.proxy.port, timeout=10)
        try:
            conn.request("GET", self.v2("blobs/sha256:" + "1" * 64))
            r = conn.getresponse()
            self.assertEqual(r.status, 400)
            r.read()
        finally:
            conn.close()
        wait_until(lambda: self.proxy.metric("shoal_proxy_tls_plaintext_refused_total") >= before + 1, 5,
                   "plaintext refusal counted")
        self.assertEqual(len(self.stub.requests("/blobs/")), upstream_before, "a request reached the upstream")

    def test_bad_certificates_fail_the_handshake_and_are_counted(self):
        before = self.proxy.metric("shoal_proxy_tls_handshakes_failed_total")
        for who in (self.foreign, self.expired, None):
            self.handshake_fails(who)
        wait_until(lambda: self.proxy.metric("shoal_proxy_tls_handshakes_failed_total") >= before + 3, 5,
                   "three refused handshakes counted")
        self.proxy.daemon.wait_log("tls handshake refused", timeout=5)

    def test_tls_metrics_are_exposed(self):
        text = self.proxy.metrics_text()
        for name in ("shoal_proxy_tls_certificate_expiry_timestamp_seconds", "shoal_proxy_tls_reloads_total",
                     "shoal_proxy_tls_plaintext_refused_total", "shoal_proxy_tls_handshakes_failed_total"):
            self.assertIn(name, text)

    def test_node_pulls_but_may_not_declare(self):
        status, data = self.call(self.node, self.v2("manifests/v1"))
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(data, MANIFEST)
        status, data = self.call(self.node, self.v2(f"blobs/{self.blob_digest}"))
        self.assertEqual((status, data), (200, self.blob))
        self.assertEqual(self.assert_allowed(self.node, "/shoal/v1/datasets"), 200)
        decl = json.dumps({"name": "d", "version": "v1", "source": {"url": "http://127.0.0.1:9/x/"}}).encode()
        msg = self.assert_refused(self.node, "/shoal/v1/datasets", "POST", decl, roles="operator")
        self.assertIn("node/node-a", msg)
        self.proxy.daemon.wait_log("request refused", timeout=5)

    def test_scheduler_reads_manifests_not_metainfo(self):
        status, data = self.call(self.sched, self.v2("manifests/v1"))
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(self.assert_allowed(self.sched, "/shoal/v1/datasets"), 200)
        self.assert_refused(self.sched, f"/shoal/v1/metainfo/{self.blob_digest}?repo=team/app",
                            roles="node, operator")
        self.assert_refused(self.sched, f"/shoal/v1/datasets/d@v1/objects/{self.blob_digest}",
                            roles="node, operator")

    def test_other_roles_reach_only_metrics_and_health(self):
        for who in (self.kube, self.norole):
            with self.subTest(who=who.cert.cert.parent.name):
                self.assertEqual(self.call(who, "/healthz")[0], 200)
                self.assertEqual(self.call(who, "/metrics")[0], 200)
                self.assert_refused(who, self.v2("manifests/v1"),
                                    roles="node, registry-proxy, scheduler, operator")
                self.assert_refused(who, "/shoal/v1/datasets/d@v1",
                                    roles="node, registry-proxy, scheduler, operator")

    def test_a_ring_replica_pulls_blobs_and_nothing_else(self):
        """Another registry-proxy replica (ring.h) streams a blob from its owner with its own
        certificate, and reads dataset records (merged lists, the manifest of a record copy);
        metainfo, dataset objects and declarations stay closed to it."""
        replica = self.pki.registry_proxy(["127.0.0.1"])
        status, data = self.call(replica, self.v2(f"blobs/{self.blob_digest}"))
        self.assertEqual((status, data), (200, self.blob))
        self.assert_refused(replica, f"/shoal/v1/metainfo/{self.blob_digest}?repo=team/app",
                            roles="node, operator")
        self.assert_refused(replica, f"/shoal/v1/datasets/d@v1/objects/{self.blob_digest}",
                            roles="node, operator")
        self.assert_refused(replica, "/shoal/v1/dataset-metainfo/d@v1/0", roles="node, operator")
        self.assert_refused(replica, "/shoal/v1/datasets", "POST", b"{}", roles="operator")
        self.assertEqual(self.call(replica, "/shoal/v1/datasets/d@v1")[0], 404)  # past the check

    def test_operator_may_do_everything(self):
        status, data = self.call(self.op, self.v2("manifests/v1"))
        self.assertEqual(status, 200, data[:300])
        self.assert_allowed(self.op, f"/shoal/v1/metainfo/{self.blob_digest}?repo=team/app&wait_ms=100")
        decl = json.dumps({"name": "d", "version": "v1", "source": {"url": "http://127.0.0.1:9/x/"}}).encode()
        status = self.assert_allowed(self.op, "/shoal/v1/datasets", "POST", decl)
        self.assertLess(status, 500)


if __name__ == "__main__":
    unittest.main()
