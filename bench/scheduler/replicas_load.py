"""The load generator of `bench/scheduler/run --replicas N` (bench/scheduler/replicas.py).

What it models, and how (docs/scheduler-bench.md, "Replicas"):

- `Universe`: the cluster's objects and each node's holdings, shaped like the C++ bench's
  scale.h: object j is on node j mod nodes, the rest of each node's `held` objects come from a
  Zipf(0.9) popularity, sizes log-uniform 100 MiB..200 GiB. The first objects are the real
  layers and configs of the benchmark's images (so the extender's scores are not all zero).
- `Node`: one fake peerd's heartbeat state (seq, epoch, whether the next message is a full list,
  its holdings, its reported health). A node is driven by one stream at a time (its lock).
- `Client`: one client stream with a keep-alive connection per scheduler replica, moving to the
  next replica on a refused or failed connection (or a 502/503/504) the way peerd and shoalctl do
  (docs/scheduler.md, "Clients fail over between scheduler replicas"): the replica that last
  answered first, a failed one last for 5 s. It records every *gap*: the time from a stream's
  first failed attempt to its next answer.
- `Stream`: a thread sending one kind of request at a fixed rate (heartbeats of its own share of
  the nodes, or extender prioritize / place dry-run decisions), recording latencies.

Python standard library only; threads (the GIL makes this one core at most: its own CPU is
reported beside the servers').
"""
from __future__ import annotations

import bisect
import hashlib
import http.client
import json
import math
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

MIB = 1 << 20
GIB = 1 << 30

# Exceptions that mean "this replica did not answer": move to the next one.
NET_ERRORS = (OSError, http.client.HTTPException, socket.timeout)
RETRY_STATUS = (502, 503, 504)
BACKOFF_S = 5.0  # a failed replica goes last this long (common/endpoints.h's scheduler_backoff)


