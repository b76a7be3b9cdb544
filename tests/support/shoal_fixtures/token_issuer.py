"""A token server for the Docker/distribution Bearer token protocol, for token-auth registries.

Protocol (distribution docs/spec/auth/token.md): a client that got `401` with
`WWW-Authenticate: Bearer realm=…,service=…,scope=…` asks the realm
`GET /token?service=S&scope=repository:NAME:pull[,push]` (scope may repeat; Basic credentials are
optional) and gets `{"token", "access_token", "expires_in", "issued_at"}`. The OAuth2 form
(`POST /token`, grant_type=password) that containerd tries first when it has credentials is
answered too. Wrong credentials get 401; a valid or anonymous request always gets a token, whose
`access` claim holds only what the rules grant (the registry then refuses what is missing, as
Docker Hub does).

Signing: RS256 computed with the standard library (PKCS#1 v1.5 over SHA-256, `pow(m, d, n)`) from
an RSA key made by the `openssl` CLI, plus a self-signed certificate of that key that the
registry loads as `rootcertbundle`. distribution 2.8 (registry/auth/token/token.go,
VerifySigningKey) finds the signing key from the JWT header in this order: `x5c` (certificate
chain verified against rootcertbundle), `jwk`, `kid`; a `kid` must be the libtrust fingerprint of
a public key in rootcertbundle: SHA-256 of the DER SubjectPublicKeyInfo, first 30 bytes, base32
without padding, in 12 colon-separated groups of 4. Both `kid` (default) and `x5c` are supported
here and both were verified against docker-registry 2.8.2. Claims checked by the registry: `iss`
(= config issuer), `aud` (= config service), `exp`/`nbf` (60 s leeway), and `access`.

Lifecycle: `TokenIssuer(dir, …)`, `start()` (serves on a free 127.0.0.1 port from a daemon thread),
`stop()`. The issued-token log and the counters are guarded by a lock and safe to read from the
test thread while the server thread appends.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Sequence

from .httpstub import StubServer
from .procs import FixtureError, run

ANONYMOUS = ""


@dataclass(frozen=True)
class Rule:
    """Grants `actions` on repositories matching the glob `repo` to `subject`.

    subject: a user name, "*" (anyone, anonymous included) or "+" (any authenticated user).
    """

    subject: str
    repo: str
    actions: tuple[str, ...] = ("pull",)

    def applies(self, user: str, repo: str) -> bool:
        if self.subject == "*" or (self.subject == "+" and user != ANONYMOUS) or \
                self.subject == user:
            return fnmatch.fnmatchcase(repo, self.repo)
        return False


@dataclass
class IssuedToken:
    """One answered token request: who asked, for what, what was granted (or why refused)."""

    time: float
    user: str
    service: str
    requested: list[str]
    granted: list[dict]
    status: int
    method: str = "GET"
    jwt: str = field(default="", repr=False)


class RsaKey:
    """An RSA private key made by `openssl genpkey`, able to sign RS256 without the CLI."""

    def __init__(self, key_pem: Path, cert_pem: Path) -> None:
        self.key_pem = key_pem
        self.cert_pem = cert_pem
        # run() returns text, so DER output goes through files to keep the bytes intact.
        der_path = key_pem.with_suffix(".der")
        run(["openssl", "pkey", "-in", key_pem, "-outform", "DER", "-out", der_path])
        der = der_path.read_bytes()
        self.n, self.e, self.d = _parse_rsa_private_key(der)
        spki = key_pem.with_suffix(".spki.der")
        run(["openssl", "pkey", "-in", key_pem, "-pubout", "-outform", "DER", "-out", spki])
        self.spki_der = spki.read_bytes()
        cert_der = cert_pem.with_suffix(".der")
        run(["openssl", "x509", "-in", cert_pem, "-outform", "DER", "-out", cert_der])
        self.cert_der = cert_der.read_bytes()

    @classmethod
    def generate(cls, directory: Path, cn: str = "shoal-test-token-issuer") -> "RsaKey":
        key = directory / "token-key.pem"
        cert = directory / "token-cert.pem"
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", cert, "-days", "2", "-subj", f"/CN={cn}"], what="openssl req -x509",
            timeout=60)
        return cls(key, cert)

    @property
    def libtrust_kid(self) -> str:
        """The key ID distribution 2.8 expects in the JWT `kid` header (libtrust fingerprint)."""
        b32 = base64.b32encode(hashlib.sha256(self.spki_der).digest()[:30]).decode()
        b32 = b32.rstrip("=")
        return ":".join(b32[i:i + 4] for i in range(0, len(b32), 4))

    def sign_rs256(self, data: bytes) -> bytes:
        k = (self.n.bit_length() + 7) // 8
        digest_info = bytes.fromhex("3031300d060960864801650304020105000420")
        t = digest_info + hashlib.sha256(data).digest()
        em = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
        return pow(int.from_bytes(em, "big"), self.d, self.n).to_bytes(k, "big")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_jwt(token: str) -> tuple[dict, dict]:
    """(header, claims) of a JWT, without verifying it (for assertions in tests)."""
    h, c, _ = token.split(".")
    return json.loads(b64url_decode(h)), json.loads(b64url_decode(c))


class TokenIssuer:
    """The token server. See the module comment for protocol, signing and lifecycle."""

    def __init__(self, directory: str | os.PathLike, *, service: str = "shoal-test-registry",
                 issuer: str = "shoal-test-issuer", users: dict[str, str] | None = None,
                 rules: Sequence[Rule] = (), expires_in: int = 300, key_header: str = "kid",
                 host: str = "127.0.0.1") -> None:
        if key_header not in ("kid", "x5c"):
            raise ValueError("key_header must be 'kid' or 'x5c'")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.service = service
        self.issuer = issuer
        self.users = dict(users or {})
        self.rules = list(rules)
        self.expires_in = expires_in
        self.key_header = key_header
        self.host = host
        self.key = RsaKey.generate(self.dir)
        self._lock = threading.Lock()
        self._log: list[IssuedToken] = []
        # Fault injection: when set, every request is answered with this HTTP status.
        self.fail_with: int | None = None
        self._server = StubServer(self._handle, methods=("GET", "POST"), host=host, name="token-issuer",
                                  log=self._access_log)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "TokenIssuer":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def _access_log(self, line: str) -> None:
        with open(self.dir / "token-issuer.log", "a") as f:
            f.write(line + "\n")

    def __enter__(self) -> "TokenIssuer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if not self._server.running:
            raise FixtureError("token issuer not started")
        return self._server.port

    @property
    def realm(self) -> str:
        return f"http://{self.host}:{self.port}/token"

    @property
    def rootcertbundle(self) -> Path:
        return self.key.cert_pem

    # -- log -------------------------------------------------------------------------------------

    @property
    def issued(self) -> list[IssuedToken]:
        """A copy of the log of answered requests (refusals included, with their status)."""
        with self._lock:
            return list(self._log)

    def diagnostics(self) -> str:
        lines = [f"{t.method} user={t.user or '(anonymous)'} status={t.status} "
                 f"requested={t.requested} granted={t.granted}" for t in self.issued[-20:]]
        return "token issuer: " + ("\n".join(lines) or "(no requests)")

    # -- tokens ----------------------------------------------------------------------------------

    def grant(self, user: str, scopes: Sequence[str]) -> list[dict]:
        """The `access` claim for `user` asking for `scopes` ("repository:NAME:a,b")."""
        access: list[dict] = []
        for scope in scopes:
            parts = scope.split(":")
            if len(parts) < 3:
                continue
            kind, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1].split(",")
            if kind != "repository":
                continue
            allowed = [a for a in actions
                       if any(a in r.actions or "*" in r.actions
                              for r in self.rules if r.applies(user, name))]
            if allowed:
                access.append({"type": "repository", "name": name, "actions": allowed})
        return access

    def make_token(self, user: str, access: list[dict], *, audience: str | None = None,
                   issuer: str | None = None, expires_in: int | None = None) -> str:
        """A signed JWT. Overrides let tests make tokens the registry must refuse."""
        now = int(time.time())
        header: dict = {"typ": "JWT", "alg": "RS256"}
        if self.key_header == "kid":
            header["kid"] = self.key.libtrust_kid
        else:
            header["x5c"] = [base64.b64encode(self.key.cert_der).decode()]
        claims = {
            "iss": issuer if issuer is not None else self.issuer,
            "sub": user,
            "aud": audience if audience is not None else self.service,
            "exp": now + (expires_in if expires_in is not None else self.expires_in),
            "nbf": now - 1,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing_input = (b64url(json.dumps(header, separators=(",", ":")).encode()) + "." +
                         b64url(json.dumps(claims, separators=(",", ":")).encode()))
        return signing_input + "." + b64url(self.key.sign_rs256(signing_input.encode()))

    # -- HTTP ------------------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(req.path)
        params = urllib.parse.parse_qs(url.query)
        body = b""
        if method == "POST":
            length = int(req.headers.get("Content-Length") or 0)
            body = req.rfile.read(length) if length > 0 else b""
            for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items():
                params.setdefault(k, []).extend(v)
        if url.path != "/token":
            self._reply(req, 404, {"errors": [{"code": "NOT_FOUND", "message": url.path}]})
            return
        service = (params.get("service") or [""])[0]
        scopes = [s for v in params.get("scope", []) for s in v.split(" ") if s]
        if self.fail_with is not None:
            self._record(method, "", service, scopes, [], self.fail_with)
            self._reply(req, self.fail_with, {"errors": [{"code": "UNAVAILABLE",
                                                          "message": "injected failure"}]})
            return
        user, password = self._credentials(req, params, method)
        if user != ANONYMOUS and self.users.get(user) != password:
            self._record(method, user, service, scopes, [], 401)
            self._reply(req, 401, {"errors": [{"code": "UNAUTHORIZED",
                                               "message": "bad credentials"}]},
                        {"WWW-Authenticate": 'Basic realm="shoal-test-token"'})
            return
        if service != self.service:
            self._record(method, user, service, scopes, [], 400)
            self._reply(req, 400, {"errors": [{"code": "INVALID_SERVICE",
                                               "message": f"unknown service {service!r}"}]})
            return
        access = self.grant(user, scopes)
        token = self.make_token(user, access)
        self._record(method, user, service, scopes, access, 200, token)
        issued_at = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        self._reply(req, 200, {"token": token, "access_token": token,
                               "expires_in": self.expires_in, "issued_at": issued_at})

    def _credentials(self, req: BaseHTTPRequestHandler, params: dict,
                     method: str) -> tuple[str, str]:
        auth = req.headers.get("Authorization", "")
        if auth.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
                return user, password
            except (ValueError, UnicodeDecodeError):
                return "\0invalid", ""
        if method == "POST" and (params.get("grant_type") or [""])[0] == "password":
            return (params.get("username") or [""])[0], (params.get("password") or [""])[0]
        return ANONYMOUS, ""

    def _record(self, method: str, user: str, service: str, scopes: list[str],
                granted: list[dict], status: int, token: str = "") -> None:
        with self._lock:
            self._log.append(IssuedToken(time.time(), user, service, scopes, granted, status,
                                         method, token))

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, status: int, obj: dict,
               headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(data)


# -- minimal DER reader for the RSA private key ---------------------------------------------------

def _der_read(buf: bytes, pos: int) -> tuple[int, bytes, int]:
    """Reads one TLV at `pos`: (tag, value, next position)."""
    tag = buf[pos]
    length = buf[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(buf[pos:pos + n], "big")
        pos += n
    return tag, buf[pos:pos + length], pos + length


def _der_sequence(value: bytes) -> list[tuple[int, bytes]]:
    items, pos = [], 0
    while pos < len(value):
        tag, v, pos = _der_read(value, pos)
        items.append((tag, v))
    return items


def _parse_rsa_private_key(der: bytes) -> tuple[int, int, int]:
    """(n, e, d) from a PKCS#8 PrivateKeyInfo or a PKCS#1 RSAPrivateKey, DER-encoded."""
    tag, outer, _ = _der_read(der, 0)
    if tag != 0x30:
        raise FixtureError("RSA key: not a DER SEQUENCE")
    items = _der_sequence(outer)
    if len(items) >= 3 and items[1][0] == 0x30 and items[2][0] == 0x04:
        # PKCS#8: version, AlgorithmIdentifier, OCTET STRING holding the PKCS#1 key.
        return _parse_rsa_private_key(items[2][1])
    ints = [int.from_bytes(v, "big") for t, v in items if t == 0x02]
    if len(ints) < 4:
        raise FixtureError("RSA key: unexpected PKCS#1 structure")
    return ints[1], ints[2], ints[3]
