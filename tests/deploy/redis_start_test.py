"""deploy/base/redis.yaml's start.sh and configuration files, run outside Kubernetes:

- which primary a pod's redis-server follows: pod 0 on a first start (no sentinel knows one), the
  one a sentinel names otherwise (the other pods' sentinels asked before its own), and, when the
  sentinels still name the restarting pod itself (it lost its data), a replica promoted with
  SENTINEL FAILOVER first; the sentinel's `monitor` line the same way;
- the configuration written holds only SHA-256 hashes of the users' passwords (the clear ones
  only where Redis must send them: masterauth, auth-pass, sentinel-pass), mode 0600; a password
  file with blanks refuses to start;
- the real redis-server and redis-sentinel (Debian 12's 7.0, as the image has) load what start.sh
  writes: the default user runs nothing, shoal-scheduler reaches `shoal:*` keys and the commands
  of its rules only, the replication and Sentinel users theirs, a wrong password is refused; the
  sentinel logs in to the server with the shoal-sentinel user and answers the scheduler's
  discovery query, but not SENTINEL FAILOVER from the scheduler's user; both listen with TLS
  only (a plain-text client and one without a certificate get nothing), and the sentinel
  monitors the server over TLS; start.sh asks the other sentinels over TLS with the pod's
  certificate.

Here redis-cli (towards the other pods' sentinels) and getent are stand-ins, the pod's name is
given (SHOAL_REDIS_POD), the daemons listen on free loopback ports instead of 6379/26379, and the
certificate files are a test CA's (the only lines the test changes).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from shoal_fixtures.certs import ClusterPKI, issue  # noqa: E402
from shoal_fixtures.procs import free_port  # noqa: E402

DOMAIN = "shoal-redis.shoal-system.svc.cluster.local"
REDIS = {n: shutil.which(n) or f"/usr/bin/{n}" for n in ("redis-server", "redis-sentinel", "redis-cli")}
HAVE_REDIS = all(os.access(p, os.X_OK) for p in REDIS.values())

# Stand-ins on PATH. redis-cli answers `SENTINEL get-master-addr-by-name` for host H from
# $FAKE/master.H (nothing: the sentinel knows no primary or does not answer), and on
# `SENTINEL FAILOVER` makes $FAKE/after-failover every sentinel's answer; it logs each call.
FAKE_CLI = """#!/bin/sh
echo "$REDISCLI_AUTH $*" >> "$FAKE/cli.log"
host=$4; shift 6
while :; do
  case "$1" in --tls) shift;; --cacert|--cert|--key) shift 2;; *) break;; esac
done
case "$1 $2" in
"SENTINEL get-master-addr-by-name")
  [ -f "$FAKE/master.$host" ] && printf '%s\\n6379\\n' "$(cat "$FAKE/master.$host")"; exit 0;;
