"""deploy/ rendered by the real `kubectl kustomize` and checked against docs/security.md's
certificate profile and the way the daemons read their certificates:

- the kustomization renders, with every object in shoal-system and the kinds the install needs;
- every object validates against the Kubernetes API's and cert-manager's schemas (kubernetes-models
  and @kubernetes-models/cert-manager from npm, tools/install-deps; validate_schema.js) and against
  their TypeScript types, which refuse unknown fields: a misspelt field fails;
- every Certificate is issued by the CA Issuer, names one shoal:// URI SAN, carries DNS "*" only
  when it is a swarm member (registry-proxy), has only FQDN DNS names otherwise (rule 3), ECDSA
  P-256 keys rotated on renewal, and the usages of the profile's table;
- every daemon whose ConfigMap enables `tls` mounts a volume at the directory of each of its
  ca/cert/key files, not through a subPath (a subPath never sees a renewal), from the Secret of a
  Certificate here or (peerd) the node's /etc/shoal/pki; every URL of a Shoal service in a ConfigMap is
  https and names its server by the Service's FQDN.

No API server runs here: what cert-manager and kubelet do with these objects is not tested.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
URI_ROLES = {"node", "registry-proxy", "scheduler", "operator", "kube-scheduler"}
BOTH = {"digital signature", "server auth", "client auth"}


MODELS = Path(os.environ.get("SHOAL_K8S_MODELS_DIR", "/opt/shoal/k8s-models")) / "node_modules"


HAVE_MODELS = all((MODELS / p / "package.json").is_file() for p in (
    "kubernetes-models", "@kubernetes-models/cert-manager", "@kubernetes-models/prometheus-operator",
    "typescript")) and shutil.which("node") is not None


def validate(text: str) -> subprocess.CompletedProcess:
    """validate_schema.js on a multi-document YAML text (schemas, then TypeScript's types)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        return subprocess.run(["node", str(Path(__file__).with_name("validate_schema.js")), f.name],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "NODE_PATH": str(MODELS)})


def render() -> str:
    return subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy")], check=True,
                          capture_output=True, text=True, timeout=60).stdout


