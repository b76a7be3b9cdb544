"""--peerd-set/--proxy-set KEY=VALUE options of the benchmarks: daemon config overrides."""
from __future__ import annotations

import json
from typing import Any


def parse_sets(items: list[str]) -> dict[str, Any]:
    """["swarm.foo=1", "torrent.bar=x"] → nested dict with JSON-parsed values where possible."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set wants key=value, not {item!r}")
        try:
            val = json.loads(raw)
        except ValueError:
            val = raw
        d = out
        parts = key.split(".")
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = val
    return out
