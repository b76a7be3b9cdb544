"""`shoalctl certs init` / `issue` against docs/security.md's certificate profile, checked by the
real `openssl verify` and `openssl x509`, a real scheduler with TLS on, and python3-libtorrent:

- init makes a CA (CA:TRUE, keyCertSign/cRLSign, key 0600) and refuses to replace it;
- each role's certificate verifies against it, with the profile's URI SAN, DNS `*` only for node
  and registry-proxy, EKUs and CN;
- the scheduler, started with shoalctl-made certificates, accepts a heartbeat over curl --cert
  from node n1's certificate and refuses n1 heartbeating as n2; `shoalctl --ca --cert --key
  nodes` lists n1 over mTLS; --token-file sends `Authorization: Bearer` (to an https stub);
- an SSL torrent rooted at the CA completes between two libtorrent sessions that each hold a
  shoalctl node certificate;
- refusals (bad node name, single-label and torrent-prefix DNS names, an existing CA) exit
  non-zero with the reason.

One scheduler and one seeder/downloader pair; a few seconds in all.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import ssl
import stat
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from shoal_fixtures import FixtureTestCase, certs  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402
from shoal_fixtures.shoal import binary  # noqa: E402

try:
    import libtorrent as lt
except ImportError:  # pragma: no cover - depends on the machine
    lt = None


def x509_text(path: Path) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(path), "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout


def ext_value(text: str, name: str) -> str:
    """The line after `X509v3 <name>:` in `openssl x509 -text`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"X509v3 {name}:"):
            return lines[i + 1].strip()
    return ""


def heartbeat(node: str) -> str:
    return json.dumps({"schema": 2, "node": node, "ip": "10.9.9.9", "bt_port": 6881, "full": True,
                       "seq": 1, "epoch": "", "objects": [], "removed": [], "health": "ok"})