def percentile(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


class Universe:
    """Objects and holdings (see the module docstring). `image_objects`: (digest, size) of the
    images' blobs, which become the most popular objects."""

    def __init__(self, nodes: int, objects: int, held: int, seed: int,
                 image_objects: list[tuple[str, int]]) -> None:
        rnd = random.Random(seed)
        self.rnd = rnd
        self.names = [f"n{i:05d}" for i in range(nodes)]
        objects = max(objects, len(image_objects))
        self.digests: list[str] = []
        self.sizes: list[int] = []
        for d, s in image_objects:
            self.digests.append(d)
            self.sizes.append(s)
        lo, hi = math.log(100 * MIB), math.log(200 * GIB)
        for i in range(len(image_objects), objects):
            self.digests.append("sha256:" + hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
            self.sizes.append(int(math.exp(rnd.uniform(lo, hi))))
        # One encoded object per digest, joined into messages without re-encoding.
        self.encoded = [json.dumps({"digest": d, "size": s, "info_hash": d[7:47]})
                        for d, s in zip(self.digests, self.sizes)]
        w = [1.0 / (k + 1) ** 0.9 for k in range(objects)]
        self.cum = []
        acc = 0.0
        for x in w:
            acc += x
            self.cum.append(acc)
        self.holdings: list[list[int]] = [[] for _ in range(nodes)]
        for j in range(objects):
            self.holdings[j % nodes].append(j)
        for i in range(nodes):
            h = self.holdings[i]
            have = set(h)
            tries = 0
            while len(h) < held and tries < 20 * held:
                o = self.zipf()
                tries += 1
                if o not in have:
                    have.add(o)
                    h.append(o)

    def zipf(self) -> int:
        return bisect.bisect_left(self.cum, self.rnd.random() * self.cum[-1])

    @property
    def holdings_total(self) -> int:
        return sum(len(h) for h in self.holdings)


@dataclass
class Node:
    """One fake peerd (see the module docstring)."""

    index: int
    name: str
    held: list[int]
    seq: int = 0
    epoch: str = ""
    full: bool = True
    health: str = "ok"
    acked_seq: int = 0           # highest seq answered 200 without Shoal-Stale
    acked_stale_seq: int = 0     # highest seq answered 200 with Shoal-Stale
    lock: threading.Lock = field(default_factory=threading.Lock)
    added: list[int] = field(default_factory=list)


class Gaps:
    """Failure episodes of all streams: (stream, first failure, next answer)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.episodes: list[dict[str, Any]] = []
        self.failed_attempts = 0

    def add(self, stream: str, start: float, end: float, attempts: int, what: str,
            cause: str = "") -> None:
        with self.lock:
            self.episodes.append({"stream": stream, "start": start, "end": end,
                                  "gap_s": end - start, "failed_attempts": attempts,
                                  "what": what, "cause": cause})
            self.failed_attempts += attempts

    def since(self, t0: float) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.episodes if e["start"] >= t0]


class Client:
    """One client stream's connections to every replica, with fail-over (module docstring).
    `timeout`: the longest wait for a connection or an answer (peerd's scheduler_timeout, 2 s).
    Used from one thread."""

    def __init__(self, name: str, urls: list[str], first: int, gaps: Gaps,
                 timeout: float = 2.0) -> None:
        self.name = name
        hosts = []
        for u in urls:
            hp = u.split("//", 1)[1]
            h, p = hp.rsplit(":", 1)
            hosts.append((h, int(p)))
        self.hosts = hosts
        self.order = list(range(first, len(hosts))) + list(range(first))
        self.failed_at = [0.0] * len(hosts)
        self.conns: dict[int, http.client.HTTPConnection] = {}
        self.timeout = timeout
        self.gaps = gaps
        self.stop: Callable[[], bool] = lambda: False

    def _conn(self, i: int) -> http.client.HTTPConnection:
        c = self.conns.get(i)
        if c is None:
            c = http.client.HTTPConnection(*self.hosts[i], timeout=self.timeout)
            self.conns[i] = c
        return c

    def _drop(self, i: int) -> None:
        c = self.conns.pop(i, None)
        if c is not None:
            c.close()

    def _candidates(self) -> list[int]:
        now = time.monotonic()
        fresh = [i for i in self.order if now - self.failed_at[i] >= BACKOFF_S]
        return fresh + [i for i in self.order if i not in fresh]

    def call(self, method: str, path: str, body: bytes | None, *, idempotent: bool = True,
             deadline_s: float = 30.0, what: str = "",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes, int]:
        """Sends until a replica answers (or `deadline_s`): (status, headers, body, replica).
        Not idempotent: retried on another replica only when the connection was refused (the
        request never reached a replica); otherwise the failure is returned as status 0."""
        first_fail = None
        cause = ""
        attempts = 0
        end = time.monotonic() + deadline_s
        while True:
            for i in self._candidates():
                c = self._conn(i)
                refused = False
                try:
                    if c.sock is None:
                        try:
                            c.connect()
                        except ConnectionRefusedError:
                            refused = True
                            raise
                        # http.client sends the headers and the body in two writes: with Nagle
                        # the body waits for the ACK of the headers, which the server delays up
                        # to 40 ms (every heartbeat took 44 ms at p50 on an idle machine).
                        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    h = dict(headers or {})
                    if body:
                        h["Content-Type"] = "application/json"
                    c.request(method, path, body=body, headers=h)
                    r = c.getresponse()
                    data = r.read()
                    status = r.status
                    headers = {k.lower(): v for k, v in r.getheaders()}
                    if r.will_close:
                        self._drop(i)
                    if status in RETRY_STATUS:
                        raise ConnectionError(f"status {status}")
                except NET_ERRORS as e:
                    self._drop(i)
                    attempts += 1
                    now = time.monotonic()
                    if first_fail is None:
                        first_fail = now
                        cause = f"{type(e).__name__}: {e}"[:120]
                    self.failed_at[i] = now
                    self.order.remove(i)
                    self.order.append(i)
                    if not idempotent and not refused:
                        self.gaps.add(self.name, first_fail, now, attempts, what + " (not retried)",
                                      cause)
                        return 0, {}, b"", i
                    continue
                # The answering replica goes first.
                self.order.remove(i)
                self.order.insert(0, i)
                if first_fail is not None:
                    self.gaps.add(self.name, first_fail, time.monotonic(), attempts, what, cause)
                return status, headers, data, i
            if time.monotonic() > end or self.stop():
                if first_fail is not None:
                    self.gaps.add(self.name, first_fail, time.monotonic(), attempts,
                                  what + " (gave up)", cause)
                return 0, {}, b"", -1
            time.sleep(0.05)

    def close(self) -> None:
        for i in list(self.conns):
            self._drop(i)


class Recorder:
    """Latencies and outcomes of one kind of request, from many streams."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lat: list[float] = []
        self.count = 0
        self.errors = 0
        self.stale = 0
        self.resync = 0
        self.statuses: dict[int, int] = {}

    def add(self, lat: float, status: int, stale: bool = False, resync: bool = False) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status in (200, 202):
                self.count += 1
                self.lat.append(lat)
            else:
                self.errors += 1
            self.stale += stale
            self.resync += resync

    def summary(self, wall: float | None = None) -> dict[str, Any]:
        with self.lock:
            lat = list(self.lat)
            out = {"count": self.count, "errors": self.errors, "stale_answers": self.stale,
                   "resyncs": self.resync,
                   "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                   "p50_ms": ms(percentile(lat, 50)), "p99_ms": ms(percentile(lat, 99)),
                   "max_ms": ms(max(lat) if lat else None)}
        if wall:
            out["per_s"] = round(self.count / wall, 1)
        return out


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 3)


class Cluster:
    """The fake nodes and the request bodies for one run (shared by every stream)."""

    def __init__(self, u: Universe, images: list[str], seed: int, gpus: int = 8) -> None:
        self.u = u
        self.nodes = [Node(i, n, list(u.holdings[i])) for i, n in enumerate(u.names)]
        self.images = images
        self.gpus = gpus
        self.rnd = random.Random(seed + 1)
        self.rnd_lock = threading.Lock()
        names = json.dumps(u.names)
        self.prioritize_bodies = []
        self.place_bodies = []
        for k in range(max(1, len(images))):
            pod_images = [images[k % len(images)], images[(k + 1) % len(images)]] if images else []
            pod = {"metadata": {"name": f"bench-{k}", "namespace": "default", "uid": f"u{k}",
                                "annotations": {}},
                   "spec": {"containers": [{"name": f"c{j}", "image": im,
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                                           for j, im in enumerate(pod_images)]}}
            self.prioritize_bodies.append(
                ('{"Pod": ' + json.dumps(pod) + ', "Nodes": null, "NodeNames": ' + names
                 + '}').encode())
            self.place_bodies.append(json.dumps({"images": pod_images, "gpus": 1, "nodes": 1,
                                                 "dry_run": True}).encode())

    def labels(self, n: Node) -> dict[str, str]:
        i = n.index
        return {"zone": f"z{i % 4}", "rack": f"r{i % 64}", "fabric": f"f{i // 500}",
                "gpu": "H100"}

    def body(self, n: Node) -> bytes:
        """The next heartbeat of `n` (caller holds n.lock): a full list or a delta of 3 added
        (Zipf) and 2 removed objects, with the next seq."""
        n.seq += 1
        head = {"schema": 2, "node": n.name, "bt_port": 10000 + n.index, "full": n.full,
                "seq": n.seq, "epoch": n.epoch, "health": n.health,
                "labels": self.labels(n), "gpus": [{"model": "H100", "count": self.gpus}]}
        if n.full:
            objs = n.held
            removed: list[str] = []
        else:
            with self.rnd_lock:
                removed_idx = []
                for _ in range(2):
                    if len(n.held) > 1:
                        k = self.rnd.randrange(len(n.held))
                        removed_idx.append(n.held[k])
                        n.held[k] = n.held[-1]
                        n.held.pop()
                have = set(n.held)
                objs = []
                for _ in range(6):
                    o = self.u.zipf()
                    if o not in have and o not in objs and o not in removed_idx:
                        objs.append(o)
                    if len(objs) == 3:
                        break
                n.held.extend(objs)
            removed = [self.u.digests[o] for o in removed_idx]
        head_s = json.dumps(head)[:-1]
        return (head_s + ', "objects": [' + ", ".join(self.u.encoded[o] for o in objs)
                + '], "removed": ' + json.dumps(removed) + '}').encode()

    def beat(self, client: Client, n: Node, rec: Recorder | None,
             frozen: Callable[[], bool] = lambda: False) -> bool:
        """One heartbeat of `n` through `client` (and, after `resync`, its full list at once,
        as peerd does). Returns whether it was answered 200."""
        with n.lock:
            if frozen():
                return False
            for _ in range(2):
                body = self.body(n)
                t0 = time.monotonic()
                status, headers, data, _ = client.call("POST", "/v1/heartbeat", body,
                                                       what="heartbeat")
                lat = time.monotonic() - t0
                stale = "shoal-stale" in headers
                resync = False
                if status == 200:
                    reply = json.loads(data)
                    n.epoch = reply.get("epoch", n.epoch)
                    resync = bool(reply.get("resync"))
                    if resync:
                        n.full = True
                    else:
                        n.full = False
                        if stale:
                            n.acked_stale_seq = max(n.acked_stale_seq, n.seq)
                        else:
                            n.acked_seq = max(n.acked_seq, n.seq)
                else:
                    n.full = True  # peerd sends its full list after any failed heartbeat
                if rec is not None:
                    rec.add(lat, status, stale, resync)
                if status != 200 or not resync:
                    return status == 200
            return False


class Stream(threading.Thread):
    """Sends `fn()` `rate` times a second until stopped (no catch-up burst when behind)."""

    def __init__(self, name: str, rate: float, fn: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.rate, self.fn = rate, fn
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        nxt = time.monotonic()
        try:
            while not self.halt.is_set():
                self.fn()
                if interval:
                    nxt += interval
                    now = time.monotonic()
                    if nxt > now:
                        self.halt.wait(nxt - now)
                    elif now - nxt > 1.0:
                        nxt = now
        except BaseException as e:  # noqa: BLE001 - reported by the driver
            self.error = e


def heartbeat_streams(cl: Cluster, urls: list[str], gaps: Gaps, rec: Recorder, streams: int,
                      rate: float, nodes: list[Node] | None = None,
                      frozen: Callable[[Node], bool] = lambda n: False) -> list[Stream]:
    """`streams` threads, each heartbeating its share of `nodes` round robin at rate/streams;
    stream k starts at replica k mod len(urls)."""
    nodes = cl.nodes if nodes is None else nodes
    out = []
    for k in range(streams):
        mine = nodes[k::streams]
        if not mine:
            continue
        client = Client(f"hb{k}", urls, k % len(urls), gaps)
        pos = [0]

        def one(mine=mine, client=client, pos=pos) -> None:
            n = mine[pos[0] % len(mine)]
            pos[0] += 1
            cl.beat(client, n, rec, lambda n=n: frozen(n))
        s = Stream(f"hb{k}", rate / streams, one)
        client.stop = s.halt.is_set
        out.append(s)
    return out


def decision_streams(cl: Cluster, urls: list[str], gaps: Gaps, rec: Recorder, streams: int,
                     rate: float, kinds: tuple[str, ...] = ("prioritize",),
                     check: Callable[[str, bytes], None] | None = None) -> list[Stream]:
    """`streams` threads sending decisions (extender prioritize, /v1/place dry runs), cycling
    through the pods; stream k starts at replica k mod len(urls)."""
    out = []
    for k in range(streams):
        # kube-scheduler's httpTimeout for the extender in deploy/ is 3 s.
        client = Client(f"dec{k}", urls, k % len(urls), gaps, timeout=3.0)
        pos = [k]

        def one(client=client, pos=pos) -> None:
            i = pos[0]
            pos[0] += 1
            kind = kinds[i % len(kinds)]
            if kind == "prioritize":
                path, body = "/v1/extender/prioritize", cl.prioritize_bodies[i % len(
                    cl.prioritize_bodies)]
            else:
                path, body = "/v1/place", cl.place_bodies[i % len(cl.place_bodies)]
            t0 = time.monotonic()
            status, _, data, _ = client.call("POST", path, body, what=kind)
            rec.add(time.monotonic() - t0, status)
            if check is not None and status == 200:
                check(kind, data)
        s = Stream(f"dec{k}", rate / streams, one)
        client.stop = s.halt.is_set
        out.append(s)
    return out


def run_streams(streams: list[Stream], seconds: float,
                during: Callable[[float], None] | None = None) -> float:
    """Starts the streams, lets them run `seconds` (calling `during(elapsed)` about every 50 ms
    when given), stops and joins them; returns the wall time."""
    t0 = time.monotonic()
    for s in streams:
        s.start()
    while (el := time.monotonic() - t0) < seconds:
        if any(s.error is not None for s in streams):
            break
        if during is not None:
            during(el)
        time.sleep(0.05)
    stop_streams(streams)
    return time.monotonic() - t0


def stop_streams(streams: list[Stream], timeout: float = 40) -> None:
    for s in streams:
        s.halt.set()
    for s in streams:
        if s.ident is None:
            continue
        s.join(timeout)
        if s.error is not None:
            raise RuntimeError(f"stream {s.name} failed: {s.error!r}") from s.error
