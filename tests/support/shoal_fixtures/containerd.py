"""A private containerd 1.6 (root, state, sockets and certs.d under one temp dir) driven by `ctr`.

Several instances can run at once: each has its own root, state, gRPC/ttrpc sockets and `opt`
dir. By default the CRI plugin is disabled and pulls go through `ctr images pull --plain-http
--hosts-dir <dir>/certs.d`, so the registry host configuration (mirror first, upstream as
`server`) is exactly the `hosts.toml` that Kubernetes nodes use through the CRI plugin's
`config_path`. With `cri=True` the CRI plugin runs with `config_path` set to that same
directory, and `cri_pull()` asks it for the image the way kubelet does (ImageService/PullImage,
through `cri_pull.py`): containerd fetches and unpacks in its own process, without ctr's gRPC
content copy, into CRI's `k8s.io` namespace (`ctr` calls stay in the fixture's own namespace
unless given `namespace=CRI_NAMESPACE`).

Pod sandboxes: `Containerd(dir, cri=True, sandbox_image=PAUSE_IMAGE)` sets the CRI plugin's
`sandbox_image` to a pause image built here (pause_image.py: static pause.c packed into a cached
OCI archive) and `restrict_oom_score_adj = true`; `run_pod(name, namespace, labels)` imports that
image into `k8s.io` once (before RunPodSandbox, so the plugin never tries to pull it), then runs a
sandbox through `cri_pod.py` (RuntimeService/RunPodSandbox, host network so no CNI is needed,
own PID and IPC namespaces). `list_pods()`, `stop_pod(id)`, `remove_pod(id)` do the rest;
`stop()` removes the sandboxes `run_pod()` made that are still there. Without `sandbox_image`
the generated config is exactly what it was before pods existed.

Verified here (containerd 1.6.20, kernel 6.x, root on ext4):
- Both the `overlayfs` and the `native` snapshotters load and unpack multi-layer images; the
  fixture uses `overlayfs` (containerd's default and what nodes run). `native` remains selectable
  for a filesystem where overlay mounts fail (e.g. a root that is itself overlayfs).
- A hosts.toml holding only `server = …` makes ctr log "failed to decode hosts.toml: invalid
  `host` tree" and fall back to defaults; so `configure_registry()` always writes at least one
  `[host."…"]` table (the upstream itself when there is no mirror).
- containerd appends `?ns=<registry host:port>` to every request it sends to a mirror host, and
  moves on to the next host, then `server`, when a mirror refuses the connection or answers 404.
- `ctr content ls` prints human-rounded sizes, so exact sizes come from the content store's files
  (`root/io.containerd.content.v1.content/blobs/sha256/<hex>`).
- The CRI plugin starts without any CNI configuration (it logs "no network config found" and
  keeps serving the image service); plain-HTTP mirrors work through `hosts.toml` alone.
- RunPodSandbox works with cgroups v1 (cgroupfs, `SystemdCgroup = false`, the default), no
  seccomp or AppArmor profile, and a host-network sandbox, both in the host's namespaces and with
  `netns=` (~0.3 s per sandbox). The one setting it needs here is `restrict_oom_score_adj`: the
  VM's capability bounding set lacks CAP_SYS_RESOURCE, so runc cannot give the pause process the
  plugin's oom_score_adj of -998 (runc's debug log: "failed to update /proc/self/oom_score_adj:
  Permission denied"; RunPodSandbox says only "can't get final child's PID from pipe: EOF").
- `ctr images import` of an OCI archive whose index entry carries `io.containerd.image.name`
  names the image exactly that; the CRI plugin picks it up from the ImageCreate event.

Lifecycle: `Containerd(dir)`, `start()`, `stop()`/`kill()`; `start()` again after a stop reuses the
same root (restart tests). Not thread-safe.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .oci import Image, sha256_file
from .pause_image import PAUSE_IMAGE, pause_archive
from .procs import Daemon, FixtureError, run, wait_until

# SHOAL_SNAPSHOTTER=native overrides the default where overlay mounts fail (a root on overlayfs).
SNAPSHOTTER = os.environ.get("SHOAL_SNAPSHOTTER", "overlayfs")
NAMESPACE = "shoal-test"
CRI_NAMESPACE = "k8s.io"  # where the CRI plugin keeps images
# cri_pull.py needs grpcio, which tools/install-deps installs for Debian's own python3.
CRI_PYTHON = os.environ.get("SHOAL_CRI_PYTHON", "/usr/bin/python3")
CRI_PULL = Path(__file__).resolve().parent / "cri_pull.py"
CRI_POD = Path(__file__).resolve().parent / "cri_pod.py"


@dataclass
class PullResult:
    """What one `ctr images pull` did: the ref, the wall time, ctr's output, and the content
    store afterwards (digest → exact size)."""

    ref: str
    seconds: float
    output: str
    content: dict[str, int]


def _cgroup_mounts_script() -> str:
    """Shell commands that mount the host's cgroup hierarchies (as /proc/self/mountinfo lists
    them under /sys/fs/cgroup) again at the same places; each failure is ignored."""
    cmds = ["mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup 2>/dev/null || true;"]
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point, fstype, super_opts = fields[4], rest[0], rest[2]
        if fstype not in ("cgroup", "cgroup2") or not point.startswith("/sys/fs/cgroup/"):
            continue
        opts = ",".join(o for o in super_opts.split(",") if o not in ("rw", "ro")) or "defaults"
        if fstype == "cgroup" and all(o.startswith(("name=", "xattr")) for o in opts.split(",")):
            opts = "none," + opts  # a named hierarchy without controllers (name=systemd)
        cmds.append(f"mkdir -p {point} && mount -t {fstype} -o {opts} {fstype} {point} 2>/dev/null || true;")
    return " ".join(cmds) + " "


class Containerd:
    """One private containerd daemon. See the module comment for layout and findings."""

    def __init__(self, directory: str | os.PathLike, *, snapshotter: str = SNAPSHOTTER,
                 namespace: str = NAMESPACE, netns: str | None = None,
                 log_level: str = "info", extra_toml: str = "", cri: bool = False,
                 max_concurrent_downloads: int = 3, sandbox_image: str | None = None) -> None:
        """`cri`: run the CRI plugin (see the module comment); `max_concurrent_downloads` is
        its setting of that name (containerd's default, 3). `sandbox_image`: the CRI plugin's
        setting of that name (None keeps containerd's default, registry.k8s.io/pause:3.6);
        `PAUSE_IMAGE` is the locally built pause image that `run_pod()` imports itself."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.snapshotter = snapshotter
        self.cri = cri
        self.max_concurrent_downloads = max_concurrent_downloads
        self.sandbox_image = sandbox_image
        self._pause_imported: set[str] = set()
        self._pods: set[str] = set()  # sandbox ids from run_pod() not yet removed
        self.namespace = namespace
        self.netns = netns
        self.log_level = log_level
        self.extra_toml = extra_toml
        self.root = self.dir / "root"
        self.state = self.dir / "state"
        self.address = self.dir / "containerd.sock"
        self.hosts_dir = self.dir / "certs.d"
        self.hosts_dir.mkdir(exist_ok=True)
        self.config_path = self.dir / "config.toml"
        self.log_path = self.dir / "containerd.log"
        self.daemon: Daemon | None = None
        if len(str(self.address)) + len(".ttrpc") >= 108:
            raise FixtureError(f"socket path too long for AF_UNIX: {self.address}")

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30) -> "Containerd":
        self._write_config()
        argv = ["containerd", "--config", str(self.config_path)]
        if self.netns:
            # `ip netns exec` mounts a fresh /sys for the namespace, without the host's cgroup
            # mounts under /sys/fs/cgroup, and runc then fails every `ctr run` ("no cgroup mount
            # found in mountinfo"). The same hierarchies are mounted again in containerd's own
            # mount namespace first (best effort: pulls do not need them).
            argv = ["sh", "-c", _cgroup_mounts_script() + 'exec "$@"', "sh", *argv]
        self.daemon = Daemon(f"containerd({self.dir.name})", argv,
                             log_path=self.log_path, netns=self.netns).start()

        def ready() -> bool:
            self.daemon.check_alive("serving its socket")
            if not self.address.exists():
                return False
            return run(self._ctr_argv("version"), timeout=10, check=False).returncode == 0
        wait_until(ready, timeout, f"containerd serving {self.address}", interval=0.1,
                   diagnostics=self.daemon.diagnostics)
        return self

    def stop(self) -> None:
        """Stops the daemon; first removes the pod sandboxes `run_pod()` made that are still
        there (best effort), so that no shim or pause process outlives the test."""
        if self.daemon is not None:
            if self._pods and self.daemon.alive:
                self._remove_own_pods()
            self.daemon.stop()

    def kill(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()

    def __enter__(self) -> "Containerd":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.daemon.log_text() if self.daemon else ""

    def log_grep(self, pattern: str) -> list[str]:
        """Lines of the daemon's log that match the regular expression `pattern`."""
        rx = re.compile(pattern)
        return [line for line in self.log_text().splitlines() if rx.search(line)]

    def diagnostics(self) -> str:
        return self.daemon.diagnostics(40) if self.daemon else "(containerd never started)"

    # -- registry hosts --------------------------------------------------------------------------

    def configure_registry(self, registry: str, *, mirrors: Sequence[str] = (),
                           server: str | None = None,
                           capabilities: Sequence[str] = ("pull", "resolve"),
                           dial_timeout: str | None = None) -> Path:
        """Writes `certs.d/<registry>/hosts.toml`: `mirrors` (URLs, tried in order) then
        `server` (default `http://<registry>`). Returns the file's path.

        `registry` is the host[:port] in image references (e.g. "127.0.0.1:5000").
        `dial_timeout` (e.g. "200ms", as Spegel sets it) applies to the mirror hosts.
        """
        server = server or f"http://{registry}"
        caps = ", ".join(f'"{c}"' for c in capabilities)
        lines = [f'server = "{server}"', ""]
        hosts = list(mirrors) or [server]
        for url in hosts:
            lines.append(f'[host."{url}"]')
            lines.append(f"  capabilities = [{caps}]" if mirrors else
                         '  capabilities = ["pull", "resolve", "push"]')
            if dial_timeout and mirrors:
                lines.append(f'  dial_timeout = "{dial_timeout}"')
            lines.append("")
        path = self.hosts_dir / registry / "hosts.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))
        return path

    # -- ctr -------------------------------------------------------------------------------------

    def ctr(self, *args: str, timeout: float = 120, check: bool = True, namespace: str | None = None):
        """Runs `ctr --address … --namespace … <args>`; returns the CompletedProcess."""
        return run(self._ctr_argv(*args, namespace=namespace), timeout=timeout, check=check,
                   what=f"ctr {' '.join(args[:3])}")

    def pull(self, ref: str, *, platform: str | None = None, all_platforms: bool = False,
             user: tuple[str, str] | None = None, plain_http: bool = True,
             timeout: float = 300, check: bool = True) -> PullResult:
        """Pulls and unpacks `ref` with the instance's snapshotter through `certs.d`.

        On failure (with `check`) raises FixtureError carrying ctr's output and the daemon log.
        """
        args = ["images", "pull", "--hosts-dir", str(self.hosts_dir),
                "--snapshotter", self.snapshotter]
        if plain_http:
            args.append("--plain-http")
        if platform:
            args += ["--platform", platform]
        if all_platforms:
            args.append("--all-platforms")
        if user:
            args += ["--user", f"{user[0]}:{user[1]}"]
        t0 = time.monotonic()
        cp = run(self._ctr_argv(*args, ref), timeout=timeout, check=False)
        seconds = time.monotonic() - t0
        output = cp.stdout + cp.stderr
        if check and cp.returncode != 0:
            raise FixtureError(f"ctr images pull {ref}: exit status {cp.returncode}\n"
                               f"{_strip_progress(output)[-3000:]}\n{self.diagnostics()}")
        return PullResult(ref, seconds, output, self.content() if cp.returncode == 0 else {})

    def cri_pull(self, ref: str, *, timeout: float = 300, check: bool = True) -> PullResult:
        """Pulls and unpacks `ref` through the CRI plugin (needs `cri=True`), as kubelet does.

        The output is containerd's image id, or the error it answered. On failure (with `check`)
        raises FixtureError carrying that error and the daemon log.
        """
        if not self.cri:
            raise FixtureError("cri_pull needs a Containerd started with cri=True")
        t0 = time.monotonic()
        # The socket is a file: the client needs no namespace; containerd dials from its own.
        cp = run([CRI_PYTHON, str(CRI_PULL), str(self.address), ref, str(timeout)],
                 timeout=timeout + 30, check=False)
        seconds = time.monotonic() - t0
        output = cp.stdout + cp.stderr
        if check and cp.returncode != 0:
            raise FixtureError(f"CRI PullImage {ref}: exit status {cp.returncode}\n{output[-3000:]}\n"
                               f"{self.diagnostics()}")
        return PullResult(ref, seconds, output,
                          self.content(namespace=CRI_NAMESPACE) if cp.returncode == 0 else {})

    def pull_with(self, ref: str, *, cri: bool, timeout: float = 300) -> PullResult:
        """`cri_pull` with `cri`, else `pull`: how a caller that offers both clients pulls."""
        return self.cri_pull(ref, timeout=timeout) if cri else self.pull(ref, timeout=timeout)

    # -- pod sandboxes (CRI RuntimeService) ------------------------------------------------------

    def import_pause_image(self, ref: str | None = None) -> str:
        """Imports the locally built pause image (pause_image.py; cached tar) into CRI's `k8s.io`
        namespace as `ref` (default: `sandbox_image`, else PAUSE_IMAGE), unpacked with the
        instance's snapshotter. Returns the reference."""
        ref = ref or self.sandbox_image or PAUSE_IMAGE
        self.ctr("images", "import", "--snapshotter", self.snapshotter, str(pause_archive(ref)),
                 namespace=CRI_NAMESPACE, timeout=60)
        if ref not in self.images(namespace=CRI_NAMESPACE):
            raise FixtureError(f"ctr images import did not create {ref} in {CRI_NAMESPACE}: "
                               f"{self.images(namespace=CRI_NAMESPACE)}")
        self._pause_imported.add(ref)
        return ref

    def run_pod(self, name: str, namespace: str = "default",
                labels: dict[str, str] | None = None, *, uid: str | None = None,
                timeout: float = 60) -> str:
        """RunPodSandbox (needs `cri=True`) as kubelet does, in the host's network namespace;
        returns the sandbox id. With `sandbox_image=PAUSE_IMAGE`, imports the pause image first
        (once per instance) so that the CRI plugin never tries to pull it."""
        if self.sandbox_image == PAUSE_IMAGE and PAUSE_IMAGE not in self._pause_imported:
            self.import_pause_image(PAUSE_IMAGE)
        uid = uid or f"uid-{namespace}-{name}"
        args = ["run", name, namespace, uid, *(f"{k}={v}" for k, v in (labels or {}).items())]
        pod_id = self._cri_pod(*args, timeout=timeout).strip()
        self._pods.add(pod_id)
        return pod_id

    def stop_pod(self, pod_id: str, *, timeout: float = 60) -> None:
        """StopPodSandbox: the sandbox's processes are killed; it stays listed, NOTREADY."""
        self._cri_pod("stop", pod_id, timeout=timeout)

    def remove_pod(self, pod_id: str, *, timeout: float = 60) -> None:
        """RemovePodSandbox (stops it first if needed, as the CRI plugin does)."""
        self._cri_pod("remove", pod_id, timeout=timeout)
        self._pods.discard(pod_id)

    def list_pods(self, *, timeout: float = 30) -> list[dict]:
        """ListPodSandbox: one dict per sandbox with id, name, namespace, uid, attempt, state
        ("SANDBOX_READY" / "SANDBOX_NOTREADY"), created_at (ns), labels, annotations."""
        out = self._cri_pod("list", timeout=timeout)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def _remove_own_pods(self) -> None:
        for pod_id in sorted(self._pods):
            try:
                self.remove_pod(pod_id, timeout=20)
            except FixtureError:
                pass  # the daemon log keeps the cause; stopping must go on
        self._pods.clear()

    def _cri_pod(self, cmd: str, *args: str, timeout: float) -> str:
        if not self.cri:
            raise FixtureError(f"{cmd}_pod needs a Containerd started with cri=True")
        cp = run([CRI_PYTHON, str(CRI_POD), cmd, str(self.address), *args], timeout=timeout + 30,
                 check=False, env={"SHOAL_CRI_TIMEOUT": str(timeout)})
        if cp.returncode != 0:
            raise FixtureError(f"cri_pod.py {cmd} {' '.join(args)}: exit status {cp.returncode}\n"
                               f"{(cp.stdout + cp.stderr)[-3000:]}\n{self.diagnostics()}")
        return cp.stdout

    def images(self, namespace: str | None = None) -> list[str]:
        """References of the images in this namespace (or `namespace`)."""
        return [x for x in self.ctr("images", "ls", "-q", namespace=namespace).stdout.split() if x]

    def remove_image(self, ref: str, sync: bool = True) -> None:
        """Deletes the image record; with `sync`, waits for garbage collection of its content."""
        self.ctr("images", "rm", *(["--sync"] if sync else []), ref)

    def content_digests(self, namespace: str | None = None) -> list[str]:
        """Digests in the content store as the API lists them (`ctr content ls -q`)."""
        return sorted(x for x in self.ctr("content", "ls", "-q", namespace=namespace).stdout.split() if x)

    def content(self, verify: bool = False, namespace: str | None = None) -> dict[str, int]:
        """digest → exact size of every committed blob, read from the content store on disk.

        Only digests the API also lists are returned (a blob file without metadata is
        garbage). With `verify`, each file is hashed and a mismatch raises FixtureError.
        """
        listed = set(self.content_digests(namespace))
        blobs = self.root / "io.containerd.content.v1.content" / "blobs" / "sha256"
        out: dict[str, int] = {}
        for digest in listed:
            path = blobs / digest.removeprefix("sha256:")
            if not path.exists():
                raise FixtureError(f"containerd lists {digest} but {path} is missing")
            if verify and sha256_file(path) != digest:
                raise FixtureError(f"containerd content {path} does not match {digest}")
            out[digest] = path.stat().st_size
        return out

    def snapshot_dirs(self) -> list[Path]:
        """The filesystem root of every snapshot of this instance's snapshotter."""
        base = self.root / f"io.containerd.snapshotter.v1.{self.snapshotter}" / "snapshots"
        if not base.exists():
            return []
        dirs = sorted(p for p in base.iterdir() if p.is_dir())
        # overlayfs keeps each snapshot's upper dir in <id>/fs; native uses <id> itself.
        return [d / "fs" if (d / "fs").is_dir() else d for d in dirs]

    def verify_unpacked(self, images: Iterable[Image], check_content: bool = True) -> int:
        """Checks that every file of every layer of `images` exists in some snapshot with the
        right size (and, with `check_content`, the right sha256). Returns the files checked.

        Raises FixtureError naming the first missing or wrong file.
        """
        roots = self.snapshot_dirs()
        checked = 0
        for im in images:
            for layer in im.layers:
                for name, size, digest in layer.files:
                    hits = [r / name for r in roots if (r / name).is_file()]
                    if not hits:
                        raise FixtureError(f"{name} of layer {layer.digest} is in no "
                                           f"{self.snapshotter} snapshot under {self.root}")
                    good = [h for h in hits if h.stat().st_size == size and
                            (not check_content or sha256_file(h) == digest)]
                    if not good:
                        raise FixtureError(f"{name} of layer {layer.digest}: no snapshot copy "
                                           f"has size {size} and digest {digest}")
                    checked += 1
        return checked

    # -- internals -------------------------------------------------------------------------------

    def _ctr_argv(self, *args: str, namespace: str | None = None) -> list[str]:
        argv = ["ctr", "--address", str(self.address), "--namespace", namespace or self.namespace, *args]
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else argv

    def _sandbox_toml(self) -> str:
        """The CRI plugin settings for pod sandboxes (none when `sandbox_image` is unset)."""
        if not self.sandbox_image:
            return ""
        # The CRI plugin gives the sandbox oom_score_adj -998; without CAP_SYS_RESOURCE (this
        # VM's bounding set lacks it) runc's nsexec fails to write that ("failed to update
        # /proc/self/oom_score_adj: Permission denied", which RunPodSandbox reports only as
        # "can't get final child's PID from pipe: EOF"). restrict_oom_score_adj clamps every
        # value to containerd's own (0 here), which an unprivileged write may set.
        return (f'  sandbox_image = "{self.sandbox_image}"\n'
                '  restrict_oom_score_adj = true\n')

    def _write_config(self) -> None:
        d = self.dir
        if self.cri:
            plugins = "disabled_plugins = []"
            cri = f"""
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  max_concurrent_downloads = {self.max_concurrent_downloads}
{self._sandbox_toml()}  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{self.snapshotter}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d / 'cni' / 'bin'}"
    conf_dir = "{d / 'cni' / 'conf'}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{self.hosts_dir}"
"""
        else:
            plugins = 'disabled_plugins = ["io.containerd.grpc.v1.cri"]'
            cri = ""
        self.config_path.write_text(f"""version = 2
root = "{self.root}"
state = "{self.state}"
{plugins}
{cri}
[grpc]
  address = "{self.address}"

[ttrpc]
  address = "{self.address}.ttrpc"

[debug]
  level = "{self.log_level}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"

{self.extra_toml}
""")


def _strip_progress(text: str) -> str:
    # ctr's progress bars are long lines of '+' and ANSI escapes: keep the informative lines.
    keep = [ln for ln in text.splitlines() if "|" not in ln and "\x1b[" not in ln]
    return "\n".join(keep)