@unittest.skipIf(shutil.which("kubectl") is None, "kubectl is not installed (tools/install-deps)")
class DeployRender(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rendered = render()
        cls.docs = [d for d in yaml.safe_load_all(cls.rendered) if d]
        cls.by_kind: dict[str, list[dict]] = {}
        for d in cls.docs:
            cls.by_kind.setdefault(d["kind"], []).append(d)

    def test_renders_everything_into_one_namespace(self):
        for kind in ("Namespace", "Issuer", "Certificate", "ConfigMap", "Deployment", "DaemonSet",
                     "Service"):
            self.assertIn(kind, self.by_kind, kind)
        for d in self.docs:
            if d["kind"] != "Namespace":
                self.assertEqual(d["metadata"].get("namespace"), "shoal-system", d["metadata"])

    @unittest.skipIf(not HAVE_MODELS, f"no Kubernetes schemas under {MODELS} (tools/install-deps)")
    def test_every_object_validates_against_its_schema(self):
        r = validate(self.rendered)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"{len(self.docs)} objects, 0 problem(s)", r.stdout)

    @unittest.skipIf(not HAVE_MODELS, f"no Kubernetes schemas under {MODELS} (tools/install-deps)")
    def test_a_misspelt_field_fails_validation(self):
        """The validator is strict: a field the type does not declare fails, at any depth (the
        schemas alone accept it; validate_schema.js's TypeScript check does not)."""
        docs = yaml.safe_load_all(self.rendered)
        bad = []
        for d in docs:
            if d and d["kind"] == "DaemonSet":
                d["spec"]["template"]["spec"]["hostNetwrok"] = True
            if d and d["kind"] == "Service":
                d["spec"]["ports"][0]["targetPrt"] = 1
            bad.append(d)
        r = validate(yaml.safe_dump_all(bad))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("'\"hostNetwrok\"' does not exist", r.stdout)
        self.assertIn("'\"targetPrt\"' does not exist", r.stdout)

    def test_certificates_follow_the_profile(self):
        issuers = {i["metadata"]["name"] for i in self.by_kind["Issuer"] if "ca" in i["spec"]}
        want = {  # secret → (uri, swarm member, usages)
            "shoal-scheduler-tls": ("shoal://scheduler/main", False, BOTH),
            "shoal-registry-proxy-tls": ("shoal://registry-proxy", True, BOTH),
            "shoal-kube-scheduler-tls": ("shoal://kube-scheduler", False,
                                         {"digital signature", "client auth"}),
        }
        seen = {}
        for c in self.by_kind["Certificate"]:
            s = c["spec"]
            name = s["secretName"]
            self.assertIn(s["issuerRef"]["name"], issuers, name)
            self.assertEqual(s["issuerRef"]["kind"], "Issuer", name)
            self.assertEqual(len(s["uris"]), 1, name)
            uri = urllib.parse.urlparse(s["uris"][0])
            self.assertEqual(uri.scheme, "shoal", name)
            self.assertIn(uri.netloc, URI_ROLES, name)
            dns = s.get("dnsNames", [])
            for d in dns:
                if d != "*":
                    self.assertIn(".", d, f"{name}: single-label DNS name {d} (rule 3)")
                    self.assertFalse(all(ch in "0123456789abcdef" for ch in d), d)
            self.assertTrue(s["commonName"].startswith("shoal-"), name)  # rule 2
            self.assertEqual(s["privateKey"], {"algorithm": "ECDSA", "size": 256,
                                               "rotationPolicy": "Always"}, name)
            seen[name] = (s["uris"][0], "*" in dns, set(s["usages"]))
        self.assertEqual(seen, want)

    def mounts_of(self, kind: str, name: str) -> tuple[dict, dict]:
        """(mountPath → volume, volume name → volume) of a workload's first container."""
        w = next(d for d in self.by_kind[kind] if d["metadata"]["name"] == name)
        pod = w["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        c = pod["containers"][0]
        for m in c["volumeMounts"]:
            self.assertNotIn("subPath", m, f"{name}: {m}")
        return {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}, volumes

    def test_daemons_mount_the_files_their_tls_section_names(self):
        secrets = {c["spec"]["secretName"] for c in self.by_kind["Certificate"]}
        workloads = {"scheduler.yaml": ("Deployment", "shoal-scheduler"),
                     "registry-proxy.yaml": ("Deployment", "shoal-registry-proxy"),
                     "peerd.yaml": ("DaemonSet", "shoal-peerd")}
        checked = set()
        for cm in self.by_kind["ConfigMap"]:
            for key, text in cm["data"].items():
                cfg = yaml.safe_load(text)
                tls = cfg.get("tls", {})
                self.assertTrue(tls.get("enabled"), f"{key}: TLS is the default deployment")
                mounts, _ = self.mounts_of(*workloads[key])
                for f in ("ca_file", "cert_file", "key_file"):
                    d = str(Path(tls[f]).parent)
                    self.assertIn(d, mounts, f"{key}: {f} {tls[f]} is under no mount")
                    vol = mounts[d]
                    if "secret" in vol:
                        self.assertIn(vol["secret"]["secretName"], secrets, key)
                    else:
                        self.assertEqual(vol["hostPath"], {"path": "/etc/shoal/pki",
                                                           "type": "Directory"}, key)
                        self.assertEqual(key, "peerd.yaml")
                checked.add(key)
                for url in _urls(cfg):
                    host = urllib.parse.urlparse(url).hostname or ""
                    if not host.startswith("shoal-"):
                        continue  # upstream registries and dataset origins: public names
                    self.assertTrue(url.startswith("https://"), f"{key}: {url}")
                    self.assertTrue(host.endswith(".svc.cluster.local"), f"{key}: {url} (rule 3)")
        self.assertEqual(checked, set(workloads))


def _urls(node) -> list[str]:
    if isinstance(node, dict):
        return [u for v in node.values() for u in _urls(v)]
    if isinstance(node, list):
        return [u for v in node for u in _urls(v)]
    return [node] if isinstance(node, str) and "://" in node else []


if __name__ == "__main__":
    unittest.main()
