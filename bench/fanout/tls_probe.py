#!/usr/bin/python3
"""The CPU price of BitTorrent over TLS between two libtorrent sessions, without the cluster.

A seeder and a downloader, each its own process (Debian's python3-libtorrent, the libtorrent
2.0.8 that peerd links), move one object of --mib MiB over loopback, plain and SSL (an SSL
torrent rooted at a fresh CA, node certificates in Shoal's profile) in the same run. Each process
reports its user+sys CPU seconds from its first connection to completion; the result is CPU
seconds per GiB moved for each side and both ways. The sessions run with swarm/'s LAN settings
(the subset that moves bytes, copied from swarm/src/swarm.cc lan_settings) plus any --set.

    bench/fanout/tls_probe.py --mib 512 [--set key=value ...] [--perf DIR] [--rounds N]

--perf records `perf record -g` of each process during the transfer to DIR/<mode>-<role>.data.
This is a diagnostic for the fan-out benchmark's tls_extra_core_s_per_gib; it compares two
sessions, not peerd.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))

import libtorrent as lt  # noqa: E402

from shoal_fixtures import certs  # noqa: E402

GIB = 1 << 30

# swarm/src/swarm.cc lan_settings: what changes how bytes move between two sessions.
LAN = {
    "enable_dht": False, "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
    "enable_outgoing_utp": False, "enable_incoming_utp": False,
    "out_enc_policy": 2, "in_enc_policy": 2,  # pe_disabled
    "allow_multiple_connections_per_ip": True,
    "unchoke_slots_limit": -1, "choking_algorithm": 0,
    "max_out_request_queue": 1500, "max_allowed_in_request_queue": 4000,
    "max_queued_disk_bytes": 64 << 20, "send_buffer_watermark": 8 << 20,
    "send_buffer_low_watermark": 1 << 20, "send_buffer_watermark_factor": 150,
    "send_not_sent_low_watermark": 512 * 1024, "max_peer_recv_buffer_size": 8 << 20,
    "aio_threads": 2, "no_atime_storage": True, "strict_end_game_mode": True,
    "min_reconnect_time": 1,
    "alert_mask": lt.alert.category_t.error_notification | lt.alert.category_t.status_notification
    | lt.alert.category_t.port_mapping_notification,
}


def piece_size_for(size: int) -> int:  # swarm/src/metainfo.cc
    p = 64 << 10
    while p < size // 1024 and p < (4 << 20):
        p <<= 1
    return p


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def role_main(a) -> int:
    """One session (seed or get); prints one JSON line per event on stdout."""
    s = dict(LAN)
    s.update(json.loads(a.settings))
    s["listen_interfaces"] = "127.0.0.1:0s" if a.ssl else "127.0.0.1:0"
    ses = lt.session(s)
    atp = lt.add_torrent_params()
    atp.ti = lt.torrent_info(a.torrent)
    atp.save_path = a.save
    atp.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)
    if a.role == "seed":
        atp.flags |= lt.torrent_flags.seed_mode
    h = ses.add_torrent(atp)
    want = lt.socket_type_t.tcp_ssl if a.ssl else lt.socket_type_t.tcp
    port, need_cert = 0, not a.ssl
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (port and need_cert):
        for x in ses.pop_alerts():
            need_cert = need_cert or isinstance(x, lt.torrent_need_cert_alert)
            if isinstance(x, lt.listen_succeeded_alert) and x.socket_type == want:
                port = x.port
        time.sleep(0.01)
    if a.ssl:
        h.set_ssl_certificate(a.cert, a.key, a.dh)
    print(json.dumps({"port": port, "pid": os.getpid()}), flush=True)
    if a.role == "seed":
        sys.stdin.readline()  # until the parent says stop
        return 0
    line = json.loads(sys.stdin.readline())  # the seeder's port, once perf (if any) runs
    h.connect_peer(("127.0.0.1", line["port"]))
    while h.status().total_payload_download == 0:
        time.sleep(0.001)
    c0, t0 = cpu_s(), time.monotonic()
    while not h.status().is_seeding:
        time.sleep(0.005)
    c1, t1 = cpu_s(), time.monotonic()
    st = h.status()
    print(json.dumps({"cpu_s": c1 - c0, "wall_s": t1 - t0, "bytes": st.total_payload_download,
                      "wire_bytes": st.total_download}), flush=True)
    sys.stdin.readline()
    return 0


def ctxt_switches(pid: int) -> int:
    """Voluntary context switches of all of a process's threads so far (each is a thread that
    went to sleep: a wake-up paid by someone)."""
    n = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (t / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    n += int(line.split()[1])
        except OSError:
            pass
    return n


def proc_cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def one_run(a, work: Path, ssl: bool, ti_path: Path, pki: dict, tag: str) -> dict:
    get_dir = work / f"get-{tag}"
    shutil.rmtree(get_dir, ignore_errors=True)
    get_dir.mkdir()
    me = str(Path(__file__).resolve())

    def spawn(role: str, save: Path, cert) -> subprocess.Popen:
        args = [sys.executable, me, "--role", role, "--torrent", str(ti_path), "--save", str(save),
                "--settings", json.dumps(a.settings)]
        if ssl:
            args += ["--ssl", "--cert", str(cert.cert), "--key", str(cert.key),
                     "--dh", str(pki["dh"])]
        return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    seed = spawn("seed", work / "seed", pki["seed"])
    get = spawn("get", get_dir, pki["get"])
    sinfo, ginfo = json.loads(seed.stdout.readline()), json.loads(get.stdout.readline())
    perfs = []
    if a.perf:
        mode = "ssl" if ssl else "plain"
        for role, pid in (("seed", sinfo["pid"]), ("get", ginfo["pid"])):
            out = str(Path(a.perf) / f"{mode}-{role}")
            cmd = (["strace", "-c", "-f", "-o", out + ".strace", "-p", str(pid)] if a.strace else
                   ["perf", "record", *os.environ.get("PROBE_PERF_ARGS", "-g").split(), "-q",
                    "-o", out + ".data", "-p", str(pid)])
            perfs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        time.sleep(1.0)
    s0 = proc_cpu_s(sinfo["pid"])
    cs0 = ctxt_switches(sinfo["pid"]) + ctxt_switches(ginfo["pid"])
    get.stdin.write(json.dumps({"port": sinfo["port"]}) + "\n")
    get.stdin.flush()
    res = json.loads(get.stdout.readline())
    s1 = proc_cpu_s(sinfo["pid"])
    cs1 = ctxt_switches(sinfo["pid"]) + ctxt_switches(ginfo["pid"])
    for p in perfs:
        p.send_signal(2)
        p.wait()
    for p in (seed, get):
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)
    shutil.rmtree(get_dir, ignore_errors=True)
    gib = res["bytes"] / GIB
    return {"mode": "ssl" if ssl else "plain", "mib_s": res["bytes"] / (1 << 20) / res["wall_s"],
            "get_core_s_per_gib": res["cpu_s"] / gib,
            # the seeder's CPU over the downloader's window, about the same span
            "seed_core_s_per_gib": (s1 - s0) / gib,
            "wire_overhead": res["wire_bytes"] / res["bytes"] - 1,
            # both processes, over the transfer (the downloader's sleeps while polling included)
            "ctxt_switches_per_mib": (cs1 - cs0) / (res["bytes"] / (1 << 20))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=["seed", "get"], help=argparse.SUPPRESS)
    ap.add_argument("--torrent", help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    ap.add_argument("--ssl", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cert", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--dh", help=argparse.SUPPRESS)
    ap.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--mib", type=int, default=512, help="object size (default 512)")
    ap.add_argument("--rounds", type=int, default=2, help="plain/SSL pairs (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="libtorrent setting for both sessions (int, bool or string)")
    ap.add_argument("--perf", help="directory for perf record data of the last round")
    ap.add_argument("--strace", action="store_true",
                    help="with --perf: count system calls (strace -c) instead of sampling")
    ap.add_argument("--workdir", default="/dev/shm", help="parent of the work directory")
    a = ap.parse_args()
    if a.role:
        return role_main(a)
    extra = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        extra[k] = {"true": True, "false": False}.get(v, int(v) if v.lstrip("-").isdigit() else v)
    a.settings = extra
    work = Path(tempfile.mkdtemp(prefix="shoal-tls-probe-", dir=a.workdir))
    try:
        (work / "seed").mkdir()
        size = a.mib << 20
        data = os.urandom(size)
        name = hashlib.sha256(data).hexdigest()
        (work / "seed" / name).write_bytes(data)
        del data
        ca = certs.make_ca(work / "ca", "probe CA")
        pki = {"dh": certs.dh_params(work / "dh.pem"),
               "seed": certs.issue_node(ca, work / "c-seed", "node-a"),
               "get": certs.issue_node(ca, work / "c-get", "node-b")}
        tis = {}
        for ssl in (False, True):
            fs = lt.file_storage()
            fs.add_file(name, size)
            ct = lt.create_torrent(fs, piece_size_for(size), lt.create_torrent.v1_only)
            ct.set_priv(True)
            if ssl:
                ct.set_root_cert(ca.pem())
            lt.set_piece_hashes(ct, str(work / "seed"))
            p = work / f"{'ssl' if ssl else 'plain'}.torrent"
            p.write_bytes(lt.bencode(ct.generate()))
            tis[ssl] = p
        if a.perf:
            Path(a.perf).mkdir(parents=True, exist_ok=True)
        out = []
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for ssl in order:
                perf = a.perf if r == a.rounds - 1 else None
                saved, a.perf = a.perf, perf
                res = one_run(a, work, ssl, tis[ssl], pki, f"{r}")
                a.perf = saved
                out.append(res)
                print(f"round {r} {res['mode']:5}: {res['mib_s']:7.0f} MiB/s  get "
                      f"{res['get_core_s_per_gib']:.3f}  seed {res['seed_core_s_per_gib']:.3f} "
                      f"core-s/GiB  wire overhead {res['wire_overhead'] * 100:.2f} %  "
                      f"{res['ctxt_switches_per_mib']:.0f} switches/MiB", flush=True)

        def med(mode: str, k: str) -> float:
            v = sorted(x[k] for x in out if x["mode"] == mode)
            return v[len(v) // 2]

        both = {m: med(m, "get_core_s_per_gib") + med(m, "seed_core_s_per_gib")
                for m in ("plain", "ssl")}
        print(json.dumps({"settings": extra, "mib": a.mib, "plain_core_s_per_gib": both["plain"],
                          "ssl_core_s_per_gib": both["ssl"],
                          "ssl_extra_core_s_per_gib": both["ssl"] - both["plain"],
                          "runs": out}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
