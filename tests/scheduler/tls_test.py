"""The scheduler with mutual TLS on, on the real binary and real certificates made by
the openssl CLI (a cluster CA, the scheduler's server certificate for 127.0.0.1, node
certificates shoal://node/n1 and shoal://node/n2, registry-proxy's, and n1 signed by another CA):

- node n1's certificate heartbeats and announces for n1; it cannot heartbeat or announce as n2
  (403 with the reason, a log line naming both);
- only registry-proxy's certificate may announce role=origin;
- no client certificate, another CA's certificate and a plaintext client are refused, each with a
  clear error at the client and a log line that says why;
- /metrics (over mTLS) exposes the certificate's expiry;
- roles: an operator's certificate may prewarm and place, a node's may not (403); kube-scheduler's
  may call the extender, a node's may not;
- a second scheduler that lets clients without a certificate connect (tls.require_client_cert:
  false) with an operator token file: /v1/objects refuses an anonymous caller (401), /healthz
  stays open, the bearer token stands for an operator (a wrong one is 401), and a token rotated
  on disk is picked up without a restart.

Two schedulers; a few seconds in all.
"""
from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> None:
    def ca(name: str) -> None:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"),
                "-subj", f"/CN={name}", "-days", "30")

    def issue(name: str, by: str, san: str, serial: int) -> None:
        (d / f"{name}.ext").write_text(
            f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth,clientAuth\n")
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"), "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{by}.pem"),
                "-CAkey", str(d / f"{by}.key"), "-set_serial", str(serial), "-days", "30",
                "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.pem"))

    ca("ca")
    ca("other-ca")
    issue("scheduler", "ca", "URI:shoal://scheduler/s1,IP:127.0.0.1", 1)
    issue("n1", "ca", "URI:shoal://node/n1", 2)
    issue("n2", "ca", "URI:shoal://node/n2", 3)
    issue("rp", "ca", "URI:shoal://registry-proxy", 4)  # docs/security.md: no name
    issue("stranger", "other-ca", "URI:shoal://node/n1", 5)
    issue("op", "ca", "URI:shoal://operator/alice", 6)
    issue("ks", "ca", "URI:shoal://kube-scheduler", 7)


def heartbeat(node: str, objects: list | None = None) -> bytes:
    return json.dumps({"schema": 2, "node": node, "ip": "10.9.9.9", "bt_port": 6881, "full": True,
                       "seq": 1, "epoch": "", "objects": objects or [], "removed": [], "health": "ok"}).encode()


