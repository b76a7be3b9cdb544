"""Test certificates made with the openssl CLI: a cluster CA, node certificates in Shoal's profile
(docs/security.md, "Certificate profile"), an unrelated CA, expired and otherwise odd certificates.

Keys are EC P-256 (instant to generate, so a test makes its own set in well under a second per
certificate). Every certificate is signed with `openssl ca` from a throw-away configuration in the
CA's directory, so validity can be set to any window (an expired certificate is one whose window
ended yesterday). Standard library only; needs `openssl` on PATH (Debian: package openssl).

    ca = make_ca(tmp / "cluster", "Shoal test cluster CA")
    node = issue_node(ca, tmp / "node-a", "node-a")        # URI SAN shoal://node/node-a, DNS SAN *
    old = issue_node(ca, tmp / "old", "old", expired=True)
"""

from __future__ import annotations

import datetime as dt
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .procs import FixtureError

# A serverAuth+clientAuth leaf: a BitTorrent peer is the TLS server on incoming connections and
# the TLS client on outgoing ones, so a swarm certificate needs both.
LEAF_EXT = """basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = {eku}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

CA_EXT = """basicConstraints = critical, CA:TRUE{pathlen}
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""

CA_CONF = """[ ca ]
default_ca = shoal_ca
[ shoal_ca ]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
default_md = sha256
policy = any_policy
unique_subject = no
copy_extensions = none
[ any_policy ]
commonName = supplied
"""


@dataclass(frozen=True)
class Cert:
    """One certificate and its key on disk (PEM)."""

    cert: Path
    key: Path

    def pem(self) -> str:
        return self.cert.read_text()

    def key_pem(self) -> str:
        return self.key.read_text()


@dataclass(frozen=True)
class CA(Cert):
    """A certificate authority: its certificate, key and `openssl ca` state directory."""

    dir: Path


def _openssl(args: Sequence[str], what: str) -> str:
    try:
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FixtureError(f"openssl {what}: {e}") from e
    if r.returncode != 0:
        raise FixtureError(f"openssl {what} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    return r.stdout


def _key(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
              "-out", str(path)], f"genpkey {path}")
    path.chmod(0o600)
    return path


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y%m%d%H%M%SZ")


def _window(days: float, expired: bool) -> tuple[str, str]:
    now = dt.datetime.now(dt.timezone.utc)
    if expired:
        return _stamp(now - dt.timedelta(days=2)), _stamp(now - dt.timedelta(days=1))
    return _stamp(now - dt.timedelta(minutes=5)), _stamp(now + dt.timedelta(days=days))


def _sign(ca: CA, csr: Path, out: Path, ext: str, days: float, expired: bool) -> None:
    extfile = out.with_suffix(".ext")
    extfile.write_text("[ ext ]\n" + ext)
    start, end = _window(days, expired)
    _openssl(["ca", "-batch", "-notext", "-config", str(ca.dir / "ca.cnf"), "-cert", str(ca.cert),
              "-keyfile", str(ca.key), "-in", str(csr), "-out", str(out), "-startdate", start,
              "-enddate", end, "-extfile", str(extfile), "-extensions", "ext"], f"ca sign {out}")


def _csr(key: Path, cn: str, out: Path) -> Path:
    _openssl(["req", "-new", "-key", str(key), "-subj", "/CN=" + cn, "-out", str(out)],
             f"req {out}")
    return out


def _init_ca_dir(d: Path) -> None:
    (d / "issued").mkdir(parents=True, exist_ok=True)
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(CA_CONF.format(dir=d))


def make_ca(directory: str | Path, cn: str, days: float = 30) -> CA:
    """A self-signed root CA in `directory` (ca.pem, ca.key and the signing state)."""
    d = Path(directory)
    _init_ca_dir(d)
    key = _key(d / "ca.key")
    cert = d / "ca.pem"
    conf = d / "req.cnf"
    conf.write_text("[ req ]\ndistinguished_name = dn\n[ dn ]\n[ ext ]\n"
                    + CA_EXT.format(pathlen=""))
    _openssl(["req", "-x509", "-new", "-key", str(key), "-subj", "/CN=" + cn, "-days",
              str(max(1, int(days))), "-sha256", "-config", str(conf), "-extensions", "ext",
              "-out", str(cert)], f"req -x509 {cert}")
    return CA(cert=cert, key=key, dir=d)


