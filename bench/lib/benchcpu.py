"""CPU accounting the benchmarks share: one process's user+sys seconds and the machine's busy
jiffies, both from /proc."""
from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int | None) -> float:
    """utime + stime of one live process, in seconds (0 when gone)."""
    if not pid:
        return 0.0
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat (user nice system idle iowait
    irq softirq steal; guest time is already inside user)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:9]]
    idle = vals[3] + vals[4]
    return sum(vals) - idle, sum(vals)


def threads_cpu_s(pid: int | None) -> dict[int, tuple[str, float]]:
    """Each live thread of one process: tid → (its name, utime + stime seconds). The daemons name
    their threads (docs/operations.md, "Threads"); empty when the process is gone."""
    out: dict[int, tuple[str, float]] = {}
    if not pid:
        return out
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = text[text.index("(") + 1:text.rindex(")")]
            rest = text.rsplit(")", 1)[1].split()
            out[int(tid)] = (name, (int(rest[11]) + int(rest[12])) / TICK)
        except (OSError, IndexError, ValueError):
            continue
    return out


def cpu_by_thread_name(before: list[dict[int, tuple[str, float]]],
                       after: list[dict[int, tuple[str, float]]],
                       process_delta_s: float) -> dict[str, float]:
    """CPU seconds per thread name between two threads_cpu_s() snapshots of the same processes
    (one dict per process, in the same order), summed over the processes, largest first. Threads
    that ended in between took their time with them: what the processes spent beyond the live
    threads is "(threads that exited)". """
    by: dict[str, float] = {}
    for b, a in zip(before, after):
        for tid, (name, cpu) in a.items():
            by[name] = by.get(name, 0.0) + cpu - (b[tid][1] if tid in b else 0.0)
    gone = process_delta_s - sum(by.values())
    if gone > 0.005:
        by["(threads that exited)"] = gone
    return {k: round(v, 3) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}


def shares(by: dict[str, float], n: int = 6) -> str:
    """The `n` largest entries of a cpu_by_thread_name() result as "name 71%, ..." ("" when it is
    empty)."""
    total = sum(by.values())
    if total <= 0:
        return ""
    top = sorted(by.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v / total * 100:.0f}%" for k, v in top)
