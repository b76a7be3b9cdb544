#!/usr/bin/env python3
"""bench/scheduler/run --replicas N: scheduler replicas on Redis against one scheduler.

    bench/scheduler/run --replicas 3 [--json FILE] [--quick] [--nodes 5000] [--objects 200000]
                        [--held-per-node 400] [--duration 20] [--hb-rate R] [--decision-rate R]

One run, on this machine, with real daemons (tests/support/shoal_fixtures): a docker-registry and
registry-proxy (the images the pods and prewarms name), then

1. **single**: one shoal-scheduler without Redis. The nodes' full lists, then a heartbeat phase
   (deltas at --hb-rate) and a decision phase (extender prioritize naming every node, at
   --decision-rate), each --duration seconds; the CPU of the scheduler process per heartbeat and
   per decision, and the latencies.
2. **replicas**: N shoal-scheduler replicas on a Redis primary, one Redis replica and three
   Sentinels (ACLs on; the configuration of tests/scheduler/ha_test.py), the same load spread
   over the replicas; CPU of every scheduler and redis-server. `redis_cost_vs_single` is the
   ratio of the two, per heartbeat and per decision. Then three failures, each under load:
   - a replica killed (SIGKILL) while heartbeats, prioritize and /v1/place dry runs flow: every
     client stream moves to the next replica; `failover_gap_s` is the longest time from a
     stream's first failed attempt to its next answer. The replica is started again (its load
     time from Redis is reported).
   - the lease holder killed while jobs' members report `failing` (failover decisions, each with
     a prewarm) and clients create prewarms (POST /v1/prewarm with an Idempotency-Key, retried
     on another replica after any failure, as shoalctl does): `duplicate_prewarms` counts
     decisions made twice (from every replica's log, the killed one's too) and prewarms created
     more than once.
   - the Redis primary killed (Sentinel promotes the replica) while heartbeats flow; half the
     nodes stop at the kill, and each of them must have, in the new primary's `shoal:n:<node>`,
     a `seq` at least the last one answered 200 without Shoal-Stale:
     `lost_acknowledged_writes` counts those that do not.

On 2 cores the replicas, Redis and this load generator share the machine: this measures
correctness under failure and the price of sharing state, not scale-out. Prints a summary and
its verdicts; --json writes every figure with `targets` and `meta` (bench/lib/benchmeta.py).
Every wait is bounded; every daemon is stopped at exit (the fixtures' atexit hook).
"""
from __future__ import annotations

import argparse
import faulthandler
import signal
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchcpu import proc_cpu_s  # noqa: E402
from benchmeta import finish, meta, print_verdicts, target, write  # noqa: E402
from replicas_load import (Client, Cluster, Gaps, Node, Recorder, Stream, Universe,  # noqa: E402
                           decision_streams, heartbeat_streams, ms, percentile, run_streams,
                           stop_streams)
from shoal_fixtures import oci  # noqa: E402
from shoal_fixtures.nodes import Scheduler  # noqa: E402
from shoal_fixtures.procs import free_port, wait_until  # noqa: E402
from shoal_fixtures.redis import RedisHA  # noqa: E402
from shoal_fixtures.registry import Registry  # noqa: E402
from shoal_fixtures.shoal import RegistryProxy, parse_metrics  # noqa: E402

GAP_BOUND = 2.0
COST_BOUND = 1.5
LEASE_TTL_S = 2
DECIDED = re.compile(r"failover(?:: no replacement)? job=(\S+) failed=(\S+) ")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Measurements

def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_busy() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def busy_share(a: list[int], b: list[int]) -> float:
    d = [y - x for x, y in zip(a, b)]
    total = sum(d)
    return round(1 - (d[3] + d[4]) / total, 3) if total else 0.0


