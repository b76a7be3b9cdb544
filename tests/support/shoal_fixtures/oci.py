"""Test images without internet: writes OCI image layouts (oci-layout, index.json, blobs/sha256/…).

A layer is a tar holding one directory `shoal/` and one or more files of seeded pseudo-random
bytes, so layers are incompressible, unique per seed, and byte-identical for the same spec (the
same `LayerSpec` in two images gives one shared digest). Tars are written by hand (ustar headers,
no record padding, mtime 0, uid/gid 0) and gzip output has mtime 0 and no file name, so output
depends only on the spec. Large layers are streamed in 1 MiB chunks, never held in memory.

Formats: "oci" (OCI image manifest/index/config/layer media types) or "docker" (Docker schema 2
manifest, manifest list, container config, rootfs.diff.tar.gzip layers). In both cases the layout
itself (index.json) is an OCI index, as the image-layout spec requires; skopeo reads either from
`oci:DIR:TAG`.

Speed measured here (2 cores): seeded random bytes ~415 MB/s, gzip level 1 on random data
~59 MB/s, gzip level 0 (stored deflate blocks, still a valid gzip stream) ~740 MB/s. Hence
`LayerSpec.gzip_level` defaults to 1 for small layers and `large_layer()` uses level 0: a
300 MiB layer is written in about a second and keeps the usual tar+gzip media type.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

MIB = 1 << 20
CHUNK = MIB

MEDIA_TYPES = {
    "oci": {
        "manifest": "application/vnd.oci.image.manifest.v1+json",
        "index": "application/vnd.oci.image.index.v1+json",
        "config": "application/vnd.oci.image.config.v1+json",
        "layer_gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
        "layer_tar": "application/vnd.oci.image.layer.v1.tar",
    },
    "docker": {
        "manifest": "application/vnd.docker.distribution.manifest.v2+json",
        "index": "application/vnd.docker.distribution.manifest.list.v2+json",
        "config": "application/vnd.docker.container.image.v1+json",
        "layer_gzip": "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "layer_tar": "application/vnd.docker.image.rootfs.diff.tar",
    },
}
OCI_INDEX = MEDIA_TYPES["oci"]["index"]
MANIFEST_TYPES = {MEDIA_TYPES[f]["manifest"] for f in MEDIA_TYPES}
INDEX_TYPES = {MEDIA_TYPES[f]["index"] for f in MEDIA_TYPES}
REF_NAME = "org.opencontainers.image.ref.name"
DEFAULT_PLATFORMS = (("linux", "amd64"), ("linux", "arm64"))


@dataclass(frozen=True)
class LayerSpec:
    """What one layer contains. Equal specs produce byte-identical layers (same digest).

    size: bytes of pseudo-random payload, split evenly over `files` files.
    seed: selects the bytes and the file names; any int or str.
    compression: "gzip" (media type ...tar+gzip / ...tar.gzip) or "none" (...tar).
    gzip_level: 1 is real compression; 0 writes stored blocks (valid gzip, ~12x faster here).
    empty: a tar with no entries at all (1024 zero bytes), like Docker's well-known empty layer.
    """

    size: int = 64 * 1024
    seed: int | str = 0
    compression: str = "gzip"
    gzip_level: int = 1
    files: int = 1
    empty: bool = False

    def __post_init__(self) -> None:
        if self.compression not in ("gzip", "none"):
            raise ValueError(f"compression must be gzip or none, not {self.compression!r}")
        if not 0 <= self.gzip_level <= 9:
            raise ValueError(f"gzip_level must be 0..9, not {self.gzip_level}")
        if self.size < 0 or self.files < 1:
            raise ValueError("size must be >= 0 and files >= 1")


def large_layer(size: int = 300 * MIB, seed: int | str = "large") -> LayerSpec:
    """A big layer that is quick to make: gzip level 0 (see the module comment)."""
    return LayerSpec(size=size, seed=seed, gzip_level=0)


def empty_layer() -> LayerSpec:
    return LayerSpec(size=0, empty=True, seed="empty")


@dataclass(frozen=True)
class Blob:
    """A content descriptor: digest ("sha256:<hex>"), size in bytes, media type."""

    digest: str
    size: int
    media_type: str

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer(Blob):
    """A layer blob plus what its config refers to (diff_id) and what it unpacks to.

    files: (path inside the tar, size, "sha256:<hex>" of the content) of each regular file.
    """

    diff_id: str = ""
    uncompressed_size: int = 0
    files: tuple[tuple[str, int, str], ...] = ()


@dataclass(frozen=True)
class Image:
    """One single-platform image: its manifest, config and layers."""

    manifest: Blob
    config: Blob
    layers: tuple[Layer, ...]
    platform: tuple[str, str]
    manifest_bytes: bytes = field(repr=False, default=b"")

    def blobs(self) -> list[Blob]:
        """Config and layers (what a pull fetches under /blobs/), deduplicated, in order."""
        seen: dict[str, Blob] = {}
        for b in (self.config, *self.layers):
            seen.setdefault(b.digest, b)
        return list(seen.values())


@dataclass
class ImageLayout:
    """Description of a tagged image in an OCI layout directory.

    `top` is what the tag points to: the manifest of a single image, or the index / manifest list
    of a multi-platform image (then `index` is the same blob). `reference` is set by
    `Registry.push()` to where the image was pushed ("127.0.0.1:PORT/name:tag").
    """

    path: Path
    tag: str
    fmt: str
    top: Blob
    images: list[Image]
    index: Blob | None = None
    reference: str | None = None

    @property
    def oci_ref(self) -> str:
        """The skopeo source name, e.g. "oci:/tmp/x/layout:v1"."""
        return f"oci:{self.path}:{self.tag}"

    @property
    def skopeo_source(self) -> str:
        """What `skopeo copy` reads this image from without changing any digest.

        OCI images: `oci:DIR:TAG`. Docker-format images: skopeo 1.9's `oci:` transport only
        looks at index.json entries with OCI media types ("no descriptor found for reference"
        otherwise), so they are exported once to skopeo's `dir:` transport (blobs hard-linked).
        """
        if self.fmt == "oci":
            return self.oci_ref
        return f"dir:{self.export_dir()}"

    def export_dir(self) -> Path:
        """Writes (once) this tag as a skopeo `dir:` transport directory; returns its path.

        Layout of "Directory Transport Version: 1.1": `manifest.json` (the top manifest or
        list), `<hex>.manifest.json` per instance of a list, and every other blob as `<hex>`.
        """
        dest = self.path.parent / f"{self.path.name}.dir-{self.tag}"
        if (dest / "manifest.json").exists():
            return dest
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "version").write_text("Directory Transport Version: 1.1\n")
        for b in self.all_blobs().values():
            hexd = b.digest.removeprefix("sha256:")
            if b.digest == self.top.digest:
                name = "manifest.json"
            elif b.media_type in MANIFEST_TYPES:
                name = f"{hexd}.manifest.json"
            else:
                name = hexd
            target = dest / name
            if not target.exists():
                os.link(self.blob_path(b.digest), target)
        return dest

    @property
    def manifest_digests(self) -> list[str]:
        return [im.manifest.digest for im in self.images]

    @property
    def layer_digests(self) -> list[str]:
        return list(dict.fromkeys(layer.digest for im in self.images for layer in im.layers))

    def image(self, arch: str) -> Image:
        for im in self.images:
            if im.platform[1] == arch:
                return im
        raise KeyError(f"no {arch} image in {self.path}:{self.tag}")

    def all_blobs(self) -> dict[str, Blob]:
        """Every content-addressed object of this tag: index, manifests, configs, layers."""
        out: dict[str, Blob] = {}
        if self.index is not None:
            out[self.index.digest] = self.index
        for im in self.images:
            out.setdefault(im.manifest.digest, im.manifest)
            for b in im.blobs():
                out.setdefault(b.digest, b)
        return out

    def blob_path(self, digest: str) -> Path:
        return self.path / "blobs" / "sha256" / digest.removeprefix("sha256:")


class LayoutWriter:
    """Writes blobs into one OCI layout directory and maintains its index.json.

    Lifecycle: construct (creates the directory, oci-layout and blobs/sha256), add layers, images,
    indexes, then `tag()` each top-level object; every `tag()` rewrites index.json. Several tags
    (and so several images sharing blobs) can live in one layout. Not thread-safe.
    """

    def __init__(self, path: str | os.PathLike, fmt: str = "oci") -> None:
        if fmt not in MEDIA_TYPES:
            raise ValueError(f"fmt must be one of {sorted(MEDIA_TYPES)}, not {fmt!r}")
        self.path = Path(path)
        self.fmt = fmt
        self.media = MEDIA_TYPES[fmt]
        self.blob_dir = self.path / "blobs" / "sha256"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        (self.path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self._tags: dict[str, dict] = {}
        index_json = self.path / "index.json"
        if index_json.exists():
            for d in json.loads(index_json.read_text()).get("manifests", []):
                name = d.get("annotations", {}).get(REF_NAME)
                if name:
                    self._tags[name] = d
        self._write_index_json()

    # -- blobs -----------------------------------------------------------------------------------

    def add_bytes(self, data: bytes, media_type: str) -> Blob:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        dest = self.blob_dir / digest.removeprefix("sha256:")
        if not dest.exists():
            tmp = dest.with_name(f".tmp-{os.getpid()}-{dest.name}")
            tmp.write_bytes(data)
            tmp.rename(dest)
        return Blob(digest, len(data), media_type)

    def add_json(self, obj: dict, media_type: str) -> tuple[Blob, bytes]:
        data = json.dumps(obj, separators=(",", ":")).encode()
        return self.add_bytes(data, media_type), data

    def layer(self, spec: LayerSpec) -> Layer:
        """Writes the layer for `spec` (streaming) and returns its descriptor."""
        media = self.media["layer_gzip" if spec.compression == "gzip" else "layer_tar"]
        tmp = self.blob_dir / f".tmp-{os.getpid()}-layer"
        diff = hashlib.sha256()
        comp = hashlib.sha256()
        gz = (zlib.compressobj(spec.gzip_level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
              if spec.compression == "gzip" else None)
        usize = 0
        size = 0
        files: list[tuple[str, int, str]] = []
        with open(tmp, "wb") as out:
            def emit(chunk: bytes) -> None:
                nonlocal size
                if chunk:
                    comp.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            for piece in _layer_tar(spec, files):
                diff.update(piece)
                usize += len(piece)
                emit(gz.compress(piece) if gz is not None else piece)
            if gz is not None:
                emit(gz.flush())
        digest = "sha256:" + comp.hexdigest()
        dest = self.blob_dir / comp.hexdigest()
        if dest.exists():
            tmp.unlink()
        else:
            tmp.rename(dest)
        return Layer(digest, size, media, diff_id="sha256:" + diff.hexdigest(),
                     uncompressed_size=usize, files=tuple(files))

    # -- manifests -------------------------------------------------------------------------------

    def image(self, layers: Sequence[LayerSpec | Layer],
              platform: tuple[str, str] = ("linux", "amd64"),
              labels: dict[str, str] | None = None) -> Image:
        """Writes config and manifest for `layers` (specs are written first) on `platform`."""
        written = tuple(x if isinstance(x, Layer) else self.layer(x) for x in layers)
        os_name, arch = platform
        config = {
            "created": "1970-01-01T00:00:00Z",
            "architecture": arch,
            "os": os_name,
            "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"],
                       "Labels": dict(labels or {})},
            "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in written]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"shoal layer {i}"}
                        for i in range(len(written))],
        }
        config_blob, _ = self.add_json(config, self.media["config"])
        manifest = {
            "schemaVersion": 2,
            "mediaType": self.media["manifest"],
            "config": config_blob.descriptor(),
            "layers": [x.descriptor() for x in written],
        }
        manifest_blob, data = self.add_json(manifest, self.media["manifest"])
        return Image(manifest_blob, config_blob, written, (os_name, arch), data)

    def index(self, images: Sequence[Image]) -> Blob:
        """Writes an OCI index or Docker manifest list over `images`."""
        index = {
            "schemaVersion": 2,
            "mediaType": self.media["index"],
            "manifests": [{**im.manifest.descriptor(),
                           "platform": {"architecture": im.platform[1], "os": im.platform[0]}}
                          for im in images],
        }
        blob, _ = self.add_json(index, self.media["index"])
        return blob

    def tag(self, tag: str, target: Image | Blob) -> None:
        """Points `tag` at an image's manifest or at an index, and rewrites index.json."""
        blob = target.manifest if isinstance(target, Image) else target
        entry = {**blob.descriptor(), "annotations": {REF_NAME: tag}}
        if isinstance(target, Image):
            entry["platform"] = {"architecture": target.platform[1], "os": target.platform[0]}
        self._tags[tag] = entry
        self._write_index_json()

    def _write_index_json(self) -> None:
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(self._tags.values())}
        tmp = self.path / ".index.json.tmp"
        tmp.write_text(json.dumps(index, indent=1))
        tmp.rename(self.path / "index.json")


