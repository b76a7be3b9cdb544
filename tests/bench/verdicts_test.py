#!/usr/bin/env python3
"""The benchmarks' verdict rules, checked on synthetic results, no daemons:

  - a ratio is compared unrounded: 1.6004 is missed against <= 1.6;
  - a fan-out warm phase with any upstream byte is missed, whatever its time;
  - a target whose phase failed is missed;
  - tools/bench-docs sums verdicts up only within one condition (same options and commit).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "lib"))
sys.path.insert(0, str(REPO / "tests" / "support"))


def load(path: Path, name: str):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


fanout = load(REPO / "bench" / "fanout" / "run", "fanout_run")
docs = load(REPO / "tools" / "bench-docs", "bench_docs")


def summary(cold=None, warm=None, warm_upstream=0, ok=True):
    s = {"phases": {}}
    if cold is not None:
        s["phases"]["cold"] = {"ok": ok}
        s.update(cold_vs_lower_bound=cold, upstream_bytes_ratio=1.0)
    if warm is not None:
        s["phases"]["warm"] = {"ok": ok}
        s.update(warm_vs_lower_bound=warm, warm_upstream_bytes=warm_upstream)
    return s


class FanoutVerdicts(unittest.TestCase):
    def test_unrounded(self):
        t = fanout.targets(summary(cold=1.6004), 8)
        self.assertFalse(t["cold_vs_lower_bound<=1.6"]["met"], t)
        t = fanout.targets(summary(cold=1.6), 8)
        self.assertTrue(t["cold_vs_lower_bound<=1.6"]["met"], t)

    def test_warm_with_upstream_bytes_is_missed(self):
        t = fanout.targets(summary(warm=1.1, warm_upstream=1), 8)
        self.assertFalse(t["warm_upstream_bytes==0"]["met"], t)
        self.assertFalse(t["warm_vs_lower_bound<=1.3"]["met"], t)
        t = fanout.targets(summary(warm=1.1, warm_upstream=0), 8)
        self.assertTrue(t["warm_vs_lower_bound<=1.3"]["met"], t)

    def test_failed_phase_is_missed(self):
        t = fanout.targets(summary(cold=1.0, ok=False), 8)
        self.assertFalse(t["cold_vs_lower_bound<=1.6"]["met"], t)


class DocsPooling(unittest.TestCase):
    def run_of(self, cond, commit, met):
        return (Path("/x.json"), {"meta": {"benchmark": "fanout", "condition": cond, "commit": commit},
                                  "targets": {"t": {"value": 1, "op": "<=", "bound": 1, "met": met}}})

    def test_only_like_for_like_is_summed(self):
        runs = [self.run_of({"phases": ["cold", "warm"]}, "a", False),
                self.run_of({"phases": ["cold", "warm"]}, "a", True),
                self.run_of({"phases": ["warm"]}, "b", True),
                self.run_of({"phases": ["warm"]}, "b", True)]
        docs.REPO = Path("/")
        text = docs.table("fanout", runs)
        self.assertIn("runs [1], [2] (same options and commit): t met in 1 of 2", text)
        self.assertIn("runs [3], [4] (same options and commit): t met in 2 of 2", text)
        self.assertNotIn("of 4", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
