#!/usr/bin/env python3
"""A misbehaving BitTorrent peer for peerd's bad-input tests (standard library only, BEP 3).

It claims to be a complete seed of one torrent: it announces itself to the tracker with left=0,
accepts connections (and dials the peers the tracker hands it), answers the 68-byte handshake,
sends a full bitfield, unchokes, and answers every request with the wrong bytes:

  garbage  random bytes of the requested length
  wrong    real bytes of the object, taken from the next piece (valid data, wrong place)
  slow     the right bytes, one block every --block-delay seconds (a peer on a crowded link)

--withhold N leaves piece N out of the bitfield and never answers requests for it (the only copy
of a piece stuck elsewhere).

It prints one JSON line per event to stdout ({"event": "block", ...}) so a test can count what it
sent. Run it as a script (inside a node's network namespace):

  bt_fake_peer.py --torrent T --listen IP:PORT --announce URL --mode garbage [--object FILE]
                  [--block-delay S] [--withhold N]

The module also has the bencode and wire helpers tests use to talk BitTorrent themselves.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request

PSTR = b"BitTorrent protocol"
CHOKE, UNCHOKE, INTERESTED, NOT_INTERESTED, HAVE, BITFIELD, REQUEST, PIECE, CANCEL = range(9)


# --- bencode -----------------------------------------------------------------------------------

def bdecode(data: bytes, i: int = 0):
    """Decodes one value at data[i:]; returns (value, end). Dicts keep bytes keys."""
    c = data[i:i + 1]
    if c == b"i":
        end = data.index(b"e", i)
        return int(data[i + 1:end]), end + 1
    if c == b"l":
        out, i = [], i + 1
        while data[i:i + 1] != b"e":
            v, i = bdecode(data, i)
            out.append(v)
        return out, i + 1
    if c == b"d":
        out, i = {}, i + 1
        while data[i:i + 1] != b"e":
            k, i = bdecode(data, i)
            v, i = bdecode(data, i)
            out[k] = v
        return out, i + 1
    if c.isdigit():
        colon = data.index(b":", i)
        n = int(data[i:colon])
        return data[colon + 1:colon + 1 + n], colon + 1 + n
    raise ValueError(f"bad bencode at {i}: {data[i:i + 8]!r}")


def bencode(v) -> bytes:
    if isinstance(v, int):
        return b"i%de" % v
    if isinstance(v, str):
        v = v.encode()
    if isinstance(v, bytes):
        return b"%d:%s" % (len(v), v)
    if isinstance(v, list):
        return b"l" + b"".join(bencode(x) for x in v) + b"e"
    if isinstance(v, dict):
        items = sorted((k.encode() if isinstance(k, str) else k, x) for k, x in v.items())
        return b"d" + b"".join(bencode(k) + bencode(x) for k, x in items) + b"e"
    raise TypeError(type(v))


def piece_size_for(size: int) -> int:
    """Shoal's piece-size rule (common/metainfo.h): ~1024 pieces, 64 KiB to 4 MiB."""
    p = 64 << 10
    while p < size // 1024 and p < (4 << 20):
        p <<= 1
    return p


def make_torrent(data: bytes, trackers: list[str] = (), name: str | None = None) -> bytes:
    """The .torrent registry-proxy would serve for `data` (same info dict, same info-hash).
    `name` (a digest's hex) replaces the name: a poisoned metainfo whose piece hashes describe
    `data` while it claims to be another object."""
    ps = piece_size_for(len(data))
    pieces = b"".join(hashlib.sha1(data[i:i + ps]).digest() for i in range(0, len(data), ps))
    info = {"length": len(data), "name": name or hashlib.sha256(data).hexdigest(), "piece length": ps,
            "pieces": pieces, "private": 1}
    top = {"created by": "shoal-test", "info": info}
    if trackers:
        top["announce"] = trackers[0]
        top["announce-list"] = [list(trackers)]
    return bencode(top)


