#!/usr/bin/env python3
"""bench/fanout/run --scale 4,8,16,32: how the swarm's fan-out time grows with the node count.

For every N of the list, a fresh cluster in network namespaces (tests/support/shoal_fixtures/
cluster.py: the registry, registry-proxy with the scheduler's tracker, N peerd nodes, no
containerd), every link shaped to the same rate B. One blob of S incompressible bytes is pushed
and registry-proxy fetches it once (so the upstream is not timed, only the swarm); then every node
asks its own peerd for the blob over peerd's HTTP API at the same moment, one curl per node, and
the blob's bytes are checked against its digest on every node.

Per N: each node's time (curl's time_total), the last node's ÷ S/B (S/B: the time one link needs
for the blob, the lower bound of every node's time), the machine's CPU share during the pulls
(/proc/stat; the rate must be low enough that the largest N stays under 80 %, or the curve
measures the CPU, not the swarm), peerd's CPU per GiB received and where the bytes came from.
Then bench/fanout/swarm_model.py fits its three parameters to the measured points (its simulated
origin offers pieces as registry-proxy's `torrent.superseed_offers` and
`torrent.superseed_max_in_flight` say), reports how far each
point is from the model (also with that point left out of the fit) and predicts N to 1,000.

Targets (docs/p2p.md, "Scale curve"): last ÷ S/B ≤ 1.3 at the largest N, growth from the smallest
to the largest N ≤ 0.15, the model within ±10 % of every measured point.

    bench/fanout/run --scale 4,8,16,32 [--rate 20mbit] [--size-mib 64] [--plain] [--tcp-cc cubic]
                     [--json F]

Needs root. Bounded waits; each cluster is torn down before the next and on failure.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(REPO / "bench" / "fanout"))
from benchcpu import machine_jiffies, proc_cpu_s  # noqa: E402
from benchmeta import finish, meta, print_verdicts, target, write  # noqa: E402
from benchsets import parse_sets  # noqa: E402
from shoal_fixtures import oci  # noqa: E402
from shoal_fixtures.case import keep_tmp  # noqa: E402
from shoal_fixtures.cluster import Cluster  # noqa: E402
from shoal_fixtures.netns import rate_bits  # noqa: E402
import swarm_model  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
RATIO_BOUND = 1.3    # last node ÷ S/B at the largest N
GROWTH_BOUND = 0.15  # its growth from the smallest N to the largest
MODEL_BOUND = 0.10   # the model's relative error at every measured point
CPU_BOUND = 0.80     # machine CPU share while the largest N pulls: above it the curve measures CPU


def pull_all(c: Cluster, url_of, timeout: float) -> list[dict[str, Any]]:
    """Every node GETs the blob from its own peerd at once; time_total, size and the body's digest."""
    def one(i: int) -> dict[str, Any]:
        out = c.workdir / f"blob-{i}"
        cp = c.curl(i, "-o", str(out), "-w", "%{http_code} %{time_total} %{size_download}", url_of(i),
                    timeout=timeout)
        parts = cp.stdout.split()
        res = {"node": i + 1, "ok": False, "seconds": None, "bytes": 0, "error": ""}
        if len(parts) == 3 and parts[0] == "200":
            digest = "sha256:" + hashlib.sha256(out.read_bytes()).hexdigest()
            res.update(seconds=float(parts[1]), bytes=int(parts[2]), digest=digest)
            res["ok"] = cp.returncode == 0
        if not res["ok"]:
            # A 200 whose body broke off (curl exit 18) is a failure too, with curl's own words.
            res["error"] = f"node{i + 1}: curl exit {cp.returncode}: {cp.stdout.strip()} {cp.stderr.strip()[-300:]}"
        out.unlink(missing_ok=True)
        return res

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(c.peerds)) as ex:
        return list(ex.map(one, range(len(c.peerds))))


def med_max(vals: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(vals), 4), "max": round(max(vals), 4)}


def link_bytes(c: Cluster) -> list[tuple[int, int]]:
    """(received, sent) bytes of every namespace's link so far, read on the host's end of its veth
    (the host end's tx is what the namespace received): registry, registry-proxy, then the nodes."""
    def read(dev: str, what: str) -> int:
        return int(Path(f"/sys/class/net/{dev}/statistics/{what}").read_text())
    return [(read(x.veth_host, "tx_bytes"), read(x.veth_host, "rx_bytes")) for x in c.net.nodes]


