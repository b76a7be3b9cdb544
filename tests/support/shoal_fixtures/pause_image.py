"""A pause image for the CRI plugin's sandboxes, built here without any registry or network.

`pause.c` (next to this file) is compiled with `gcc -static -O2 -s` and packed by hand into an
OCI image archive (a tar holding `oci-layout`, `index.json` and `blobs/sha256/…`): one
uncompressed layer with `/pause` (mode 0755), a config with `Entrypoint ["/pause"]`, and an index
entry annotated with `io.containerd.image.name` = the full reference, which `ctr images import`
takes as the image's name verbatim. `Containerd.import_pause_image()` imports it into CRI's
`k8s.io` namespace under the name that the generated config gives as `sandbox_image`.

The archive is deterministic (mtime 0, uid/gid 0, sorted JSON) and cached under
`$SHOAL_PAUSE_CACHE` (default `<tmp>/shoal-pause-cache`), keyed by the source, the compiler's
version and the reference, so only the first run on a machine compiles (~1 s); later runs reuse
the tar.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .procs import FixtureError

PAUSE_IMAGE = "shoal.test/pause:static"  # the name `sandbox_image` defaults to in these tests
PAUSE_SOURCE = Path(__file__).resolve().parent / "pause.c"
CC = os.environ.get("CC", "gcc")
_FORMAT = "1"  # bump when the archive layout below changes

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
         "s390x": "s390x", "riscv64": "riscv64"}


def cache_dir() -> Path:
    d = Path(os.environ.get("SHOAL_PAUSE_CACHE") or Path(tempfile.gettempdir()) / "shoal-pause-cache")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cc_version() -> str:
    try:
        cp = subprocess.run([CC, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise FixtureError(f"no C compiler for the pause image ({CC}: {e.strerror})") from e
    return cp.stdout.splitlines()[0] if cp.stdout else CC


def build_pause_binary(directory: Path | None = None) -> Path:
    """Compiles pause.c statically (cached by source and compiler); returns the binary's path."""
    source = PAUSE_SOURCE.read_bytes()
    key = hashlib.sha256(source + _cc_version().encode()).hexdigest()[:16]
    out = (directory or cache_dir()) / f"pause-{key}"
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    cp = subprocess.run([CC, "-static", "-O2", "-s", "-o", str(tmp), str(PAUSE_SOURCE)],
                        capture_output=True, text=True, timeout=120)
    if cp.returncode != 0:
        raise FixtureError(f"{CC} -static pause.c failed (static libc: Debian libc6-dev):\n"
                           f"{cp.stderr[-2000:]}")
    tmp.rename(out)
    return out


def _tar_bytes(entries: list[tuple[str, bytes, int]]) -> bytes:
    """A deterministic tar of (name, data, mode) regular files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _json(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def pause_archive_bytes(binary: bytes, ref: str) -> bytes:
    """The OCI image archive of a pause image whose only file is `binary` at /pause."""
    arch = _ARCH.get(platform.machine(), platform.machine())
    layer = _tar_bytes([("pause", binary, 0o755)])
    config = _json({
        "architecture": arch,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/",
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "shoal pause.c"}],
    })
    manifest = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _digest(layer), "size": len(layer)}],
    })
    index = _json({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": _digest(manifest), "size": len(manifest),
                       "platform": {"architecture": arch, "os": "linux"},
                       "annotations": {"io.containerd.image.name": ref}}],
    })
    entries = [("oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644),
               ("index.json", index, 0o644)]
    entries += [(f"blobs/sha256/{_digest(b).removeprefix('sha256:')}", b, 0o644)
                for b in (layer, config, manifest)]
    return _tar_bytes(entries)


def pause_archive(ref: str = PAUSE_IMAGE) -> Path:
    """The cached OCI archive of the pause image named `ref` (built on first use)."""
    binary = build_pause_binary()
    key = hashlib.sha256(f"{_FORMAT}\0{binary.name}\0{ref}".encode()).hexdigest()[:16]
    out = cache_dir() / f"pause-image-{key}.tar"
    if not out.exists():
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        tmp.write_bytes(pause_archive_bytes(binary.read_bytes(), ref))
        tmp.rename(out)
    return out