def info_span(torrent: bytes) -> bytes:
    """The raw bytes of the info dict (its SHA-1 is the info-hash)."""
    top, _ = bdecode(torrent)
    assert isinstance(top, dict) and b"info" in top
    # Find the info dict's exact byte span by walking the top-level dict.
    i = 1
    while torrent[i:i + 1] != b"e":
        k, i = bdecode(torrent, i)
        start = i
        _, i = bdecode(torrent, i)
        if k == b"info":
            return torrent[start:i]
    raise ValueError("no info dict")


class Torrent:
    def __init__(self, data: bytes):
        self.raw = data
        top, _ = bdecode(data)
        info = top[b"info"]
        self.info_hash = hashlib.sha1(info_span(data)).digest()
        self.piece_size = info[b"piece length"]
        self.length = info[b"length"]
        self.pieces = [info[b"pieces"][i:i + 20] for i in range(0, len(info[b"pieces"]), 20)]
        self.name = info[b"name"].decode()

    @property
    def piece_count(self) -> int:
        return len(self.pieces)

    def piece_length(self, i: int) -> int:
        return min(self.piece_size, self.length - i * self.piece_size)


# --- wire --------------------------------------------------------------------------------------

def handshake(info_hash: bytes, peer_id: bytes) -> bytes:
    return bytes([len(PSTR)]) + PSTR + bytes(8) + info_hash + peer_id


def msg(mid: int, payload: bytes = b"") -> bytes:
    return struct.pack(">IB", 1 + len(payload), mid) + payload