def link_summary(before: list[tuple[int, int]], after: list[tuple[int, int]], blob: int) -> dict[str, Any]:
    """The pull's bytes on the links ÷ the blob: what the origin sent, what each node received and
    sent (framing, protocol messages, duplicates and the ACKs of what it received)."""
    d = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before)]
    rx = [x[0] / blob for x in d[2:]]
    tx = [x[1] / blob for x in d[2:]]
    return {
        "origin_sent_over_blob": round(d[1][1] / blob, 4),
        "node_received_over_blob": med_max(rx),
        "node_sent_over_blob": med_max(tx),
        "all_sent_over_nodes_blob": round(sum(x[1] for x in d[1:]) / (len(rx) * blob), 4),
    }


def swarm_summary(statuses: list[dict[str, Any]], blob: int) -> dict[str, Any]:
    """libtorrent's own totals per node (peerd's status "swarm"): what its connections received ÷
    the blob (payload, messages, TLS records), the redundant payload ÷ the blob and why, HAVE
    messages received."""
    rows = [s["swarm"] for s in statuses if "swarm" in s]
    if not rows:
        return {}
    return {
        "received_over_blob": med_max([x["received"] / blob for x in rows]),
        "redundant_over_blob": med_max([x["redundant"] / blob for x in rows]),
        "redundant_why_over_blob": {k: round(sum(x["redundant_why"].get(k, 0) for x in rows) / (len(rows) * blob), 4)
                                    for k in ("timed_out", "cancelled", "end_game", "other")},
        "haves_received": med_max([float(x["haves_received"]) for x in rows]),
    }


