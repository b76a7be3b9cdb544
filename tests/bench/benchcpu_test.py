#!/usr/bin/env python3
"""bench/lib/benchcpu.py's split of a process's CPU by thread name, on this process itself: a named
thread that spins shows under its name, and one that spins and ends before the second snapshot
shows as "(threads that exited)"."""
from __future__ import annotations

import os
import sys
import threading
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "lib"))

from benchcpu import cpu_by_thread_name, proc_cpu_s, shares, threads_cpu_s  # noqa: E402


def spin(name: str, seconds: float, started: threading.Event | None = None,
         stop: threading.Event | None = None) -> None:
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(name)
    if started:
        started.set()
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    if stop:
        stop.wait(10)


class ThreadSplit(unittest.TestCase):
    def test_named_and_exited_threads(self):
        pid = os.getpid()
        started, stop = threading.Event(), threading.Event()
        live = threading.Thread(target=spin, args=("busy-live", 0.3, started, stop))
        live.start()
        self.assertTrue(started.wait(10))
        before, cpu0 = threads_cpu_s(pid), proc_cpu_s(pid)
        self.assertIn("busy-live", {n for n, _ in before.values()})
        gone = threading.Thread(target=spin, args=("busy-gone", 0.3))
        gone.start()
        gone.join()
        time.sleep(0.1)
        after, cpu1 = threads_cpu_s(pid), proc_cpu_s(pid)
        by = cpu_by_thread_name([before], [after], cpu1 - cpu0)
        stop.set()
        live.join()
        self.assertNotIn("busy-gone", by)  # it ended: its time is the exited share
        self.assertGreaterEqual(by.get("(threads that exited)", 0), 0.2, by)
        self.assertGreaterEqual(by.get("busy-live", 0), 0.2, by)
        self.assertEqual(list(by.values()), sorted(by.values(), reverse=True))

    def test_shares(self):
        self.assertEqual(shares({"a": 1.0, "b": 3.0, "c": 0.0}, 2), "b 75%, a 25%")
        self.assertEqual(shares({}), "")

    def test_gone_process(self):
        self.assertEqual(threads_cpu_s(None), {})
        self.assertEqual(threads_cpu_s(2 ** 22 + 12345), {})


if __name__ == "__main__":
    unittest.main()