# -- convenience builders ------------------------------------------------------------------------

def make_image(path: str | os.PathLike, layers: Sequence[LayerSpec] = (LayerSpec(),), *,
               fmt: str = "oci", tag: str = "v1", platform: tuple[str, str] = ("linux", "amd64"),
               labels: dict[str, str] | None = None) -> ImageLayout:
    """A single-platform image tagged `tag` in the layout at `path` (created or extended)."""
    w = LayoutWriter(path, fmt)
    im = w.image(layers, platform, labels)
    w.tag(tag, im)
    return ImageLayout(Path(path), tag, fmt, im.manifest, [im])


def make_multiarch(path: str | os.PathLike, layers: Sequence[LayerSpec] = (LayerSpec(),), *,
                   fmt: str = "oci", tag: str = "v1",
                   platforms: Sequence[tuple[str, str]] = DEFAULT_PLATFORMS,
                   shared: Sequence[LayerSpec] = ()) -> ImageLayout:
    """An OCI index (fmt "oci") or Docker manifest list (fmt "docker") over `platforms`.

    Each platform gets its own variant of every spec in `layers` (the arch is mixed into the
    seed, so digests differ per platform) followed by the `shared` layers, which are identical
    on every platform.
    """
    w = LayoutWriter(path, fmt)
    images = []
    for plat in platforms:
        own = [LayerSpec(size=s.size, seed=f"{s.seed}/{plat[0]}/{plat[1]}",
                         compression=s.compression, gzip_level=s.gzip_level, files=s.files,
                         empty=s.empty) for s in layers]
        images.append(w.image([*own, *shared], plat, {"shoal.platform": "/".join(plat)}))
    idx = w.index(images)
    w.tag(tag, idx)
    return ImageLayout(Path(path), tag, fmt, idx, images, index=idx)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def verify_layout(path: str | os.PathLike) -> dict[str, int]:
    """Checks that every blob's file name is the sha256 of its content; returns digest → size.

    Raises ValueError naming the first mismatching blob. Useful after `skopeo copy` back into a
    layout or dir.
    """
    out = {}
    for p in sorted((Path(path) / "blobs" / "sha256").iterdir()):
        if p.name.startswith("."):
            continue
        got = sha256_file(p)
        if got != "sha256:" + p.name:
            raise ValueError(f"blob {p} has digest {got}")
        out[got] = p.stat().st_size
    return out