def make_intermediate(parent: CA, directory: str | Path, cn: str, days: float = 30) -> CA:
    """A CA signed by `parent` (pathlen 0)."""
    d = Path(directory)
    _init_ca_dir(d)
    key = _key(d / "ca.key")
    cert = d / "ca.pem"
    _sign(parent, _csr(key, cn, d / "ca.csr"), cert, CA_EXT.format(pathlen=", pathlen:0"), days,
          False)
    return CA(cert=cert, key=key, dir=d)


def cross_sign(subject: CA, subject_cn: str, by: CA, out: str | Path, days: float = 30) -> Path:
    """`subject`'s CA certificate re-issued by `by`: the same name and key (so the same subject key
    identifier), signed by the other CA. A server sending its leaf of `subject` followed by this
    certificate verifies against either CA alone (a CA rotation's tracker, docs/security.md).
    `subject_cn` is the CN `subject` was made with."""
    o = Path(out)
    o.parent.mkdir(parents=True, exist_ok=True)
    _sign(by, _csr(subject.key, subject_cn, o.with_suffix(".csr")), o, CA_EXT.format(pathlen=""),
          days, False)
    return o


def issue(ca: CA, directory: str | Path, cn: str, *, dns: Sequence[str] = (),
          uris: Sequence[str] = (), ips: Sequence[str] = (), days: float = 7,
          expired: bool = False, eku: str = "serverAuth, clientAuth") -> Cert:
    """A leaf certificate for `cn` signed by `ca`, with exactly the SANs given (none: no SAN
    extension). `expired`: valid from two days ago until yesterday. `eku`: extendedKeyUsage."""
    d = Path(directory)
    key = _key(d / "key.pem")
    cert = d / "cert.pem"
    sans = [f"DNS:{n}" for n in dns] + [f"URI:{u}" for u in uris] + [f"IP:{i}" for i in ips]
    ext = LEAF_EXT.format(eku=eku) + (f"subjectAltName = {', '.join(sans)}\n" if sans else "")
    _sign(ca, _csr(key, cn, d / "req.csr"), cert, ext, days, expired)
    return Cert(cert=cert, key=key)


def node_uri(name: str) -> str:
    """The identity a node's certificate carries (URI SAN)."""
    return f"shoal://node/{name}"


def issue_node(ca: CA, directory: str | Path, name: str, *, days: float = 7,
               expired: bool = False) -> Cert:
    """A node certificate in Shoal's profile: CN and URI SAN shoal://node/<name> carry the
    identity, DNS SAN `*` admits it to every SSL torrent whose root is `ca`."""
    return issue(ca, directory, name, dns=["*"], uris=[node_uri(name)], days=days,
                 expired=expired)


def dh_params(path: str | Path) -> Path:
    """RFC 7919 ffdhe2048 parameters (no generation: instant). libtorrent's
    `torrent_handle::set_ssl_certificate` loads a DH file and posts an error alert without one."""
    p = Path(path)
    _openssl(["genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", "group:ffdhe2048", "-out",
              str(p)], f"dh params {p}")
    return p


def text(cert: Cert | Path) -> str:
    """`openssl x509 -text` of a certificate, for failure messages."""
    path = cert.cert if isinstance(cert, Cert) else Path(cert)
    return _openssl(["x509", "-in", str(path), "-noout", "-text"], f"x509 -text {path}")


def issue_node_at(ca: CA, directory: str | Path, name: str, ips: Sequence[str] = (), *,
                  days: float = 30) -> Cert:
    """A node certificate (issue_node's profile) that also names the node's addresses (IP SANs):
    what its metrics listener serves with TLS."""
    return issue(ca, directory, name, dns=["*"], uris=[node_uri(name)], ips=ips, days=days)


