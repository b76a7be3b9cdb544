#!/usr/bin/env python3
"""bench/proxy/run --replicas N: registry-proxy replicas on a rendezvous-hash ring (ring.h).

    bench/proxy/run --replicas 3 [--json FILE] [--shape 200mbit] [--herd 50] [--herd-mib 64]
                    [--kill-rounds 3] [--kill-mib 64] [--kill-at 0.3] [--kill-clients 2]
                    [--timeout 300] [--workdir DIR] [--keep]

One run, on this machine, with real daemons (tests/support/shoal_fixtures): the real registry
(Debian docker-registry) inside a network namespace behind a shaped link (tc tbf, `--shape`,
default 200 Mbit/s, so a cold blob is still arriving while the herd and the kill land), N
registry-proxy replicas on one ring (`ring.members`, torrent on, as tests/registry-proxy/ring_test.py)
and, for the baseline, one plain registry-proxy (no ring, torrent on) against the same registry.
Every blob is cold: its own pseudo-random layer, pushed once, fetched by one phase only.

1. **herd over the ring**: `--herd` clients (default 50), spread round-robin over the replicas,
   each with its connection open, released together, GET one cold blob of `--herd-mib` (default
   64) whole; every body is sha256-hashed and checked against the digest and size. Figures:
   `upstream_gets` (GETs of that blob in the registry's own access log; target 1), the owner,
   each replica's upstream GETs and ring forwards (metrics), wall time from the release to the
   last body, each client's time (p50, max), aggregate client throughput, and each replica's
   user+sys CPU seconds (/proc/<pid>/stat, as bench/proxy/run) with CPU per GiB it served to
   clients. CPU is taken at the last body and again once the daemons went idle
   (`cpu_settled_s`: cache commit, seeding; bounded at 10 s); ratios use the settled figures.
2. **herd on one proxy**: the same herd (clients, blob size; another cold blob) against the one
   plain registry-proxy: the same figures, and `cpu_vs_single` = the replicas' total CPU ÷ the
   single proxy's, `wall_vs_single` = the ring herd's wall time ÷ the single one's. Informational,
   no target: the two non-owners receive, write and hash the blob once more each, the owner
   serves them as two more clients.
3. **manifest herd**: the herd's clients, spread over the replicas, ask at once for one tag, then
   for one manifest by digest (a small image of its own, neither asked before): `manifest_herd`
   `tag` and `digest` `upstream_gets` (the registry's log; target 1 each: the manifest's owner
   fetches it, the others ask the owner, and within a replica one fetch serves every waiter).
4. **failover**, `--kill-rounds` times (default 3), each on a fresh cold blob of `--kill-mib`:
   `ProxyRing.kill_owner_mid_blob` (`--kill-clients` clients on every replica but the owner GET the
   blob; the owner is SIGKILLed once it received `--kill-at` of it from upstream), then the killed
   replica is started again (same port and cache) and every replica must see every member up
   before the next round. Per round and the max: `upstream_gets`, `extra_upstream_bytes` (the
   registry's bytes for that blob beyond one copy; also as a fraction of the blob), the clients'
   completion time, takeovers counted by the survivors, every body right.

Targets (benchmeta.target, unrounded): the ring herd's `upstream_gets == 1`, the manifest herds'
`upstream_gets == 1`; the max
`extra_upstream_bytes` ≤ 1 × the blob; every client of every phase completes with the right
bytes (`wrong_bodies == 0`, herds and failover separately). A phase that fails (a hang, a daemon
that does not come up) is recorded under `errors` and misses its targets.

On 2 cores the replicas, the registry, the shaped link and this load generator (which hashes every
body: its CPU is `loadgen_cpu_s`) share the machine: this measures what the ring costs and whether
it stays correct, not scale-out. Prints a summary and the verdicts; --json writes every figure
with `targets` and `meta` (bench/lib/benchmeta.py: machine, CPU model, `openssl speed sha256`,
commit, options) and `binary` (the registry-proxy measured: path, sha256, mtime). Exit status 1
when a target is missed or a phase failed; the work directory (every daemon's log, the registry's
access log) is then kept, as with --keep. Every wait is bounded; every daemon and the namespace
are stopped at exit (here, and the fixtures' atexit hooks). Needs root (network namespace).
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench" / "lib"))

from benchcpu import proc_cpu_s  # noqa: E402
from benchmeta import finish, meta, print_verdicts, target, write  # noqa: E402
from shoal_fixtures import oci  # noqa: E402
from shoal_fixtures.netns import Network, Shape  # noqa: E402
from shoal_fixtures.procs import FixtureError, wait_until  # noqa: E402
from shoal_fixtures.proxy_ring import ProxyRing, get_hashed  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, binary, upstream  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
NPROC = os.cpu_count() or 1
REPO_NAME = "bench/ring"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- measurements --------------------------------------------------------------------------------

def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_sample() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def busy_share(a: list[int], b: list[int]) -> float:
    d = [y - x for x, y in zip(a, b)]
    total = sum(d)
    return 1 - (d[3] + d[4]) / total if total else 0.0


def settle(pids: list[int | None], quiet: float = 0.02, window: float = 0.5,
           bound: float = 10.0) -> float:
    """Waits until the processes used at most `quiet` CPU seconds over `window` (at most `bound`
    seconds); returns the seconds waited."""
    t0 = time.monotonic()
    last = sum(proc_cpu_s(p) for p in pids)
    while time.monotonic() - t0 < bound:
        time.sleep(window)
        now = sum(proc_cpu_s(p) for p in pids)
        if now - last <= quiet:
            break
        last = now
    return time.monotonic() - t0


def binary_meta(path: Path) -> dict:
    """Which registry-proxy this run measured (SHOAL_BUILD_DIR may hold another commit's)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    mtime = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))
    return {"path": str(path), "sha256": h.hexdigest(), "mtime": mtime}


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# -- the herd ------------------------------------------------------------------------------------

@dataclass
class Got:
    replica: int
    status: Any
    digest: str
    size: int
    seconds: float
    error: str = ""


def herd(targets: list[RegistryProxy], path: str, clients: int, timeout: float,
         on_release=None, headers: dict[str, str] | None = None) -> tuple[list[Got], float]:
    """`clients` whole-blob GETs, client i to targets[i % len(targets)], each on a connection
    opened beforehand, released together; every body hashed. Returns the answers and the wall
    time from the release to the last body. `on_release()` runs just before the release."""
    barrier = threading.Barrier(clients + 1)
    out: list[Got | None] = [None] * clients

    def one(i: int) -> None:
        rep = i % len(targets)
        p = targets[rep]
        conn = http.client.HTTPConnection(p.host, p.port, timeout=60)
        t0 = time.monotonic()
        try:
            conn.connect()
            barrier.wait(60)
            t0 = time.monotonic()
            status, digest, n = get_hashed(conn, "GET", path, headers)
            out[i] = Got(rep, status, digest, n, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - reported as a wrong body
            out[i] = Got(rep, "error", "", 0, time.monotonic() - t0, repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    if on_release is not None:
        on_release()
    try:
        barrier.wait(60)
    except threading.BrokenBarrierError:
        pass  # a client could not connect: its answer says so
    t0 = time.monotonic()
    deadline = t0 + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    wall = time.monotonic() - t0
    hung = sum(1 for t in threads if t.is_alive())
    if hung:
        raise FixtureError(f"herd: {hung} of {clients} clients still reading after {timeout:.0f} s")
    return [o for o in out if o is not None], wall


# -- the run -------------------------------------------------------------------------------------

class Bench:
    def __init__(self, a: argparse.Namespace, work: Path):
        self.a, self.work = a, work
        self.stack: list = []
        self.out: dict[str, Any] = {"benchmark": "proxy-replicas", "ok": True, "errors": [],
                                    "failed_phases": []}

    def fail(self, phase: str, what: str) -> None:
        log(f"ERROR in {phase}: {what}")
        self.out["ok"] = False
        self.out["errors"].append(f"{phase}: {what}")
        self.out["failed_phases"].append(phase)

    # -- setup ------------------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.a
        log(f"network namespace with a {a.shape} link; the registry inside it")
        self.net = Network(1, shape=Shape(a.shape)).create()
        self.stack.append(self.net)
        node = self.net.nodes[0]
        self.reg = Registry(self.work / "registry", host=node.ip, netns=node.name).start()
        self.stack.append(self.reg)
        self.ns = self.reg.host_port
        specs = [oci.large_layer(a.herd_mib * MIB, seed="ring-herd"),
                 oci.large_layer(a.herd_mib * MIB, seed="single-herd")]
        specs += [oci.large_layer(a.kill_mib * MIB, seed=f"ring-kill-{k}")
                  for k in range(a.kill_rounds)]
        log(f"making {len(specs)} cold blobs ({a.herd_mib} MiB x 2, {a.kill_mib} MiB x "
            f"{a.kill_rounds}) and pushing them")
        layout = oci.make_image(self.work / "image", specs)
        self.reg.push(layout, REPO_NAME)
        shutil.rmtree(self.work / "image", ignore_errors=True)  # the registry holds the bytes
        layers = layout.images[0].layers
        self.herd_blob, self.single_blob = layers[0], layers[1]
        # Two small images for the manifest herds: one asked by its tag, one by its digest only.
        self.tagged = oci.make_image(self.work / "tagged", [oci.LayerSpec(size=1000,
                                                                          seed="ring-tagged")])
        self.reg.push(self.tagged, REPO_NAME, "herd")
        self.by_digest = oci.make_image(self.work / "by-digest", [
            oci.LayerSpec(size=1000, seed="ring-by-digest")])
        self.reg.push(self.by_digest, REPO_NAME, "not-asked-by-tag")
        self.kill_blobs = layers[2:]
        ups = [upstream(self.ns, self.reg.url)]
        quota = {"cache": {"quota": f"{(2 * a.herd_mib + a.kill_rounds * a.kill_mib) * 2 + 1024}MiB"}}
        self.ring = ProxyRing(self.work / "ring", a.replicas, upstreams=ups, torrent=True,
                              extra=quota, log_level="info")
        self.stack.append(self.ring)
        self.ring.start()
        self.wait_ring_up()
        self.single = RegistryProxy(self.work / "single", upstreams=ups, torrent=True,
                                    extra=quota, log_level="info")
        self.out["params"]["owner_of_herd_blob"] = self.ring.owner(self.herd_blob.digest)

    def wait_ring_up(self) -> None:
        n = len(self.ring.proxies)
        for i, p in enumerate(self.ring.proxies):
            wait_until(lambda p=p: p.metric("shoal_proxy_ring_members_up") >= n, 30,
                       f"replica {i} seeing {n} ring members up", interval=0.2,
                       diagnostics=self.ring.diagnostics)

    def blob_path(self, digest: str) -> str:
        return f"/v2/{REPO_NAME}/blobs/{digest}?ns={self.ns}"

    # -- herds ------------------------------------------------------------------------------------

    def run_herd(self, label: str, targets: list[RegistryProxy], blob) -> dict[str, Any]:
        a = self.a
        pids = [p.daemon.pid for p in targets]
        mark = self.reg.mark()
        m0: dict[int, dict[str, float]] = {}
        s0: dict[str, Any] = {}

        def before() -> None:
            for i, p in enumerate(targets):
                m0[i] = p.metrics()
            s0.update(cpu=[proc_cpu_s(pid) for pid in pids], loadgen=self_cpu_s(),
                      registry=proc_cpu_s(self.reg.daemon.pid), machine=machine_sample())

        log(f"{label}: {a.herd} clients over {len(targets)} registry-proxy "
            f"{'replicas' if len(targets) > 1 else 'process'}, a cold {a.herd_mib} MiB blob")
        got, wall = herd(targets, self.blob_path(blob.digest), a.herd, a.timeout, before)
        c0, c1 = s0["cpu"], [proc_cpu_s(pid) for pid in pids]
        loadgen = self_cpu_s() - s0["loadgen"]
        reg_cpu = proc_cpu_s(self.reg.daemon.pid) - s0["registry"]
        busy = busy_share(s0["machine"], machine_sample())
        waited = settle(pids)
        c2 = [proc_cpu_s(pid) for pid in pids]
        self.reg.wait_log_quiet()
        gets = [(e.status, e.size) for e in self.reg.access_log(mark)
                if e.method == "GET" and e.blob is not None and e.blob[1] == blob.digest]
        wrong = [g for g in got if (g.status, g.digest, g.size) != (200, blob.digest, blob.size)]
        wrong += [Got(-1, "missing", "", 0, 0.0)] * (a.herd - len(got))
        times = [g.seconds for g in got]
        per = []
        for i, p in enumerate(targets):
            m1 = p.metrics()
            d = lambda k: m1.get(k, 0.0) - m0[i].get(k, 0.0)  # noqa: E731
            served = sum(g.size for g in got if g.replica == i)
            cpu, cpu_settled = c1[i] - c0[i], c2[i] - c0[i]
            per.append({
                "replica": i, "clients": sum(1 for g in got if g.replica == i),
                "client_bytes": served,
                "response_blob_bytes": int(d('shoal_proxy_response_bytes_total{route="blob"}')),
                "upstream_blob_gets": int(d("shoal_proxy_upstream_blob_gets_total")),
                # from upstream (the owner) or from the owner (the others)
                "fetched_bytes": int(d("shoal_proxy_upstream_bytes_total")
                                     + d("shoal_proxy_ring_bytes_total")),
                "ring_forwarded": int(d("shoal_proxy_ring_forwarded_total")),
                "singleflight_joins": int(d("shoal_proxy_singleflight_joins_total")),
                "cpu_s": round(cpu, 3), "cpu_settled_s": round(cpu_settled, 3),
                "cpu_s_per_gib_served": round(cpu_settled / (served / GIB), 3) if served else None,
            })
        total_bytes = sum(g.size for g in got)
        cpu_total = sum(r["cpu_settled_s"] for r in per)
        res = {
            "clients": a.herd, "blob_mib": round(blob.size / MIB, 2), "digest": blob.digest,
            "upstream_gets": len(gets), "upstream_get_sizes": gets,
            "wrong_bodies": len(wrong),
            "wrong_examples": [vars(g) for g in wrong[:3]],
            "wall_s": round(wall, 3),
            "client_s_p50": round(statistics.median(times), 3) if times else None,
            "client_s_max": round(max(times), 3) if times else None,
            "client_s_p90": round(pct(times, 90), 3) if times else None,
            "aggregate_mib_s": round(total_bytes / MIB / wall, 1) if wall else None,
            "served_gib": round(total_bytes / GIB, 3),
            "cpu_s": round(sum(r["cpu_s"] for r in per), 3),
            "cpu_settled_s": round(cpu_total, 3),
            "settle_wait_s": round(waited, 2),
            "cpu_s_per_gib_served": round(cpu_total / (total_bytes / GIB), 3) if total_bytes else None,
            "registry_cpu_s": round(reg_cpu, 3), "loadgen_cpu_s": round(loadgen, 3),
            "machine_busy": round(busy, 3), "machine_busy_cores": round(busy * NPROC, 2),
            "per_process": per,
        }
        log(f"{label}: {len(gets)} upstream GET(s), {len(wrong)} wrong bodies, {wall:.2f} s, "
            f"{res['aggregate_mib_s']} MiB/s to the clients, registry-proxy CPU "
            f"{cpu_total:.2f} s ({' + '.join(str(r['cpu_settled_s']) for r in per)})")
        return res

    def run_manifest_herd(self) -> None:
        """The herd's clients ask the ring for one tag at once, then for one manifest by digest
        (neither asked before): upstream sees one GET of each, by its owner (registry-proxy's
        manifest single flight and the ring's ownership of manifests)."""
        a = self.a
        accept = {"Accept": "application/vnd.oci.image.manifest.v1+json, "
                            "application/vnd.oci.image.index.v1+json, "
                            "application/vnd.docker.distribution.manifest.v2+json"}
        res: dict[str, Any] = {"clients": a.herd}
        try:
            for key, ref, want in (("tag", "herd", self.tagged.top.digest),
                                   ("digest", self.by_digest.top.digest, self.by_digest.top.digest)):
                mark = self.reg.mark()
                got, wall = herd(self.ring.proxies, f"/v2/{REPO_NAME}/manifests/{ref}?ns={self.ns}",
                                 a.herd, a.timeout, headers=accept)
                self.reg.wait_log_quiet()
                wrong = [g for g in got if (g.status, g.digest) != (200, want)]
                res[key] = {"upstream_gets": self.reg.count_manifest_requests(ref, since=mark),
                            "wrong_bodies": len(wrong) + (a.herd - len(got)),
                            "wall_s": round(wall, 3)}
                log(f"manifest herd by {key}: {a.herd} clients over the ring, "
                    f"{res[key]['upstream_gets']} upstream GET(s), {len(wrong)} wrong, "
                    f"{wall:.2f} s")
        except Exception as e:  # noqa: BLE001 - recorded; the other phases still run
            traceback.print_exc()
            self.fail("manifest_herd", f"{type(e).__name__}: {str(e)[:3000]}")
        self.out["manifest_herd"] = res

    def run_herds(self) -> None:
        try:
            ring = self.run_herd("herd over the ring", self.ring.proxies, self.herd_blob)
            ring["owner"] = self.ring.owner(self.herd_blob.digest)
            self.out["herd"] = ring
        except Exception as e:  # noqa: BLE001 - recorded; the other phases still run
            traceback.print_exc()
            self.fail("herd", f"{type(e).__name__}: {str(e)[:3000]}")
            return
        try:
            self.single.start()
            self.stack.append(self.single)
            single = self.run_herd("herd on one proxy", [self.single], self.single_blob)
            self.out["herd_single"] = single
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            self.fail("herd_single", f"{type(e).__name__}: {str(e)[:3000]}")
            return
        finally:
            self.single.stop()
        if single["cpu_settled_s"]:
            self.out["cpu_vs_single"] = round(ring["cpu_settled_s"] / single["cpu_settled_s"], 3)
        if single["wall_s"]:
            self.out["wall_vs_single"] = round(ring["wall_s"] / single["wall_s"], 3)

    # -- failover ---------------------------------------------------------------------------------

    def run_failover(self) -> None:
        a = self.a
        rounds: list[dict[str, Any]] = []
        self.out["failover"] = {"rounds": rounds}
        for k, blob in enumerate(self.kill_blobs):
            owner = self.ring.owner(blob.digest)
            survivors = [i for i in range(a.replicas) if i != owner]
            log(f"failover round {k + 1}: owner replica {owner} killed at {a.kill_at:.0%} of a "
                f"cold {a.kill_mib} MiB blob, {a.kill_clients} clients on each of {survivors}")
            try:
                tk0 = self.ring.metric_sum("shoal_proxy_ring_takeovers_total", survivors)
                res = self.ring.kill_owner_mid_blob(
                    self.reg, REPO_NAME, blob.digest, blob.size, self.ns,
                    clients_per_replica=a.kill_clients, kill_at=a.kill_at, timeout=a.timeout)
                takeovers = self.ring.metric_sum("shoal_proxy_ring_takeovers_total", survivors) - tk0
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                self.fail(f"failover round {k + 1}", f"{type(e).__name__}: {str(e)[:3000]}")
                return
            wrong = [c for c in res.clients if (c.status, c.digest, c.size) !=
                     (200, blob.digest, blob.size)]
            missing = len(survivors) * a.kill_clients - len(res.clients)
            r = {"round": k + 1, "owner": owner, "blob_bytes": blob.size, "digest": blob.digest,
                 "clients": len(res.clients), "wrong_bodies": len(wrong) + missing,
                 "wrong_examples": [vars(c) for c in wrong[:3]],
                 "upstream_gets": res.upstream_gets, "upstream_get_sizes": res.gets,
                 "upstream_bytes": res.upstream_bytes,
                 "extra_upstream_bytes": res.extra_upstream_bytes,
                 "extra_fraction": round(res.extra_upstream_bytes / blob.size, 4),
                 "clients_done_s": round(res.seconds, 3), "takeovers": int(takeovers)}
            rounds.append(r)
            log(f"failover round {k + 1}: {res.upstream_gets} upstream GETs {res.gets}, extra "
                f"{res.extra_upstream_bytes / MIB:.2f} MiB of {blob.size / MIB:.0f}, "
                f"{len(wrong) + missing} wrong bodies, clients done in {res.seconds:.2f} s, "
                f"{int(takeovers)} takeover(s)")
            try:
                t0 = time.monotonic()
                self.ring.proxies[owner].start(timeout=30)
                self.wait_ring_up()
                r["restart_s"] = round(time.monotonic() - t0, 2)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                self.fail(f"failover round {k + 1} restart", f"{type(e).__name__}: {str(e)[:3000]}")
                return
        f = self.out["failover"]
        if rounds:
            f["max_upstream_gets"] = max(r["upstream_gets"] for r in rounds)
            worst = max(rounds, key=lambda r: r["extra_fraction"])
            f["max_extra_upstream_bytes"] = worst["extra_upstream_bytes"]
            f["max_extra_fraction"] = worst["extra_fraction"]
            f["max_clients_done_s"] = max(r["clients_done_s"] for r in rounds)
            f["wrong_bodies"] = sum(r["wrong_bodies"] for r in rounds)

    def stop(self) -> None:
        for r in reversed(self.stack):
            try:
                r.stop()
            except Exception as e:  # noqa: BLE001
                log(f"stop {r}: {e}")
        self.stack.clear()


def verdicts(out: dict[str, Any], a: argparse.Namespace) -> None:
    failed = out["failed_phases"]
    h, s, f = out.get("herd", {}), out.get("herd_single", {}), out.get("failover", {})
    mh = out.get("manifest_herd", {})
    herd_ok = "herd" not in failed
    fail_ok = not any(p.startswith("failover") for p in failed) and \
        len(f.get("rounds", [])) == a.kill_rounds
    out["targets"] = {
        "herd_upstream_gets==1": target(h.get("upstream_gets"), "==", 1, herd_ok),
        "manifest_herd_upstream_gets==1": target(
            max((mh.get(k, {}).get("upstream_gets", 99) for k in ("tag", "digest")), default=99),
            "==", 1, "manifest_herd" not in out["failed_phases"],
            "the most upstream GETs of the tag's and the digest's herd"),
        "herd_wrong_bodies==0": target(
            (h.get("wrong_bodies") or 0) + (s.get("wrong_bodies") or 0) if herd_ok else None,
            "==", 0, herd_ok and "herd_single" not in failed,
            "ring herd and single-proxy herd: every client 200, right digest and size"),
        "failover_max_extra_upstream_fraction<=1": target(
            f.get("max_extra_fraction"), "<=", 1.0, fail_ok,
            "extra upstream bytes over all rounds, in blobs"),
        "failover_wrong_bodies==0": target(f.get("wrong_bodies"), "==", 0, fail_ok,
                                           "every client of every round: 200, right bytes"),
    }


def summary(out: dict[str, Any]) -> None:
    p = out["params"]
    h, s, f = out.get("herd", {}), out.get("herd_single", {}), out.get("failover", {})
    print(f"registry-proxy ring: {p['replicas']} replicas vs one proxy; registry behind a "
          f"{p['shape']} link")
    for label, r in (("herd over the ring", h), ("herd on one proxy", s)):
        if not r:
            print(f"  {label}: did not run")
            continue
        print(f"  {label:20s} {r['clients']} clients, {r['blob_mib']:.0f} MiB: upstream GETs "
              f"{r['upstream_gets']}, wrong bodies {r['wrong_bodies']}, wall {r['wall_s']} s "
              f"(client p50 {r['client_s_p50']} s, max {r['client_s_max']} s), "
              f"{r['aggregate_mib_s']} MiB/s to the clients")
        print(f"  {'':20s} registry-proxy CPU {r['cpu_settled_s']} s "
              f"({', '.join(str(x['cpu_settled_s']) for x in r['per_process'])}), "
              f"{r['cpu_s_per_gib_served']} core-s/GiB served; load generator {r['loadgen_cpu_s']} s, "
              f"machine {r['machine_busy_cores']}/{NPROC} cores busy")
    print(f"  cpu_vs_single {out.get('cpu_vs_single')}, wall_vs_single {out.get('wall_vs_single')}"
          " (informational)")
    for k, r in out.get("manifest_herd", {}).items():
        if isinstance(r, dict):
            print(f"  manifest herd by {k}: {out['manifest_herd']['clients']} clients, upstream "
                  f"GETs {r['upstream_gets']}, wrong bodies {r['wrong_bodies']}, wall {r['wall_s']} s")
    for r in f.get("rounds", []):
        print(f"  failover round {r['round']}: owner {r['owner']} killed; upstream GETs "
              f"{r['upstream_gets']} {r['upstream_get_sizes']}, extra {r['extra_upstream_bytes']} B "
              f"({r['extra_fraction']:.1%} of the blob), {r['clients']} clients done in "
              f"{r['clients_done_s']} s, wrong bodies {r['wrong_bodies']}, takeovers "
              f"{r['takeovers']}, restarted in {r.get('restart_s')} s")
    if f.get("rounds"):
        print(f"  failover max: upstream GETs {f['max_upstream_gets']}, extra "
              f"{f['max_extra_upstream_bytes']} B ({f['max_extra_fraction']:.1%}), clients done "
              f"within {f['max_clients_done_s']} s")
    for e in out["errors"]:
        print(f"  ERROR {e[:300]}")
    m = out.get("meta", {}).get("machine", {})
    sha = m.get("openssl_sha256_16k_bytes_per_s")
    print(f"  machine: {m.get('cpu_model')}, {m.get('cores')} cores, openssl sha256 "
          f"{f'{sha / 1e9:.2f} GB/s' if sha else 'n/a'}, load before {m.get('loadavg_before')}, "
          f"after {m.get('loadavg_after')}")
    print_verdicts(out["targets"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/proxy/run",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, required=True, help="replicas on the ring (>= 2)")
    ap.add_argument("--json", default="", help="also write the results to this file")
    ap.add_argument("--shape", default="200mbit", help="the registry's link (tc tbf rate)")
    ap.add_argument("--herd", type=int, default=50, help="concurrent clients of each herd")
    ap.add_argument("--herd-mib", type=int, default=64, help="each herd's cold blob")
    ap.add_argument("--kill-rounds", type=int, default=3, help="owner-killed rounds")
    ap.add_argument("--kill-mib", type=int, default=64, help="each failover round's cold blob")
    ap.add_argument("--kill-at", type=float, default=0.3,
                    help="kill the owner once it received this share of the blob")
    ap.add_argument("--kill-clients", type=int, default=2,
                    help="failover clients on each replica but the owner")
    ap.add_argument("--timeout", type=float, default=300, help="bound of every herd and round (s)")
    ap.add_argument("--workdir", help="parent of the work directory (default $TMPDIR or /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    a = ap.parse_args(argv)
    if a.replicas < 2:
        ap.error("--replicas needs at least 2")
    if os.geteuid() != 0:
        print("bench/proxy/run --replicas: needs root (network namespace)", file=sys.stderr)
        return 2
    try:
        bin_path = binary("shoal-registry-proxy").resolve()
    except FixtureError as e:
        print(f"bench/proxy/run: {e}", file=sys.stderr)
        return 2
    # SIGTERM (a timeout of the caller) runs the cleanup below like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    m = meta("proxy-replicas", vars(a), ignore=("json", "keep", "workdir", "timeout"))
    out_bin = binary_meta(bin_path)
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-proxy-replicas-", dir=a.workdir))
    b = Bench(a, work)
    out = b.out
    out["binary"] = out_bin
    out["params"] = {"replicas": a.replicas, "shape": a.shape, "herd_clients": a.herd,
                     "herd_mib": a.herd_mib, "kill_rounds": a.kill_rounds, "kill_mib": a.kill_mib,
                     "kill_at": a.kill_at, "kill_clients_per_replica": a.kill_clients,
                     "torrent": True, "cpus": NPROC}
    t0 = time.monotonic()
    try:
        b.setup()
        b.run_herds()
        b.run_manifest_herd()
        b.run_failover()
    except Exception as e:  # noqa: BLE001 - recorded, the JSON still written
        traceback.print_exc()
        b.fail("setup", f"{type(e).__name__}: {str(e)[:3000]}")
    except BaseException:  # SIGTERM, Ctrl-C: no results, the logs kept
        b.stop()
        log(f"interrupted; work directory kept: {work}")
        raise
    finally:
        b.stop()
        out["wall_s"] = round(time.monotonic() - t0, 1)
    # Headline figures (the ones the issue names) at the top level.
    out["herd_upstream_gets"] = out.get("herd", {}).get("upstream_gets")
    out["failover_max_extra_upstream_bytes"] = out.get("failover", {}).get("max_extra_upstream_bytes")
    now_bin = binary_meta(bin_path)
    if now_bin["sha256"] != out_bin["sha256"]:
        out["binary_changed_during_run"] = now_bin
        log(f"WARNING: {bin_path} changed during the run (a build relinked it)")
    verdicts(out, a)
    out["meta"] = finish(m)
    if a.json:
        write(a.json, out)
    summary(out)
    missed = not out["ok"] or not all(t["met"] for t in out["targets"].values())
    if a.keep or missed:
        log(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
