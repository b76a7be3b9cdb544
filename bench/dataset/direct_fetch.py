#!/usr/bin/env python3
"""The benchmark's baseline: one node downloading a whole dataset straight from its S3 origin,
`--parallel` objects at a time, each written to a file (as a training job copying its data would),
with SigV4-signed requests (python standard library only). Prints one JSON line with the
seconds, objects and bytes.

    direct_fetch.py ENDPOINT BUCKET PREFIX OUTDIR [--parallel 8] [--region us-east-1]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import hmac
import http.client
import json
import os
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

ACCESS, SECRET = os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER"), os.environ.get("AWS_SECRET_ACCESS_KEY", "S3RVER")
EMPTY = hashlib.sha256(b"").hexdigest()


def sign(method: str, host: str, path: str, query: dict[str, str], region: str) -> dict[str, str]:
    now = datetime.datetime.now(datetime.timezone.utc)
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    q = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                 for k, v in sorted(query.items()))
    headers = {"host": host, "x-amz-content-sha256": EMPTY, "x-amz-date": amz}
    signed = ";".join(sorted(headers))
    canon = "\n".join([method, urllib.parse.quote(path, safe="/-_.~"), q,
                       "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, EMPTY])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canon.encode()).hexdigest()])
    k = ("AWS4" + SECRET).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={signed}, Signature={sig}"
    return headers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("out")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--region", default="us-east-1")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.endpoint)
    host = u.netloc
    t0 = time.monotonic()
    keys: list[tuple[str, int]] = []
    token = ""
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    while True:
        q = {"list-type": "2", "max-keys": "1000", "prefix": a.prefix}
        if token:
            q["continuation-token"] = token
        path = f"/{a.bucket}"
        conn.request("GET", path + "?" + urllib.parse.urlencode(q), headers=sign("GET", host, path, q, a.region))
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise SystemExit(f"list: HTTP {r.status}: {body[:200]!r}")
        root = ET.fromstring(body)
        ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        for c in root.findall(f"{ns}Contents"):
            keys.append((c.find(f"{ns}Key").text, int(c.find(f"{ns}Size").text)))
        if root.findtext(f"{ns}IsTruncated") != "true":
            break
        token = root.findtext(f"{ns}NextContinuationToken")
    local = threading.local()
    total = 0
    lock = threading.Lock()

    def get(item: tuple[str, int]) -> None:
        nonlocal total
        key, _ = item
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        path = f"/{a.bucket}/{key}"
        local.conn.request("GET", urllib.parse.quote(path), headers=sign("GET", host, path, {}, a.region))
        r = local.conn.getresponse()
        dst = os.path.join(a.out, key)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        n = 0
        with open(dst, "wb") as f:
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                f.write(chunk)
                n += len(chunk)
        if r.status != 200:
            raise RuntimeError(f"GET {key}: HTTP {r.status}")
        with lock:
            total += n

    with concurrent.futures.ThreadPoolExecutor(a.parallel) as ex:
        list(ex.map(get, keys))
    print(json.dumps({"seconds": time.monotonic() - t0, "objects": len(keys), "bytes": total}))


if __name__ == "__main__":
    main()