def bitfield(n: int) -> bytes:
    b = bytearray((n + 7) // 8)
    for i in range(n):
        b[i // 8] |= 0x80 >> (i % 8)
    return bytes(b)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return buf


def announce_url(base: str, info_hash: bytes, peer_id: bytes, port: int, *, left: int, ip: str | None,
                 event: str = "started", node: str = "evil") -> str:
    q = {"info_hash": info_hash, "peer_id": peer_id, "port": str(port), "uploaded": "0", "downloaded": "0",
         "left": str(left), "event": event, "compact": "1", "node": node, "role": "peer"}
    if ip:
        q["ip"] = ip
    sep = "&" if "?" in base else "?"
    return base + sep + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)


def compact_peers(blob: bytes) -> list[tuple[str, int]]:
    out = []
    for i in range(0, len(blob) - len(blob) % 6, 6):
        out.append((socket.inet_ntoa(blob[i:i + 4]), struct.unpack(">H", blob[i + 4:i + 6])[0]))
    return out


# --- the fake seed -----------------------------------------------------------------------------

class FakeSeed:
    def __init__(self, t: Torrent, mode: str, object_path: str | None, block_delay: float = 1.0,
                 withhold: int | None = None):
        self.t, self.mode, self.block_delay, self.withhold = t, mode, block_delay, withhold
        self.data = open(object_path, "rb").read() if object_path else None
        if mode in ("wrong", "slow") and self.data is None:
            raise SystemExit(f"--mode {mode} needs --object")
        self.peer_id = b"-FK0001-" + os.urandom(6).hex().encode()[:12]
        self.lock = threading.Lock()
        self.connected: set[tuple[str, int]] = set()

    def emit(self, **kv):
        with self.lock:
            print(json.dumps(kv), flush=True)

    def block(self, index: int, begin: int, length: int) -> bytes:
        if self.mode == "garbage":
            return os.urandom(length)
        src = index if self.mode == "slow" else (index + 1) % self.t.piece_count
        off = src * self.t.piece_size + begin
        chunk = self.data[off:off + length]
        return chunk + bytes(length - len(chunk))

    def serve(self, s: socket.socket, addr, outgoing: bool):
        s.settimeout(60)
        try:
            if outgoing:
                s.sendall(handshake(self.t.info_hash, self.peer_id))
            hs = recv_exact(s, 68)
            if hs[0] != 19 or hs[1:20] != PSTR:
                self.emit(event="bad_handshake", peer=str(addr))
                return
            if hs[28:48] != self.t.info_hash:
                self.emit(event="unknown_info_hash", peer=str(addr))
                return
            if not outgoing:
                s.sendall(handshake(self.t.info_hash, self.peer_id))
            bits = bytearray(bitfield(self.t.piece_count))
            if self.withhold is not None and 0 <= self.withhold < self.t.piece_count:
                bits[self.withhold // 8] &= ~(0x80 >> (self.withhold % 8)) & 0xFF
            s.sendall(msg(BITFIELD, bytes(bits)) + msg(UNCHOKE))
            self.emit(event="connected", peer=str(addr), peer_id=hs[48:68].decode(errors="replace"),
                      outgoing=outgoing)
            while True:
                (n,) = struct.unpack(">I", recv_exact(s, 4))
                if n == 0:
                    continue
                body = recv_exact(s, n)
                mid = body[0]
                if mid == INTERESTED:
                    s.sendall(msg(UNCHOKE))
                elif mid == REQUEST and len(body) == 13:
                    index, begin, length = struct.unpack(">III", body[1:])
                    if index >= self.t.piece_count or length > (1 << 17) or index == self.withhold:
                        continue
                    s.sendall(msg(PIECE, struct.pack(">II", index, begin) + self.block(index, begin, length)))
                    self.emit(event="block", piece=index, begin=begin, length=length, at=time.time())
                    if self.mode == "slow":
                        time.sleep(self.block_delay)  # the requests queue up in the socket meanwhile
        except (OSError, ConnectionError, struct.error) as e:
            self.emit(event="closed", peer=str(addr), error=str(e))
        finally:
            s.close()

    def dial(self, host: str, port: int):
        key = (host, port)
        with self.lock:
            if key in self.connected:
                return
            self.connected.add(key)
        try:
            s = socket.create_connection(key, timeout=5)
        except OSError as e:
            self.emit(event="dial_failed", peer=f"{host}:{port}", error=str(e))
            with self.lock:
                self.connected.discard(key)
            return
        self.serve(s, key, True)
        with self.lock:
            self.connected.discard(key)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--torrent", required=True, help=".torrent file of the object")
    ap.add_argument("--listen", required=True, help="IP:PORT to accept peers on")
    ap.add_argument("--announce", required=True, help="tracker announce URL (with ?node=... if wanted)")
    ap.add_argument("--mode", choices=("garbage", "wrong", "slow"), default="garbage")
    ap.add_argument("--object", help="the object's real bytes (for --mode wrong and slow)")
    ap.add_argument("--block-delay", type=float, default=1.0, help="seconds between blocks (--mode slow)")
    ap.add_argument("--withhold", type=int, help="a piece never offered nor sent")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between announces")
    args = ap.parse_args()
    t = Torrent(open(args.torrent, "rb").read())
    seed = FakeSeed(t, args.mode, args.object, args.block_delay, args.withhold)
    host, port = args.listen.rsplit(":", 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(64)
    seed.emit(event="listening", listen=args.listen, info_hash=t.info_hash.hex(), pieces=t.piece_count)

    def accept_loop():
        while True:
            c, addr = ls.accept()
            threading.Thread(target=seed.serve, args=(c, addr, False), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    # Announce as a complete seed and dial whoever the tracker hands out (bounded by the test's
    # lifetime: the fixture kills this process at cleanup).
    while True:
        url = announce_url(args.announce, t.info_hash, seed.peer_id, int(port), left=0, ip=host)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                reply, _ = bdecode(r.read())
            peers = compact_peers(reply.get(b"peers", b"")) if isinstance(reply, dict) else []
            seed.emit(event="announced", peers=[f"{h}:{p}" for h, p in peers])
            for h, p in peers:
                threading.Thread(target=seed.dial, args=(h, p), daemon=True).start()
        except (OSError, ValueError) as e:
            seed.emit(event="announce_failed", error=str(e))
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