"SENTINEL FAILOVER") for f in "$FAKE"/master.*; do cp "$FAKE/after-failover" "$f"; done; echo OK;;
esac
"""
FAKE_EXEC = """#!/bin/sh
cp "$1" "$FAKE/exec-$(basename "$0")"
"""


def host(i: int) -> str:
    return f"shoal-redis-{i}.{DOMAIN}"


class StartScript(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        docs = list(yaml.safe_load_all((ROOT / "deploy/base/redis.yaml").read_text()))
        cls.files = next(d for d in docs if d["kind"] == "ConfigMap")["data"]

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="shoal-redis-start-"))
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.conf, self.bin, self.fake = self.dir / "conf", self.dir / "bin", self.dir / "fake"
        for d in (self.conf, self.bin, self.fake, self.dir / "secrets", self.dir / "internal",
                  self.dir / "data", self.dir / "sentinel"):
            d.mkdir()
        for name, text in self.files.items():
            (self.conf / name).write_text(text)
        self.pw = {"scheduler": "s3cr3t-scheduler", "repl": "r3pl", "sentinel": "s3nt1nel"}
        (self.dir / "secrets/password").write_text(self.pw["scheduler"] + "\n")
        (self.dir / "internal/repl").write_text(self.pw["repl"] + "\n")
        (self.dir / "internal/sentinel").write_text(self.pw["sentinel"])
        scripts = {"redis-cli": FAKE_CLI, "redis-server": FAKE_EXEC, "redis-sentinel": FAKE_EXEC,
                   "getent": "#!/bin/sh\nexit 0\n"}
        for name, text in scripts.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)

    def start(self, what: str, pod: int, check: bool = True) -> subprocess.CompletedProcess:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "FAKE": str(self.fake), "SHOAL_REDIS_POD": f"shoal-redis-{pod}",
               "POD_NAMESPACE": "shoal-system", "SHOAL_REDIS_SERVICE": "shoal-redis", "SHOAL_REDIS_PODS": "3",
               "SHOAL_REDIS_CONF": str(self.conf), "SHOAL_REDIS_SECRETS": str(self.dir / "secrets"),
               "SHOAL_REDIS_INTERNAL": str(self.dir / "internal"), "SHOAL_REDIS_DATA": str(self.dir / "data"),
               "SHOAL_REDIS_SENTINEL_STATE": str(self.dir / "sentinel"), "SHOAL_REDIS_TLS": str(self.dir / "tls"),
               "SHOAL_REDIS_TLS_WATCH": "0"}  # tls-reload.sh runs in the daemons' test
        cp = subprocess.run(["sh", str(self.conf / "start.sh"), what], env=env, capture_output=True,
                            text=True, timeout=120)
        if check:
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        return cp

    def written(self, what: str, fresh: bool = True) -> list[str]:
        """The file redis-{what} was started with; `fresh`: start.sh wrote it (mode 0600)."""
        path = self.fake / f"exec-redis-{what}"
        src = self.dir / ("data/redis.conf" if what == "server" else "sentinel/sentinel.conf")
        if fresh:
            self.assertEqual(stat.S_IMODE(src.stat().st_mode), 0o600, src)
        return path.read_text().splitlines()

    def sentinels_name(self, primary: str | None, pods=(0, 1, 2)) -> None:
        for i in pods:
            if primary is not None:
                (self.fake / f"master.{host(i)}").write_text(primary)

    # -- which primary ---------------------------------------------------------------------------

    def test_first_start_pod_0_is_the_primary(self):
        self.start("server", 0)
        conf = self.written("server")
        self.assertFalse([l for l in conf if l.startswith("replicaof")])
        self.assertIn(f"replica-announce-ip {host(0)}", conf)
        self.start("server", 2)
        self.assertIn(f"replicaof {host(0)} 6379", self.written("server"))
        self.start("sentinel", 1)
        conf = self.written("sentinel")
        self.assertIn(f"sentinel monitor shoal {host(0)} 6379 2", conf)
        self.assertIn(f"sentinel announce-ip {host(1)}", conf)

    def test_follows_the_primary_the_sentinels_name(self):
        self.sentinels_name(host(2))
        self.start("server", 0)
        self.assertIn(f"replicaof {host(2)} 6379", self.written("server"))
        self.start("sentinel", 0)
        self.assertIn(f"sentinel monitor shoal {host(2)} 6379 2", self.written("sentinel"))
        # The other pods' sentinels are asked first: pod 0's own (fresh) one is not needed.
        asked = [l.split()[4] for l in (self.fake / "cli.log").read_text().splitlines()]
        self.assertNotIn(host(0), asked)
        self.assertTrue(all(l.startswith(self.pw["sentinel"] + " --user shoal-sentinel ")
                            for l in (self.fake / "cli.log").read_text().splitlines()))
        # Always over TLS, with the pod's certificate (the sentinels take nothing else).
        tls = str(self.dir / "tls")
        self.assertTrue(all(f" --tls --cacert {tls}/ca.crt --cert {tls}/tls.crt --key {tls}/tls.key " in l
                            for l in (self.fake / "cli.log").read_text().splitlines()))

    def test_a_restarted_sentinel_keeps_its_file(self):
        (self.dir / "sentinel/sentinel.conf").write_text("sentinel myid kept\n")
        self.sentinels_name(host(2))
        self.start("sentinel", 0)
        self.assertEqual(self.written("sentinel", fresh=False), ["sentinel myid kept"])

    def test_a_primary_that_lost_its_data_has_a_replica_promoted_first(self):
        self.sentinels_name(host(1))
        (self.fake / "after-failover").write_text(host(2))
        cp = self.start("server", 1)
        self.assertIn(f"replicaof {host(2)} 6379", self.written("server"))
        log = (self.fake / "cli.log").read_text()
        self.assertIn("SENTINEL FAILOVER shoal", log)
        self.assertFalse([l for l in log.splitlines() if f"-h {host(1)} " in l and "SENTINEL FAILOVER" in l])
        self.assertIn(f"the sentinels name {host(2)}", cp.stdout)

    def test_passwords_are_hashed_and_checked(self):
        self.start("server", 0)
        self.start("sentinel", 0)
        for what in ("server", "sentinel"):
            text = "\n".join(self.written(what))
            self.assertNotIn(self.pw["scheduler"], text)  # only its hash: no daemon sends it
            self.assertNotRegex(text, r"@[A-Z0-9_]+@", f"{what}: a placeholder left")
        server = self.written("server")
        self.assertIn(f"masterauth {self.pw['repl']}", server)
        # tls-reload.sh's user: CONFIG SET only, a fresh password's hash.
        local = [l for l in server if l.startswith("user shoal-local ")]
        self.assertEqual(len(local), 1, server)
        self.assertRegex(local[0], r"^user shoal-local on resetpass #[0-9a-f]{64} resetkeys "
                                   r"resetchannels -@all \+config\|set \+ping$")
        self.assertNotIn(self.pw["sentinel"], "\n".join(server))
        self.assertIn(f"sentinel auth-pass shoal {self.pw['sentinel']}", self.written("sentinel"))
        (self.dir / "internal/repl").write_text("two words\n")
        (self.fake / "exec-redis-server").unlink()
        cp = self.start("server", 0, check=False)
        self.assertEqual(cp.returncode, 2, cp.stderr)
        self.assertIn("empty or holds blanks", cp.stderr)
        self.assertFalse((self.fake / "exec-redis-server").exists())

    # -- the real daemons load it ----------------------------------------------------------------

    @unittest.skipUnless(HAVE_REDIS, "redis-server, redis-sentinel, redis-cli not installed (tools/install-deps)")
    def test_redis_and_sentinel_load_the_configuration(self):
        self.start("server", 0)
        self.start("sentinel", 0)
        port, sport = free_port(), free_port()
        # The pod's Secret shoal-redis-tls, from a test CA: tls.crt, tls.key, ca.crt.
        pki = ClusterPKI(self.dir / "pki")
        party = pki.redis(["127.0.0.1"])
        tls = self.dir / "tls"
        tls.mkdir()
        for src, name in ((party.cert.cert, "tls.crt"), (party.cert.key, "tls.key"), (party.ca, "ca.crt")):
            shutil.copy(src, tls / name)
        files = {f"tls-{k}-file ": f"tls-{k}-file {tls}/{v}"
                 for k, v in (("cert", "tls.crt"), ("key", "tls.key"), ("ca-cert", "ca.crt"))}
        local_pw = "l0cal-test"
        server = _patch(self.written("server"), {
            "tls-port ": f"tls-port {port}", "bind ": "bind 127.0.0.1", "dir ": f"dir {self.dir / 'data'}",
            "user shoal-local ": f"user shoal-local on resetpass #{hashlib.sha256(local_pw.encode()).hexdigest()} "
                                "resetkeys resetchannels -@all +config|set +ping", **files})
        self.assertIn("port 0", server.splitlines(), "no plain-text port")
        (self.dir / "data/run.conf").write_text(server)
        sentinel = _patch(self.written("sentinel"), {
            "tls-port ": f"tls-port {sport}\nbind 127.0.0.1", "dir ": f"dir {self.dir / 'sentinel'}",
            "sentinel monitor ": f"sentinel monitor shoal 127.0.0.1 {port} 2", **files})
        self.assertIn("port 0", sentinel.splitlines(), "no plain-text port")
        (self.dir / "sentinel/run.conf").write_text(sentinel)
        for argv in ([REDIS["redis-server"], str(self.dir / "data/run.conf")],
                     [REDIS["redis-sentinel"], str(self.dir / "sentinel/run.conf")]):
            with open(self.dir / f"{Path(argv[0]).name}.log", "wb") as log:
                p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            self.addCleanup(_stop, p)
        cli = lambda user, pw, *args, p=port: _cli(p, tls, user, pw, *args)
        s, r, sn = self.pw["scheduler"], self.pw["repl"], self.pw["sentinel"]
        _wait(lambda: cli("shoal-sentinel", sn, "PING") == "PONG", "redis-server")
        # TLS only, and only with a certificate of the CA.
        plain = subprocess.run([REDIS["redis-cli"], "-p", str(port), "PING"], capture_output=True,
                               text=True, timeout=10)
        self.assertNotIn("PONG", plain.stdout + plain.stderr)
        anon = subprocess.run([REDIS["redis-cli"], "-p", str(port), "--tls", "--cacert", str(tls / "ca.crt"),
                               "PING"], capture_output=True, text=True, timeout=10)
        self.assertNotIn("PONG", anon.stdout + anon.stderr)
        self.assertIn("NOAUTH", cli(None, None, "PING"))
        self.assertIn("WRONGPASS", cli("shoal-scheduler", "wrong", "PING"))
        self.assertEqual(cli("shoal-scheduler", s, "SET", "shoal:k", "v"), "OK")
        self.assertEqual(cli("shoal-scheduler", s, "EVAL", "return redis.call('GET', KEYS[1])", "1", "shoal:k"), "v")
        self.assertEqual(len(cli("shoal-scheduler", s, "TIME").splitlines()), 2)
        self.assertIn("role:master", cli("shoal-scheduler", s, "INFO", "replication"))
        for denied in (["SET", "other:k", "v"], ["CONFIG", "GET", "maxmemory"], ["FLUSHALL"],
                       ["KEYS", "*"], ["SELECT", "1"], ["FUNCTION", "LIST"]):
            self.assertIn("NOPERM", cli("shoal-scheduler", s, *denied), denied)
        self.assertIn("NOPERM", cli("shoal-repl", r, "GET", "shoal:k"))
        self.assertIn("NOPERM", cli("shoal-sentinel", sn, "GET", "shoal:k"))
        # The sentinel monitors the server through the shoal-sentinel user, and answers the
        # scheduler's discovery (same user and password as on the server), nothing more.
        scli = lambda user, pw, *args: _cli(sport, tls, user, pw, *args)
        _wait(lambda: scli("shoal-scheduler", s, "SENTINEL", "get-master-addr-by-name", "shoal").splitlines()
              == ["127.0.0.1", str(port)], "redis-sentinel")
        # The run id comes from the server's INFO, which the sentinel reads as shoal-sentinel.
        run_id = next(l.split(":", 1)[1] for l in cli("shoal-scheduler", s, "INFO", "server").splitlines()
                      if l.startswith("run_id:"))
        _wait(lambda: _pairs(scli("shoal-sentinel", sn, "SENTINEL", "master", "shoal")).get("runid") == run_id,
              "the sentinel logged in to the server")
        self.assertEqual(_pairs(scli("shoal-sentinel", sn, "SENTINEL", "master", "shoal"))["flags"], "master")
        self.assertIn("NOAUTH", scli(None, None, "SENTINEL", "masters"))
        self.assertIn("NOPERM", scli("shoal-scheduler", s, "SENTINEL", "FAILOVER", "shoal"))
        self.assertIn("NOPERM", cli("shoal-local", local_pw, "GET", "shoal:k"))

        # cert-manager renews the certificate: tls-reload.sh has the server load it (the server
        # then presents the new one) and stops the sentinel (here a stand-in process).
        env = {"PATH": "/usr/bin:/bin", "SHOAL_REDIS_TLS": str(tls), "SHOAL_REDIS_TLS_WATCH": "1",
               "SHOAL_REDIS_PORT": str(port), "SHOAL_REDIS_LOCAL_PW": local_pw}
        stand_in = subprocess.Popen(["sleep", "60"])
        self.addCleanup(_stop, stand_in)
        for what, extra in (("server", {}), ("sentinel", {"SHOAL_REDIS_PID": str(stand_in.pid),
                                                          "SHOAL_REDIS_TLS_STAGGER": "0"})):
            with open(self.dir / f"tls-reload-{what}.log", "wb") as log:
                w = subprocess.Popen(["sh", str(self.conf / "tls-reload.sh"), what], env={**env, **extra},
                                     stdout=log, stderr=subprocess.STDOUT)
            self.addCleanup(_stop, w)
        time.sleep(1.5)  # both have read the files as they were
        self.assertEqual(_presented(port, tls), _der(tls / "tls.crt"))
        renewed = issue(pki.ca, self.dir / "renewed", "shoal-redis", uris=["shoal://redis"], ips=["127.0.0.1"])
        for src, name in ((renewed.cert, "tls.crt"), (renewed.key, "tls.key")):
            shutil.copy(src, tls / f".{name}.new")
            os.replace(tls / f".{name}.new", tls / name)
        new = _der(tls / "tls.crt")
        _wait(lambda: _presented(port, tls) == new, "the server presenting the renewed certificate", 15)
        _wait(lambda: stand_in.poll() is not None, "the sentinel stopped", 15)
        self.assertEqual(stand_in.returncode, -15)
        self.assertIn("the renewed certificate is loaded", (self.dir / "tls-reload-server.log").read_text())


def _patch(lines: list[str], by_prefix: dict[str, str]) -> str:
    """The configuration with each line starting with a key of `by_prefix` replaced."""
    out = []
    for line in lines:
        key = next((k for k in by_prefix if line.startswith(k)), None)
        out.append(by_prefix[key] if key else line)
    return "\n".join(out) + "\n"


def _der(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


def _presented(port: int, tls: Path) -> bytes | None:
    """The certificate a TLS server on loopback presents to a client with tls's certificate."""
    ctx = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                return s.getpeercert(binary_form=True)
    except OSError:
        return None


def _pairs(text: str) -> dict[str, str]:
    lines = text.splitlines()
    return dict(zip(lines[0::2], lines[1::2]))


def _cli(port: int, tls: Path, user: str | None, pw: str | None, *args: str) -> str:
    """redis-cli over TLS with the certificate in `tls` (tls.crt, tls.key, ca.crt)."""
    argv = [REDIS["redis-cli"], "-p", str(port), "--no-auth-warning", "--tls", "--cacert",
            str(tls / "ca.crt"), "--cert", str(tls / "tls.crt"), "--key", str(tls / "tls.key")]
    if user:
        argv += ["--user", user, "--pass", pw]
    cp = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=10)
    return (cp.stdout + cp.stderr).strip()


def _wait(pred, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not ready after {timeout} s")
        time.sleep(0.1)



def _stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


if __name__ == "__main__":
    unittest.main()
