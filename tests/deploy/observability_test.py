"""deploy/observability/: the alert rules, the Grafana dashboard and the Prometheus Operator
objects, checked without a cluster (tests/peerd/cluster_test.py runs the Debian Prometheus against
the namespace cluster with the same rules and queries every panel):

- alerts.yaml passes `promtool check rules`, and its unit tests (alerts_test.yaml) pass: each alert
  fires on the series it is written for and stays quiet on a healthy cluster's;
- prometheusrule.yaml carries exactly alerts.yaml's groups (`--write-prometheusrule` regenerates it);
- the kustomization renders, every object validates strictly (validate_schema.js), and the
  dashboard ConfigMap holds grafana-dashboard.json byte for byte;
- the dashboard: unique panel ids, every panel has queries, every query is valid PromQL
  (promtool), and every metric that the rules and panels name is one a daemon defines.

    python3 tests/deploy/observability_test.py [--write-prometheusrule]
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OBS = ROOT / "deploy" / "observability"
sys.path.insert(0, str(HERE))
from render_test import HAVE_MODELS, KUSTOMIZE, MODELS, render, validate  # noqa: E402

HEADER = ("# The rules of alerts.yaml as a Prometheus Operator object. alerts.yaml is the source: after\n"
          "# editing it, regenerate this file (tests/deploy/observability_test.py checks they are equal):\n"
          "#   python3 tests/deploy/observability_test.py --write-prometheusrule\n")
SOURCE_DIRS = ("common", "cache", "swarm", "registry-proxy", "peerd", "scheduler", "netsetup")


def prometheusrule_text() -> str:
    rules = yaml.safe_load((OBS / "alerts.yaml").read_text())
    obj = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "shoal", "namespace": "shoal-system",
                        "labels": {"app.kubernetes.io/part-of": "shoal"}},
           "spec": rules}
    return HEADER + yaml.safe_dump(obj, sort_keys=False, width=100)


def dashboard() -> dict:
    return json.loads((OBS / "grafana-dashboard.json").read_text())


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel."""
    out = []
    for p in dashboard()["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def alert_exprs() -> list[tuple[str, str]]:
    out = []
    for g in yaml.safe_load((OBS / "alerts.yaml").read_text())["groups"]:
        for r in g["rules"]:
            out.append((r.get("alert") or r.get("record"), r["expr"]))
    return out


def grafana_to_promql(expr: str) -> str:
    """Grafana's variables replaced by what they become at query time."""
    return expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")


def defined_metric_names() -> tuple[set[str], set[str]]:
    """Metric names the daemons' sources define: whole literals ("shoal_cache_bytes"), and the
    suffixes added to a per-daemon prefix (p + "_tls_reloads_total")."""
    names, suffixes = set(), set()
    for d in SOURCE_DIRS:
        for f in (ROOT / d).rglob("*.cc"):
            text = f.read_text(errors="replace")
            names.update(re.findall(r'"(shoal_[a-z0-9_]+)"', text))
            suffixes.update(re.findall(r'\+ "(_[a-z0-9_]+)"', text))
    return names, suffixes


def composed(name: str, suffixes: set[str]) -> bool:
    """A name a daemon builds from its prefix and a suffix (shoal_proxy + _tls_reloads_total), or
    the cache's per-kind gauges (shoal_cache_<kind> + _bytes)."""
    return any(name.endswith(s) and re.fullmatch(r"shoal_(peerd|proxy|scheduler|cache_[a-z]+)",
                                                   name[: -len(s)]) for s in suffixes)


METRIC_RE = re.compile(r"\b(shoal_[a-z0-9_]+)\b")
REGEX_NAME_RE = re.compile(r'__name__=~"shoal_(?:\.\+|\[a-z\]\+)(_[a-z0-9_]+)"')


def referenced(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, per-daemon suffixes) an expression reads."""
    suffixes = set(REGEX_NAME_RE.findall(expr))
    stripped = REGEX_NAME_RE.sub("", expr)
    names = set()
    for n in METRIC_RE.findall(stripped):
        for hist in ("_bucket", "_sum", "_count"):
            if n.endswith(hist) and n.endswith("_seconds" + hist):
                n = n[: -len(hist)]
        names.add(n)
    return names, suffixes


@unittest.skipIf(shutil.which("promtool") is None, "promtool is not installed (tools/install-deps: prometheus)")
class AlertRules(unittest.TestCase):
    def test_rules_check(self):
        r = subprocess.run(["promtool", "check", "rules", str(OBS / "alerts.yaml")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_rule_unit_tests(self):
        r = subprocess.run(["promtool", "test", "rules", str(HERE / "alerts_test.yaml")],
                           capture_output=True, text=True, timeout=120, cwd=HERE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)

    def test_every_alert_has_a_unit_test(self):
        tested = set()
        for t in yaml.safe_load((HERE / "alerts_test.yaml").read_text())["tests"]:
            for a in t.get("alert_rule_test", []):
                if a.get("exp_alerts"):
                    tested.add(a["alertname"])
        alerts = {name for name, _ in alert_exprs()}
        self.assertEqual(alerts - tested, set(), "alerts with no test that makes them fire")

    def test_every_dashboard_query_is_valid_promql(self):
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"shoal:panel_{i}", "expr": grafana_to_promql(e)}
            for i, (_, e) in enumerate(panel_queries())]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(json.dumps(rules))
            f.flush()
            r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True,
                               timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class Dashboard(unittest.TestCase):
    def test_structure(self):
        d = dashboard()
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        self.assertEqual(d["uid"], "shoal-overview")
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            self.assertTrue(p.get("targets"), f"panel {p['title']!r} has no query")
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
                self.assertTrue(t["expr"].strip(), p["title"])

    def test_every_metric_named_is_defined_by_a_daemon(self):
        names, suffixes = defined_metric_names()
        self.assertIn("shoal_peerd_bytes_from_peers_total", names)  # the scan works
        missing = []
        for what, expr in panel_queries() + alert_exprs():
            ns, ss = referenced(expr)
            missing += [f"{what}: {n}" for n in ns if n not in names and not composed(n, suffixes)]
            missing += [f"{what}: *{s}" for s in ss if s not in suffixes]
        self.assertEqual(missing, [], "metrics no daemon defines")


class Objects(unittest.TestCase):
    def test_prometheusrule_matches_alerts(self):
        self.assertEqual((OBS / "prometheusrule.yaml").read_text(), prometheusrule_text(),
                         "regenerate: python3 tests/deploy/observability_test.py --write-prometheusrule")

    @unittest.skipIf(not KUSTOMIZE.exists(), f"no kustomize at {KUSTOMIZE} (tools/install-deps)")
    def test_renders_and_validates(self):
        out = render("deploy/observability")
        docs = [d for d in yaml.safe_load_all(out) if d]
        kinds = sorted(d["kind"] for d in docs)
        self.assertEqual(kinds, ["Certificate", "ConfigMap", "PodMonitor", "PrometheusRule",
                                 "ServiceMonitor", "ServiceMonitor"])
        for d in docs:
            self.assertEqual(d["metadata"]["namespace"], "shoal-system")
        cm = next(d for d in docs if d["kind"] == "ConfigMap")
        self.assertEqual(cm["data"]["shoal.json"], (OBS / "grafana-dashboard.json").read_text())
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        # Jobs are named as alerts.yaml expects: the selected object's app.kubernetes.io/name.
        for d in docs:
            if d["kind"] in ("ServiceMonitor", "PodMonitor"):
                self.assertEqual(d["spec"]["jobLabel"], "app.kubernetes.io/name")
                self.assertTrue(d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"].startswith("shoal-"))
        if HAVE_MODELS:
            r = validate(out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        else:
            self.skipTest(f"no Kubernetes schemas under {MODELS} (tools/install-deps)")

    @unittest.skipIf(not KUSTOMIZE.exists(), f"no kustomize at {KUSTOMIZE} (tools/install-deps)")
    def test_selected_objects_carry_the_labels(self):
        """The monitors select Services and peerd's pods by app.kubernetes.io/name; the base
        deploy/ must put that label where they look, and peerd must expose the metrics port."""
        base = [d for d in yaml.safe_load_all(render("deploy/base")) if d]
        svc = {d["metadata"]["name"]: d for d in base if d["kind"] == "Service"}
        for name in ("shoal-registry-proxy", "shoal-scheduler"):
            self.assertEqual(svc[name]["metadata"]["labels"]["app.kubernetes.io/name"], name)
            self.assertIn("http", [p["name"] for p in svc[name]["spec"]["ports"]])
        ds = next(d for d in base if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shoal-peerd")
        pod = ds["spec"]["template"]
        self.assertEqual(pod["metadata"]["labels"]["app.kubernetes.io/name"], "shoal-peerd")
        c = pod["spec"]["containers"][0]
        self.assertIn(9465, [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"])
        self.assertIn("metrics_listen=$(NODE_IP):9465", c["args"])


if __name__ == "__main__":
    if "--write-prometheusrule" in sys.argv:
        (OBS / "prometheusrule.yaml").write_text(prometheusrule_text())
        print(f"wrote {OBS / 'prometheusrule.yaml'}")
        sys.exit(0)
    unittest.main()