class SchedulerTls(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        d = cls.class_tmpdir("shoal-sched-tls-")
        make_pki(d)
        cls.pki = d
        tls = {"enabled": True, "ca_file": str(d / "ca.pem"), "cert_file": str(d / "scheduler.pem"),
               "key_file": str(d / "scheduler.key")}
        cls.sched = Scheduler(d / "sched", extra={"tls": tls})
        cls.class_track(cls.sched)
        cls.sched.daemon.start()
        cls.sched.daemon.wait_tcp(cls.sched.port, timeout=20)
        cls.base = f"https://127.0.0.1:{cls.sched.port}"

    def ctx(self, who: str | None, ca: str = "ca") -> ssl.SSLContext:
        c = ssl.create_default_context(cafile=str(self.pki / f"{ca}.pem"))
        if who:
            c.load_cert_chain(str(self.pki / f"{who}.pem"), str(self.pki / f"{who}.key"))
        return c

    def call(self, who: str | None, path: str, body: bytes | None = None, *, base: str | None = None,
             token: str | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request((base or self.base) + path, data=body, method="POST" if body else "GET")
        if token is not None:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, context=self.ctx(who), timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def log_has(self, needle: str, timeout: float = 3, sched: Scheduler | None = None) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in ((sched or self.sched).dir / "scheduler.log").read_text(errors="replace"):
                return True
            time.sleep(0.05)
        return False

    def announce(self, who: str, node: str, role: str = "peer") -> tuple[int, bytes]:
        q = urllib.parse.urlencode({"info_hash": b"\x01" * 20, "peer_id": b"-SH0001-" + b"x" * 12,
                                    "port": 6881, "left": 100, "compact": 1, "node": node, "role": role})
        return self.call(who, "/announce?" + q)

    def test_a_node_heartbeats_for_itself_only(self):
        code, body = self.call("n1", "/v1/heartbeat", heartbeat("n1"))
        self.assertEqual(code, 200, body)
        code, body = self.call("n1", "/v1/heartbeat", heartbeat("n2"))
        self.assertEqual(code, 403, body)
        self.assertEqual(json.loads(body)["error"],
                         'heartbeat for node "n2" refused: the client certificate is node/n1')
        self.assertTrue(self.log_has("heartbeat refused: certificate names another node node=n2"))
        code, body = self.call("rp", "/v1/heartbeat", heartbeat("n1"))
        self.assertEqual(code, 403, body)
        code, body = self.call("n1", "/v1/nodes")
        self.assertEqual(code, 200, body)
        self.assertEqual([n["node"] for n in json.loads(body)], ["n1"])

    def test_announces_are_authorized_by_the_certificate(self):
        code, body = self.announce("n2", "n2")
        self.assertEqual(code, 200, body)
        code, body = self.announce("n1", "n2")
        self.assertEqual(code, 403, body)
        self.assertIn(b'announce for node "n2" refused: the client certificate is node/n1', body)
        code, body = self.announce("n1", "n1", role="origin")
        self.assertEqual(code, 403, body)
        code, body = self.announce("rp", "origin", role="origin")
        self.assertEqual(code, 200, body)

    def test_no_client_certificate_is_refused(self):
        with self.assertRaises((ssl.SSLError, urllib.error.URLError, ConnectionError)) as e:
            self.call(None, "/v1/nodes")
        self.assertIn("CERTIFICATE_REQUIRED", str(e.exception).upper().replace(" ", "_"))
        self.assertTrue(self.log_has("no client certificate: this server requires one"))

    def test_another_cas_certificate_is_refused(self):
        with self.assertRaises((ssl.SSLError, urllib.error.URLError, ConnectionError)) as e:
            self.call("stranger", "/v1/nodes")
        self.assertIn("UNKNOWN_CA", str(e.exception).upper().replace(" ", "_"))
        self.assertTrue(self.log_has("not signed by the cluster CA"))

    def test_plaintext_client_gets_a_clear_refusal(self):
        with socket.create_connection(("127.0.0.1", self.sched.port), timeout=5) as s:
            s.sendall(b"GET /v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer)
        self.assertIn(b"this port speaks HTTPS only", answer)
        self.assertTrue(self.log_has("plaintext request on a TLS port refused"))

    def test_metrics_expose_the_certificate_expiry(self):
        code, body = self.call("n1", "/metrics")
        self.assertEqual(code, 200)
        line = [x for x in body.decode().splitlines()
                if x.startswith("shoal_scheduler_tls_certificate_expiry_timestamp_seconds ")]
        self.assertEqual(len(line), 1, body[:2000])
        days = (float(line[0].split()[1]) - time.time()) / 86400
        self.assertTrue(29 < days < 31, days)
        for name in ("shoal_scheduler_tls_plaintext_refused_total",
                     "shoal_scheduler_tls_handshakes_failed_total", "shoal_scheduler_tls_reloads_total",
                     "shoal_tracker_unauthorized_announces_total"):
            self.assertIn("\n" + name + " ", body.decode(), name)


    # Placement and prewarm need an operator. The bodies are valid up to what needs registry-proxy
    # (not running here), so an authorized call gets past the check to a 4xx/5xx of its own.
    def test_an_operator_may_prewarm_and_place_a_node_may_not(self):
        self.assertEqual(self.call("n1", "/v1/heartbeat", heartbeat("n1"))[0], 200)
        prewarm = json.dumps({"nodes": ["n1"]}).encode()
        code, body = self.call("op", "/v1/prewarm", prewarm)
        self.assertEqual(code, 400, body)
        self.assertIn("nothing to prewarm", json.loads(body)["error"])
        code, body = self.call("n1", "/v1/prewarm", prewarm)
        self.assertEqual(code, 403, body)
        err = json.loads(body)
        self.assertEqual(err["presented"], "node/n1")
        self.assertIn("an operator certificate (shoal://operator/<user>)", err["error"])
        self.assertTrue(self.log_has("request refused status=403 path=/v1/prewarm"))
        place = json.dumps({"nodes": 1, "gpus": 0, "images": [], "dry_run": True}).encode()
        self.assertNotIn(self.call("op", "/v1/place", place)[0], (401, 403))
        self.assertEqual(self.call("rp", "/v1/place", place)[0], 403)
        # Reads: any cluster certificate.
        self.assertEqual(self.call("ks", "/v1/prewarm")[0], 200)

    def test_only_kube_scheduler_calls_the_extender(self):
        args = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"},
                                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                           "NodeNames": ["n1"]}).encode()
        code, body = self.call("ks", "/v1/extender/prioritize", args)
        self.assertEqual(code, 200, body)
        code, body = self.call("n1", "/v1/extender/filter", args)
        self.assertEqual(code, 403, body)
        self.assertIn("kube-scheduler's certificate", json.loads(body)["error"])
        self.assertEqual(self.call("op", "/v1/extender/prioritize", args)[0], 403)


class SchedulerTokenTls(FixtureTestCase):
    """TLS that admits clients without a certificate, so each route's own check is what stands."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        d = cls.class_tmpdir("shoal-sched-token-")
        make_pki(d)
        cls.pki = d
        cls.token_file = d / "operator-token"
        cls.token_file.write_text("a" * 40 + "\n")
        tls = {"enabled": True, "ca_file": str(d / "ca.pem"), "cert_file": str(d / "scheduler.pem"),
               "key_file": str(d / "scheduler.key"), "require_client_cert": False}
        cls.sched = Scheduler(d / "sched", extra={"tls": tls, "auth": {"operator_token_file": str(cls.token_file)}})
        cls.class_track(cls.sched)
        cls.sched.daemon.start()
        cls.sched.daemon.wait_tcp(cls.sched.port, timeout=20)
        cls.base = f"https://127.0.0.1:{cls.sched.port}"

    ctx = SchedulerTls.ctx
    call = SchedulerTls.call
    log_has = SchedulerTls.log_has

    def test_objects_refuse_an_anonymous_caller(self):
        digest = "sha256:" + "ab" * 32
        held = [{"digest": digest, "info_hash": "cd" * 20, "size": 10, "kind": "blob"}]
        self.assertEqual(self.call("n1", "/v1/heartbeat", heartbeat("n1", held))[0], 200)
        code, body = self.call(None, "/v1/objects/" + digest)
        self.assertEqual(code, 401, body)
        self.assertNotIn(b"n1", body)
        err = json.loads(body)
        self.assertEqual(err["presented"], "anonymous (tls)")
        self.assertIn("a cluster certificate with a shoal:// role or the operator bearer token", err["error"])
        self.assertEqual(self.call(None, "/v1/nodes")[0], 401)
        code, body = self.call("ks", "/v1/objects/" + digest)  # any member
        self.assertEqual(code, 200, body)
        self.assertEqual([h["node"] for h in json.loads(body)["holders"]], ["n1"])
        self.assertEqual(self.call(None, "/healthz")[0], 200)
        code, body = self.call(None, "/metrics")
        self.assertEqual(code, 200)
        self.assertIn(b'shoal_scheduler_auth_refused_total{need="member",reason="unauthenticated"} 2', body)
        # Open to anyone, so it must name no object (digest, info-hash) and no node.
        self.assertIsNone(re.search(rb"[0-9a-f]{40}|node=", body), "metrics reveal an object or node")
        self.assertTrue(self.log_has("request refused status=401 path=/v1/objects/"))

    def test_the_bearer_token_stands_for_an_operator_and_follows_its_file(self):
        prewarm = json.dumps({"nodes": ["nobody"]}).encode()
        old, new = "a" * 40, "b" * 40
        code, body = self.call(None, "/v1/prewarm", prewarm, token=old)
        self.assertEqual(code, 404, body)  # past the check: the node is unknown
        code, body = self.call(None, "/v1/prewarm", prewarm, token="wrong-token-wrong-token")
        self.assertEqual(code, 401, body)
        self.assertEqual(json.loads(body)["error"], "the bearer token is not the operator token")
        self.assertEqual(self.call(None, "/v1/prewarm", prewarm)[0], 401)
        self.assertEqual(self.call("n1", "/v1/prewarm", prewarm)[0], 403)
        self.assertEqual(self.call("ks", "/v1/extender/filter", b"{}", token=old)[0], 400)  # cert decides
        # Rotate: written beside and renamed over, as a Secret update does.
        tmp = self.token_file.with_suffix(".new")
        tmp.write_text(new + "\n")
        tmp.replace(self.token_file)
        end = time.monotonic() + 5
        while self.call(None, "/v1/prewarm", prewarm, token=new)[0] != 404:
            self.assertLess(time.monotonic(), end, "the rotated token was not picked up")
            time.sleep(0.1)
        self.assertEqual(self.call(None, "/v1/prewarm", prewarm, token=old)[0], 401)
        self.assertTrue(self.log_has("operator token reloaded"))
        self.assertFalse(self.log_has(old, timeout=0) or self.log_has(new, timeout=0), "a token was logged")


if __name__ == "__main__":
    unittest.main()
