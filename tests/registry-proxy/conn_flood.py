"""Half-open HTTP connections, as an attacker holds them (conn_shed_test.py runs this).

    python3 conn_flood.py HOST PORT --sources A,B,... --per N [--hold S]

Opens N connections from each source address (round-robin over the sources, so they fill up
together), sends each the start of a request whose header never ends
(`GET /v2/ HTTP/1.1\\r\\nX-Slow: `), prints one JSON line {"opened", "failed", "seconds"}, then
holds the connections until stdin closes or S seconds pass, and prints a second line
{"closed_by_server"}: how many of the opened ones the server had closed by then. Every step is
bounded: connects time out after 1 s and the whole opening phase after 20 s. Runs in a
subprocess so it can run inside a network namespace (`ip netns exec`).
"""

from __future__ import annotations

import argparse
import json
import resource
import select
import socket
import sys
import time

PARTIAL = b"GET /v2/ HTTP/1.1\r\nHost: flood\r\nX-Slow: "


def open_all(host: str, port: int, sources: list[str], per: int) -> tuple[list, int, float]:
    t0 = time.monotonic()
    socks, failed = [], 0
    for _ in range(per):
        for src in sources:
            if time.monotonic() - t0 > 20:
                return socks, failed, time.monotonic() - t0
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                s.bind((src, 0))
                s.connect((host, port))
                s.send(PARTIAL)
                socks.append(s)
            except OSError:
                failed += 1
                s.close()
    return socks, failed, time.monotonic() - t0


def closed_by_server(socks: list) -> int:
    n = 0
    for s in socks:
        try:
            s.setblocking(False)
            if s.recv(1) == b"":
                n += 1
        except BlockingIOError:
            pass  # still open
        except OSError:
            n += 1  # reset
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--sources", required=True)
    ap.add_argument("--per", type=int, required=True)
    ap.add_argument("--hold", type=float, default=30)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sources = a.sources.split(",")
    socks, failed, secs = open_all(a.host, a.port, sources, a.per)
    print(json.dumps({"opened": len(socks), "failed": failed, "seconds": round(secs, 2)}),
          flush=True)
    # Hold until the test closes stdin (or the bound passes).
    select.select([sys.stdin], [], [], a.hold)
    print(json.dumps({"closed_by_server": closed_by_server(socks)}), flush=True)
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