def one_point(n: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    payload = args.size_mib * MIB
    c = Cluster(root / f"n{n}", nodes=n, rate=args.rate, link_latency=args.link_latency,
                containerd=False, tls=not args.plain,
                log_level=args.log_level, peerd_extra=parse_sets(args.peerd_set) or None,
                proxy_extra=parse_sets(args.proxy_set) or None)
    try:
        t0 = time.monotonic()
        c.start()
        started_s = time.monotonic() - t0
        # Before any of the pull's connections (an accepted one takes its namespace's default too).
        tcp_cc = c.net.set_tcp_congestion_control(args.tcp_cc)
        layer = oci.LayerSpec(size=payload, seed=f"scale-{args.seed}", compression="none")
        layout, _ = c.push([layer], name="bench/scale", tag="v1")
        blob = layout.images[0].layers[0]
        digest, size = blob.digest, blob.size  # the tar: the payload and its headers
        sb = size * 8 / rate_bits(args.rate)
        ns = c.registry.host_port
        # registry-proxy fetches the blob and cuts its metainfo now, over unshaped links (the
        # upstream is not what this measures); then its link is B again like every node's.
        c.shape_infra(False)
        deadline, code = time.monotonic() + 300, ""
        while time.monotonic() < deadline:
            warm = c.curl(None, "-o", "/dev/null", "-w", "%{http_code}",
                          f"{c.proxy.url}/shoal/v1/metainfo/{digest}?repo=bench/scale&wait_ms=10000&ns={ns}",
                          timeout=30)
            code = warm.stdout.strip()
            if code == "200":
                break
            time.sleep(0.5)  # 202: still fetching
        if code != "200":
            raise RuntimeError(f"registry-proxy gave no metainfo in 300 s: HTTP {code}")
        c.shape_infra()
        peerd_cpu0 = [proc_cpu_s(p.daemon.pid) for p in c.peerds]
        proxy_cpu0 = proc_cpu_s(c.proxy.daemon.pid)
        busy0, total0 = machine_jiffies()
        links0 = link_bytes(c)
        origin0 = c.proxy_metrics()
        t_pull = time.monotonic()
        nodes = pull_all(c, lambda i: f"{c.peerds[i].url}/v2/bench/scale/blobs/{digest}?ns={ns}",
                         timeout=max(120.0, 20 * sb))
        wall = time.monotonic() - t_pull
        busy1, total1 = machine_jiffies()
        links = link_summary(links0, link_bytes(c), size)
        peerd_cpu = sum(proc_cpu_s(p.daemon.pid) for p in c.peerds) - sum(peerd_cpu0)
        proxy_cpu = proc_cpu_s(c.proxy.daemon.pid) - proxy_cpu0
        # peerd takes libtorrent's session totals every 5 s: wait until every node's cover the
        # payload it counted live (at most 6 s).
        deadline = time.monotonic() + 6
        while True:
            statuses = [p.status() for p in c.peerds]
            if time.monotonic() > deadline or all(
                    st.get("swarm", {}).get("received", 0) >=
                    st.get("bytes", {}).get("from_origin", 0) + st.get("bytes", {}).get("from_peers", 0)
                    for st in statuses):
                break
            time.sleep(0.5)
        report = c.byte_report(statuses)
        swarm_totals = swarm_summary(statuses, size)
        origin1 = c.proxy_metrics()

        def grew(name: str) -> float:
            return origin1.get(name, 0.0) - origin0.get(name, 0.0)
        links["origin_payload_sent_over_blob"] = round(grew("shoal_proxy_p2p_uploaded_bytes_total") / size, 4)
        superseed = {k: int(grew(f"shoal_proxy_superseed_{k}_total"))
                     for k in ("first_offers", "second_offers", "expired_offers", "expired_requested_offers")}
        for k in ("same_node", "other_node"):
            superseed[f"repeat_{k}_over_blob"] = round(grew(f"shoal_proxy_superseed_repeat_{k}_bytes_total") / size, 4)
    finally:
        c.stop()
    for x in nodes:
        if x["ok"] and (x.get("digest") != digest or x["bytes"] != size):
            x["ok"] = False
            x["error"] = (f"node{x['node']}: HTTP 200 with {x['bytes']} bytes, {x.get('digest')}; "
                          f"expected {size} bytes, {digest}")
    ok = all(x["ok"] for x in nodes)
    times = [x["seconds"] for x in nodes if x["seconds"] is not None]
    last = max(times) if times else None
    received_gib = n * size / GIB
    return {
        "nodes": n, "ok": ok, "s_over_b_s": round(sb, 3), "cluster_start_s": round(started_s, 1),
        "tcp_congestion_control": tcp_cc,
        "last_s": last, "p50_s": statistics.median(times) if times else None,
        "first_s": min(times) if times else None,
        "last_over_sb": last / sb if last else None,
        "wall_s": round(wall, 3),
        "cpu_util": round((busy1 - busy0) / max(total1 - total0, 1), 3),
        "peerd_core_s": round(peerd_cpu, 2), "proxy_core_s": round(proxy_cpu, 2),
        "peerd_core_s_per_gib": round(peerd_cpu / received_gib, 2),
        "blob_bytes": size,
        "link_bytes": links,
        "swarm_bytes": swarm_totals,
        "superseed": superseed,
        "bytes": {k: report.get(k) for k in ("from_registry_proxy_p2p", "from_peers", "from_registry_proxy_http",
                                              "upstream_bytes", "upstream_blob_gets")},
        "per_node_s": [x["seconds"] for x in nodes],
        "errors": [x["error"] for x in nodes if x["error"]][:5],
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench/fanout/run --scale", description=__doc__.splitlines()[0])
    ap.add_argument("--scale", required=True, help="node counts, comma-separated (each 1..32)")
    ap.add_argument("--rate", default="20mbit", help="every link's rate B, tc units (default 20mbit)")
    ap.add_argument("--size-mib", type=int, default=64, help="blob size S in MiB (default 64)")
    ap.add_argument("--link-latency", default="50ms",
                    help="tbf latency of every link: how long its queue holds at the rate (default 50ms)")
    ap.add_argument("--seed", default="1", help="seed of the blob's bytes (default 1)")
    ap.add_argument("--tcp-cc", default="",
                    help="TCP congestion control in every namespace (default: the host's, which "
                         "namespaces inherit; Debian's default is cubic)")
    ap.add_argument("--plain", action="store_true", help="no TLS (default: mutual TLS, SSL torrents)")
    ap.add_argument("--peerd-set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a peerd config key (dotted, e.g. swarm.streaming_window=4); repeatable")
    ap.add_argument("--proxy-set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a registry-proxy config key (e.g. torrent.superseed_offers=2)")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every pull succeeded and the model was fitted (smoke test)")
    ap.add_argument("--log-level", default="warn")
    ap.add_argument("--workdir", help="parent of the work directory (default $TMPDIR or /tmp)")
    args = ap.parse_args(argv)
    try:
        counts = sorted({int(x) for x in args.scale.split(",") if x.strip()})
    except ValueError:
        ap.error("--scale takes node counts like 4,8,16,32")
    if not counts or counts[0] < 1 or counts[-1] > 32:
        ap.error("--scale counts must be 1..32")
    if args.size_mib < 1:
        ap.error("--size-mib must be positive")
    m = meta("fanout-scale", vars(args))
    points = []
    keep = keep_tmp()
    workdir = (contextlib.nullcontext(tempfile.mkdtemp(prefix="shoal-scale-", dir=args.workdir)) if keep
               else tempfile.TemporaryDirectory(prefix="shoal-scale-", dir=args.workdir))
    with workdir as tmp:
        if keep:
            print(f"SHOAL_KEEP_TMP: the work directory (daemon logs) stays in {tmp}", flush=True)
        for n in counts:
            print(f"bench/fanout/run --scale: {n} nodes at {args.rate}, {args.size_mib} MiB...", flush=True)
            p = one_point(n, args, Path(tmp))
            points.append(p)
            last = p["last_over_sb"]
            print(f"  {n:>3} nodes: last {p['last_s'] or float('nan'):.2f} s = "
                  f"{last or float('nan'):.3f} x S/B ({p['s_over_b_s']:.2f} s), p50 {p['p50_s'] or float('nan'):.2f} s, "
                  f"cpu {p['cpu_util']:.0%}, peerd {p['peerd_core_s_per_gib']} core-s/GiB, "
                  f"origin sent {p['link_bytes']['origin_sent_over_blob']} x blob, a node received "
                  f"{p['link_bytes']['node_received_over_blob']['median']} (max "
                  f"{p['link_bytes']['node_received_over_blob']['max']}), redundant "
                  f"{p['swarm_bytes'].get('redundant_over_blob', {}).get('median')}, origin payload "
                  f"{p['link_bytes']['origin_payload_sent_over_blob']} (offers {p['superseed']}), "
                  f"HTTP {p['bytes'].get('from_registry_proxy_http')} B, "
                  f"{'ok' if p['ok'] else 'FAILED: ' + '; '.join(p['errors'])}", flush=True)
    all_ok = all(p["ok"] for p in points)
    ratios = [p["last_over_sb"] for p in points]
    blob = points[0]["blob_bytes"]
    piece = swarm_model.piece_size_for(blob)
    # The simulation's seed offers as registry-proxy is configured to.
    torrent = parse_sets(args.proxy_set).get("torrent", {})
    offers = (int(torrent.get("superseed_offers", swarm_model.SUPERSEED_OFFERS))
              if torrent.get("super_seeding", True) not in (False, "false") else None)
    model = swarm_model.fit_and_check([(p["nodes"], p["last_s"]) for p in points if p["last_s"]],
                                      size=blob, piece=piece, rate_bps=rate_bits(args.rate),
                                      offers=offers,
                                      max_in_flight=int(torrent.get("superseed_max_in_flight",
                                                                    swarm_model.MAX_IN_FLIGHT)))
    growth = ratios[-1] - ratios[0] if all(r is not None for r in ratios) and len(ratios) > 1 else None
    targets = {
        "last_over_sb_at_max": target(ratios[-1], "<=", RATIO_BOUND, ok=all_ok,
                                      note=f"{counts[-1]} nodes"),
        "growth": target(growth, "<=", GROWTH_BOUND, ok=all_ok and len(counts) > 1,
                         note=f"{counts[0]} to {counts[-1]} nodes"),
        "cpu_util_at_max": target(points[-1]["cpu_util"], "<", CPU_BOUND, ok=all_ok,
                                  note="the link rate is low enough for the machine"),
        "model_max_error": target(model.get("max_rel_error"), "<=", MODEL_BOUND, ok=all_ok,
                                  note="fitted to every point"),
        "model_max_error_left_out": target(model.get("max_rel_error_left_out"), "<=", MODEL_BOUND,
                                           ok=all_ok and len(counts) > 2,
                                           note="each point predicted from the others"),
    }
    out = {"benchmark": "fanout-scale", "ok": all_ok, "rate": args.rate, "size_mib": args.size_mib,
           "piece_bytes": piece, "tls": not args.plain, "points": points, "growth": growth,
           "model": model, "targets": targets, "meta": finish(m)}
    print(f"  model: {model.get('summary', '')}")
    print_verdicts(targets)
    if args.json:
        write(args.json, out)
        print(f"  JSON: {args.json}")
    if args.check and model.get("max_rel_error") is None:
        print("bench/fanout/run --scale --check: the model was not fitted", file=sys.stderr)
        return 1
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