class Profile:
    """`perf record -g` of every process of the `counted` groups for the phase, to
    DIR/<label>-<group><i>.data (nothing when DIR is empty). perf's own CPU is in no group, but it
    slows the profiled processes down: a profiled run's figures are not stored."""

    def __init__(self, directory: str, label: str, groups: dict[str, list[int | None]],
                 counted: tuple[str, ...], call_graph: str = "fp"):
        self.dir, self.label, self.groups, self.counted = directory, label, groups, counted
        self.call_graph = call_graph
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Profile":
        if not self.dir:
            return self
        Path(self.dir).mkdir(parents=True, exist_ok=True)
        for g in self.counted:
            for i, pid in enumerate(self.groups.get(g, [])):
                if pid is None:
                    continue
                out = Path(self.dir) / f"{self.label}-{g}{i}.data"
                self.procs.append(subprocess.Popen(
                    ["perf", "record", f"--call-graph={self.call_graph}", "-q", "-o", str(out),
                     "-p", str(pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


class CpuPhase:
    """CPU seconds of groups of processes ({group: [pid]}), of this load generator, and the
    machine's busy share, between enter and exit."""

    def __init__(self, groups: dict[str, list[int | None]]):
        self.groups = groups

    def __enter__(self) -> "CpuPhase":
        self.c0 = {g: sum(proc_cpu_s(p) for p in ps) for g, ps in self.groups.items()}
        self.s0, self.m0, self.t0 = self_cpu(), machine_busy(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self.t0
        self.cpu = {g: sum(proc_cpu_s(p) for p in ps) - self.c0[g]
                    for g, ps in self.groups.items()}
        self.loadgen = self_cpu() - self.s0
        self.busy = busy_share(self.m0, machine_busy())

    def report(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall, 2), "cpu_s": {g: round(v, 3) for g, v in self.cpu.items()},
                "loadgen_cpu_s": round(self.loadgen, 3), "machine_busy": self.busy}


def send(req: urllib.request.Request | str, timeout: float) -> tuple[int, bytes]:
    """(status, body); an HTTP error status with its body; (0, b"") when nothing answered."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def get(url: str, timeout: float = 10) -> tuple[int, bytes]:
    return send(url, timeout)


def post(url: str, body: dict, timeout: float = 30) -> tuple[int, bytes]:
    return send(urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                       headers={"Content-Type": "application/json"}), timeout)


def metrics(url: str) -> dict[str, float]:
    code, body = get(url + "/metrics")
    return parse_metrics(body.decode()) if code == 200 else {}


def replica_metrics(urls: list[str], names: tuple[str, ...]) -> dict[str, list[float | None]]:
    """The named samples of every replica's /metrics (None where missing or unreachable)."""
    pages = [metrics(u) for u in urls]
    return {n: [p.get(n) for p in pages] for n in names}


def node_count(url: str) -> int:
    code, body = get(url + "/v1/nodes", timeout=60)
    return len(json.loads(body)) if code == 200 else -1


# ---------------------------------------------------------------------------------------------
# The run

class Bench:
    def __init__(self, a: argparse.Namespace, work: Path):
        self.a, self.work = a, work
        self.gaps = Gaps()
        self.started: dict[str, float] = {}
        self.out: dict[str, Any] = {"benchmark": "scheduler-replicas", "ok": True, "errors": []}

    def fail(self, what: str) -> None:
        log("ERROR: " + what)
        self.out["ok"] = False
        self.out["errors"].append(what)

    # -- setup ------------------------------------------------------------------------------------

    def start_images(self) -> None:
        a = self.a
        self.registry = Registry(self.work / "registry").start()
        self.proxy_port = free_port()
        self.proxy = RegistryProxy(self.work / "registry-proxy", port=self.proxy_port, log_level="info",
                                   upstreams=[{"name": self.registry.host_port,
                                               "url": self.registry.url}]).start()
        self.images: list[str] = []
        blobs: list[tuple[str, int]] = []
        for k in range(a.images):
            layers = [oci.LayerSpec(size=4096 + 512 * j, seed=f"bench-{k}-{j}", gzip_level=0)
                      for j in range(a.layers)]
            lay = oci.make_image(self.work / f"img{k}", layers)
            self.registry.push(lay, f"bench/img{k}", "v1")
            im = lay.images[0]
            self.images.append(f"{self.registry.host_port}/bench/img{k}@{im.manifest.digest}")
            blobs += [(b.digest, b.size) for b in im.blobs()]
        self.image_blobs = list(dict.fromkeys(blobs))

    def sched_cfg(self) -> dict[str, Any]:
        return {"resolver": {"registry_proxy": f"http://127.0.0.1:{self.proxy_port}"},
                # Failures here are reported (`failing`); the nodes heartbeat often enough that
                # silence fails none. failed_after is also the start-up window in which a
                # replica decides nothing (failures.cc), so the lease phase waits it out.
                "nodes": {"unhealthy_after": f"{self.a.failed_after:g}s", "drop_after": "30m",
                          "heartbeat_interval": "10s"},
                "failover": {"failed_after": f"{self.a.failed_after:g}s"},
                "prewarm": {"max_prewarms": 10000}}

    def load_nodes(self, cl: Cluster, urls: list[str], label: str) -> dict[str, Any]:
        """Every node's full list, 4 streams as fast as answered; then waits until every
        scheduler lists every node."""
        rec = Recorder()
        for n in cl.nodes:
            n.full, n.epoch = True, ""
        errors: list[BaseException] = []

        def walk(k: int) -> None:
            client = Client(f"load{k}", urls, k % len(urls), self.gaps,
                            timeout=self.a.load_timeout / 10)
            try:
                for n in cl.nodes[k::4]:
                    cl.beat(client, n, rec)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                client.close()
        threads = [threading.Thread(target=walk, args=(k,), daemon=True) for k in range(4)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.a.load_timeout)
        if errors or any(t.is_alive() for t in threads):
            raise RuntimeError(f"{label}: loading the nodes failed: {errors!r}")
        wall = time.monotonic() - t0
        for u in urls:
            wait_until(lambda u=u: node_count(u) >= len(cl.nodes), 120,
                       f"{u} listing {len(cl.nodes)} nodes", interval=0.5)
        settled = time.monotonic() - t0
        out = {"full_heartbeats": rec.count, "wall_s": round(wall, 2),
               "full_heartbeats_s": round(rec.count / wall, 1) if wall else None,
               "all_replicas_listing_every_node_s": round(settled, 2), **rec.summary()}
        log(f"{label}: {rec.count} full lists in {wall:.1f} s; every scheduler lists every node "
            f"after {settled:.1f} s")
        return out

    def cost_phases(self, cl: Cluster, urls: list[str], groups: dict[str, list[int | None]],
                    counted: tuple[str, ...], label: str) -> dict[str, Any]:
        """An idle phase, the heartbeat phase and the decision phase: CPU of the `counted`
        process groups per operation, in all and above the idle rate."""
        a = self.a
        out: dict[str, Any] = {}
        with CpuPhase(groups) as ph, Profile(a.perf, f"{label}-idle", groups, counted, a.perf_call_graph):
            time.sleep(a.duration / 2)
        idle_rate = sum(ph.cpu[g] for g in counted) / ph.wall
        out["idle"] = {**ph.report(), "server_cpu_s_per_s": round(idle_rate, 4)}
        log(f"{label} idle: server CPU {idle_rate:.3f} s/s {ph.cpu}")

        def per_op(ph: CpuPhase, rec: Recorder) -> dict[str, Any]:
            srv = sum(ph.cpu[g] for g in counted)
            n = max(1, rec.count)
            return {**rec.summary(ph.wall), **ph.report(), "counted": list(counted),
                    "server_cpu_ms_per_op": round(srv * 1000 / n, 4),
                    "server_cpu_ms_per_op_above_idle": round(
                        (srv - idle_rate * ph.wall) * 1000 / n, 4)}
        rec = Recorder()
        streams = heartbeat_streams(cl, urls, self.gaps, rec, a.hb_streams, a.hb_rate)
        with CpuPhase(groups) as ph, Profile(a.perf, f"{label}-heartbeats", groups, counted, a.perf_call_graph):
            run_streams(streams, a.duration)
        h = out["heartbeats"] = per_op(ph, rec)
        log(f"{label} heartbeats: {rec.count}, p99 {h['p99_ms']} ms, server CPU "
            f"{h['server_cpu_ms_per_op']} ms each ({h['server_cpu_ms_per_op_above_idle']} above "
            f"idle) {ph.cpu}; loadgen {ph.loadgen:.2f} s; machine busy {ph.busy}")
        if rec.errors or rec.resync:
            self.fail(f"{label}: heartbeat phase had {rec.errors} errors, {rec.resync} resyncs")
        if len(urls) > 1:
            h["replica_metrics"] = replica_metrics(urls, ("shoal_scheduler_heartbeats_waited_total",
                                                          'shoal_scheduler_log_applied_total{type="hb"}'))
            log(f"{label} replica metrics after heartbeats: {h['replica_metrics']}")
        rec = Recorder()
        nonzero = [0, 0]
        lock = threading.Lock()

        def check(kind: str, data: bytes) -> None:
            with lock:
                if nonzero[1] >= 20:
                    return
                nonzero[1] += 1
            scores = json.loads(data)
            with lock:
                nonzero[0] += sum(1 for s in scores if s.get("Score", 0) > 0)
        streams = decision_streams(cl, urls, self.gaps, rec, a.decision_streams,
                                   a.decision_rate, ("prioritize",), check)
        with CpuPhase(groups) as ph:
            run_streams(streams, a.duration)
        d = out["decisions"] = {"kind": "extender prioritize, NodeNames = every node",
                                **per_op(ph, rec), "nonzero_scores_in_first_20": nonzero[0]}
        log(f"{label} decisions: {rec.count}, p99 {d['p99_ms']} ms, server CPU "
            f"{d['server_cpu_ms_per_op']} ms each ({d['server_cpu_ms_per_op_above_idle']} above "
            f"idle) {ph.cpu}; loadgen {ph.loadgen:.2f} s; machine busy {ph.busy}")
        if rec.errors:
            self.fail(f"{label}: decision phase had {rec.errors} errors")
        if nonzero[0] == 0:
            self.fail(f"{label}: every prioritize score was 0 (nothing measured)")
        return out

    # -- single ----------------------------------------------------------------------------------

    def run_single(self, cl: Cluster) -> None:
        log("== single: one scheduler, no Redis")
        s = Scheduler(self.work / "single", extra=self.sched_cfg()).start(timeout=60)
        res: dict[str, Any] = {}
        try:
            res["load"] = self.load_nodes(cl, [s.url], "single")
            res.update(self.cost_phases(cl, [s.url], {"scheduler": [s.daemon.pid]},
                                        ("scheduler",), "single"))
            res["rss_mib"] = rss_mib(s.daemon.pid)
        finally:
            s.stop()
        self.out["single"] = res

    # -- replicas --------------------------------------------------------------------------------

    def start_redis(self) -> None:
        d = self.work / "redis"
        self.redis = RedisHA(d).start(timeout=60)
        self.redis_cfg = {"redis": self.redis.scheduler_section(
            self.work / "redis.password", lease_ttl=f"{LEASE_TTL_S}s", wait_replicas=1,
            wait_timeout="500ms")}

    def start_replica(self, i: int, port: int | None = None, gen: int = 0) -> Scheduler:
        cfg = self.sched_cfg()
        cfg.update(self.redis_cfg)
        s = Scheduler(self.work / f"replica{i}-{gen}", port=port, extra=cfg)
        self.started[s.url] = time.monotonic()
        return s.start(timeout=120)

    def groups(self) -> dict[str, list[int | None]]:
        return {"schedulers": [r.daemon.pid for r in self.replicas],
                "redis_servers": [n.daemon.pid for n in self.redis.data_nodes if n.daemon],
                "sentinels": [n.daemon.pid for n in self.redis.sentinel_nodes if n.daemon]}

    def run_replicas(self, cl: Cluster) -> None:
        a = self.a
        log(f"== replicas: {a.replicas} schedulers on Redis (primary, 1 replica, 3 Sentinels)")
        self.start_redis()
        self.replicas = [self.start_replica(i) for i in range(a.replicas)]
        self.logs: list[Path] = [r.dir / "scheduler.log" for r in self.replicas]
        urls = [r.url for r in self.replicas]
        res: dict[str, Any] = {}
        self.out["replicas"] = res
        res["load"] = self.load_nodes(cl, urls, "replicas")
        groups = self.groups()
        # The ratio counts schedulers and redis-servers (Sentinels are reported apart).
        res.update(self.cost_phases(cl, urls, groups, ("schedulers", "redis_servers"), "replicas"))
        res["rss_mib"] = {"schedulers": [rss_mib(r.daemon.pid) for r in self.replicas],
                          "redis_servers": [rss_mib(n.daemon.pid) for n in self.redis.data_nodes]}
        if a.faults:
            self.lease_kill(cl)
            self.replica_kill(cl)
            self.redis_kill(cl)
        res["metrics"] = {r.url: {k: v for k, v in metrics(r.url).items()
                                  if k.startswith(("shoal_scheduler_redis", "shoal_scheduler_state_",
                                                   "shoal_scheduler_announces_unshared",
                                                   "shoal_scheduler_shared_state_stale"))}
                          for r in self.replicas if r.daemon.alive}

    def live_urls(self) -> list[str]:
        return [r.url for r in self.replicas if r.daemon.alive]

    def replica_kill(self, cl: Cluster) -> None:
        a = self.a
        victim = 1 % len(self.replicas)
        log(f"== failure 2: replica {victim} killed (SIGKILL) under heartbeats and decisions")
        urls = [r.url for r in self.replicas]
        hb, dec = Recorder(), Recorder()
        streams = heartbeat_streams(cl, urls, self.gaps, hb, a.hb_streams, a.hb_rate) + \
            decision_streams(cl, urls, self.gaps, dec, a.decision_streams, a.decision_rate,
                             ("prioritize", "place"))
        killed_at = [0.0]

        def during(el: float) -> None:
            if not killed_at[0] and el >= a.duration / 3:
                killed_at[0] = time.monotonic()
                self.replicas[victim].kill()
                log(f"   replica {victim} killed at {el:.1f} s")
        wall = run_streams(streams, a.duration, during)
        eps = [e for e in self.gaps.since(killed_at[0] - 1)]
        gap = max((e["gap_s"] for e in eps), default=0.0)
        per_stream: dict[str, float] = {}
        for e in eps:
            per_stream[e["stream"]] = max(per_stream.get(e["stream"], 0.0), e["gap_s"])
        causes: dict[str, int] = {}
        for e in eps:
            key = e["cause"].split(":")[0] + " (" + e["what"] + ")"
            causes[key] = causes.get(key, 0) + 1
        res = {"killed": self.replicas[victim].url, "wall_s": round(wall, 2),
               "episode_causes": causes,
               "longest_episode": max(eps, key=lambda e: e["gap_s"]) if eps else None,
               "heartbeats": hb.summary(wall), "decisions": dec.summary(wall),
               "failover_gap_s": round(gap, 4),
               "streams_with_a_gap": len(per_stream),
               "gap_s_per_stream": {k: round(v, 4) for k, v in sorted(per_stream.items())},
               "episodes": len(eps), "gave_up": sum(1 for e in eps if "gave up" in e["what"])}
        log(f"   failover gap {gap:.3f} s over {len(per_stream)} streams; heartbeats "
            f"{hb.count} ok / {hb.errors} failed, decisions {dec.count} ok / {dec.errors} failed")
        if hb.errors or dec.errors:
            self.fail(f"replica kill: {hb.errors} heartbeats and {dec.errors} decisions unanswered")
        # Started again (same port): how long it takes to load the state from Redis.
        t0 = time.monotonic()
        port = self.replicas[victim].port
        self.replicas[victim] = self.start_replica(victim, port=port, gen=1)
        self.logs.append(self.replicas[victim].dir / "scheduler.log")
        started = time.monotonic() - t0
        url = self.replicas[victim].url
        health = get(url + "/healthz")[1].decode(errors="replace")[:200]
        n = node_count(url)
        # Start-up waits for the first load only a few Redis timeouts (shared_state::start):
        # how long until the replica's view is whole.
        try:
            wait_until(lambda: node_count(url) >= len(cl.nodes), 120, "the whole view",
                       interval=0.2)
            whole = round(time.monotonic() - t0, 2)
        except Exception:  # noqa: BLE001 - reported
            whole = None
        res["restart"] = {"healthy_after_s": round(started, 2), "healthz_at_once": health,
                          "nodes_listed_at_once": n, "every_node_listed_after_s": whole}
        log(f"   restarted replica healthy after {started:.1f} s listing {n} nodes "
            f"({health.strip()!r}); every node listed after {whole} s")
        if whole is None:
            self.fail(f"restarted replica lists {node_count(url)} of {len(cl.nodes)} nodes")
        self.out["replicas"]["replica_kill"] = res

    def holders(self) -> list[Scheduler]:
        return [r for r in self.replicas if r.daemon.alive
                and metrics(r.url).get("shoal_scheduler_lease_held") == 1]

    def send_now(self, cl: Cluster, n: Node, health: str) -> None:
        n.health = health
        client = Client(f"now-{n.name}", self.live_urls(), 0, Gaps())
        try:
            cl.beat(client, n, None)
        finally:
            client.close()

    def lease_kill(self, cl: Cluster) -> None:
        a = self.a
        log(f"== failure 1: the lease holder killed while {a.jobs} jobs fail over and prewarms "
            f"are created")
        res: dict[str, Any] = {}
        self.out["replicas"]["lease_kill"] = res
        urls = [r.url for r in self.replicas]
        jobs: dict[str, dict[str, Any]] = {}
        for k in range(a.jobs):
            jid = f"bench-job-{k}"
            code, body = post(urls[k % len(urls)] + "/v1/place",
                              {"id": jid, "images": [self.images[k % len(self.images)]],
                               "nodes": 2, "gpus": 8, "standby": 1})
            if code != 200 or not json.loads(body).get("feasible"):
                self.fail(f"placing {jid}: {code} {body[:300]!r}")
                continue
            b = json.loads(body)
            jobs[jid] = {"members": b["chosen"], "standby": b.get("standby", [])}
        for u in urls:
            wait_until(lambda u=u: all(get(f"{u}/v1/jobs/{j}")[0] == 200 for j in jobs), 30,
                       f"every job known at {u}", interval=0.2)
        # Fail a member that is no other job's member or standby, so each decision is one job's.
        count: dict[str, int] = {}
        for j in jobs.values():
            for n in j["members"] + j["standby"]:
                count[n] = count.get(n, 0) + 1
        failing: dict[str, str] = {}
        for jid, j in jobs.items():
            only = [m for m in j["members"] if count[m] == 1]
            if only:
                failing[jid] = only[0]
        by_name = {n.name: n for n in cl.nodes}
        order = list(failing.items())
        first, second = order[: len(order) // 2], order[len(order) // 2:]
        holder = wait_until(self.holders, 20, "a lease holder")[0]
        victim = self.replicas.index(holder)
        res["jobs"] = len(jobs)
        res["jobs_failed_over"] = len(failing)
        # Background: heartbeats; clients creating prewarms on single nodes.
        hb = Recorder()
        streams = heartbeat_streams(cl, urls, self.gaps, hb, a.hb_streams, a.hb_rate,
                                    [n for n in cl.nodes if n.name not in failing.values()])
        created: list[dict[str, Any]] = []
        pw_nodes = [n.name for n in cl.nodes if n.name not in count][: a.prewarms]
        pw_rec = Recorder()
        pw_lock = threading.Lock()
        pw_clients = [Client(f"pw{k}", urls, k % len(urls), self.gaps) for k in range(2)]

        def make(k: int) -> None:
            with pw_lock:
                if not pw_nodes:
                    return
                node = pw_nodes.pop(0)
            c = pw_clients[k]
            t0 = time.monotonic()
            # With an Idempotency-Key, as shoalctl sends: retried on another replica after any
            # failure, and a request that was in fact made answers 200 with the same prewarm.
            status, hdrs, body, rep = c.call("POST", "/v1/prewarm", json.dumps(
                {"images": [self.images[0]], "nodes": [node]}).encode(), idempotent=True,
                what="prewarm", headers={"Idempotency-Key": f"bench-{node}"})
            pw_rec.add(time.monotonic() - t0, status)
            ok = status in (200, 202)
            with pw_lock:
                created.append({"node": node, "status": status, "replica": rep,
                                "replayed": hdrs.get("idempotent-replayed") == "true",
                                "id": json.loads(body).get("id") if ok else None})
        pw_streams = [Stream(f"pw{k}", a.prewarm_rate / 2, lambda k=k: make(k)) for k in range(2)]
        for k, s in enumerate(pw_streams):
            pw_clients[k].stop = s.halt.is_set
        for s in streams:
            s.start()
        try:
            # A replica decided nothing during its first failed_after (failures.cc: the view was
            # stale while nodes may not all have reported) until 2026-12-04; it now judges from
            # when the schedulers began serving. The wait stays, so runs before and after compare.
            youngest = max(self.started[r.url] for r in self.replicas if r.daemon.alive)
            wait = youngest + a.failed_after + 1 - time.monotonic()
            if wait > 0:
                log(f"   waiting {wait:.0f} s until every replica is past its start-up window")
                time.sleep(wait)
            res["waited_for_startup_window_s"] = round(max(0.0, wait), 1)
            for s in pw_streams:
                s.start()
            time.sleep(1)
            # The first half report failing over 2 s, the holder is killed 1 s in: some are
            # decided before the kill, some while it happens, the rest by the next holder.
            t_fail = time.monotonic()
            t_kill = 0.0
            for k, (jid, node) in enumerate(first):
                at = t_fail + 2.0 * k / max(1, len(first))
                if not t_kill and at >= t_fail + 1.0:
                    time.sleep(max(0.0, t_fail + 1.0 - time.monotonic()))
                    self.replicas[victim].kill()
                    t_kill = time.monotonic()
                time.sleep(max(0.0, at - time.monotonic()))
                self.send_now(cl, by_name[node], "failing")
            if not t_kill:
                time.sleep(max(0.0, t_fail + 1.0 - time.monotonic()))
                self.replicas[victim].kill()
                t_kill = time.monotonic()
            log(f"   {len(first)} members failing from {t_fail - t_kill:+.2f} s, the lease holder "
                f"{holder.url} killed at 0; {len(second)} more failing now")
            for jid, node in second:
                self.send_now(cl, by_name[node], "failing")
            new = wait_until(self.holders, LEASE_TTL_S + 15, "a new lease holder")[0]
            res["new_holder_after_s"] = round(time.monotonic() - t_kill, 2)

            def decided() -> bool:
                for u in self.live_urls():
                    for jid, node in failing.items():
                        code, body = get(f"{u}/v1/jobs/{jid}/failover")
                        if code != 200 or json.loads(body).get("failed", {}).get("node") != node:
                            return False
                return True
            try:
                wait_until(decided, a.decide_timeout, "a decision for every failed job on every "
                           "live replica", interval=0.5)
            except Exception as e:  # noqa: BLE001 - reported as a failure of the phase
                self.fail(f"lease kill: {str(e).splitlines()[0]}")
            res["all_decided_after_kill_s"] = round(time.monotonic() - t_kill, 2)
            time.sleep(LEASE_TTL_S + 1)  # time for a second decision, were one to be made
        finally:
            stop_streams(streams + pw_streams)
            for c in pw_clients:
                c.close()
        # Count: decisions in every replica's log (the killed one's too), failover prewarms
        # and created prewarms in the lists of the live replicas.
        decisions: dict[tuple[str, str], int] = {}
        deciders: dict[str, int] = {}
        for p in self.logs:
            text = p.read_text(errors="replace") if p.exists() else ""
            for m in DECIDED.finditer(text):
                if m[1] in failing:
                    decisions[(m[1], m[2])] = decisions.get((m[1], m[2]), 0) + 1
                    deciders[str(p.parent.name)] = deciders.get(str(p.parent.name), 0) + 1
        dup_decisions = sum(max(0, v - 1) for v in decisions.values())
        missing = [j for j, n in failing.items() if (j, n) not in decisions]
        per_replica = {}
        dup_fo = dup_pw = lost_pw = 0
        for r in self.replicas:
            if not r.daemon.alive:
                continue
            code, body = get(r.url + "/v1/prewarm")
            items = json.loads(body) if code == 200 else []
            fo_jobs: dict[str, int] = {}
            pw_nodes_seen: dict[str, int] = {}
            for it in items:
                c2, b2 = get(f"{r.url}/v1/prewarm/{it['id']}")
                if c2 != 200:
                    continue
                req = json.loads(b2).get("request", {})
                if it["id"].startswith("fo-") and req.get("job") in failing:
                    fo_jobs[req["job"]] = fo_jobs.get(req["job"], 0) + 1
                elif it["id"].startswith("pw-"):
                    for nd in req.get("nodes", []):
                        pw_nodes_seen[nd] = pw_nodes_seen.get(nd, 0) + 1
            d_fo = sum(max(0, v - 1) for v in fo_jobs.values())
            d_pw = sum(max(0, pw_nodes_seen.get(c["node"], 0) - 1) for c in created)
            l_pw = sum(1 for c in created
                       if c["status"] in (200, 202) and not pw_nodes_seen.get(c["node"]))
            per_replica[r.url] = {"failover_prewarms": sum(fo_jobs.values()),
                                  "duplicate_failover_prewarms": d_fo,
                                  "created_prewarms_listed": sum(pw_nodes_seen.values()),
                                  "duplicate_created_prewarms": d_pw,
                                  "acknowledged_prewarms_missing": l_pw}
            dup_fo, dup_pw, lost_pw = max(dup_fo, d_fo), max(dup_pw, d_pw), max(lost_pw, l_pw)
        res.update({
            "decisions_logged": sum(decisions.values()), "decisions_by_replica_dir": deciders,
            "duplicate_decisions": dup_decisions, "jobs_without_decision": missing,
            "duplicate_failover_prewarms": dup_fo,
            "prewarm_requests": len(created), "prewarm_requests_202": sum(
                1 for c in created if c["status"] == 202),
            "prewarm_requests_replayed": sum(1 for c in created if c.get("replayed")),
            "prewarm_requests_unanswered": sum(1 for c in created if c["status"] == 0),
            "prewarm_latency": pw_rec.summary(),
            "duplicate_created_prewarms": dup_pw, "acknowledged_prewarms_missing": lost_pw,
            "per_replica": per_replica, "heartbeats": hb.summary(),
            "duplicate_prewarms": dup_decisions + dup_fo + dup_pw})
        log(f"   decisions {sum(decisions.values())} for {len(failing)} failures "
            f"(duplicates {dup_decisions}, missing {len(missing)}); failover prewarms duplicated "
            f"{dup_fo}; {len(created)} prewarms requested, duplicated {dup_pw}, "
            f"acknowledged but missing {lost_pw}")
        if missing:
            self.fail(f"lease kill: no decision for {missing}")
        # The killed holder comes back, so the Redis phase has every replica.
        self.replicas[victim] = self.start_replica(victim, port=self.replicas[victim].port, gen=2)
        self.logs.append(self.replicas[victim].dir / "scheduler.log")
        for jid, node in failing.items():
            by_name[node].health = "ok"

    def redis_kill(self, cl: Cluster) -> None:
        a = self.a
        log("== failure 3: the Redis primary killed (SIGKILL) under heartbeats; half the nodes "
            "stop at the kill")
        res: dict[str, Any] = {}
        self.out["replicas"]["redis_kill"] = res
        urls = [r.url for r in self.replicas]
        unrep0 = sum(metrics(u).get("shoal_scheduler_redis_unreplicated_writes_total", 0) for u in urls)
        frozen_flag = threading.Event()
        frozen_nodes = [n for n in cl.nodes if n.index % 2 == 0]
        hb = Recorder()
        timeline: list[tuple[float, bool, float]] = []
        tl_lock = threading.Lock()

        class TimedRecorder(Recorder):
            def add(self, lat: float, status: int, stale: bool = False, resync: bool = False) -> None:
                super().add(lat, status, stale, resync)
                with tl_lock:
                    timeline.append((time.monotonic(), status == 200 and not stale, lat))
        hb = TimedRecorder()
        streams = heartbeat_streams(cl, urls, self.gaps, hb, a.hb_streams, a.hb_rate,
                                    frozen=lambda n: frozen_flag.is_set() and n.index % 2 == 0)
        for s in streams:
            s.start()
        try:
            time.sleep(max(2.0, a.duration / 3))
            frozen_flag.set()
            old = self.redis.kill_primary()
            t_kill = time.monotonic()
            log(f"   primary {old} killed")
            new = self.redis.wait_failover(old, timeout=60)
            t_promoted = time.monotonic()
            log(f"   Sentinel promoted {new} after {t_promoted - t_kill:.1f} s")

            def fresh() -> bool:
                return all(metrics(u).get("shoal_scheduler_shared_state_stale") == 0 for u in urls)
            wait_until(fresh, 30, "every replica back on Redis", interval=0.2)
            t_fresh = time.monotonic()
            time.sleep(1 if a.quick else 3)
        finally:
            stop_streams(streams)
        with tl_lock:
            after = [t for t, ok, _ in timeline if t > t_kill and ok]
            stale_after = sum(1 for t, ok, _ in timeline if t > t_kill and not ok)
            lat_fresh = [x for t, ok, x in timeline if t > t_fresh and ok]
            lat_before = [x for t, ok, x in timeline if t < t_kill and ok]
        first_ok = (after[0] - t_kill) if after else None
        # Every frozen node answered 200 without Shoal-Stale with seq S: the new primary's record
        # must say seq >= S.
        checked = [n for n in frozen_nodes if n.acked_seq > 0]
        violations, stale_lost, sample = 0, 0, []
        for i in range(0, len(checked), 1000):
            part = checked[i:i + 1000]
            replies = self.redis.cli_session([("HGET", f"shoal:n:{n.name}", "seq") for n in part],
                                             addr=new, timeout=60)
            for n, rep in zip(part, replies):
                seq = int(rep) if rep.strip().isdigit() else 0
                if seq < n.acked_seq:
                    violations += 1
                    if len(sample) < 10:
                        sample.append({"node": n.name, "acknowledged_seq": n.acked_seq,
                                       "redis_seq": seq})
                if n.acked_stale_seq > max(seq, n.acked_seq):
                    stale_lost += 1
        unrep = sum(metrics(u).get("shoal_scheduler_redis_unreplicated_writes_total", 0)
                    for u in urls) - unrep0
        res.update({
            "old_primary": str(old), "new_primary": str(new),
            "promoted_after_s": round(t_promoted - t_kill, 2),
            "replicas_fresh_after_s": round(t_fresh - t_kill, 2),
            "first_fresh_heartbeat_after_kill_s": None if first_ok is None else round(first_ok, 3),
            "stale_answers_after_kill": stale_after,
            # The new primary has no replica until the old one is back: every WAIT 1 then runs
            # to wait_timeout (500 ms).
            "heartbeat_p50_ms_before_kill": ms(percentile(lat_before, 50)),
            "heartbeat_p50_ms_after_failover": ms(percentile(lat_fresh, 50)),
            "nodes_checked": len(checked), "lost_acknowledged_writes": violations,
            "lost_examples": sample,
            "stale_acknowledged_not_in_redis": stale_lost,
            "unreplicated_writes_counted": unrep,
            "heartbeats": hb.summary()})
        log(f"   promoted after {t_promoted - t_kill:.1f} s, replicas fresh after "
            f"{t_fresh - t_kill:.1f} s; {len(checked)} nodes checked, {violations} lost "
            f"acknowledged writes; unreplicated counted {unrep:g}; {stale_after} stale answers")


def rss_mib(pid: int | None) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def headline(out: dict[str, Any]) -> None:
    """The top-level figures and their verdicts."""
    s, r = out.get("single", {}), out.get("replicas", {})
    ok = out["ok"]

    def ratio(k: str, key: str = "server_cpu_ms_per_op") -> float | None:
        a = s.get(k, {}).get(key)
        b = r.get(k, {}).get(key)
        return round(b / a, 4) if a and b and a > 0 else None
    hb, dec = ratio("heartbeats"), ratio("decisions")
    out["redis_cost_vs_single"] = {"heartbeat": hb, "decision": dec}
    out["redis_cost_vs_single_above_idle"] = {
        "heartbeat": ratio("heartbeats", "server_cpu_ms_per_op_above_idle"),
        "decision": ratio("decisions", "server_cpu_ms_per_op_above_idle"),
        "idle_server_cpu_s_per_s": {"single": s.get("idle", {}).get("server_cpu_s_per_s"),
                                    "replicas": r.get("idle", {}).get("server_cpu_s_per_s")}}
    out["p99_ms"] = {m: {k: x.get(k, {}).get("p99_ms") for k in ("heartbeats", "decisions")}
                     for m, x in (("single", s), ("replicas", r))}
    rk, lk, dk = r.get("replica_kill", {}), r.get("lease_kill", {}), r.get("redis_kill", {})
    out["failover_gap_s"] = rk.get("failover_gap_s")
    out["duplicate_prewarms"] = lk.get("duplicate_prewarms")
    out["lost_acknowledged_writes"] = dk.get("lost_acknowledged_writes")
    out["unreplicated_writes_counted"] = dk.get("unreplicated_writes_counted")
    t = {"failover_gap_s<=2": target(out["failover_gap_s"], "<=", GAP_BOUND, ok),
         "duplicate_prewarms==0": target(out["duplicate_prewarms"], "==", 0, ok),
         "lost_acknowledged_writes==0": target(out["lost_acknowledged_writes"], "==", 0, ok),
         "redis_cost_vs_single.heartbeat<=1.5": target(hb, "<=", COST_BOUND, ok,
                                                       "CPU of schedulers + redis-servers per heartbeat"),
         "redis_cost_vs_single.decision<=1.5": target(dec, "<=", COST_BOUND, ok,
                                                      "CPU of schedulers + redis-servers per prioritize")}
    out["targets"] = t


def summary(out: dict[str, Any]) -> None:
    s, r = out.get("single", {}), out.get("replicas", {})
    p = out["params"]
    print(f"scheduler replicas: {p['replicas']} replicas + Redis (1 replica, 3 Sentinels) vs one "
          f"scheduler; {p['nodes']} nodes, {p['objects']} objects, {p['held_per_node']} held per node")
    for k, what in (("heartbeats", "heartbeat"), ("decisions", "decision (prioritize)")):
        a, b = s.get(k, {}), r.get(k, {})
        print(f"  {what:24s} single: {a.get('server_cpu_ms_per_op')} ms CPU, p99 {a.get('p99_ms')} ms"
              f" | replicas: {b.get('server_cpu_ms_per_op')} ms CPU, p99 {b.get('p99_ms')} ms"
              f" | ratio {out['redis_cost_vs_single'].get(k[:-1] if k == 'heartbeats' else 'decision')}")
    print(f"  failover gap (replica killed):   {out.get('failover_gap_s')} s")
    print(f"  duplicate prewarms (lease kill): {out.get('duplicate_prewarms')}")
    print(f"  lost acknowledged writes (Redis primary killed): {out.get('lost_acknowledged_writes')}"
          f" (unreplicated counted: {out.get('unreplicated_writes_counted')})")
    m = out.get("meta", {}).get("machine", {})
    sha = m.get("openssl_sha256_16k_bytes_per_s")
    print(f"  machine: {m.get('cpu_model')}, {m.get('cores')} cores, openssl sha256 "
          f"{sha / 1e6 if sha else 'n/a'} MB/s, load before {m.get('loadavg_before')}")
    print_verdicts(out["targets"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=None, help="nodes (default 5000; --quick 60)")
    ap.add_argument("--objects", type=int, default=None, help="distinct objects (default 200000)")
    ap.add_argument("--held-per-node", type=int, default=None, help="objects per node (default 400)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per phase (default 20)")
    ap.add_argument("--hb-rate", type=float, default=None, help="heartbeats/s offered (default 200)")
    ap.add_argument("--decision-rate", type=float, default=None, help="decisions/s offered (default 10)")
    ap.add_argument("--hb-streams", type=int, default=6)
    ap.add_argument("--decision-streams", type=int, default=3)
    ap.add_argument("--failed-after", type=float, default=None,
                    help="the schedulers' failover.failed_after and nodes.unhealthy_after in s "
                         "(default 120; --quick 6)")
    ap.add_argument("--jobs", type=int, default=None, help="jobs failed over in the lease phase")
    ap.add_argument("--prewarms", type=int, default=None, help="prewarms created in the lease phase")
    ap.add_argument("--prewarm-rate", type=float, default=10)
    ap.add_argument("--images", type=int, default=None, help="images (default 4; --quick 2)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--no-faults", dest="faults", action="store_false")
    ap.add_argument("--quick", action="store_true", help="a tiny smoke run (about 40 s)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 also when a correctness target (failover gap, duplicate prewarms, "
                         "lost writes) is missed; the cost targets are only reported")
    ap.add_argument("--json", default="")
    ap.add_argument("--perf", default="",
                    help="directory for `perf record -g` of the schedulers and redis-servers in "
                         "the idle and heartbeat phases (a profiled run's figures are skewed)")
    ap.add_argument("--perf-call-graph", default="fp",
                    help="perf's --call-graph: fp (cheap; stacks stop in code built without frame "
                         "pointers) or dwarf (whole stacks, large files)")
    ap.add_argument("--workdir", help="parent of the work directory (default $TMPDIR or /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack
    q = a.quick
    defaults = {"nodes": (5000, 60), "objects": (200_000, 2000), "held_per_node": (400, 40),
                "duration": (20.0, 1.5), "hb_rate": (200.0, 60.0), "decision_rate": (10.0, 10.0),
                "jobs": (12, 4), "prewarms": (40, 8), "failed_after": (120.0, 6.0), "images": (4, 2)}
    for k, (full, quick) in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, quick if q else full)
    a.load_timeout = 600.0
    a.decide_timeout = 60.0
    options = {k: v for k, v in vars(a).items() if k not in ("load_timeout", "decide_timeout")}
    m = meta("scheduler-replicas", options)
    m["machine"]["loadavg_before"] = [float(x) for x in
                                      os.environ.get("SHOAL_BENCH_LOADAVG_BEFORE", "").split()] or \
        m["machine"]["loadavg_before"]
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-replicas-", dir=a.workdir))
    b = Bench(a, work)
    out = b.out
    out["params"] = {"replicas": a.replicas, "nodes": a.nodes, "objects": a.objects,
                     "held_per_node": a.held_per_node, "duration_s": a.duration,
                     "hb_rate": a.hb_rate, "decision_rate": a.decision_rate,
                     "hb_streams": a.hb_streams, "decision_streams": a.decision_streams,
                     "jobs": a.jobs, "prewarms": a.prewarms, "lease_ttl_s": LEASE_TTL_S,
                     "failed_after_s": a.failed_after,
                     "quick": q, "seed": a.seed}
    t0 = time.monotonic()
    try:
        b.start_images()
        log(f"building {a.nodes} nodes x {a.held_per_node} of {a.objects} objects")
        u = Universe(a.nodes, a.objects, a.held_per_node, a.seed, b.image_blobs)
        out["params"]["holdings"] = u.holdings_total
        out["params"]["images"] = len(b.images)
        b.run_single(Cluster(u, b.images, a.seed))
        b.run_replicas(Cluster(u, b.images, a.seed))
    except Exception as e:  # noqa: BLE001 - recorded, the JSON still written
        import traceback
        traceback.print_exc()
        b.fail(f"{type(e).__name__}: {str(e)[:2000]}")
    finally:
        out["wall_s"] = round(time.monotonic() - t0, 1)
        out["gaps_total"] = len(b.gaps.episodes)
    headline(out)
    out["meta"] = finish(m)
    if a.json:
        write(a.json, out)
    summary(out)
    from shoal_fixtures.procs import _stop_all
    _stop_all()
    if a.keep:
        log(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not out["ok"]:
        return 1
    if a.check and not all(t["met"] for k, t in out["targets"].items()
                           if not k.startswith("redis_cost")):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