def _host_sans(hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """Host names and IPs of a server's URLs as (DNS SANs, IP SANs)."""
    import ipaddress
    dns, ips = [], []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            ips.append(h)
        except ValueError:
            dns.append(h)
    return dns, ips


@dataclass(frozen=True)
class TLSParty:
    """One party's TLS files: the cluster CA it trusts and its own certificate. What a daemon's
    `tls` config section takes, and what a test presents as a client (curl, urllib)."""

    ca: Path
    cert: Cert

    def section(self, **over: object) -> dict:
        """A daemon's `tls:` config section for this party."""
        return {"enabled": True, "ca_file": str(self.ca), "cert_file": str(self.cert.cert),
                "key_file": str(self.cert.key), "reload_interval": "1s", **over}

    def curl_args(self) -> list[str]:
        return ["--cacert", str(self.ca), "--cert", str(self.cert.cert), "--key", str(self.cert.key)]

    def ssl_context(self):
        import ssl
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.cert.cert), str(self.cert.key))
        return ctx


class ClusterPKI:
    """A cluster CA and the certificates of every party in docs/security.md's profile, made once
    per cluster (or test class) in `directory`; each party's certificate is issued on first use.

        pki = ClusterPKI(tmp / "pki")
        proxy = pki.registry_proxy(["10.0.0.2"])   # URI shoal://registry-proxy, DNS *, IP SAN
        node = pki.node("node1", ["10.0.0.3"])     # URI shoal://node/node1, DNS *, IP SAN
        op = pki.operator()                        # URI shoal://operator/test (client only)
    """

    # Leaves last 30 days, past the daemons' default expiry_warning (14 days): no warning at start.
    DAYS = 30

    def __init__(self, directory: str | Path, cn: str = "Shoal test cluster CA"):
        self.dir = Path(directory)
        self.ca = make_ca(self.dir / "ca", cn, days=2 * self.DAYS)
        self._parties: dict[str, TLSParty] = {}

    def _party(self, key: str, make) -> TLSParty:
        if key not in self._parties:
            self._parties[key] = TLSParty(self.ca.cert, make(self.dir / key.replace("/", "_")))
        return self._parties[key]

    def node(self, name: str, ips: Sequence[str] = ()) -> TLSParty:
        return self._party(f"node/{name}", lambda d: issue_node_at(self.ca, d, name, ips, days=self.DAYS))

    def registry_proxy(self, hosts: Sequence[str]) -> TLSParty:
        dns, ips = _host_sans(hosts)
        return self._party("registry-proxy", lambda d: issue(
            self.ca, d, "shoal-registry-proxy", dns=["*", *dns], uris=["shoal://registry-proxy"], ips=ips,
            days=self.DAYS))

    def scheduler(self, hosts: Sequence[str], replica: str = "s1") -> TLSParty:
        dns, ips = _host_sans(hosts)
        return self._party(f"scheduler/{replica}", lambda d: issue(
            self.ca, d, f"shoal-scheduler-{replica}", dns=dns, uris=[f"shoal://scheduler/{replica}"], ips=ips,
            days=self.DAYS))

    def redis(self, hosts: Sequence[str]) -> TLSParty:
        """Redis and its Sentinels (server and client: replication and Sentinel's own
        connections present it too): URI shoal://redis, a SAN for each of its hosts."""
        dns, ips = _host_sans(hosts)
        return self._party("redis", lambda d: issue(
            self.ca, d, "shoal-redis", dns=dns, uris=["shoal://redis"], ips=ips, days=self.DAYS))

    def operator(self, user: str = "test") -> TLSParty:
        return self._party(f"operator/{user}", lambda d: issue(
            self.ca, d, f"shoal-operator-{user}", uris=[f"shoal://operator/{user}"], eku="clientAuth",
            days=self.DAYS))

    def monitor(self, name: str = "prometheus") -> TLSParty:
        """A scraper's certificate: the cluster CA's, with no shoal:// URI, so no role — what
        docs/security.md gives Prometheus: /metrics and /healthz on every daemon, nothing else."""
        return self._party(f"monitor/{name}", lambda d: issue(
            self.ca, d, f"shoal-monitor-{name}", eku="clientAuth", days=self.DAYS))
