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
