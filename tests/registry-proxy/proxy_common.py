"""Helpers shared by the registry-proxy integration tests (tests/registry-proxy/*_test.py).

Importing this module puts tests/support on sys.path, so each test script starts with
`import proxy_common` and then imports the fixtures. Nothing here starts a process.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)

from shoal_fixtures.procs import FixtureError  # noqa: E402

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ALL_MANIFESTS = ", ".join([OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST])


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def error_code(body: bytes) -> str:
    """The first spec error code of a JSON error body; fails loudly on anything else."""
    try:
        doc = json.loads(body)
        return doc["errors"][0]["code"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise AssertionError(f"not a spec JSON error body: {body[:300]!r}") from None


def error_message(body: bytes) -> str:
    return json.loads(body)["errors"][0].get("message", "")


def raw_exchange(host: str, port: int, data: bytes, timeout: float = 10) -> tuple[bytes, bool]:
    """Sends raw bytes and reads until the server closes or `timeout`. Returns what came back
    and whether the server closed the connection (EOF or reset) within the timeout."""
    s = socket.create_connection((host, port), timeout=timeout)
    out = b""
    closed = False
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            except socket.timeout:
                break
            if not chunk:
                closed = True
                break
            out += chunk
    finally:
        s.close()
    return out, closed


def read_body_until_close(resp, limit: int | None = None) -> tuple[bytes, bool]:
    """Reads (the rest of) an http.client response body chunk by chunk. Returns (bytes,
    complete): complete is False when the connection ended before Content-Length bytes arrived
    (counting what the caller read before) or a chunked body was cut off."""
    got = bytearray()
    try:
        while True:
            chunk = resp.read1(1 << 20) if hasattr(resp, "read1") else resp.read(1 << 20)
            if not chunk:
                break
            got += chunk
            if limit is not None and len(got) >= limit:
                break
    except Exception:  # noqa: BLE001 - IncompleteRead, reset: the body was cut short
        return bytes(got), False
    # http.client counts down the bytes still owed under Content-Length.
    complete = resp.length is None or resp.length == 0
    return bytes(got), complete


__all__ = ["FixtureError", "sha256", "error_code", "error_message", "raw_exchange",
           "read_body_until_close", "OCI_MANIFEST", "OCI_INDEX", "DOCKER_MANIFEST",
           "DOCKER_LIST", "ALL_MANIFESTS"]


# -- bencode (BEP 3), for checking .torrent files -------------------------------------------------

def bdecode(data: bytes):
    """Decodes one bencoded value. Dicts come back as {key: value} with bytes keys, plus the raw
    encoded bytes of every dict value under `(key, "raw")` so a test can hash the info dict
    exactly as served. Raises ValueError on malformed input or trailing bytes."""
    value, end = _bdecode_at(data, 0)
    if end != len(data):
        raise ValueError(f"trailing bytes after offset {end}")
    return value


def _bdecode_at(data: bytes, i: int):
    c = data[i:i + 1]
    if c == b"i":
        end = data.index(b"e", i)
        return int(data[i + 1:end]), end + 1
    if c == b"l":
        out, i = [], i + 1
        while data[i:i + 1] != b"e":
            v, i = _bdecode_at(data, i)
            out.append(v)
        return out, i + 1
    if c == b"d":
        out, i = {}, i + 1
        last = None
        while data[i:i + 1] != b"e":
            k, i = _bdecode_at(data, i)
            if not isinstance(k, bytes) or (last is not None and k <= last):
                raise ValueError("dict keys must be byte strings in sorted order")
            last = k
            start = i
            v, i = _bdecode_at(data, i)
            out[k] = v
            out[(k, "raw")] = data[start:i]
        return out, i + 1
    if c.isdigit():
        colon = data.index(b":", i)
        n = int(data[i:colon])
        return data[colon + 1:colon + 1 + n], colon + 1 + n
    raise ValueError(f"bad bencode at offset {i}")


def piece_size_for(size: int) -> int:
    """common/metainfo.h's rule: a power of two aiming at ~1024 pieces, 64 KiB to 4 MiB."""
    p, target = 64 * 1024, size // 1024
    while p < target and p < 4 * 1024 * 1024:
        p <<= 1
    return p