def verify_dir(path: str | os.PathLike) -> dict[str, int]:
    """Checks a skopeo `dir:` copy: every blob and manifest matches the digest in its name.

    Returns digest → size for everything in it; the top manifest (`manifest.json`) is included
    under its computed digest. Raises ValueError naming the first mismatch.
    """
    out = {}
    for p in sorted(Path(path).iterdir()):
        if p.name == "version" or p.name.startswith("signature"):
            continue
        got = sha256_file(p)
        if p.name != "manifest.json":
            want = "sha256:" + p.name.removesuffix(".manifest.json")
            if got != want:
                raise ValueError(f"{p} has digest {got}, expected {want}")
        out[got] = p.stat().st_size
    return out


# -- tar writing ---------------------------------------------------------------------------------

def _layer_tar(spec: LayerSpec, files_out: list[tuple[str, int, str]]) -> Iterator[bytes]:
    """Yields the uncompressed tar for `spec` in chunks of at most CHUNK bytes."""
    if not spec.empty:
        yield _tar_header("shoal/", 0, tarfile.DIRTYPE, 0o755)
        tag = _seed_tag(spec.seed)
        rng = random.Random(f"shoal-layer:{spec.seed}")
        per_file, extra = divmod(spec.size, spec.files)
        for i in range(spec.files):
            name = f"shoal/{tag}-{i}.bin"
            n = per_file + (1 if i < extra else 0)
            yield _tar_header(name, n, tarfile.REGTYPE, 0o644)
            h = hashlib.sha256()
            left = n
            while left > 0:
                k = min(CHUNK, left)
                data = rng.randbytes(k)
                h.update(data)
                yield data
                left -= k
            files_out.append((name, n, "sha256:" + h.hexdigest()))
            if n % 512:
                yield b"\0" * (512 - n % 512)
    # End of archive: two zero blocks. No padding to tarfile's 10 KiB record size, so an empty
    # layer is exactly the 1024 bytes Docker's canonical empty layer has.
    yield b"\0" * 1024


def _tar_header(name: str, size: int, kind: bytes, mode: int) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.type = kind
    ti.mode = mode
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    return ti.tobuf(format=tarfile.USTAR_FORMAT)


def _seed_tag(seed: int | str) -> str:
    return hashlib.sha256(str(seed).encode()).hexdigest()[:12]