class ShoalctlCerts(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.tmp = cls.class_tmpdir("shoal-certs-")
        cls.pki = cls.tmp / "pki"
        cls.init = cls.ctl("certs", "init", "--dir", str(cls.pki))
        cls.issued = {
            "node-n1": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--node", "n1",
                               "--ip", "127.0.0.1"),
            "node-n2": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--node", "n2"),
            "registry-proxy": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--role",
                                      "registry-proxy", "--dns",
                                      "shoal-registry-proxy.shoal.svc.cluster.local"),
            "scheduler-s1": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--role", "scheduler",
                                    "--name", "s1", "--ip", "127.0.0.1", "--dns",
                                    "shoal-scheduler.shoal.svc.cluster.local"),
            "operator-alice": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--role", "operator",
                                      "--name", "alice", "--days", "7"),
            "kube-scheduler": cls.ctl("certs", "issue", "--dir", str(cls.pki), "--role",
                                      "kube-scheduler"),
        }

    @classmethod
    def ctl(cls, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(binary("shoalctl")), *args], capture_output=True, text=True,
                              timeout=30, env=env)

    def text(self, base: str) -> str:
        return x509_text(self.pki / f"{base}.pem")

    # ---- init

    def test_init_makes_a_ca_and_keeps_its_key_private(self):
        self.assertEqual(self.init.returncode, 0, self.init.stderr)
        self.assertIn(str(self.pki / "ca.pem"), self.init.stdout)
        t = self.text("ca")
        self.assertIn("Subject: CN = Shoal cluster CA", t)
        self.assertIn("Issuer: CN = Shoal cluster CA", t)
        self.assertIn("CA:TRUE", ext_value(t, "Basic Constraints"))
        self.assertEqual(ext_value(t, "Key Usage"), "Certificate Sign, CRL Sign")
        self.assertIn("ASN1 OID: prime256v1", t)
        self.assertEqual(stat.S_IMODE(os.stat(self.pki / "ca.key").st_mode), 0o600)
        days = (ssl.cert_time_to_seconds(
            subprocess.run(["openssl", "x509", "-in", str(self.pki / "ca.pem"), "-noout",
                            "-enddate"], capture_output=True, text=True).stdout.split("=", 1)[1]
            .strip()) - time.time()) / 86400
        self.assertGreater(days, 3600)

    def test_init_refuses_an_existing_ca(self):
        before = (self.pki / "ca.pem").read_bytes(), (self.pki / "ca.key").read_bytes()
        r = self.ctl("certs", "init", "--dir", str(self.pki))
        self.assertEqual(r.returncode, 1)
        self.assertIn("already exists: refusing to replace the cluster CA", r.stderr)
        self.assertEqual(before, ((self.pki / "ca.pem").read_bytes(),
                                  (self.pki / "ca.key").read_bytes()))

    # ---- issue: the profile, read back by openssl

    def test_every_leaf_verifies_against_the_ca_directly(self):
        for base, r in self.issued.items():
            self.assertEqual(r.returncode, 0, f"{base}: {r.stderr}")
            self.assertIn(str(self.pki / f"{base}.pem"), r.stdout)
            self.assertEqual(stat.S_IMODE(os.stat(self.pki / f"{base}.key").st_mode), 0o600, base)
            v = subprocess.run(["openssl", "verify", "-CAfile", str(self.pki / "ca.pem"),
                                str(self.pki / f"{base}.pem")], capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, f"{base}: {v.stdout}{v.stderr}")
            t = self.text(base)
            self.assertIn("Issuer: CN = Shoal cluster CA", t)
            self.assertIn("CA:FALSE", ext_value(t, "Basic Constraints"))
            self.assertEqual(ext_value(t, "Key Usage"), "Digital Signature")

    def test_sans_ekus_and_cns_follow_the_table(self):
        both = "TLS Web Server Authentication, TLS Web Client Authentication"
        client = "TLS Web Client Authentication"
        want = {
            "node-n1": ("n1", "URI:shoal://node/n1, DNS:*, IP Address:127.0.0.1", both),
            "node-n2": ("n2", "URI:shoal://node/n2, DNS:*", both),
            "registry-proxy": ("shoal-registry-proxy",
                               "URI:shoal://registry-proxy, DNS:*, "
                               "DNS:shoal-registry-proxy.shoal.svc.cluster.local", both),
            "scheduler-s1": ("shoal-scheduler-s1",
                             "URI:shoal://scheduler/s1, DNS:shoal-scheduler.shoal.svc.cluster.local"
                             ", IP Address:127.0.0.1", "TLS Web Server Authentication"),
            "operator-alice": ("shoal-operator-alice", "URI:shoal://operator/alice", client),
            "kube-scheduler": ("shoal-kube-scheduler", "URI:shoal://kube-scheduler", client),
        }
        for base, (cn, sans, eku) in want.items():
            t = self.text(base)
            self.assertIn(f"Subject: CN = {cn}\n", t, base)
            self.assertEqual(ext_value(t, "Subject Alternative Name"), sans, base)
            self.assertEqual(ext_value(t, "Extended Key Usage"), eku, base)
        # Only swarm members carry DNS *.
        for base in ("scheduler-s1", "operator-alice", "kube-scheduler"):
            self.assertNotIn("DNS:*", ext_value(self.text(base), "Subject Alternative Name"))

    def test_days_sets_the_lifetime(self):
        end = subprocess.run(["openssl", "x509", "-in", str(self.pki / "operator-alice.pem"),
                              "-noout", "-enddate"], capture_output=True, text=True).stdout
        days = (ssl.cert_time_to_seconds(end.split("=", 1)[1].strip()) - time.time()) / 86400
        self.assertTrue(6.9 < days < 7.1, days)

    def test_issuing_again_renews_in_place(self):
        d = self.tmp / "renew"
        self.assertEqual(self.ctl("certs", "init", "--dir", str(d)).returncode, 0)
        first = self.ctl("certs", "issue", "--dir", str(d), "--node", "r1")
        self.assertEqual(first.returncode, 0, first.stderr)
        serial1 = x509_text(d / "node-r1.pem").split("Serial Number:")[1].split("\n")[1].strip()
        again = self.ctl("certs", "issue", "--dir", str(d), "--node", "r1")
        self.assertEqual(again.returncode, 0, again.stderr)
        serial2 = x509_text(d / "node-r1.pem").split("Serial Number:")[1].split("\n")[1].strip()
        self.assertNotEqual(serial1, serial2)
        self.assertEqual(sorted(p.name for p in d.iterdir()),
                         ["ca.key", "ca.pem", "node-r1.key", "node-r1.pem"])  # no temporaries

    def test_a_long_node_name_is_kept_whole_in_the_uri(self):
        name = "ip-10-0-0-1." + "a" * 80 + ".compute.internal"  # 109 characters
        r = self.ctl("certs", "issue", "--dir", str(self.pki), "--node", name)
        self.assertEqual(r.returncode, 0, r.stderr)
        t = self.text(f"node-{name}")
        self.assertEqual(ext_value(t, "Subject Alternative Name"), f"URI:shoal://node/{name}, DNS:*")
        self.assertIn(f"Subject: CN = {name[:64]}\n", t)  # X.509 caps a CN at 64

    # ---- refusals

    def test_refusals_name_the_rule(self):
        d = str(self.pki)
        cases = [
            (["--node", "n1/evil"], "not a valid identity name"),
            (["--node", "a b"], "not a valid identity name"),
            (["--role", "scheduler", "--name", "s2", "--dns", "shoal-scheduler"],
             "a single-label name"),
            (["--role", "registry-proxy", "--dns", "4c1e"], "could be a prefix of a torrent name"),
            (["--role", "scheduler", "--name", "s2", "--dns", "sha256"],
             "could be a prefix of a torrent name"),
            (["--role", "scheduler", "--name", "s2", "--dns", "*.shoal.svc"], "wildcards are refused"),
            (["--role", "scheduler", "--name", "s2"], "needs --dns FQDN and/or --ip"),
            (["--role", "operator"], "needs --name"),
            (["--role", "operator", "--name", "bob", "--ip", "10.0.0.1"], "no --dns or --ip"),
            (["--role", "kube-scheduler", "--name", "x"], "drop --name"),
            (["--node", "n3", "--dns", "n3.example.com"], "DNS * only"),
            (["--node", "n3", "--ip", "10.0.0.300"], "not an IPv4 or IPv6 address"),
            (["--role", "root"], "unknown"),
        ]
        before = sorted(p.name for p in self.pki.iterdir())
        for args, why in cases:
            r = self.ctl("certs", "issue", "--dir", d, *args)
            self.assertEqual(r.returncode, 1, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn(why, r.stderr, args)
        self.assertEqual(sorted(p.name for p in self.pki.iterdir()), before)  # nothing written
        r = self.ctl("certs", "issue", "--dir", str(self.tmp / "no-ca"), "--node", "n9")
        self.assertEqual(r.returncode, 1)
        self.assertIn("run `shoalctl certs init`", r.stderr)

    # ---- the certificates in use

    def test_scheduler_accepts_the_node_certificate_and_shoalctl_speaks_mtls(self):
        p = self.pki
        tls = {"enabled": True, "ca_file": str(p / "ca.pem"), "cert_file": str(p / "scheduler-s1.pem"),
               "key_file": str(p / "scheduler-s1.key")}
        sched = self.track(Scheduler(self.tmp / "sched", extra={"tls": tls}))
        sched.daemon.start()
        sched.daemon.wait_tcp(sched.port, timeout=20)
        base = f"https://127.0.0.1:{sched.port}"

        def curl(who: str, node: str) -> tuple[int, str]:
            r = subprocess.run(["curl", "-sS", "--cacert", str(p / "ca.pem"), "--cert",
                                str(p / f"{who}.pem"), "--key", str(p / f"{who}.key"),
                                "-o", "-", "-w", "\n%{http_code}", "-H",
                                "Content-Type: application/json", "--data", heartbeat(node),
                                base + "/v1/heartbeat"], capture_output=True, text=True, timeout=20)
            body, _, code = r.stdout.rpartition("\n")
            return int(code or 0), body + r.stderr

        self.assertEqual(curl("node-n1", "n1")[0], 200)
        code, body = curl("node-n1", "n2")
        self.assertEqual(code, 403, body)
        self.assertIn("the client certificate is node/n1", body)
        r = self.ctl("--scheduler", base, "--ca", str(p / "ca.pem"), "--cert",
                     str(p / "operator-alice.pem"), "--key", str(p / "operator-alice.key"), "nodes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\nn1 ")
        # Without a client certificate the scheduler refuses the handshake.
        r = self.ctl("--scheduler", base, "--ca", str(p / "ca.pem"), "nodes")
        self.assertEqual(r.returncode, 1)

    def test_token_file_sends_a_bearer_token(self):
        p = self.pki
        seen: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                seen.append(self.headers.get("Authorization", ""))
                body = b"[]"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(p / "scheduler-s1.pem"), str(p / "scheduler-s1.key"))
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)  # cleanups run last-in first-out: shut down, then close
        token = self.tmp / "token"
        token.write_text("s3cret-token\n")
        url = f"https://127.0.0.1:{srv.server_address[1]}"
        r = self.ctl("--scheduler", url, "--ca", str(p / "ca.pem"), "--token-file", str(token),
                     "nodes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(seen, ["Bearer s3cret-token"])
        (self.tmp / "empty-token").write_text("\n")
        r = self.ctl("--scheduler", url, "--token-file", str(self.tmp / "empty-token"), "nodes")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no token on its first line", r.stderr)

    @unittest.skipIf(lt is None, "python3-libtorrent is not installed (tools/install-deps)")
    def test_ssl_torrent_completes_between_shoalctl_node_certificates(self):
        t = self.tmp / "swarm"
        (t / "seed").mkdir(parents=True)
        (t / "get").mkdir()
        data = os.urandom(256 << 10)
        name = hashlib.sha256(data).hexdigest()
        (t / "seed" / name).write_bytes(data)
        fs = lt.file_storage()
        fs.add_file(name, len(data))
        ct = lt.create_torrent(fs, 64 << 10, lt.create_torrent.v1_only)
        ct.set_priv(True)
        ct.set_root_cert((self.pki / "ca.pem").read_text())
        lt.set_piece_hashes(ct, str(t / "seed"))
        ti = lt.torrent_info(ct.generate())
        dh = certs.dh_params(t / "dh.pem")

        def peer(save: Path, node: str):
            ses = lt.session({"listen_interfaces": "127.0.0.1:0s", "enable_dht": False,
                              "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
                              "enable_outgoing_utp": False, "enable_incoming_utp": False,
                              "allow_multiple_connections_per_ip": True, "min_reconnect_time": 1,
                              "alert_mask": lt.alert.category_t.all_categories})
            atp = lt.add_torrent_params()
            atp.ti, atp.save_path = ti, str(save)
            atp.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
            h = ses.add_torrent(atp)
            port, need_cert, deadline = 0, False, time.monotonic() + 5
            while time.monotonic() < deadline and not (need_cert and port):
                for a in ses.pop_alerts():
                    need_cert = need_cert or isinstance(a, lt.torrent_need_cert_alert)
                    if isinstance(a, lt.listen_succeeded_alert) and \
                            a.socket_type == lt.socket_type_t.tcp_ssl:
                        port = a.port
                time.sleep(0.02)
            self.assertTrue(need_cert and port, f"{node}: not an SSL torrent, or no SSL port")
            h.set_ssl_certificate(str(self.pki / f"node-{node}.pem"),
                                  str(self.pki / f"node-{node}.key"), str(dh))
            return ses, h, port

        seed_ses, seed, seed_port = peer(t / "seed", "n1")
        get_ses, get, _ = peer(t / "get", "n2")
        get.connect_peer(("127.0.0.1", seed_port))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and get.status().total_done < len(data):
            seed_ses.pop_alerts()
            get_ses.pop_alerts()
            time.sleep(0.05)
        self.assertEqual(get.status().total_done, len(data))
        self.assertEqual((t / "get" / name).read_bytes(), data)


if __name__ == "__main__":
    unittest.main()
